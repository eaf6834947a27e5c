"""TxnOffsetCommit (Kafka API 28, v0-v3) and OffsetFetch's ``require_stable``
(v7, KIP-447) on a real broker, in raw Kafka requests, with an ACL authorizer
(User:ANONYMOUS, over PLAINTEXT and gRPC, is a super user; User:alice logs in
over SASL_PLAINTEXT):

* each version commits; the offsets stay invisible to OffsetFetch, and
  UNSTABLE_OFFSET_COMMIT with ``require_stable``, until a COMMIT marker is
  written to the group's offsets partition (WriteTxnMarkers, as a transaction
  coordinator sends it); an ABORT marker drops them;
* unknown partitions, metadata too large, a stale producer epoch, and v3's
  member checks (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID)
  are answered as Kafka 2.8 answers them;
* alice needs Write on the transactional id, then Read on the group, then
  Read on each topic, as Kafka's handleTxnOffsetCommitRequest checks;
* annal's gRPC TxnOffsetCommit answers the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
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
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient

from annal import errors

pytestmark = pytest.mark.timeout(120)

TXN_OFFSET_COMMIT, OFFSET_FETCH, WRITE_TXN_MARKERS, JOIN, FIND_COORDINATOR = 28, 9, 27, 11, 10
NONE = errors.NONE.number
TOPIC = "paid"
OTHER = "owed"
_ids = itertools.count(1000)


class Cluster(NamedTuple):
    broker: BrokerProcess
    sasl_port: int


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> Cluster:
    broker = module_broker_factory(
        1,
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
        extra_listeners="SASL_PLAINTEXT://127.0.0.1:0",
    )
    port = broker.listener_port("SASL_PLAINTEXT")
    with ZkClient(broker.zookeeper_connect) as zk:
        zk.upsert_scram_credential(
            "alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "alice-secret")
        )
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(TOPIC, 2, 1)
        admin.create_topic(OTHER, 1, 1)
    with connect(broker) as c:
        wait_until(
            lambda: c.exchange(FIND_COORDINATOR, 2, {"key": "g", "key_type": 0}).error_code
            == NONE,
            60, "a group coordinator",
        )  # fmt: skip
        wait_until(lambda: fetch(c, "probe", require_stable=True) == [(-1, NONE)], 60, "loaded")
    return Cluster(broker, port)


@pytest.fixture
def broker(cluster: Cluster) -> BrokerProcess:
    return cluster.broker


class connect:
    """A Kafka connection over PLAINTEXT (a super user), closed after the block."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.connection = KafkaConnection(broker.kafka_endpoint, 60, client_id="txn-offsets")

    def __enter__(self) -> KafkaConnection:
        return self.connection

    def __exit__(self, *_: object) -> None:
        self.connection.close()


