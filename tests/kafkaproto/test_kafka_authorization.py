"""Kafka's ACL authorizer on the data path, judged by Kafka's own clients over SASL:
a user without ACLs is refused, an ACL added through one broker lets it in on
another within seconds, prefixed ACLs match, a DENY beats an ALLOW; and a client
posing as a follower (Fetch with a broker's replica id) is refused without the
ISR, the high watermark or the log changing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
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
from annal.zk.client import ZkClient

from annal import errors

pytestmark = pytest.mark.timeout(240)

AUTHORIZED = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    # the brokers replicate over PLAINTEXT, and the tests set up over gRPC, anonymously
    "super.users": "User:ANONYMOUS",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "replica.lag.time.max.ms": "3000",
}


class Cluster:
    def __init__(self, brokers: list[BrokerProcess], sasl_ports: list[int]) -> None:
        self.brokers = brokers
        self.sasl_ports = sasl_ports

    def client(self, index: int = 0, user: str = "alice") -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl_ports[index]}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
        }

    def allow(self, binding: AclBinding, through: int = 0) -> None:
        with AdminClient(self.brokers[through].endpoint) as admin:
            admin.create_acls([binding])


@pytest.fixture
def cluster(broker_factory: Callable[..., BrokerProcess]) -> Iterator[Cluster]:
    brokers = [
        broker_factory(i, AUTHORIZED, extra_listeners="SASL_PLAINTEXT://127.0.0.1:0")
        for i in (1, 2)
    ]
    ports = [b.listener_port("SASL_PLAINTEXT") for b in brokers]
    with ZkClient(brokers[0].zookeeper_connect) as zk:
        for user in ("alice", "bob"):
            credential = make_credential("SCRAM-SHA-512", f"{user}-secret")
            zk.upsert_scram_credential(user, "SCRAM-SHA-512", credential)
    yield Cluster(brokers, ports)


def acl(
    name: str,
    operation: AclOperation,
    principal: str = "User:alice",
    pattern: ResourcePattern | None = None,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(
        pattern or ResourcePattern.literal(ResourceType.TOPIC, name),
        AccessControlEntry(principal, "*", operation, permission),
    )


def refused(error: int | None) -> bool:
    return error == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


def isr(zk: ZkClient, topic: str) -> tuple[int, ...] | None:
    found = zk.get_partition_state(topic, 0)
    return None if found is None else tuple(found[0].isr)


def produce_error(config: dict[str, Any], topic: str) -> int | None:
    """The error of one record's delivery (None: stored)."""
    found: list[Any] = []
    producer = ck.Producer({**config, "message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: found.append(err))
    producer.flush(15)
    if not found:
        return -1  # no delivery report
    return None if found[0] is None else int(found[0].code())


def consume_error(config: dict[str, Any], topic: str) -> int | None:
    """The error of reading partition 0 from the start (None: a record came)."""
    consumer = ck.Consumer({**config, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                return int(message.error().code())
            return None
        return -1  # nothing within 15 s
    finally:
        consumer.close()


def test_topic_acls_let_a_user_write_and_read_and_a_deny_wins(cluster: Cluster) -> None:
    with AdminClient(cluster.brokers[0].endpoint) as admin:
        admin.create_topic("orders", 1, 2)
    # the consumers' group (librdkafka finds its coordinator even for assigned partitions)
    everyone = ResourcePattern.literal(ResourceType.GROUP, "g")
    cluster.allow(acl("g", AclOperation.READ, principal="User:*", pattern=everyone))
    alice = cluster.client()
    assert refused(produce_error(alice, "orders"))
    cluster.allow(acl("orders", AclOperation.WRITE), through=1)  # told to the other broker
    wait_until(lambda: produce_error(alice, "orders") is None, 30, "alice may write")
    assert refused(consume_error(alice, "orders"))
    prefixed = ResourcePattern.prefixed(ResourceType.TOPIC, "ord")
    cluster.allow(acl("", AclOperation.READ, pattern=prefixed))
    wait_until(lambda: consume_error(alice, "orders") is None, 30, "alice may read")
    # bob may see the topic (Metadata hides it otherwise) but not read it
    cluster.allow(acl("orders", AclOperation.DESCRIBE, principal="User:bob"))
    bob = cluster.client(user="bob")
    wait_until(lambda: refused(consume_error(bob, "orders")), 30, "bob refused")
    cluster.allow(acl("orders", AclOperation.READ, permission=AclPermissionType.DENY))
    wait_until(lambda: refused(consume_error(alice, "orders")), 30, "deny wins")
    log = cluster.brokers[0].log_path.read_text()
    assert "DENIED: principal User:alice" in log and "Read" in log


def test_a_client_posing_as_a_follower_is_refused_and_nothing_changes(cluster: Cluster) -> None:
    """Broker 2 is stopped and out of the ISR; a client's Fetch as replica 2 at the
    log end would put it back (and move the high watermark) if it were believed."""
    leader, follower = cluster.brokers
    with AdminClient(leader.endpoint) as admin:
        admin.create_topic("spoof", assignment={0: [1, 2]})
    cluster.allow(acl("spoof", AclOperation.WRITE))
    wait_until(lambda: produce_error(cluster.client(), "spoof") is None, 30, "a record stored")
    follower.kill()
    with ZkClient(leader.zookeeper_connect) as zk:
        wait_until(lambda: isr(zk, "spoof") == (1,), 60, "ISR [1]")
        state_before = zk.get_partition_state("spoof", 0)
    segment = next((leader.log_dir / "spoof-0").glob("*.log"))
    bytes_before = segment.read_bytes()
    connection = KafkaConnection(f"127.0.0.1:{cluster.sasl_ports[0]}", 10)
    try:
        assert connection.exchange(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        login = connection.exchange(36, 0, {"auth_bytes": b"\0alice\0alice-secret"})
        assert login.error_code == 0
        answer = connection.exchange(1, 11, {
            "replica_id": 2, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "spoof", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20,
            }]}],
            "forgotten_topics_data": [], "rack_id": "",
        })  # fmt: skip
    finally:
        connection.close()
    partition = answer.responses[0].partitions[0]
    assert partition.error_code == errors.CLUSTER_AUTHORIZATION_FAILED.number
    with ZkClient(leader.zookeeper_connect) as zk:
        assert zk.get_partition_state("spoof", 0) == state_before
    assert segment.read_bytes() == bytes_before
