"""Fetch from follower (KIP-392) inside one broker: Kafka's RackAwareReplicaSelector,
``replica.selector.class``, the leader's choice of a preferred read replica and a
follower's reads for consumers with client metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.broker.config import BrokerConfig, ConfigError
from annal.broker.metadata_cache import LiveBroker, MetadataSnapshot
from annal.broker.replication.leadership_fence import LeadershipFence
from annal.broker.replication.partition import LeaderAndIsrState
from annal.broker.replication.replica_manager import ReplicaManager
from annal.broker.replication.replica_selector import (
    RACK_AWARE,
    ClientMetadata,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)
from annal.broker.requests.delayed import FetchStart
from annal.storage.files import TopicPartition
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch
from annal.zk.layout import Endpoint

from annal import errors

pytestmark = pytest.mark.timeout(60)

TP = TopicPartition("t", 0)
RACKS = {1: "r1", 2: "r2", 3: "r3"}


def client(rack: str) -> ClientMetadata:
    return ClientMetadata(rack, "c", "127.0.0.1", "User:ANONYMOUS", "PLAINTEXT")


# -- the selector -----------------------------------------------------------------


def test_rack_aware_selector_picks_as_kafka_does() -> None:
    select = RackAwareReplicaSelector().select
    leader = ReplicaView(1, "r1", 10, 0)
    two = ReplicaView(2, "r2", 10, 50)
    three = ReplicaView(3, "r2", 10, 20)  # as caught up, more recently
    four = ReplicaView(4, "r3", 9, 0)
    replicas = [leader, two, three, four]
    assert select(TP, client(""), leader, replicas) is leader  # no rack: the leader
    assert select(TP, client("r9"), leader, replicas) is leader  # no replica there
    assert select(TP, client("r1"), leader, replicas) is leader  # the leader's own rack
    assert select(TP, client("r2"), leader, replicas) is three
    assert select(TP, client("r3"), leader, replicas) is four
    five = ReplicaView(5, "r2", 11, 900)  # the largest log end wins first
    assert select(TP, client("r2"), leader, [*replicas, five]) is five
    tie = ReplicaView(6, "r2", 10, 20)  # then the larger broker id
    assert select(TP, client("r2"), leader, [*replicas, tie]) is tie


def test_the_setting_names_kafkas_class_or_nothing() -> None:
    assert replica_selector("") is None
    assert isinstance(replica_selector(f" {RACK_AWARE} "), RackAwareReplicaSelector)
    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
    assert BrokerConfig.from_properties(base).replica_selector_class == ""
    chosen = BrokerConfig.from_properties({**base, "replica.selector.class": RACK_AWARE})
    assert chosen.replica_selector_class == RACK_AWARE
    for wrong in ("RackAwareReplicaSelector", "com.example.MySelector"):
        with pytest.raises(ConfigError, match=r"replica\.selector\.class="):
            BrokerConfig.from_properties({**base, "replica.selector.class": wrong})


# -- the replica manager ---------------------------------------------------------------


def one(value: bytes, epoch: int = 0) -> bytes:
    return encode_batch([Record(0, 0, None, value)], partition_leader_epoch=epoch)


def live(broker_id: int, listener: str = "PLAINTEXT") -> LiveBroker:
    return LiveBroker(
        broker_id, "127.0.0.1", 9000 + broker_id, RACKS[broker_id],
        endpoints=(Endpoint(listener, "127.0.0.1", 9100 + broker_id),),
    )  # fmt: skip


def three(leader: int, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 0) -> LeaderAndIsrState:
    return LeaderAndIsrState("t", 0, 1, leader, epoch, isr, (1, 2, 3), 0)


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path], broker_id=1, settings=LogManagerConfig(cleaner_enable=False))
    manager.startup()
    yield manager
    manager.shutdown()


class Cluster:
    """What the leader's metadata cache holds: the live brokers."""

    def __init__(self) -> None:
        self.brokers = {b: live(b) for b in (1, 2, 3)}

    def __call__(self) -> MetadataSnapshot:
        return MetadataSnapshot(brokers=dict(self.brokers))


def leader_with_records(logs: LogManager, selector: bool, cluster: Cluster) -> ReplicaManager:
    """Broker 1 leads ``t-0`` (replicas 1, 2, 3, all in sync) with 3 records that
    both followers hold."""
    fence = LeadershipFence(1)
    replicas = ReplicaManager(
        1, logs, lambda topic: {}, lambda tp: tp == TP, fence=fence,
        replica_selector=replica_selector(RACK_AWARE if selector else ""), metadata=cluster,
    )  # fmt: skip
    assert replicas.become_leader_or_follower([three(1)]) == {TP: errors.NONE}
    for value in (b"a", b"b", b"c"):
        assert replicas.append(TP, one(value)).error is errors.NONE
    for follower in (2, 3):
        assert replicas.read(TP, 3, 1 << 20, replica_id=follower).error is errors.NONE
    assert replicas.partition(TP).log.high_watermark == 3  # type: ignore[union-attr]
    return replicas


