"""Group and coordinator answers that Kafka's clients check to the letter, on a real
broker, in raw Kafka requests and through confluent-kafka and kafka-python:

* a JoinGroup naming 10,000 protocols is answered without holding up the
  broker's other connections (protocol selection is linear), and one naming
  more is refused; the protocol is chosen by the members' votes (Kafka's
  ``GroupMetadata.selectProtocol``);
* an OffsetCommit (and confluent-kafka's ``alter_consumer_group_offsets``) of a
  topic or partition the broker does not know is UNKNOWN_TOPIC_OR_PARTITION;
* DescribeGroups of an unknown group answers it ``Dead``, with no error;
* a static member (KIP-345) that leads its group rejoins after a restart
  without a rebalance;
* a transactional producer fails at once, saying that transactions are not
  supported, instead of waiting for a transaction coordinator that never comes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import kafka
import kafka.errors
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from confluent_kafka import admin as ck_admin

from annal import errors

pytestmark = pytest.mark.timeout(240)

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN, HEARTBEAT = 8, 9, 10, 11, 12
SYNC, DESCRIBE, API_VERSIONS = 14, 15, 18
NONE = errors.NONE.number
SESSION_MS = 30_000
MAX_PROTOCOLS = 10_000  # GroupMembership.MAX_PROTOCOLS
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One broker, the coordinator of every group once its offsets topic is there."""
    broker = module_broker_factory(
        1, {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
    )
    wait_until(
        lambda: call(broker, FIND_COORDINATOR, 2, key="probe").error_code == NONE,
        60, "a group coordinator",
    )  # fmt: skip
    wait_until(
        lambda: join(broker, f"probe-{next(_names)}").error_code == NONE,
        60, "the coordinator loaded",
    )  # fmt: skip
    return broker


def call(broker: BrokerProcess, api_key: int, version: int, **values: Any) -> Any:
    """One request on a connection of its own (a JoinGroup waits for its rebalance);
    the response body."""
    connection = KafkaConnection(broker.kafka_endpoint, 120, client_id="exact")
    try:
        return connection.exchange(api_key, version, values)
    finally:
        connection.close()


def join(
    broker: BrokerProcess,
    group: str,
    member_id: str = "",
    protocols: list[tuple[str, bytes]] | None = None,
    instance_id: str | None = None,
) -> Any:
    """A JoinGroup: v5 for a static member, v3 for a dynamic one (admitted at once,
    without MEMBER_ID_REQUIRED)."""
    values: dict[str, Any] = {
        "group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": 60_000,
        "member_id": member_id, "protocol_type": "consumer",
        "protocols": [
            {"name": name, "metadata": data}
            for name, data in (protocols or [("range", b"subscription")])
        ],
    }  # fmt: skip
    if instance_id is None:
        return call(broker, JOIN, 3, **values)
    return call(broker, JOIN, 5, group_instance_id=instance_id, **values)


def sync(
    broker: BrokerProcess,
    group: str,
    generation: int,
    member_id: str,
    instance_id: str | None = None,
    assignments: dict[str, bytes] | None = None,
) -> Any:
    return call(
        broker, SYNC, 3, group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id,
        assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    )  # fmt: skip


def heartbeat(
    broker: BrokerProcess, group: str, generation: int, member_id: str, instance_id: str | None
) -> int:
    answer = call(
        broker, HEARTBEAT, 3, group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id,
    )  # fmt: skip
    return int(answer.error_code)


def describe(broker: BrokerProcess, group: str) -> Any:
    answer = call(broker, DESCRIBE, 5, groups=[group], include_authorized_operations=False)
    return answer.groups[0]


def in_background(action: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``action`` (a request that may wait) in a thread; its answer lands in the list."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(action()), daemon=True)
    thread.start()
    return thread, answer


def answered(answer: list[Any], timeout_s: float, what: str) -> Any:
    wait_until(lambda: bool(answer), timeout_s, what)
    return answer[0]


def rebalance_with(
    broker: BrokerProcess,
    group: str,
    leader: Any,
    leader_protocols: list[tuple[str, bytes]],
    newcomers: list[list[tuple[str, bytes]]],
) -> tuple[Any, list[Any]]:
    """Newcomers (dynamic, JoinGroup v3) join the stable group that ``leader`` (a
    JoinGroup answer) leads alone; once each is in, the leader joins again and the
    rebalance completes.  (The leader's answer, the newcomers' answers.)"""
    waiting = []
    for protocols in newcomers:
        waiting.append(in_background(lambda p=protocols: join(broker, group, protocols=p)))
        if len(waiting) == 1:
            wait_until(
                lambda: heartbeat(broker, group, leader.generation_id, leader.member_id, None)
                == errors.REBALANCE_IN_PROGRESS.number,
                30, "the rebalance the first newcomer starts",
            )  # fmt: skip
        wait_until(
            lambda: len(describe(broker, group).members) == 1 + len(waiting),
            30, "the newcomers members",
        )  # fmt: skip
    again = join(broker, group, leader.member_id, protocols=leader_protocols)
    return again, [answered(answer, 30, "a newcomer's join") for _, answer in waiting]


# -- 1. protocol selection ---------------------------------------------------------------


def test_a_join_naming_ten_thousand_protocols_holds_up_no_other_connection(
    broker: BrokerProcess,
) -> None:
    group = f"many-protocols-{next(_names)}"
    forward = [(f"p{i:05d}", b"m%d" % i) for i in range(MAX_PROTOCOLS)]
    backward = forward[::-1]

    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:  # ApiVersions round trips on a connection of their own
        connection = KafkaConnection(broker.kafka_endpoint, 60, client_id="probe")
        try:
            while not stop.is_set():
                started = time.monotonic()
                assert connection.exchange(API_VERSIONS, 0, {}).error_code == NONE
                latencies.append(time.monotonic() - started)
        finally:
            connection.close()

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        wait_until(lambda: len(latencies) >= 5, 30, "the probe running")
        first = join(broker, group, protocols=forward)
        assert first.error_code == NONE and first.generation_id == 1
        assert first.protocol_name == "p00000"
        assert [m.metadata for m in first.members] == [b"m0"]

        # a second member prefers the last: one vote each, the leader's preference wins
        again, [second] = rebalance_with(broker, group, first, forward, [backward])
        assert again.error_code == NONE and second.error_code == NONE
        assert again.generation_id == second.generation_id == 2
        assert again.protocol_name == second.protocol_name == "p00000"
        assert sorted(m.metadata for m in again.members) == [b"m0", b"m0"]
        seen = len(latencies)
        wait_until(lambda: len(latencies) >= seen + 5, 30, "more probes")
    finally:
        stop.set()
        prober.join(60)
    assert max(latencies) < 1.0, f"an ApiVersions round trip took {max(latencies):.2f} s"

    too_many = [*forward, ("one-more", b"")]
    refused = join(broker, f"too-many-{next(_names)}", protocols=too_many)
    assert refused.error_code == errors.INVALID_REQUEST.number
    assert "names 10001 protocols" in broker.log_path.read_text()


def test_the_protocol_is_the_one_most_members_prefer(broker: BrokerProcess) -> None:
    group = f"votes-{next(_names)}"
    leader_prefers = [("range", b"a"), ("roundrobin", b"b")]
    others_prefer = [("roundrobin", b"c"), ("sticky", b"x"), ("range", b"d")]
    first = join(broker, group, protocols=leader_prefers)
    assert first.protocol_name == "range"
    again, others = rebalance_with(
        broker, group, first, leader_prefers, [others_prefer, others_prefer]
    )
    # range and roundrobin are the candidates (sticky is not the leader's); the two
    # others vote roundrobin, the leader range
    assert again.leader == first.member_id
    assert [again.protocol_name] + [o.protocol_name for o in others] == ["roundrobin"] * 3
    assert sorted(m.metadata for m in again.members) == [b"b", b"c", b"c"]


# -- 2. committing offsets of unknown topics and partitions -----------------------------


def test_a_commit_of_an_unknown_topic_or_partition_is_refused(broker: BrokerProcess) -> None:
    topic, group = f"known-{next(_names)}", f"commits-{next(_names)}"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, 2, 1)
    wait_until(lambda: _metadata_has(broker, topic), 30, "the topic in the metadata")
    missing = f"missing-{next(_names)}"
    answer = call(
        broker, OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None,
        topics=[
            {"name": topic, "partitions": [
                {"partition_index": 1, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""},
                {"partition_index": 2, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]},
            {"name": missing, "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]},
        ],
    )  # fmt: skip
    codes = {(t.name, p.partition_index): int(p.error_code) for t in answer.topics
             for p in t.partitions}  # fmt: skip
    unknown = errors.UNKNOWN_TOPIC_OR_PARTITION.number
    assert codes == {(topic, 1): NONE, (topic, 2): unknown, (missing, 0): unknown}

    fetched = call(
        broker, OFFSET_FETCH, 7, group_id=group, require_stable=False,
        topics=[{"name": topic, "partition_indexes": [1, 2]},
                {"name": missing, "partition_indexes": [0]}],
    )  # fmt: skip
    offsets = {(t.name, p.partition_index): p.committed_offset for t in fetched.topics
               for p in t.partitions}  # fmt: skip
    assert offsets == {(topic, 1): 5, (topic, 2): -1, (missing, 0): -1}

    # the admin call that is an OffsetCommit too
    admin = ck_admin.AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    request = ck.ConsumerGroupTopicPartitions(
        group, [ck.TopicPartition(topic, 0, 7), ck.TopicPartition(missing, 0, 7)]
    )
    altered = admin.alter_consumer_group_offsets([request])[group].result(30)
    outcome = {
        (tp.topic, tp.partition): None if tp.error is None else tp.error.code()
        for tp in altered.topic_partitions
    }
    assert outcome == {(topic, 0): None, (missing, 0): ck.KafkaError.UNKNOWN_TOPIC_OR_PART}


def _metadata_has(broker: BrokerProcess, topic: str) -> bool:
    answer = call(broker, 3, 1, topics=[{"name": topic}])
    return any(t.name == topic and int(t.error_code) == NONE for t in answer.topics)


# -- 3. describing an unknown group -------------------------------------------------------


def test_an_unknown_group_is_described_dead(broker: BrokerProcess) -> None:
    unknown = describe(broker, f"never-seen-{next(_names)}")
    assert int(unknown.error_code) == NONE
    assert unknown.group_state == "Dead"
    assert (unknown.protocol_type, unknown.protocol_data, unknown.members) == ("", "", ())

    # a group with committed offsets and no members is Empty
    topic, group = f"offsets-only-{next(_names)}", f"offsets-only-{next(_names)}"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, 1, 1)
    wait_until(lambda: _metadata_has(broker, topic), 30, "the topic in the metadata")
    committed = call(
        broker, OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None,
        topics=[{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}],
    )  # fmt: skip
    assert int(committed.topics[0].partitions[0].error_code) == NONE
    assert describe(broker, group).group_state == "Empty"

    admin_client = ck_admin.AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    name = f"never-seen-{next(_names)}"
    found = admin_client.describe_consumer_groups([name])[name].result(30)
    assert found.state == ck.ConsumerGroupState.DEAD and not found.members


# -- 4. static members --------------------------------------------------------------------


def test_a_static_leader_rejoins_without_a_rebalance(broker: BrokerProcess) -> None:
    group = f"static-{next(_names)}"
    both = [("range", b"range-s"), ("roundrobin", b"rr-s")]
    a = join(broker, group, protocols=both, instance_id="a")
    assert a.error_code == NONE and a.leader == a.member_id and a.generation_id == 1
    assert sync(broker, group, 1, a.member_id, "a", {a.member_id: b"a-1"}).error_code == NONE

    # b joins; a joins again as the leader: generation 2, assignments stored
    _, b_answer = in_background(lambda: join(broker, group, protocols=both, instance_id="b"))
    wait_until(
        lambda: heartbeat(broker, group, 1, a.member_id, "a")
        == errors.REBALANCE_IN_PROGRESS.number,
        30, "the rebalance b starts",
    )  # fmt: skip
    a2 = join(broker, group, a.member_id, protocols=both, instance_id="a")
    b = answered(b_answer, 30, "b's join")
    assert a2.generation_id == b.generation_id == 2 and a2.leader == a.member_id
    assert a2.protocol_name == "range"
    _, b_synced = in_background(lambda: sync(broker, group, 2, b.member_id, "b"))
    assignments = {a.member_id: b"a-2", b.member_id: b"b-2"}
    assert sync(broker, group, 2, a.member_id, "a", assignments).assignment == b"a-2"
    assert answered(b_synced, 30, "b's sync").assignment == b"b-2"

    # the leader restarts: same instance id, no member id, the same protocols
    _, restarted = in_background(lambda: join(broker, group, protocols=both, instance_id="a"))
    back = answered(restarted, 15, "the restarted leader's join, without a rebalance")
    assert back.error_code == NONE and back.generation_id == 2
    assert back.member_id not in ("", a.member_id)
    # as Kafka answers JoinGroup before v9: the old leader id and no members, so
    # that the leader assigns nothing in a stable group
    assert back.leader == a.member_id and back.members == ()
    assert back.protocol_name == "range"
    assert heartbeat(broker, group, 2, b.member_id, "b") == NONE  # no rebalance
    described = describe(broker, group)
    assert described.group_state == "Stable"
    assert sorted(m.member_id for m in described.members) == sorted([back.member_id, b.member_id])
    synced = sync(broker, group, 2, back.member_id, "a")
    assert synced.error_code == NONE and synced.assignment == b"a-2"  # its assignment kept
    # the old member id is fenced, as Kafka fences it
    assert heartbeat(broker, group, 2, a.member_id, "a") == errors.FENCED_INSTANCE_ID.number
    zombie = join(broker, group, a.member_id, protocols=both, instance_id="a")
    assert zombie.error_code == errors.FENCED_INSTANCE_ID.number
    assert heartbeat(broker, group, 2, back.member_id, "a") == NONE

    # b restarts naming only roundrobin: the group's protocol would change, so it rebalances
    _, changed = in_background(
        lambda: join(broker, group, protocols=[("roundrobin", b"rr-b")], instance_id="b")
    )
    wait_until(
        lambda: heartbeat(broker, group, 2, back.member_id, "a")
        == errors.REBALANCE_IN_PROGRESS.number,
        30, "the rebalance b's change of protocols starts",
    )  # fmt: skip
    a3 = join(broker, group, back.member_id, protocols=both, instance_id="a")
    b3 = answered(changed, 30, "b's join")
    assert a3.generation_id == b3.generation_id == 3
    assert a3.protocol_name == b3.protocol_name == "roundrobin"


# -- 5. transactions ----------------------------------------------------------------------


def test_find_coordinator_names_transaction_coordinators(broker: BrokerProcess) -> None:
    def found(version: int) -> Any:
        return call(broker, FIND_COORDINATOR, version, key="tx-raw", key_type=1)

    # the first ask creates __transaction_state: COORDINATOR_NOT_AVAILABLE until it leads
    wait_until(lambda: found(2).error_code == errors.NONE.number, 30, "a transaction coordinator")
    for version in (2, 3):
        answer = found(version)
        assert (answer.node_id, answer.port) == (broker.broker_id, broker.kafka_port)
    batched = call(broker, FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["tx-1", "tx-2"])
    assert [(c.key, int(c.error_code), c.node_id) for c in batched.coordinators] == [
        ("tx-1", errors.NONE.number, broker.broker_id),
        ("tx-2", errors.NONE.number, broker.broker_id),
    ]
    empty = call(broker, FIND_COORDINATOR, 2, key="", key_type=1)
    assert empty.error_code == errors.INVALID_REQUEST.number

    python_producer = kafka.KafkaProducer(
        bootstrap_servers=broker.kafka_endpoint,
        transactional_id=f"tx-{next(_names)}",
        max_block_ms=20_000,
    )
    try:
        python_producer.init_transactions()
        python_producer.begin_transaction()
        python_producer.send("txn-topic", b"v")
        python_producer.commit_transaction()
    finally:
        python_producer.close(0)
