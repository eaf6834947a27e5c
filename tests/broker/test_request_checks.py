"""Every request is checked at the broker's boundary, as Kafka checks them.

The pure checks (``broker/requests/request_checks.py``) first; then two real brokers on
a real ZooKeeper, shared by the module, sent every rpc of ``annal.v1.Annal``
and of ``BrokerControl`` (the same port, so any client reaches it) with each
field at its extremes: illegal topic names, partitions -1 and 2^31-1, numbers
at the int32/int64 limits, empty lists.  Each gets a specific answer: Kafka's
error code where the field is per topic or per partition, INVALID_ARGUMENT
naming the field where it is the request's.  None reaches the safety net
(``broker/requests/rpc_guard.py``): the last test finds no traceback in the logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from annal.broker.requests import request_checks as checks
from annal.broker.requests.request_checks import InvalidRequest, Refusal
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient

from annal import errors

ILLEGAL_NAMES = ["", ".", "..", "x" * 250, "a/b", "tópico"]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NEGATIVE_PARTITIONS = [-1, INT32_MIN]
MISSING_PARTITIONS = [-1, INT32_MIN, INT32_MAX]
BAD_EPOCHS = [-2, INT32_MIN]  # -1 means "unknown"


def error(outcome: object) -> str | None:
    """The error a check answered; None when it let the value through."""
    return outcome.error.name if isinstance(outcome, Refusal) else None


# -- the pure checks -----------------------------------------------------------------


def test_topic_names() -> None:
    for topic in [*ILLEGAL_NAMES, "x" * 10_000, "a b", "a\x00"]:
        refusal = checks.topic_name(topic)
        assert refusal is not None and refusal.error.name == "INVALID_TOPIC_EXCEPTION", topic
        assert len(refusal.message) < 200  # a long name is cut in the message
    for topic in ["t", "x" * 249, "a.b_c-D9", "...", "__consumer_offsets"]:
        assert checks.topic_name(topic) is None
    assert error(checks.topic_partition("t", -1)) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error(checks.topic_partition("a/b", -1)) == "INVALID_TOPIC_EXCEPTION"  # name first
    assert checks.topic_partition("t", INT32_MAX) is None  # exists or not: the broker knows


def test_request_level_fields_raise_naming_the_field() -> None:
    with pytest.raises(InvalidRequest, match=r"^timeout_ms must be >= 0 .*, not -1$"):
        checks.check_timeout_ms(-1)
    checks.check_timeout_ms(0)
    checks.check_timeout_ms(INT32_MAX)
    with pytest.raises(InvalidRequest, match="replica_id must be -1 .*, not -2"):
        checks.check_replica_id(-2)
    checks.check_replica_id(-1)
    for field, args in [
        ("max_wait_ms", (-1, 0, 0)),
        ("min_bytes", (0, INT32_MIN, 0)),
        ("max_bytes", (0, 0, -1)),
    ]:
        with pytest.raises(InvalidRequest, match=f"^{field} must be") as info:
            checks.check_fetch_limits(*args)
        assert info.value.field == field
    with pytest.raises(InvalidRequest, match=r"live\[0\].port must be a TCP port"):
        checks.check_broker_endpoint("live[0]", 1, 70_000)


def test_per_partition_fields() -> None:
    assert error(checks.acks(2)) == "INVALID_REQUIRED_ACKS"
    assert [checks.acks(a) for a in (-1, 0, 1)] == [None] * 3
    assert error(checks.produce_partition("__consumer_offsets", 0)) == "INVALID_TOPIC_EXCEPTION"
    fetch = checks.fetch_partition
    assert error(fetch("t", 0, -1, 0, -1, -1)) == "OFFSET_OUT_OF_RANGE"
    assert error(fetch("t", 0, 0, -1, -1, -1)) == "INVALID_REQUEST"
    assert error(fetch("t", 0, 0, 0, -2, -1)) == "INVALID_REQUEST"
    assert error(fetch("t", 0, 0, 0, -1, -2)) == "INVALID_REQUEST"
    assert fetch("t", 0, INT64_MAX, INT32_MAX, INT32_MAX, INT64_MAX) is None
    assert error(checks.list_offsets_partition("t", 0, -3, -1)) == "INVALID_REQUEST"
    assert checks.list_offsets_partition("t", 0, -2, -1) is None
    assert error(checks.epoch_partition("t", 0, -1, -2)) == "INVALID_REQUEST"
    assert checks.epoch_partition("t", 0, -1, -1) is None
    assert error(checks.delete_records_partition("t", 0, -2)) == "OFFSET_OUT_OF_RANGE"
    assert checks.delete_records_partition("t", 0, -1) is None  # the high watermark
    assert error(checks.commit_partition("t", 0, -1, -1)) == "INVALID_REQUEST"
    assert error(checks.commit_partition("t", 0, 0, -2)) == "INVALID_REQUEST"
    assert error(checks.group_id("")) == "INVALID_GROUP_ID"
    assert error(checks.group_id("é" * 20_000)) == "INVALID_GROUP_ID"  # 40,000 bytes
    assert checks.group_id("g" * 32_767) is None
    assert checks.repeated(["a", "b", "a", "c", "c"]) == {"a", "c"}


def test_new_topic_assignment() -> None:
    live = [1, 2, 3]

    def plan(
        partitions: int = -1, factor: int = -1, assignment: Mapping[int, Sequence[int]] = {}
    ) -> Refusal | dict[int, tuple[int, ...]]:
        return checks.new_topic_assignment(partitions, factor, assignment, live, 2, 1)

    assert plan() == {0: (1,), 1: (2,)}  # the broker's defaults
    assert plan(3, 3) == {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}
    assert plan(assignment={0: [3, 1], 1: [1, 2]}) == {0: (3, 1), 1: (1, 2)}
    for partitions in (0, -2, INT32_MIN, INT32_MAX, checks.MAX_PARTITIONS + 1):
        assert error(plan(partitions=partitions)) == "INVALID_PARTITIONS"
    for factor in (0, -7, INT32_MIN, 4, INT32_MAX):
        assert error(plan(factor=factor)) == "INVALID_REPLICATION_FACTOR"
    for bad in ({0: [1, 1]}, {0: []}, {0: [999]}, {0: [-1]}, {0: [1], 1: [1, 2]}, {1: [1]}):
        assert error(plan(assignment=bad)) == "INVALID_REPLICA_ASSIGNMENT", bad
    for partitions, factor in ((1, -1), (-1, 1), (0, 0)):
        both = plan(partitions, factor, {0: [1]})
        assert error(both) == "INVALID_REQUEST"
    assert checks.replication_factor(-1, 3, 1) == Refusal(
        errors.INVALID_REPLICATION_FACTOR, "replication factor 3 is larger than the 1 live brokers"
    )


def test_added_partitions_and_reassignments() -> None:
    current = {0: [1, 2]}
    live = [1, 2, 3]

    def grow(count: int, given: Sequence[Sequence[int]] = ()) -> object:
        return checks.added_partitions_assignment("t", count, current, given, live)

    assert grow(3) == {1: (2, 3), 2: (3, 1)}
    assert grow(2, [[3, 1]]) == {1: (3, 1)}
    for count in (1, 0, -1, INT32_MIN, INT32_MAX):
        assert error(grow(count)) == "INVALID_PARTITIONS"
    for given in ([[1, 1]], [[]], [[1, 999]], [[1]], [[1, 2], [2, 3]]):
        assert error(grow(2, given)) == "INVALID_REPLICA_ASSIGNMENT", given
    assert error(checks.reassignment("t", 0, [], live)) == "INVALID_REPLICA_ASSIGNMENT"
    assert error(checks.reassignment("t", 0, [2, 2], live)) == "INVALID_REPLICA_ASSIGNMENT"
    assert error(checks.reassignment("t", 0, [4], live)) == "INVALID_REPLICA_ASSIGNMENT"
    assert error(checks.reassignment("t", -1, [1], live)) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert checks.reassignment("t", 0, [3, 1], live) is None


def test_topic_configs() -> None:
    for props in [
        {"min.insync.replicas": "0"},
        {"segment.bytes": str(2**31)},
        {"retention.ms": str(2**63)},
        {"retention.ms": "-2"},
        {"segment.bytes": "lots"},
        {"no.such.config": "1"},
    ]:
        assert error(checks.topic_configs(props)) == "INVALID_CONFIG", props
    assert checks.topic_configs({"retention.ms": "-1", "segment.bytes": str(INT32_MAX)}) is None


def test_controller_partition_states() -> None:
    state = checks.partition_state
    assert error(state("../escape", 0, 1, 0, [1], [1])) == "INVALID_TOPIC_EXCEPTION"
    assert error(state("t", -1, 1, 0, [1], [1])) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error(state("t", 0, -2, 0, [1], [1])) == "INVALID_REQUEST"
    assert error(state("t", 0, 1, -1, [1], [1])) == "INVALID_REQUEST"
    assert error(state("t", 0, 1, 0, [1, 1], [1])) == "INVALID_REQUEST"
    assert error(state("t", 0, 1, 0, [1], [-3])) == "INVALID_REQUEST"
    assert state("t", 0, -1, 0, [], [1, 2]) is None


def test_waits_end_at_the_callers_deadline() -> None:
    assert checks.bounded_wait_ms(0, 30_000, None) == 30_000
    assert checks.bounded_wait_ms(INT32_MAX, 30_000, None) == INT32_MAX
    assert checks.bounded_wait_ms(0, 30_000, 9.2e18) == 30_000  # gRPC's "no deadline"
    assert checks.bounded_wait_ms(INT32_MAX, 30_000, 2.0) == 1_800  # a tenth early
    assert checks.bounded_wait_ms(INT32_MAX, 30_000, 100.0) == 99_000  # at most 1 s
    assert checks.bounded_wait_ms(INT32_MAX, 30_000, 0.1) == 80  # at least 20 ms
    assert checks.bounded_wait_ms(100, 30_000, 2.5) == 100
    assert checks.bounded_wait_ms(100, 30_000, 0.0) == 0


# -- real brokers ------------------------------------------------------------------------


@dataclass
class Cluster:
    brokers: list[BrokerProcess]
    channels: list[grpc.Channel]

    @property
    def client(self) -> annal_pb2_grpc.AnnalStub:
        """Broker 1: the controller, and the leader of every partition below."""
        return annal_pb2_grpc.AnnalStub(self.channels[0])

    def control(self, index: int = 0) -> annal_pb2_grpc.BrokerControlStub:
        return annal_pb2_grpc.BrokerControlStub(self.channels[index])

    def controller_epoch(self) -> int:
        with ZkClient(self.brokers[0].zookeeper_connect) as zk:
            found = zk.get("/controller_epoch")
        assert found is not None
        return int(found[0])


SETTINGS = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1"}


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> Iterator[Cluster]:
    """Broker 1 (the controller, started first) and broker 2; topics ``t`` (one
    partition on broker 1, holding a record) and ``pair`` (replicas [1, 2])."""
    brokers = [module_broker_factory(i, SETTINGS) for i in (1, 2)]
    wait_until(lambda: metadata_lists(brokers[0].endpoint, [1, 2]), 60, "both brokers listed")
    channels = [grpc.insecure_channel(b.endpoint) for b in brokers]
    found = Cluster(brokers, channels)
    created = found.client.CreateTopics(
        pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name="t", num_partitions=-1, replication_factor=-1,
                    assignment={0: pb.ReplicaList(brokers=[1])},
                ),
                pb.CreatableTopic(
                    name="pair", num_partitions=-1, replication_factor=-1,
                    assignment={0: pb.ReplicaList(brokers=[1, 2])},
                ),
            ],
            timeout_ms=30_000,
        ),
        timeout=40,
    )  # fmt: skip
    assert [t.error for t in created.topics] == [pb.NONE, pb.NONE], created
    produced = found.client.Produce(
        pb.ProduceRequest(acks=1, topics=[pb.TopicProduceData(name="t", partitions=[
            pb.PartitionProduceData(partition=0, records=encode_batch([Record(0, 1, None, b"v")]))
        ])]),
        timeout=10,
    )  # fmt: skip
    assert produced.topics[0].partitions[0].error == pb.NONE, produced
    yield found
    for channel in channels:
        channel.close()


def invalid_argument(call: Callable[..., Any], request: Any, field: str) -> None:
    """The request is refused whole: INVALID_ARGUMENT naming ``field``."""
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
    assert (info.value.details() or "").startswith(field), info.value.details()


def name(code: int) -> str:
    return pb.ErrorCode.Name(code)


def partition_errors(response: Any) -> list[tuple[str, int, str]]:
    return [(t.name, p.partition, name(p.error)) for t in response.topics for p in t.partitions]


def produce(
    cluster: Cluster, topic: str, partition: int = 0, acks: int = 1, timeout_ms: int = 0,
    records: bytes = encode_batch([Record(0, 1, None, b"x")]),
) -> Any:  # fmt: skip
    return cluster.client.Produce(
        pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[
            pb.TopicProduceData(name=topic, partitions=[
                pb.PartitionProduceData(partition=partition, records=records)
            ])
        ]),
        timeout=10,
    )  # fmt: skip


@pytest.mark.timeout(180)
def test_metadata(cluster: Cluster) -> None:
    for auto_create in (False, True):
        response = cluster.client.Metadata(
            pb.MetadataRequest(topics=[*ILLEGAL_NAMES, "t"], allow_auto_topic_creation=auto_create),
            timeout=10,
        )
        assert [name(t.error) for t in response.topics] == ["INVALID_TOPIC_EXCEPTION"] * len(
            ILLEGAL_NAMES
        ) + ["NONE"]
    everything = cluster.client.Metadata(pb.MetadataRequest(), timeout=10)
    assert {"t", "pair"} <= {t.name for t in everything.topics}


@pytest.mark.timeout(180)
def test_produce(cluster: Cluster) -> None:
    for topic in ILLEGAL_NAMES:
        answer = produce(cluster, topic).topics[0].partitions[0]
        assert name(answer.error) == "INVALID_TOPIC_EXCEPTION", topic
        assert "illegal topic name" in answer.error_message and answer.base_offset == -1
    for partition in MISSING_PARTITIONS:
        answer = produce(cluster, "t", partition).topics[0].partitions[0]
        assert name(answer.error) == "UNKNOWN_TOPIC_OR_PARTITION", partition
    for acks in (2, -2, INT32_MIN, INT32_MAX):
        answer = produce(cluster, "t", acks=acks).topics[0].partitions[0]
        assert name(answer.error) == "INVALID_REQUIRED_ACKS", acks
    for timeout_ms in (-1, INT32_MIN):
        request = pb.ProduceRequest(acks=-1, timeout_ms=timeout_ms)
        invalid_argument(cluster.client.Produce, request, "timeout_ms")
    # the longest timeout is only a bound: a one-replica ISR answers at once
    answer = produce(cluster, "t", acks=-1, timeout_ms=INT32_MAX).topics[0].partitions[0]
    assert name(answer.error) == "NONE"
    for records in (b"", b"\x00" * 7, b"\xff" * 100):
        answer = produce(cluster, "t", records=records).topics[0].partitions[0]
        assert name(answer.error) == "CORRUPT_MESSAGE", records
    answer = produce(cluster, "__consumer_offsets").topics[0].partitions[0]
    assert name(answer.error) == "INVALID_TOPIC_EXCEPTION"
    assert "internal topic" in answer.error_message
    empty = cluster.client.Produce(
        pb.ProduceRequest(acks=1, topics=[pb.TopicProduceData(name="t")]), timeout=10
    )
    assert partition_errors(empty) == []


def fetch(
    cluster: Cluster, topic: str = "t", partition: int = 0, offset: int = 0, *,
    replica_id: int = -1, max_wait_ms: int = 0, min_bytes: int = 0, max_bytes: int = 0,
    partition_max_bytes: int = 0, epoch: int | None = None, log_start_offset: int = -1,
) -> Any:  # fmt: skip
    return cluster.client.Fetch(
        pb.FetchRequest(
            replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
            max_bytes=max_bytes,
            topics=[pb.TopicFetchData(name=topic, partitions=[
                pb.PartitionFetchData(
                    partition=partition, fetch_offset=offset,
                    partition_max_bytes=partition_max_bytes, current_leader_epoch=epoch,
                    log_start_offset=log_start_offset,
                )
            ])],
        ),
        timeout=10,
    ).topics[0].partitions[0]  # fmt: skip


@pytest.mark.timeout(180)
def test_fetch(cluster: Cluster) -> None:
    for topic in ILLEGAL_NAMES:
        answer = fetch(cluster, topic)
        assert name(answer.error) == "INVALID_TOPIC_EXCEPTION", topic
        assert "illegal topic name" in answer.error_message
    for partition in MISSING_PARTITIONS:
        assert name(fetch(cluster, partition=partition).error) == "UNKNOWN_TOPIC_OR_PARTITION"
    for offset in (-1, INT64_MIN, INT64_MAX):
        assert name(fetch(cluster, offset=offset).error) == "OFFSET_OUT_OF_RANGE", offset
    for value in (-1, INT32_MIN):
        assert name(fetch(cluster, partition_max_bytes=value).error) == "INVALID_REQUEST"
    for epoch in BAD_EPOCHS:
        assert name(fetch(cluster, epoch=epoch).error) == "INVALID_REQUEST"
    assert name(fetch(cluster, epoch=INT32_MAX).error) == "UNKNOWN_LEADER_EPOCH"
    for start in (-2, INT64_MIN):
        answer = fetch(cluster, replica_id=2, log_start_offset=start)
        assert name(answer.error) == "INVALID_REQUEST"
    # request-level fields
    for field, value in [
        ("replica_id", -2), ("replica_id", INT32_MIN), ("max_wait_ms", -1),
        ("max_wait_ms", INT32_MIN), ("min_bytes", -1), ("max_bytes", -1), ("max_bytes", INT32_MIN),
    ]:  # fmt: skip
        invalid_argument(cluster.client.Fetch, pb.FetchRequest(**{field: value}), field)
    # a broker id that is no replica of the partition reads nothing (Kafka's rule)
    assert name(fetch(cluster, replica_id=INT32_MAX).error) == "NOT_LEADER_OR_FOLLOWER"
    assert name(fetch(cluster, replica_id=1).error) == "NOT_LEADER_OR_FOLLOWER"  # itself
    # proto3's default replica_id, 0, is a broker id: a client that leaves it unset is
    # refused, where it used to read past the high watermark as "follower 0"
    assert name(fetch(cluster, replica_id=0).error) == "NOT_LEADER_OR_FOLLOWER"
    assert name(fetch(cluster, replica_id=2, epoch=0).error) == "UNKNOWN_LEADER_EPOCH"
    # the limits at their largest: data there is answered at once
    answer = fetch(
        cluster, max_wait_ms=INT32_MAX, min_bytes=1, max_bytes=INT32_MAX,
        partition_max_bytes=INT32_MAX,
    )  # fmt: skip
    assert name(answer.error) == "NONE" and answer.records
    answer = fetch(cluster, max_wait_ms=0, min_bytes=INT32_MAX)
    assert name(answer.error) == "NONE" and answer.records
    # a long poll with nothing to read is answered before the caller's deadline,
    # not in 24 days
    started = time.monotonic()
    empty = cluster.client.Fetch(
        pb.FetchRequest(replica_id=-1, max_wait_ms=INT32_MAX, min_bytes=1, topics=[
            pb.TopicFetchData(name="pair", partitions=[pb.PartitionFetchData(partition=0)])]),
        timeout=2,
    ).topics[0].partitions[0]  # fmt: skip
    assert (name(empty.error), empty.records) == ("NONE", b"")
    assert 1.0 < time.monotonic() - started < 2.0


@pytest.mark.timeout(180)
def test_list_offsets(cluster: Cluster) -> None:
    def ask(topic: str = "t", partition: int = 0, timestamp: int = -1, epoch: int = -1) -> Any:
        return cluster.client.ListOffsets(
            pb.ListOffsetsRequest(replica_id=-1, topics=[pb.TopicListOffsets(name=topic,
                partitions=[pb.PartitionListOffsets(
                    partition=partition, timestamp=timestamp, current_leader_epoch=epoch)])]),
            timeout=10,
        ).topics[0].partitions[0]  # fmt: skip

    for topic in ILLEGAL_NAMES:
        assert name(ask(topic).error) == "INVALID_TOPIC_EXCEPTION"
    for partition in MISSING_PARTITIONS:
        assert name(ask(partition=partition).error) == "UNKNOWN_TOPIC_OR_PARTITION"
    for timestamp in (-3, INT64_MIN):
        assert name(ask(timestamp=timestamp).error) == "INVALID_REQUEST"
    for epoch in BAD_EPOCHS:
        assert name(ask(epoch=epoch).error) == "INVALID_REQUEST"
    earliest, latest, future = ask(timestamp=-2), ask(timestamp=-1), ask(timestamp=INT64_MAX)
    assert (name(earliest.error), earliest.offset) == ("NONE", 0)
    assert name(latest.error) == "NONE" and latest.offset >= 1
    assert (name(future.error), future.offset) == ("NONE", -1)  # no record that recent
    for replica_id in (-2, INT32_MIN):
        request = pb.ListOffsetsRequest(replica_id=replica_id)
        invalid_argument(cluster.client.ListOffsets, request, "replica_id")


@pytest.mark.timeout(180)
def test_offsets_for_leader_epoch(cluster: Cluster) -> None:
    def ask(topic: str = "t", partition: int = 0, current: int = -1, epoch: int = 0) -> Any:
        return cluster.client.OffsetsForLeaderEpoch(
            pb.OffsetsForLeaderEpochRequest(replica_id=2, topics=[pb.TopicEpochs(name=topic,
                partitions=[pb.PartitionEpoch(
                    partition=partition, current_leader_epoch=current, leader_epoch=epoch)])]),
            timeout=10,
        ).topics[0].partitions[0]  # fmt: skip

    for topic in ILLEGAL_NAMES:
        assert name(ask(topic).error) == "INVALID_TOPIC_EXCEPTION"
    for partition in MISSING_PARTITIONS:
        assert name(ask(partition=partition).error) == "UNKNOWN_TOPIC_OR_PARTITION"
    for epoch in BAD_EPOCHS:
        assert name(ask(current=epoch).error) == "INVALID_REQUEST"
        assert name(ask(epoch=epoch).error) == "INVALID_REQUEST"
    assert name(ask(current=INT32_MAX).error) == "UNKNOWN_LEADER_EPOCH"
    beyond = ask(epoch=INT32_MAX)
    assert (name(beyond.error), beyond.leader_epoch, beyond.end_offset) == ("NONE", -1, -1)
    for replica_id in (-2, INT32_MIN):
        request = pb.OffsetsForLeaderEpochRequest(replica_id=replica_id)
        invalid_argument(cluster.client.OffsetsForLeaderEpoch, request, "replica_id")


def create(
    cluster: Cluster, topic: str = "fresh", partitions: int = -1, factor: int = -1,
    assignment: Mapping[int, Sequence[int]] | None = None,
    configs: Mapping[str, str] | None = None, validate_only: bool = True,
) -> Any:  # fmt: skip
    return cluster.client.CreateTopics(
        pb.CreateTopicsRequest(
            topics=[pb.CreatableTopic(
                name=topic, num_partitions=partitions, replication_factor=factor,
                assignment={p: pb.ReplicaList(brokers=r) for p, r in (assignment or {}).items()},
                configs=configs,
            )],
            timeout_ms=10_000, validate_only=validate_only,
        ),
        timeout=20,
    ).topics[0]  # fmt: skip


@pytest.mark.timeout(180)
def test_create_topics_refuses_replica_lists_kafka_refuses(cluster: Cluster) -> None:
    """[1, 1] put one broker twice in a replica list (its ISR [1, 1] then met
    min.insync.replicas 2 alone); [] and [999] named no live broker; replication
    factors 0 and -7 were taken as the default."""
    for topic, assignment, factor, wanted in [
        ("twice", {0: [1, 1]}, -1, "INVALID_REPLICA_ASSIGNMENT"),
        ("nobody", {0: []}, -1, "INVALID_REPLICA_ASSIGNMENT"),
        ("stranger", {0: [999]}, -1, "INVALID_REPLICA_ASSIGNMENT"),
        ("zero", None, 0, "INVALID_REPLICATION_FACTOR"),
        ("minus-seven", None, -7, "INVALID_REPLICATION_FACTOR"),
    ]:
        result = create(
            cluster, topic, 1 if assignment is None else -1, factor, assignment,
            configs={"min.insync.replicas": "2"}, validate_only=False,
        )  # fmt: skip
        assert name(result.error) == wanted, (topic, result)
        assert result.error_message
    listed = cluster.client.Metadata(pb.MetadataRequest(), timeout=10)
    assert {"twice", "nobody", "stranger", "zero", "minus-seven"}.isdisjoint(
        t.name for t in listed.topics
    )


@pytest.mark.timeout(180)
def test_create_topics(cluster: Cluster) -> None:
    for topic in ILLEGAL_NAMES:
        assert name(create(cluster, topic).error) == "INVALID_TOPIC_EXCEPTION"
    for partitions in (0, -2, INT32_MIN, INT32_MAX, checks.MAX_PARTITIONS + 1):
        assert name(create(cluster, partitions=partitions).error) == "INVALID_PARTITIONS"
    for factor in (0, -2, INT32_MIN, 3, INT32_MAX):  # two brokers are live
        result = create(cluster, factor=factor)
        assert name(result.error) == "INVALID_REPLICATION_FACTOR", factor
    for assignment in (
        {0: [1, 1]}, {0: []}, {0: [999]}, {0: [-1]}, {0: [INT32_MAX]}, {0: [1], 1: [1, 2]},
        {1: [1]}, {-1: [1]}, {INT32_MAX: [1]}, {INT32_MIN: [1]},
    ):  # fmt: skip
        result = create(cluster, assignment=assignment)
        assert name(result.error) == "INVALID_REPLICA_ASSIGNMENT", assignment
    for partitions, factor in ((1, -1), (-1, 1), (0, 0), (INT32_MAX, INT32_MIN)):
        result = create(cluster, partitions=partitions, factor=factor, assignment={0: [1]})
        assert name(result.error) == "INVALID_REQUEST", (partitions, factor)
    for configs in (
        {"min.insync.replicas": "0"}, {"segment.bytes": str(2**31)},
        {"retention.ms": str(2**63)}, {"retention.ms": "-2"}, {"no.such.config": "1"},
    ):  # fmt: skip
        assert name(create(cluster, configs=configs).error) == "INVALID_CONFIG", configs
    assert name(create(cluster, "t").error) == "TOPIC_ALREADY_EXISTS"
    assert name(create(cluster, partitions=2, factor=2).error) == "NONE"  # validate_only
    twice = cluster.client.CreateTopics(
        pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="dup", num_partitions=1,
            replication_factor=1)] * 2, validate_only=True),
        timeout=10,
    )  # fmt: skip
    assert [name(t.error) for t in twice.topics] == ["INVALID_REQUEST"] * 2
    for timeout_ms in (-1, INT32_MIN):
        request = pb.CreateTopicsRequest(timeout_ms=timeout_ms)
        invalid_argument(cluster.client.CreateTopics, request, "timeout_ms")
    quick = cluster.client.CreateTopics(
        pb.CreateTopicsRequest(timeout_ms=INT32_MAX, validate_only=True), timeout=10
    )
    assert list(quick.topics) == []


@pytest.mark.timeout(180)
def test_create_partitions(cluster: Cluster) -> None:
    def grow(topic: str = "pair", count: int = 2, assignment: Sequence[Sequence[int]] = ()) -> Any:
        return cluster.client.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.CreatePartitionsTopic(name=topic, count=count,
                    assignment=[pb.ReplicaList(brokers=r) for r in assignment])],
                validate_only=True,
            ),
            timeout=10,
        ).topics[0]  # fmt: skip

    for topic in ILLEGAL_NAMES:
        assert name(grow(topic).error) == "INVALID_TOPIC_EXCEPTION"
    assert name(grow("absent").error) == "UNKNOWN_TOPIC_OR_PARTITION"
    for count in (1, 0, -1, INT32_MIN, INT32_MAX):
        assert name(grow(count=count).error) == "INVALID_PARTITIONS", count
    for assignment in ([[1, 1]], [[]], [[1, 999]], [[2]], [[2, 1], [1, 2]], [[-1, 1]]):
        result = grow(assignment=assignment)
        assert name(result.error) == "INVALID_REPLICA_ASSIGNMENT", assignment
    assert name(grow(assignment=[[2, 1]]).error) == "NONE"
    twice = cluster.client.CreatePartitions(
        pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsTopic(name="pair", count=2)] * 2, validate_only=True
        ),
        timeout=10,
    )
    assert [name(t.error) for t in twice.topics] == ["INVALID_REQUEST"] * 2
    invalid_argument(
        cluster.client.CreatePartitions, pb.CreatePartitionsRequest(timeout_ms=-1), "timeout_ms"
    )


@pytest.mark.timeout(180)
def test_delete_topics(cluster: Cluster) -> None:
    def delete(topics: list[str], timeout_ms: int = 10_000) -> list[str]:
        response = cluster.client.DeleteTopics(
            pb.DeleteTopicsRequest(topics=topics, timeout_ms=timeout_ms), timeout=20
        )
        return [name(t.error) for t in response.topics]

    assert delete(ILLEGAL_NAMES) == ["INVALID_TOPIC_EXCEPTION"] * len(ILLEGAL_NAMES)
    assert delete(["absent"], INT32_MAX) == ["UNKNOWN_TOPIC_OR_PARTITION"]
    assert delete(["t", "t"]) == ["INVALID_REQUEST"] * 2
    assert delete([]) == []
    for timeout_ms in (-1, INT32_MIN):
        request = pb.DeleteTopicsRequest(topics=["t"], timeout_ms=timeout_ms)
        invalid_argument(cluster.client.DeleteTopics, request, "timeout_ms")
    assert name(create(cluster, "doomed", 1, 1, validate_only=False).error) == "NONE"
    assert delete(["doomed"], INT32_MAX) == ["NONE"]  # answered once gone, not in 24 days


@pytest.mark.timeout(180)
def test_elect_leaders(cluster: Cluster) -> None:
    def elect(topic: str, partitions: list[int]) -> list[tuple[int, str]]:
        response = cluster.client.ElectLeaders(
            pb.ElectLeadersRequest(
                topic_partitions=[pb.TopicPartitions(topic=topic, partitions=partitions)],
                timeout_ms=5_000,
            ),
            timeout=10,
        )
        return [(r.partition, name(r.error)) for r in response.results]

    for topic in ILLEGAL_NAMES:
        assert elect(topic, []) == [(-1, "INVALID_TOPIC_EXCEPTION")]
        refused = [(0, "INVALID_TOPIC_EXCEPTION"), (3, "INVALID_TOPIC_EXCEPTION")]
        assert elect(topic, [0, 3]) == refused
    for partition in MISSING_PARTITIONS:
        assert elect("pair", [partition]) == [(partition, "UNKNOWN_TOPIC_OR_PARTITION")]
    assert elect("pair", [0]) == [(0, "ELECTION_NOT_NEEDED")]
    assert elect("absent", []) == [(-1, "UNKNOWN_TOPIC_OR_PARTITION")]
    for timeout_ms in (-1, INT32_MIN):
        request = pb.ElectLeadersRequest(timeout_ms=timeout_ms)
        invalid_argument(cluster.client.ElectLeaders, request, "timeout_ms")


@pytest.mark.timeout(180)
def test_alter_partition_reassignments(cluster: Cluster) -> None:
    def move(topic: str, partition: int, replicas: list[int]) -> str:
        response = cluster.client.AlterPartitionReassignments(
            pb.AlterPartitionReassignmentsRequest(
                partitions=[
                    pb.ReassignablePartition(topic=topic, partition=partition, replicas=replicas)
                ]
            ),
            timeout=10,
        )
        (result,) = response.results
        assert result.error == pb.NONE or result.error_message
        return name(result.error)

    for topic in ILLEGAL_NAMES:
        assert move(topic, 0, [1]) == "INVALID_TOPIC_EXCEPTION"
    for partition in MISSING_PARTITIONS:
        assert move("pair", partition, [1, 2]) == "UNKNOWN_TOPIC_OR_PARTITION"
    for replicas in ([], [1, 1], [999], [-1], [INT32_MIN, 1], [1, INT32_MAX]):
        assert move("pair", 0, replicas) == "INVALID_REPLICA_ASSIGNMENT", replicas
    nothing = cluster.client.AlterPartitionReassignments(
        pb.AlterPartitionReassignmentsRequest(), timeout=10
    )
    assert list(nothing.results) == []


@pytest.mark.timeout(180)
def test_delete_records(cluster: Cluster) -> None:
    def delete(topic: str = "t", partition: int = 0, offset: int = 0) -> str:
        response = cluster.client.DeleteRecords(
            pb.DeleteRecordsRequest(
                partitions=[
                    pb.DeleteRecordsPartition(topic=topic, partition=partition, offset=offset)
                ],
                timeout_ms=5_000,
            ),
            timeout=10,
        )
        return name(response.results[0].error)

    for topic in ILLEGAL_NAMES:
        assert delete(topic) == "INVALID_TOPIC_EXCEPTION"
    for partition in MISSING_PARTITIONS:
        assert delete(partition=partition) == "UNKNOWN_TOPIC_OR_PARTITION"
    for offset in (-2, INT64_MIN, INT64_MAX):
        assert delete(offset=offset) == "OFFSET_OUT_OF_RANGE", offset
    assert delete(offset=0) == "NONE"  # nothing before 0: a no-op
    for timeout_ms in (-1, INT32_MIN):
        request = pb.DeleteRecordsRequest(timeout_ms=timeout_ms)
        invalid_argument(cluster.client.DeleteRecords, request, "timeout_ms")


@pytest.mark.timeout(180)
def test_describe_and_alter_configs(cluster: Cluster) -> None:
    described = cluster.client.DescribeConfigs(
        pb.DescribeConfigsRequest(topics=[*ILLEGAL_NAMES, "absent", "t"]), timeout=10
    )
    assert [name(t.error) for t in described.topics] == ["INVALID_TOPIC_EXCEPTION"] * len(
        ILLEGAL_NAMES
    ) + ["UNKNOWN_TOPIC_OR_PARTITION", "NONE"]
    assert all(t.error_message for t in described.topics[:-1])

    def alter(topic: str, set_: Mapping[str, str], delete: Sequence[str] = ()) -> str:
        response = cluster.client.AlterConfigs(
            pb.AlterConfigsRequest(
                topics=[pb.TopicConfigChange(name=topic, set=set_, delete=delete)],
                validate_only=True,
            ),
            timeout=10,
        )
        return name(response.topics[0].error)

    for topic in ILLEGAL_NAMES:
        assert alter(topic, {"retention.ms": "1000"}) == "INVALID_TOPIC_EXCEPTION"
    assert alter("absent", {}) == "UNKNOWN_TOPIC_OR_PARTITION"
    for key, value in [
        ("min.insync.replicas", "0"), ("min.insync.replicas", str(INT32_MAX + 1)),
        ("retention.ms", str(INT64_MAX + 1)), ("retention.bytes", str(INT64_MIN)),
        ("segment.bytes", "-1"), ("flush.ms", "soon"),
    ]:  # fmt: skip
        assert alter("t", {key: value}) == "INVALID_CONFIG", (key, value)
    assert alter("t", {}, ["retention.ms"]) == "INVALID_CONFIG"  # not set: cannot delete
    assert alter("t", {"retention.ms": str(INT64_MAX)}) == "NONE"


@pytest.mark.timeout(180)
def test_group_rpcs(cluster: Cluster) -> None:
    for group in ("", "g" * 40_000):
        found = cluster.client.FindCoordinator(pb.FindCoordinatorRequest(group=group), timeout=10)
        assert name(found.error) == "INVALID_GROUP_ID" and found.error_message
        fetched = cluster.client.OffsetFetch(pb.OffsetFetchRequest(group=group), timeout=10)
        assert name(fetched.error) == "INVALID_GROUP_ID"

    def commit(
        group: str = "g", topic: str = "t", partition: int = 0, offset: int = 0, epoch: int = -1
    ) -> str:
        response = cluster.client.OffsetCommit(
            pb.OffsetCommitRequest(group=group, topics=[pb.OffsetCommitTopic(name=topic,
                partitions=[pb.OffsetCommitPartition(
                    partition=partition, offset=offset, leader_epoch=epoch)])]),
            timeout=10,
        )  # fmt: skip
        return partition_errors(response)[0][2]

    assert commit(group="") == "INVALID_GROUP_ID"
    assert commit(group="g" * 40_000) == "INVALID_GROUP_ID"
    for topic in ILLEGAL_NAMES:
        assert commit(topic=topic) == "INVALID_TOPIC_EXCEPTION"
    for partition in NEGATIVE_PARTITIONS:
        assert commit(partition=partition) == "UNKNOWN_TOPIC_OR_PARTITION"
    for offset in (-1, INT64_MIN):
        assert commit(offset=offset) == "INVALID_REQUEST"
    for epoch in BAD_EPOCHS:
        assert commit(epoch=epoch) == "INVALID_REQUEST"
    for timeout_ms in (-1, INT32_MIN):
        request = pb.OffsetCommitRequest(group="g", timeout_ms=timeout_ms)
        invalid_argument(cluster.client.OffsetCommit, request, "timeout_ms")

    def committed(topic: str, partitions: list[int]) -> Any:
        return cluster.client.OffsetFetch(
            pb.OffsetFetchRequest(
                group="g", topics=[pb.TopicPartitions(topic=topic, partitions=partitions)]
            ),
            timeout=10,
        )

    for topic in ILLEGAL_NAMES:
        for partitions in ([], [0]):
            answer = committed(topic, partitions)
            assert name(answer.error) == "INVALID_TOPIC_EXCEPTION" and answer.error_message
    for partition in NEGATIVE_PARTITIONS:
        assert name(committed("t", [partition]).error) == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.timeout(180)
def test_controller_requests(cluster: Cluster) -> None:
    """BrokerControl shares the clients' port: garbage is refused before it is applied."""
    control = cluster.control()
    epoch = cluster.controller_epoch()
    assert epoch >= 1
    for stale in (epoch - 1, -1, INT32_MIN):
        answer = control.LeaderAndIsr(
            pb.LeaderAndIsrRequest(controller_id=1, controller_epoch=stale), timeout=10
        )
        assert name(answer.error) == "STALE_CONTROLLER_EPOCH"
        answer = control.UpdateMetadata(
            pb.UpdateMetadataRequest(controller_id=1, controller_epoch=stale), timeout=10
        )
        assert name(answer.error) == "STALE_CONTROLLER_EPOCH"
        answer = control.StopReplica(
            pb.StopReplicaRequest(controller_id=1, controller_epoch=stale), timeout=10
        )
        assert name(answer.error) == "STALE_CONTROLLER_EPOCH"
    for call, request in [
        (control.LeaderAndIsr, pb.LeaderAndIsrRequest),
        (control.UpdateMetadata, pb.UpdateMetadataRequest),
        (control.StopReplica, pb.StopReplicaRequest),
    ]:
        invalid_argument(call, request(controller_id=-1, controller_epoch=epoch), "controller_id")
    # the current epoch, so nothing moves it: each partition refused on its own
    escape = "../../escape"
    states = [
        pb.PartitionState(topic=escape, partition=0, leader=1, leader_epoch=0, isr=[1],
                          replicas=[1]),
        pb.PartitionState(topic="t", partition=-1, leader=1, leader_epoch=0, isr=[1],
                          replicas=[1]),
        pb.PartitionState(topic="t", partition=0, leader=1, leader_epoch=-1, isr=[1],
                          replicas=[1]),
        pb.PartitionState(topic="t", partition=0, leader=1, leader_epoch=0, isr=[1, 1],
                          replicas=[1]),
    ]  # fmt: skip
    answer = control.LeaderAndIsr(
        pb.LeaderAndIsrRequest(controller_id=1, controller_epoch=epoch, partition_states=states),
        timeout=10,
    )
    assert name(answer.error) == "NONE"
    assert [(e.topic, e.partition, name(e.error)) for e in answer.partition_errors] == [
        (escape, 0, "INVALID_TOPIC_EXCEPTION"),
        ("t", -1, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("t", 0, "INVALID_REQUEST"),
        ("t", 0, "INVALID_REQUEST"),
    ]
    assert not (cluster.brokers[0].log_dir.parent.parent / "escape-0").exists()
    for state in states:
        request = pb.UpdateMetadataRequest(
            controller_id=1, controller_epoch=epoch, partition_states=[state]
        )
        invalid_argument(control.UpdateMetadata, request, "partition_states[0]")
    invalid_argument(
        control.UpdateMetadata,
        pb.UpdateMetadataRequest(controller_id=1, controller_epoch=epoch, deleted_topics=["a/b"]),
        "deleted_topics[0]",
    )
    invalid_argument(
        control.UpdateMetadata,
        pb.UpdateMetadataRequest(
            controller_id=1, controller_epoch=epoch,
            live_brokers=[pb.Broker(id=1, host="h", port=INT32_MAX)],
        ),
        "live_brokers[0].port",
    )  # fmt: skip
    invalid_argument(
        control.LeaderAndIsr,
        pb.LeaderAndIsrRequest(
            controller_id=1, controller_epoch=epoch, live_leaders=[pb.Broker(id=-1, port=1)]
        ),
        "live_leaders[0].id",
    )
    stopped = control.StopReplica(
        pb.StopReplicaRequest(controller_id=1, controller_epoch=epoch, partitions=[
            pb.StopReplicaPartition(topic=escape, partition=0, delete_partition=True),
            pb.StopReplicaPartition(topic="t", partition=INT32_MIN, delete_partition=True),
        ]),
        timeout=10,
    )  # fmt: skip
    assert [name(e.error) for e in stopped.partition_errors] == [
        "INVALID_TOPIC_EXCEPTION",
        "UNKNOWN_TOPIC_OR_PARTITION",
    ]
    invalid_argument(
        control.ControlledShutdown, pb.ControlledShutdownRequest(broker_id=-1), "broker_id"
    )
    elsewhere = cluster.control(1).ControlledShutdown(
        pb.ControlledShutdownRequest(broker_id=2), timeout=10
    )
    assert name(elsewhere.error) == "NOT_CONTROLLER"
    # none of it moved the epoch or the metadata: topics still work
    assert cluster.controller_epoch() == epoch
    assert name(produce(cluster, "t").topics[0].partitions[0].error) == "NONE"
    listed = cluster.client.Metadata(pb.MetadataRequest(), timeout=10)
    assert {t.name for t in listed.topics} >= {"t", "pair"}
    assert escape not in {t.name for t in listed.topics}


@pytest.mark.timeout(60)
def test_no_traceback_in_the_broker_logs(cluster: Cluster) -> None:
    """Runs last: nothing above reached the safety net or gRPC's own handler."""
    for broker in cluster.brokers:
        log = broker.log_path.read_text("utf-8", "replace")
        assert "Traceback" not in log, broker.tail_log(80)
        assert "Exception calling application" not in log