def commit(
    c: KafkaConnection,
    version: int,
    group: str,
    producer_id: int,
    offsets: dict[tuple[str, int], int],
    epoch: int = 0,
    metadata: str = "",
    **v3: Any,
) -> dict[tuple[str, int], int]:
    """A TxnOffsetCommit; the error code of each partition."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        p: dict[str, Any] = {"partition_index": partition, "committed_offset": offset,
                             "committed_metadata": metadata}  # fmt: skip
        if version >= 2:
            p["committed_leader_epoch"] = -1
        by_topic.setdefault(topic, []).append(p)
    values: dict[str, Any] = {
        "transactional_id": f"txn-{group}", "group_id": group, "producer_id": producer_id,
        "producer_epoch": epoch,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }  # fmt: skip
    if version >= 3:
        values.update({"generation_id": -1, "member_id": "", "group_instance_id": None, **v3})
    answer = c.exchange(TXN_OFFSET_COMMIT, version, values)
    return {
        (t.name, int(p.partition_index)): int(p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def fetch(
    c: KafkaConnection, group: str, version: int = 7, require_stable: bool = False
) -> list[tuple[int, int]]:
    """OffsetFetch of partition 0 of TOPIC: [(offset, error code)], or [(-1, the
    request's error)]."""
    values: dict[str, Any] = {
        "group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}],
    }  # fmt: skip
    if version >= 7:
        values["require_stable"] = require_stable
    answer = c.exchange(OFFSET_FETCH, version, values)
    if answer.error_code != NONE:
        return [(-1, int(answer.error_code))]
    return [(int(p.committed_offset), int(p.error_code)) for p in answer.topics[0].partitions]


def marker(c: KafkaConnection, producer_id: int, commit: bool, epoch: int = 0) -> None:
    """The COMMIT or ABORT marker of the producer's transaction, on __consumer_offsets-0."""
    answer = c.exchange(WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
        "topics": [{"name": "__consumer_offsets", "partition_indexes": [0]}],
        "coordinator_epoch": 0,
    }]})  # fmt: skip
    codes = [int(p.error_code) for m in answer.markers for t in m.topics for p in t.partitions]
    assert codes == [NONE]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_each_version_commits_when_the_transaction_does(
    broker: BrokerProcess, version: int
) -> None:
    group, pid = f"v{version}", next(_ids)
    with connect(broker) as c:
        assert commit(c, version, group, pid, {(TOPIC, 0): 10, (TOPIC, 1): 11}) == {
            (TOPIC, 0): NONE,
            (TOPIC, 1): NONE,
        }
        assert fetch(c, group, version=6) == [(-1, NONE)]
        assert fetch(c, group) == [(-1, NONE)]
        assert fetch(c, group, require_stable=True) == [(-1, errors.UNSTABLE_OFFSET_COMMIT.number)]
        marker(c, pid, commit=True)
        assert fetch(c, group, require_stable=True) == [(10, NONE)]

        assert commit(c, version, group, pid, {(TOPIC, 0): 20}) == {(TOPIC, 0): NONE}
        marker(c, pid, commit=False)
        assert fetch(c, group, require_stable=True) == [(10, NONE)]


def test_refusals(broker: BrokerProcess) -> None:
    pid = next(_ids)
    with connect(broker) as c:
        unknown = errors.UNKNOWN_TOPIC_OR_PARTITION.number
        assert commit(c, 3, "r", pid, {("nowhere", 0): 1, (TOPIC, 9): 1, (TOPIC, 0): 1}) == {
            ("nowhere", 0): unknown,
            (TOPIC, 9): unknown,
            (TOPIC, 0): NONE,
        }
        too_large = errors.OFFSET_METADATA_TOO_LARGE.number
        assert commit(c, 0, "r", pid, {(TOPIC, 1): 1}, metadata="x" * 5000) == {
            (TOPIC, 1): too_large
        }
        # the log fences an older epoch of the producer
        assert commit(c, 2, "r", pid, {(TOPIC, 0): 2}, epoch=5) == {(TOPIC, 0): NONE}
        stale = errors.INVALID_PRODUCER_EPOCH.number
        assert commit(c, 2, "r", pid, {(TOPIC, 0): 3}, epoch=4) == {(TOPIC, 0): stale}
        marker(c, pid, commit=True, epoch=5)
        assert fetch(c, "r", require_stable=True) == [(2, NONE)]
        # v3 (KIP-447): a group never stored has no members and generation 0
        expect = {(TOPIC, 0): errors.UNKNOWN_MEMBER_ID.number}
        assert commit(c, 3, "r", pid, {(TOPIC, 0): 4}, epoch=5, member_id="ghost") == expect
        expect = {(TOPIC, 0): errors.ILLEGAL_GENERATION.number}
        assert commit(c, 3, "r", pid, {(TOPIC, 0): 4}, epoch=5, generation_id=3) == expect


