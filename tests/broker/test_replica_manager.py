"""ReplicaManager and Partition: fencing by epochs, the ISR and high watermark rules,
acks=all."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from annal.broker.replication.isr_changes import IsrChangeWriter
from annal.broker.replication.partition import Applied, IsrChange, LeaderAndIsrState, Partition
from annal.broker.replication.replica_fetcher import FollowOrder
from annal.broker.replication.replica_manager import ReplicaManager
from annal.storage.config import LogConfig
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch
from annal.zk.client import StaleVersionError
from annal.zk.layout import PartitionState

from annal import errors

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from logutil import FakeClock

TP = TopicPartition("t", 0)


def state(leader: int, leader_epoch: int) -> LeaderAndIsrState:
    return LeaderAndIsrState("t", 0, 1, leader, leader_epoch, (leader,), (1, 2), 0)


def test_fencing(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], broker_id=1, settings=LogManagerConfig(cleaner_enable=False))
    logs.startup()
    try:
        replicas = ReplicaManager(1, logs, lambda topic: {}, lambda tp: tp == TP)
        assert replicas.check_controller_epoch(3)
        assert not replicas.check_controller_epoch(2)  # a stale controller
        assert replicas.become_leader_or_follower([state(1, 5)]) == {TP: errors.NONE}
        assert replicas.append(TP, encode_batch([Record(0, 0, None, b"a")])).error is errors.NONE
        assert replicas.become_leader_or_follower([state(2, 4)]) == {TP: errors.FENCED_LEADER_EPOCH}
        assert replicas.become_leader_or_follower([state(2, 6)]) == {TP: errors.NONE}
        refused = replicas.append(TP, encode_batch([Record(0, 0, None, b"b")]))
        assert refused.error is errors.NOT_LEADER_OR_FOLLOWER
        other = replicas.append(TopicPartition("zzz", 0), b"")
        assert other.error is errors.UNKNOWN_TOPIC_OR_PARTITION
        assert replicas.read(TP, 0, 100).error is errors.NOT_LEADER_OR_FOLLOWER
    finally:
        logs.shutdown()


class IsrLog:
    """Stands in for ZooKeeper's partition state znode: versioned ISR writes."""

    def __init__(self) -> None:
        self.version = 0
        self.writes: list[tuple[int, ...]] = []
        self.refuse = False

    def __call__(self, tp: TopicPartition, written: PartitionState, expected: int) -> int:
        if self.refuse or expected != self.version:
            raise StaleVersionError(f"version {expected} is not {self.version}")
        self.version += 1
        self.writes.append(written.isr)
        return self.version


def three_replicas(leader_epoch: int, isr: tuple[int, ...]) -> LeaderAndIsrState:
    return LeaderAndIsrState("t", 0, 1, 1, leader_epoch, isr, (1, 2, 3), 0)


def one(value: bytes) -> bytes:
    return encode_batch([Record(0, 0, None, value)])


def test_the_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path: Path) -> None:
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", LogConfig())
    isr_log = IsrLog()

    def write_now(change: IsrChange) -> None:
        """The writer's work, done at once: write the znode, report back."""
        try:
            version: int | None = isr_log(change.tp, change.state, change.expected_version)
        except StaleVersionError:
            version = None
        partition.complete_isr_change(change, version)

    partition = Partition(TP, log, 1, clock, submit_isr_change=write_now)
    assert partition.apply(three_replicas(0, (1, 2, 3))) is Applied.NEW
    for value in (b"a", b"b", b"c"):
        log.append_as_leader(one(value), 0)
        partition.after_leader_append()
    assert log.high_watermark == 0  # followers not heard from yet
    assert not partition.record_follower_fetch(2, 3, 3)  # 3 not heard from
    assert log.high_watermark == 0
    assert partition.record_follower_fetch(3, 2, 3)
    assert log.high_watermark == 2  # the smallest log end in the ISR
    assert partition.apply(three_replicas(0, (1, 2, 3))) is Applied.SAME

    # 3 stops fetching: after replica.lag.time.max.ms it leaves the ISR and the
    # high watermark moves past it.
    clock.advance(5_000)
    partition.record_follower_fetch(2, 3, 3)
    partition.maybe_shrink_isr(10_000)
    assert partition.isr == (1, 2, 3) and log.high_watermark == 2
    clock.advance(6_000)
    partition.maybe_shrink_isr(10_000)
    assert partition.isr == (1, 2) and isr_log.writes == [(1, 2)]
    assert log.high_watermark == 3

    # 3 comes back: it rejoins once it reaches the high watermark.
    log.append_as_leader(one(b"d"), 0)
    partition.after_leader_append()
    partition.record_follower_fetch(3, 2, 4)
    assert partition.isr == (1, 2)  # below the high watermark (3)
    partition.record_follower_fetch(3, 3, 4)
    assert partition.isr == (1, 2, 3) and isr_log.writes[-1] == (1, 2, 3)

    # A write the controller overtook keeps the ISR as it is.
    isr_log.refuse = True
    clock.advance(20_000)
    partition.record_follower_fetch(2, 4, 4)
    partition.maybe_shrink_isr(10_000)
    assert partition.isr == (1, 2, 3) and not partition.isr_change_pending
    log.close()


