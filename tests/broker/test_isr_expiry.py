"""The ISR expiration looks only at partitions where something happened, and
still drops followers that stop keeping up, written to or idle."""

from __future__ import annotations

import sys
from pathlib import Path

from annal.broker.replication.isr_expiry import IsrExpiration, IsrWatch
from annal.broker.replication.partition import IsrChange, LeaderAndIsrState, Partition
from annal.storage.config import LogConfig
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from logutil import FakeClock

LAG_MS = 10_000


def state(tp: TopicPartition, leader_epoch: int, isr: tuple[int, ...]) -> LeaderAndIsrState:
    return LeaderAndIsrState(tp.topic, tp.partition, 1, 1, leader_epoch, isr, (1, 2, 3), 0)


class Broker:
    """Leader 1 of a few partitions with followers 2 and 3; ISR writes succeed at once."""

    def __init__(self, root: Path, count: int) -> None:
        self.clock = FakeClock()
        self.watch = IsrWatch()
        self.written: list[tuple[TopicPartition, tuple[int, ...]]] = []
        self.partitions: dict[TopicPartition, Partition] = {}
        for p in range(count):
            tp = TopicPartition("t", p)
            log = Log.open(root / str(tp), LogConfig())
            partition = Partition(
                tp, log, 1, self.clock, submit_isr_change=self._write, watch=self.watch
            )
            partition.apply(state(tp, 0, (1, 2, 3)))
            self.partitions[tp] = partition
        self.expiration = IsrExpiration(
            self.watch, LAG_MS, self.partitions.get, self.partitions.values, self.clock
        )

    def _write(self, change: IsrChange) -> None:
        self.written.append((change.tp, change.state.isr))
        self.partitions[change.tp].complete_isr_change(change, len(self.written))

    def fetch(self, follower: int, partitions: list[Partition] | None = None) -> None:
        """``follower`` fetches up to the log end of ``partitions`` (all of them)."""
        for partition in partitions if partitions is not None else self.partitions.values():
            end = partition.log.log_end_offset
            partition.record_follower_fetch(follower, end, end)

    def close(self) -> None:
        for partition in self.partitions.values():
            partition.log.close()


def test_idle_partitions_cost_the_expiration_nothing(tmp_path: Path) -> None:
    broker = Broker(tmp_path, 50)
    try:
        assert broker.expiration.tick() == 50  # just led: the followers' ends are unknown
        broker.fetch(2)
        broker.fetch(3)
        assert broker.expiration.tick() == 50  # all caught up: they leave the watch
        for _ in range(5):  # minutes pass; the followers keep fetching, nothing is written
            broker.clock.advance(LAG_MS)
            broker.fetch(2, [])  # a fetch that names none of these partitions
            broker.watch.fetched(2, broker.clock())
            broker.watch.fetched(3, broker.clock())
            assert broker.expiration.tick() == 0
        assert broker.written == []
        assert all(p.isr == (1, 2, 3) for p in broker.partitions.values())
    finally:
        broker.close()


def test_a_follower_behind_on_a_written_partition_leaves_the_isr(tmp_path: Path) -> None:
    broker = Broker(tmp_path, 3)
    try:
        broker.fetch(2)
        broker.fetch(3)
        broker.expiration.tick()
        written = broker.partitions[TopicPartition("t", 1)]
        written.append_as_leader(encode_batch([Record(0, 0, None, b"v")]), 1)
        assert broker.watch.watched() == [written]  # only the partition written to
        broker.fetch(2, [written])
        for _ in range(2):  # both keep fetching; 3 never reaches this partition's end
            broker.clock.advance(LAG_MS // 2)
            assert written.isr == (1, 2, 3) and broker.expiration.tick() == 1
            broker.fetch(2, [])
            broker.watch.fetched(2, broker.clock())
            broker.watch.fetched(3, broker.clock())
        broker.clock.advance(1)
        broker.expiration.tick()
        assert written.isr == (1, 2) and broker.written == [(written.tp, (1, 2))]
        assert broker.expiration.tick() == 1  # the ISR changed: looked at once more
        assert broker.expiration.tick() == 0
    finally:
        broker.close()


def test_a_follower_broker_gone_silent_leaves_the_isrs_of_idle_partitions(
    tmp_path: Path,
) -> None:
    broker = Broker(tmp_path, 4)
    try:
        broker.fetch(2)
        broker.fetch(3)
        broker.expiration.tick()
        for _ in range(3):  # 3 stops fetching; 2 goes on (with nothing new to copy)
            broker.clock.advance(LAG_MS // 2)
            broker.watch.fetched(2, broker.clock())
            broker.expiration.tick()
        assert sorted(isr for _, isr in broker.written) == [(1, 2)] * 4
        assert all(p.isr == (1, 2) for p in broker.partitions.values())
        assert broker.expiration.tick() == 4  # the ISRs changed: looked at once more
        broker.clock.advance(LAG_MS)
        broker.watch.fetched(2, broker.clock())
        assert broker.expiration.tick() == 0  # 3's silence was reported once
    finally:
        broker.close()


def test_a_partition_no_longer_led_or_hosted_leaves_the_watch(tmp_path: Path) -> None:
    broker = Broker(tmp_path, 2)
    try:
        first, second = broker.partitions.values()
        first.apply(LeaderAndIsrState("t", 0, 1, 2, 1, (2, 1), (2, 1), 0))  # 2 leads now
        del broker.partitions[second.tp]  # stopped
        assert broker.expiration.tick() == 2
        assert broker.watch.watched() == [] and broker.written == []
    finally:
        first.log.close()
        second.log.close()