def test_v3_checks_the_member(broker: BrokerProcess) -> None:
    group, pid = "members", next(_ids)
    with connect(broker) as c:
        joined = c.exchange(JOIN, 5, {
            "group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
            "member_id": "", "group_instance_id": "static-1", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        })  # fmt: skip
        assert joined.error_code == NONE
        member, generation = joined.member_id, int(joined.generation_id)
        tp = (TOPIC, 0)
        cases = [
            ({"member_id": "someone-else", "group_instance_id": "static-1"}, "FENCED_INSTANCE_ID"),
            ({"member_id": "someone-else"}, "UNKNOWN_MEMBER_ID"),
            ({"member_id": member, "generation_id": generation + 1}, "ILLEGAL_GENERATION"),
            ({"member_id": member, "generation_id": generation, "group_instance_id": "static-1"},
             "NONE"),
            ({}, "NONE"),  # no member named: not checked
        ]
        for fields, expected in cases:
            code = getattr(errors, expected).number
            assert commit(c, 3, group, pid, {tp: 7}, **fields) == {tp: code}, fields


def _allow(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourcePattern.literal(resource_type, name),
        AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW),
    )


@pytest.fixture
def alice(cluster: Cluster) -> Iterator[KafkaConnection]:
    connection = KafkaConnection(f"127.0.0.1:{cluster.sasl_port}", 30)
    assert connection.exchange(17, 1, {"mechanism": "PLAIN"}).error_code == NONE
    assert connection.exchange(36, 0, {"auth_bytes": b"\0alice\0alice-secret"}).error_code == NONE
    yield connection
    connection.close()


def test_authorization(broker: BrokerProcess, alice: KafkaConnection) -> None:
    group, pid = "guarded", next(_ids)
    offsets = {(TOPIC, 0): 5, (OTHER, 0): 6}
    stages = [
        ([], errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),  # noqa: E501
        ([(ResourceType.TRANSACTIONAL_ID, f"txn-{group}", AclOperation.WRITE)],
         errors.GROUP_AUTHORIZATION_FAILED, errors.GROUP_AUTHORIZATION_FAILED),
        ([(ResourceType.GROUP, group, AclOperation.READ)],
         errors.TOPIC_AUTHORIZATION_FAILED, errors.TOPIC_AUTHORIZATION_FAILED),
        ([(ResourceType.TOPIC, TOPIC, AclOperation.READ)],
         errors.NONE, errors.TOPIC_AUTHORIZATION_FAILED),
    ]  # fmt: skip
    given: list[AclBinding] = []
    try:
        for grants, first, second in stages:
            bindings = [_allow(*g) for g in grants]
            if bindings:
                with AdminClient(broker.endpoint) as admin:
                    admin.create_acls(bindings)
                given += bindings
            assert commit(alice, 3, group, pid, offsets) == {
                (TOPIC, 0): first.number,
                (OTHER, 0): second.number,
            }, grants
    finally:
        if given:
            with AdminClient(broker.endpoint) as admin:
                admin.delete_acls([b.to_filter() for b in given])
    with connect(broker) as c:
        assert fetch(c, group, require_stable=True) == [(-1, errors.UNSTABLE_OFFSET_COMMIT.number)]


def test_grpc(broker: BrokerProcess) -> None:
    pid = next(_ids)
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)

        def txn_commit(producer_id: int, epoch: int = 0) -> list[int]:
            answer = stub.TxnOffsetCommit(
                pb.TxnOffsetCommitRequest(
                    transactional_id="grpc-txn", group="grpc", producer_id=producer_id,
                    producer_epoch=epoch, generation_id=-1,
                    topics=[pb.OffsetCommitTopic(name=TOPIC, partitions=[
                        pb.OffsetCommitPartition(partition=0, offset=33, leader_epoch=-1)])],
                ),
                timeout=30,
            )  # fmt: skip
            return [p.error for t in answer.topics for p in t.partitions]

        assert txn_commit(-1) == [pb.INVALID_REQUEST]
        assert txn_commit(pid, epoch=40_000) == [pb.INVALID_REQUEST]
        assert txn_commit(pid) == [pb.NONE]
        wanted = [pb.TopicPartitions(topic=TOPIC, partitions=[0])]
        fetched = stub.OffsetFetch(pb.OffsetFetchRequest(group="grpc", topics=wanted), timeout=30)
        assert [(p.offset, p.error) for p in fetched.topics[0].partitions] == [(-1, pb.NONE)]
    with connect(broker) as c:
        marker(c, pid, commit=True)
        assert fetch(c, "grpc", require_stable=True) == [(33, NONE)]