def test_the_leader_sends_a_consumer_to_an_in_sync_replica_of_its_rack(
    logs: LogManager,
) -> None:
    cluster = Cluster()
    replicas = leader_with_records(logs, True, cluster)
    sent = replicas.read(TP, 0, 1 << 20, client=client("r2"))
    assert (sent.error, sent.preferred_read_replica, sent.records) == (errors.NONE, 2, b"")
    assert (sent.high_watermark, sent.log_start_offset) == (3, 0)
    # the leader's own rack, no rack, an unknown rack, no client metadata: read here
    for metadata in (client("r1"), client(""), client("r9"), None):
        served = replicas.read(TP, 0, 1 << 20, client=metadata)
        assert served.preferred_read_replica == -1 and served.records
    # a replica that does not hold the offset is no candidate (follower 3 is at 3)
    assert replicas.read(TP, 4, 1 << 20, client=client("r3")).error is errors.OFFSET_OUT_OF_RANGE
    # a broker the metadata no longer lists (dead), or with no endpoint on the
    # consumer's listener, is no candidate
    del cluster.brokers[2]
    assert replicas.read(TP, 0, 1 << 20, client=client("r2")).preferred_read_replica == -1
    cluster.brokers[2] = live(2, "OTHER")
    assert replicas.read(TP, 0, 1 << 20, client=client("r2")).preferred_read_replica == -1
    cluster.brokers[2] = live(2)
    # a follower out of the ISR is no candidate
    assert replicas.become_leader_or_follower([three(1, (1, 3), epoch=1)]) == {TP: errors.NONE}
    assert replicas.read(TP, 0, 1 << 20, replica_id=3).error is errors.NONE
    assert replicas.read(TP, 0, 1 << 20, client=client("r2")).preferred_read_replica == -1
    assert replicas.read(TP, 0, 1 << 20, client=client("r3")).preferred_read_replica == 3
    # a fenced leader answers NOT_LEADER_OR_FOLLOWER, never a preferred replica
    replicas.fence.session_lost()
    fenced = replicas.read(TP, 0, 1 << 20, client=client("r3"))
    assert (fenced.error, fenced.preferred_read_replica) == (errors.NOT_LEADER_OR_FOLLOWER, -1)


def test_without_a_selector_the_leader_serves_every_consumer(logs: LogManager) -> None:
    replicas = leader_with_records(logs, False, Cluster())
    served = replicas.read(TP, 0, 1 << 20, client=client("r2"))
    assert served.preferred_read_replica == -1 and served.records and not served.from_follower


def test_a_follower_serves_consumers_with_client_metadata_up_to_its_high_watermark(
    logs: LogManager,
) -> None:
    replicas = ReplicaManager(2, logs, lambda topic: {}, lambda tp: tp == TP)
    assert replicas.become_leader_or_follower([three(1, epoch=4)]) == {TP: errors.NONE}
    log = replicas.partition(TP).log  # type: ignore[union-attr]
    for value in (b"a", b"b", b"c"):
        at = log.log_end_offset
        batch = [Record(at, 0, None, value)]
        log.append_as_follower(encode_batch(batch, base_offset=at, partition_leader_epoch=4))
    log.update_high_watermark(2)
    read = replicas.read(TP, 0, 1 << 20, client=client("r2"))
    assert read.error is errors.NONE and read.from_follower
    assert (read.high_watermark, read.log_end_offset) == (2, 3)
    assert len(read.records) == 2 * len(one(b"a"))  # below its high watermark only
    assert replicas.read(TP, 2, 1 << 20, client=client("")).records == b""  # HW..LEO
    beyond = replicas.read(TP, 4, 1 << 20, client=client("r2"))
    assert beyond.error is errors.OFFSET_OUT_OF_RANGE
    # the leader epoch is checked as the leader checks it
    assert replicas.read(TP, 0, 100, 3, client=client("r2")).error is errors.FENCED_LEADER_EPOCH
    assert replicas.read(TP, 0, 100, 5, client=client("r2")).error is errors.UNKNOWN_LEADER_EPOCH
    assert replicas.read(TP, 0, 100, 4, client=client("r2")).error is errors.NONE
    # no client metadata (Fetch v10 and older): the leader only
    assert replicas.read(TP, 0, 1 << 20).error is errors.NOT_LEADER_OR_FOLLOWER
    # a consumer's long poll waits for this follower's high watermark
    segment, position = log.end_position()
    start = FetchStart(TP, 2, -1, segment, position)
    assert replicas.bytes_available(start, False) is None  # leader-only: answer now
    assert replicas.any_replica.bytes_available(start, False) == 0
    log.update_high_watermark(3)
    assert replicas.any_replica.bytes_available(start, False) == 1
    # ListOffsets stays with the leader
    assert replicas.list_offset(TP, -1)[0] is errors.NOT_LEADER_OR_FOLLOWER