def test_acks_all_waits_for_the_isr(tmp_path: Path) -> None:
    logs = LogManager(
        [tmp_path],
        LogConfig(min_insync_replicas=2),
        broker_id=1,
        settings=LogManagerConfig(cleaner_enable=False),
    )
    logs.startup()
    isr_log = IsrLog()
    writer = IsrChangeWriter(
        isr_log, lambda written: None, lambda c, v: replicas.on_isr_written(c, v)
    )
    writer.start()
    try:
        replicas = ReplicaManager(1, logs, lambda topic: {}, lambda tp: tp == TP, None, writer)
        replicas.become_leader_or_follower([three_replicas(0, (1,))])
        refused = replicas.append(TP, one(b"a"), acks=-1)
        assert (
            refused.error is errors.NOT_ENOUGH_REPLICAS
            and "min.insync.replicas 2" in refused.message
        )
        assert replicas.partition(TP) is not None
        assert replicas.partition(TP).log.log_end_offset == 0  # type: ignore[union-attr]

        replicas.become_leader_or_follower([three_replicas(1, (1, 2))])
        appended = replicas.append(TP, one(b"b"), acks=-1)
        assert (appended.error, appended.last_offset) == (errors.NONE, 0)
        assert replicas.replication_outcome(TP, 0) is None  # the follower has not copied it
        replicas.read(TP, 1, 1 << 20, replica_id=2)  # the follower fetches past it
        assert replicas.replication_outcome(TP, 0) == (errors.NONE, "")
        assert replicas.read(TP, 0, 1 << 20).high_watermark == 1
    finally:
        writer.initiate_shutdown()
        writer.await_shutdown()
        logs.shutdown()


class Fetchers:
    """Stands in for the replica fetcher manager: what it was told, in order, and
    whether each partition it was told to stop copying was led here already."""

    def __init__(self, replicas: list[ReplicaManager]) -> None:
        self._replicas = replicas
        self.calls: list[tuple[str, object]] = []

    def follow_many(self, orders: Iterable[FollowOrder]) -> None:
        self.calls.append(("follow_many", [(o.tp, o.leader) for o in orders]))

    def unfollow(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        led = [p is not None and p.is_leader for p in map(self._replicas[0].partition, tps)]
        self.calls.append(("unfollow", (tps, led)))


def test_a_big_leader_and_isr_is_applied_in_one_pass(tmp_path: Path) -> None:
    """Topic configs read once per topic, the fetchers told once about the new
    leaderships (before they are taken), each follower handed to its leader."""
    logs = LogManager([tmp_path], broker_id=1, settings=LogManagerConfig(cleaner_enable=False))
    logs.startup()
    reads: list[str] = []

    def topic_config(topic: str) -> dict[str, str]:
        reads.append(topic)
        return {"retention.ms": "1234"} if topic == "b" else {}

    owner: list[ReplicaManager] = []
    fetchers = Fetchers(owner)
    replicas = ReplicaManager(1, logs, topic_config, fetchers=fetchers)  # type: ignore[arg-type]
    owner.append(replicas)
    tps = [TopicPartition(t, p) for t in "abc" for p in range(100)]

    def states(epoch: int, leads: Callable[[int], bool]) -> list[LeaderAndIsrState]:
        out = []
        for i, tp in enumerate(tps):
            ids = (1, 2 + i % 2) if leads(i) else (2 + i % 2, 1)
            out.append(LeaderAndIsrState(tp.topic, tp.partition, 1, ids[0], epoch, ids, ids, 0))
        return out

    endpoints = {2: "h:2", 3: "h:3"}
    try:
        results = replicas.become_leader_or_follower(states(1, lambda i: i % 3 == 0), endpoints)
        assert set(results.values()) == {errors.NONE} and len(results) == 300
        assert sorted(reads) == ["a", "b", "c"]  # once per topic, not per partition
        configured = [logs.get_log(tp) for tp in tps if tp.topic == "b"]
        assert all(log is not None and log.config.retention_ms == 1234 for log in configured)
        led = [tp for i, tp in enumerate(tps) if i % 3 == 0]
        assert fetchers.calls[0] == ("unfollow", (led, [False] * 100))  # before leading
        followed = [(tp, 2 + i % 2) for i, tp in enumerate(tps) if i % 3 != 0]
        assert fetchers.calls[1:] == [("follow_many", followed)]  # every follower at once

        fetchers.calls.clear()
        # a new epoch for all, leading the others; one of them from a stale controller
        flipped = states(2, lambda i: i % 3 != 0)
        flipped[1] = dataclasses.replace(flipped[1], leader_epoch=0)
        results = replicas.become_leader_or_follower(flipped, endpoints)
        assert results[tps[1]] is errors.FENCED_LEADER_EPOCH
        assert reads == sorted(reads) and len(reads) == 3  # nothing new to read
        unfollowed, led_then = fetchers.calls[0][1]  # type: ignore[misc]
        assert unfollowed == [tp for i, tp in enumerate(tps) if i % 3 != 0 and i != 1]
        assert not any(led_then)
        assert [(c[0], len(c[1])) for c in fetchers.calls[1:]] == [("follow_many", 100)]  # type: ignore[arg-type]
        assert replicas.partition(tps[1]).is_leader is False  # type: ignore[union-attr]

        # a leader nobody can reach yet: no longer fetched, in one call
        fetchers.calls.clear()
        gone = states(3, lambda i: False)
        assert set(replicas.become_leader_or_follower(gone, {}).values()) == {errors.NONE}
        assert fetchers.calls == [("unfollow", (tps, [False] * 300))]
    finally:
        replicas.shutdown()
        logs.shutdown()
