"""Consumer groups of Kafka's clients on real brokers: confluent-kafka and
kafka-python consumers share a topic's partitions through annal's group
coordinator (each partition owned by one member, none skipped), a member killed
with SIGKILL is replaced after its session timeout, and committed offsets
survive the coordinator broker's SIGKILL."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import kafka
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from confluent_kafka import admin as ck_admin
from runcli import annal

pytestmark = pytest.mark.timeout(300)

SESSION_MS = 6000
_names = itertools.count()
FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "6"}


def bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.kafka_endpoint for b in cluster if b.alive)


class GroupMember(threading.Thread):
    """A consumer of one client library polling in a thread until stopped."""

    def __init__(self, kind: str, servers: str, group: str, topic: str) -> None:
        super().__init__(daemon=True, name=f"{kind}-member")
        self.kind = kind
        self.stopping = threading.Event()
        self.seen: list[tuple[int, int, bytes]] = []
        self.assigned: set[int] = set()
        self.failure: BaseException | None = None
        if kind == "confluent":
            self.consumer: Any = ck.Consumer({
                "bootstrap.servers": servers, "group.id": group, "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                "client.id": "ck-member", "topic.metadata.refresh.interval.ms": 2000,
            })  # fmt: skip
            self.consumer.subscribe([topic])
        else:
            self.consumer = kafka.KafkaConsumer(
                topic, bootstrap_servers=servers, group_id=group, auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500, client_id="kp-member",
            )  # fmt: skip

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                if self.kind == "confluent":
                    message = self.consumer.poll(0.2)
                    if message is not None and message.error() is None:
                        self.seen.append((message.partition(), message.offset(), message.value()))
                    self.assigned = {p.partition for p in self.consumer.assignment()}
                else:
                    for tp, messages in self.consumer.poll(timeout_ms=200).items():
                        self.seen.extend((tp.partition, m.offset, m.value) for m in messages)
                    self.assigned = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as exc:  # reported by the test
            self.failure = exc
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def produce(servers: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    producer = ck.Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(60) == 0


def balanced(members: list[GroupMember], partitions: int) -> bool:
    owned = [p for m in members for p in m.assigned]
    return len(owned) == partitions and set(owned) == set(range(partitions))


def describe(servers: str, group: str) -> Any:
    """The group as confluent-kafka's admin client describes it; None while it
    cannot (the offsets topic still being created, a coordinator moving)."""
    admin = ck_admin.AdminClient({"bootstrap.servers": servers})
    try:
        return admin.describe_consumer_groups([group])[group].result(20)
    except (ck.KafkaException, TimeoutError):
        return None


def members_of(servers: str, group: str) -> int:
    found = describe(servers, group)
    return -1 if found is None else len(found.members)


def stable(servers: str, group: str) -> bool:
    found = describe(servers, group)
    return found is not None and found.state == ck.ConsumerGroupState.STABLE


def test_a_mixed_group_shares_partitions_and_replaces_a_killed_member(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = [broker_factory(i, FAST) for i in (1, 2, 3)]
    servers = bootstrap(cluster)
    topic, group = f"shared-{next(_names)}", f"g-{next(_names)}"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(topic, 12, 3)
    produce(servers, topic, 1200, 12)
    victim = subprocess.Popen(
        [sys.executable, "-c", VICTIM, servers, group, topic],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    members = [GroupMember("confluent", servers, group, topic) for _ in range(3)]
    members.append(GroupMember("kafka-python", servers, group, topic))
    try:
        for m in members:
            m.start()
        assigned = threading.Event()
        threading.Thread(
            target=lambda: victim.stdout is not None and victim.stdout.readline()
            and assigned.set(), daemon=True,
        ).start()  # fmt: skip
        wait_until(lambda: members_of(servers, group) == 5, 120, "five members")
        wait_until(lambda: stable(servers, group), 120, "a stable group of five")
        wait_until(assigned.is_set, 60, "the victim's assignment")
        victim.kill()  # SIGKILL: no LeaveGroup, the session timeout must notice
        killed_at = time.monotonic()
        wait_until(lambda: members_of(servers, group) == 4, 60, "the victim gone")
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1.5
        wait_until(lambda: balanced(members, 12), 90, "12 partitions over the four members")
        produce(servers, topic, 600, 12, start=1200)
        wanted = {b"%d" % i for i in range(1800)}
        wait_until(
            lambda: wanted <= {v for m in members for _, _, v in m.seen}, 90,
            "every record consumed",
        )  # fmt: skip
        assert all(m.failure is None for m in members), [m.failure for m in members]
        description = describe(servers, group)
        assert description is not None
        assert sorted(m.client_id for m in description.members) == ["ck-member"] * 3 + [
            "kp-member"
        ]
        owners: dict[int, int] = {}
        for i, m in enumerate(members):
            for p in m.assigned:
                assert p not in owners, f"partition {p} owned twice"
                owners[p] = i
    finally:
        victim.kill()
        for m in members:
            m.stop()


# A member in a process of its own, killed with SIGKILL; it commits nothing, so
# what it read is read again by the member that takes its partitions over.
VICTIM = """
import sys, confluent_kafka as ck
servers, group, topic = sys.argv[1:]
c = ck.Consumer({"bootstrap.servers": servers, "group.id": group, "client.id": "victim",
                 "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                 "heartbeat.interval.ms": 500, "enable.auto.commit": False})
c.subscribe([topic])
told = False
while True:
    c.poll(0.2)
    if c.assignment() and not told:
        print("assigned", flush=True)
        told = True
"""


def test_committed_offsets_survive_the_coordinators_sigkill(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = [broker_factory(i, FAST) for i in (1, 2, 3)]
    servers = bootstrap(cluster)
    topic, group = f"resume-{next(_names)}", f"g-{next(_names)}"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(topic, 1, 3)
    produce(servers, topic, 100, 1)
    first = ck.Consumer({"bootstrap.servers": servers, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    first.subscribe([topic])
    taken: list[int] = []
    deadline = time.monotonic() + 60
    while len(taken) < 40 and time.monotonic() < deadline:
        message = first.poll(0.5)
        if message is not None and message.error() is None:
            taken.append(message.offset())
    assert taken[:40] == list(range(40))
    first.commit(offsets=[ck.TopicPartition(topic, 0, 40)], asynchronous=False)
    first.close()
    found = describe(servers, group)
    assert found is not None
    coordinator = found.coordinator.id
    next(b for b in cluster if b.broker_id == coordinator).kill()

    servers = bootstrap(cluster)

    def moved() -> bool:
        found = describe(servers, group)
        return found is not None and found.coordinator.id != coordinator

    wait_until(moved, 60, "a new coordinator")
    second = ck.Consumer({"bootstrap.servers": servers, "group.id": group,
                          "auto.offset.reset": "earliest"})  # fmt: skip
    second.subscribe([topic])
    resumed: list[int] = []
    deadline = time.monotonic() + 90
    while len(resumed) < 60 and time.monotonic() < deadline:
        message = second.poll(0.5)
        if message is not None and message.error() is None:
            resumed.append(message.offset())
    second.close()
    assert resumed == list(range(40, 100))  # nothing skipped, nothing read twice


def test_annal_consumer_groups_shows_kafka_clients_groups(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = [broker_factory(i, FAST) for i in (1, 2)]
    servers = bootstrap(cluster)
    topic, group = f"shown-{next(_names)}", f"g-{next(_names)}"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(topic, 4, 2)
    produce(servers, topic, 40, 4)
    members = [GroupMember("confluent", servers, group, topic) for _ in range(2)]
    try:
        for m in members:
            m.start()
        wait_until(lambda: balanced(members, 4), 120, "4 partitions over two members")
        wait_until(lambda: sum(len(m.seen) for m in members) >= 40, 60, "every record read")
        grpc_servers = ",".join(b.endpoint for b in cluster)
        listed = annal("consumer-groups", "--bootstrap-server", grpc_servers, "--list")
        assert listed.returncode == 0, listed.stderr
        assert group in listed.stdout.split()
        found = describe(servers, group)
        assert found is not None
        ids = {m.member_id for m in found.members}

        def rows() -> list[dict[str, Any]]:
            shown = annal("consumer-groups", "--bootstrap-server", grpc_servers, "--describe",
                          "--group", group, "--json")  # fmt: skip
            assert shown.returncode == 0, shown.stderr
            return [json.loads(line) for line in shown.stdout.splitlines()]

        wait_until(lambda: all(r["lag"] == 0 for r in rows()), 60, "offsets committed")
        table = rows()
        assert [r["partition"] for r in table] == [0, 1, 2, 3]
        assert {r["owner"] for r in table} == ids
        assert all(r["log_end_offset"] == 10 for r in table)
    finally:
        for m in members:
            m.stop()


def test_a_static_member_comes_back_to_its_place(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = [broker_factory(1, FAST)]
    servers = bootstrap(cluster)
    topic, group = f"static-{next(_names)}", f"g-{next(_names)}"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(topic, 2, 1)

    def member() -> Any:
        consumer = ck.Consumer({
            "bootstrap.servers": servers, "group.id": group, "group.instance.id": "static-1",
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
        })  # fmt: skip
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        return consumer

    first = member()
    before = describe(servers, group)
    assert before is not None and [m.group_instance_id for m in before.members] == ["static-1"]
    first.close()  # a static member sends no LeaveGroup: its place is kept for the session
    second = member()
    try:
        assert {p.partition for p in second.assignment()} == {0, 1}
        after = describe(servers, group)
        assert after is not None and len(after.members) == 1
        assert after.members[0].group_instance_id == "static-1"
        assert after.members[0].member_id != before.members[0].member_id
    finally:
        second.close()


def test_a_cooperative_member_loses_a_deleted_topic_and_closes_at_once(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """librdkafka's 0113 h_delete_topic: two subscribed topics, one deleted; the
    cooperative rebalance takes its partition away and close() returns at once.
    (librdkafka 2.0.2, Debian's, then hangs in rd_kafka_destroy on a reference
    count of its own, fixed in librdkafka 2.1.0: docs/kafka-protocol.md.)"""
    servers = bootstrap([broker_factory(1, FAST)])
    name = f"coop-{next(_names)}"
    kept, deleted = f"{name}-kept", f"{name}-deleted"
    admin = ck_admin.AdminClient({"bootstrap.servers": servers})
    created = admin.create_topics([ck_admin.NewTopic(t, 1, 1) for t in (kept, deleted)])
    for future in created.values():
        future.result(60)
    consumer = ck.Consumer({
        "bootstrap.servers": servers, "group.id": name,
        "partition.assignment.strategy": "cooperative-sticky",
        "topic.metadata.refresh.interval.ms": 1000,
    })  # fmt: skip
    consumer.subscribe([kept, deleted])
    try:
        deadline = time.monotonic() + 60
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert {p.topic for p in consumer.assignment()} == {kept, deleted}
        admin.delete_topics([deleted])[deleted].result(60)
        while len(consumer.assignment()) != 1 and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert [p.topic for p in consumer.assignment()] == [kept]
    finally:
        started = time.monotonic()
        consumer.close()
    assert time.monotonic() - started < 5
    wait_until(lambda: members_of(servers, name) == 0, 30, "the member left")
