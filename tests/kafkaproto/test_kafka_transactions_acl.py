"""Transactions under Kafka's ACL authorizer, over SASL as User:alice: a Produce of
transactional batches needs Write on the producer's transactional id (and a
transactional id at all), else every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is stored; WriteTxnMarkers
(Kafka's API 27) needs ClusterAction on the cluster, which a broker (here the
super user) has and alice has not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from annal.kafkaproto import legacy_versions
from annal.kafkaproto.client import KafkaConnection
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.security.scram import make_credential
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.zk.client import ZkClient
from txnhelp import (
    WRITE_TXN_MARKERS,
    client,
    fetch,
    kafka_produce,
    leader_of,
    markers,
    now_ms,
    plain_batch,
    write_markers,
)

from annal import errors

pytestmark = pytest.mark.timeout(120)

SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",  # set-up goes through PLAINTEXT and gRPC
    "sasl.enabled.mechanisms": "PLAIN",
}
TOPIC = "acl-txn"
TXN = ResourceType.TRANSACTIONAL_ID
TXN_DENIED = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.number


def allow(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourcePattern.literal(resource_type, name),
        AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW),
    )


SASL_PORTS: dict[int, int] = {}  # broker id -> its SASL_PLAINTEXT port


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    broker = module_broker_factory(1, SETTINGS, extra_listeners="SASL_PLAINTEXT://127.0.0.1:0")
    SASL_PORTS[broker.broker_id] = broker.listener_port("SASL_PLAINTEXT")
    with ZkClient(broker.zookeeper_connect) as zk:
        credential = make_credential("SCRAM-SHA-512", "alice-secret")
        zk.upsert_scram_credential("alice", "SCRAM-SHA-512", credential)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(TOPIC, 1, 1)
        admin.create_acls([allow(ResourceType.TOPIC, TOPIC, AclOperation.WRITE)])
    leader_of([broker], TOPIC)
    return broker


def alice(broker: BrokerProcess) -> KafkaConnection:
    """A Kafka connection logged in as alice (SASL PLAIN)."""
    connection = KafkaConnection(f"127.0.0.1:{SASL_PORTS[broker.broker_id]}", 30)
    assert connection.exchange(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    login = connection.exchange(36, 0, {"auth_bytes": b"\0alice\0alice-secret"})
    assert login.error_code == 0, login.error_message
    return connection


def transactional_batch(pid: int, sequence: int) -> bytes:
    return encode_batch(
        [Record(0, now_ms(), None, b"t%d" % sequence)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=True,
    )


def test_a_transactional_produce_needs_write_on_its_transactional_id(
    broker: BrokerProcess,
) -> None:
    pid = client(broker).InitProducerId(pb.InitProducerIdRequest(), timeout=15).producer_id
    connection = alice(broker)
    try:

        def produce(records: bytes, transactional_id: str | None) -> Any:
            return kafka_produce(broker, TOPIC, records, transactional_id, connection)

        refused = produce(transactional_batch(pid, 0), "tx-alice")
        assert (refused.error_code, refused.base_offset) == (TXN_DENIED, -1)
        assert "User:alice may not Write TransactionalId" in (refused.error_message or "")
        assert produce(transactional_batch(pid, 0), None).error_code == TXN_DENIED  # no id
        assert produce(plain_batch(b"plain"), None).error_code == 0  # Write on the topic
        assert fetch(broker, TOPIC, isolation=0).high_watermark == 1  # nothing else stored
        with AdminClient(broker.endpoint) as admin:
            admin.create_acls(
                [allow(ResourceType.TRANSACTIONAL_ID, "tx-alice", AclOperation.WRITE)]
            )
        stored = produce(transactional_batch(pid, 0), "tx-alice")
        assert (stored.error_code, stored.base_offset) == (0, 1)
    finally:
        connection.close()
    log = broker.log_path.read_text()
    assert "operation Write on resource TransactionalId:LITERAL:tx-alice" in log
    # the transaction stays open until a broker writes its marker
    assert fetch(broker, TOPIC).last_stable_offset == 1
    assert write_markers(broker, markers(pid, True, TOPIC, [0])) == [0]
    assert fetch(broker, TOPIC).last_stable_offset == 3


def test_write_txn_markers_needs_cluster_action(broker: BrokerProcess) -> None:
    pid = client(broker).InitProducerId(pb.InitProducerIdRequest(), timeout=15).producer_id
    values = {"markers": [{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": False,
        "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 0,
    }]}  # fmt: skip
    legacy_versions.install()  # v0 in this client's kio too
    end_before = fetch(broker, TOPIC, isolation=0).log_end_offset
    connection = alice(broker)
    try:
        for version in (0, 1):
            answer = connection.exchange(WRITE_TXN_MARKERS, version, values)
            (partition,) = answer.markers[0].topics[0].partitions
            assert partition.error_code == errors.CLUSTER_AUTHORIZATION_FAILED.number
    finally:
        connection.close()
    assert fetch(broker, TOPIC, isolation=0).log_end_offset == end_before  # nothing written
    assert "refused WriteTxnMarkers from User:alice" in broker.log_path.read_text()
    # a broker (the super user here, over PLAINTEXT) is served
    superuser = KafkaConnection(broker.kafka_endpoint, 40)
    try:
        answer = superuser.exchange(WRITE_TXN_MARKERS, 0, values)
        (partition,) = answer.markers[0].topics[0].partitions
        assert partition.error_code == 0
    finally:
        superuser.close()
    assert fetch(broker, TOPIC, isolation=0).log_end_offset == end_before + 1
