"""One hosted partition: its log, who leads it, and, on the leader, how far each
follower has copied, which decides the ISR and the high watermark.

The rules are Kafka's (ZooKeeper era, 2.x):

* A follower's fetch offset is its log end offset: it holds everything below.
* A follower is caught up when it fetched up to the leader's log end (or up to
  where the log ended at its previous fetch); one that has not been caught up
  for ``replica.lag.time.max.ms`` leaves the ISR.
* A follower outside the ISR rejoins once its log end reaches both the high
  watermark and the first offset of the current leader epoch.
* The high watermark is the smallest log end over the ISR, and never goes back.

The leader writes ISR changes itself, to the partition's state znode,
conditioned on the znode version it last knew, then leaves an ISR-change
notification for the controller.  When the version has moved (the controller
wrote in between) it keeps its ISR and waits for the controller's next
LeaderAndIsr, as Kafka's leader does.

Thread safety: ``self._lock`` guards leadership, ISR, follower states and the
high watermark's moves; the ISR write to ZooKeeper happens under it, so two
changes never race.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.zk.client import StaleVersionError, ZkError
from annal.zk.layout import PartitionState

logger = logging.getLogger(__name__)

# (partition, new state, expected znode version) -> new version; raises StaleVersionError
IsrWriter = Callable[[TopicPartition, PartitionState, int], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class LeaderAndIsrState:
    """One partition of a LeaderAndIsr request, free of protobuf types."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int


class Applied(enum.Enum):
    """What a LeaderAndIsr did to a partition."""

    NEW = "new"  # a newer leader epoch: taken
    SAME = "same"  # the current epoch again: nothing to do
    FENCED = "fenced"  # an older epoch: refused


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    log_end_offset: int = -1  # unknown until its first fetch under this leadership
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_end: int = -1
    last_fetch_ms: int = 0


class Partition:
    """A hosted partition; see the module docstring."""

    def __init__(
        self,
        tp: TopicPartition,
        log: Log,
        broker_id: int,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self.leader = -1
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.zk_version = -1
        self.leader_epoch_start_offset = -1
        self._followers: dict[int, FollowerState] = {}

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    def apply(self, state: LeaderAndIsrState) -> Applied:
        """Take a newer leader epoch.  The same epoch again changes nothing (the
        leader may have changed the ISR since), an older one is fenced."""
        with self._lock:
            if state.leader_epoch < self.leader_epoch:
                return Applied.FENCED
            if state.leader_epoch == self.leader_epoch:
                return Applied.SAME
            me = self.broker_id
            new_leadership = state.leader == me
            self.leader = state.leader
            self.leader_epoch = state.leader_epoch
            self.controller_epoch = state.controller_epoch
            self.isr = state.isr
            self.replicas = state.replicas
            self.zk_version = state.zk_version
            if not new_leadership:
                self._followers = {}
                return Applied.NEW
            now = self._clock_ms()
            self._followers = {
                r: FollowerState(last_caught_up_ms=now if r in state.isr else 0)
                for r in state.replicas
                if r != me
            }
            self.leader_epoch_start_offset = self.log.log_end_offset
            self._maybe_increment_high_watermark()
            return Applied.NEW

    def follower_log_end(self, replica_id: int) -> int:
        """The follower's log end as its last fetch told (-1 when unknown)."""
        with self._lock:
            found = self._followers.get(replica_id)
            return -1 if found is None else found.log_end_offset

    # -- the leader's bookkeeping --------------------------------------------------

    def after_leader_append(self) -> bool:
        """True when the high watermark moved (an ISR of the leader alone)."""
        with self._lock:
            return self._maybe_increment_high_watermark()

    def record_follower_fetch(
        self, replica_id: int, fetch_offset: int, leader_end: int, write_isr: IsrWriter
    ) -> bool:
        """A follower fetched from ``fetch_offset`` while the log ended at
        ``leader_end``; may add it to the ISR.  True when the high watermark moved."""
        with self._lock:
            follower = self._followers.get(replica_id)
            if self.leader != self.broker_id or follower is None:
                return False
            now = self._clock_ms()
            follower.log_end_offset = fetch_offset
            if fetch_offset >= leader_end:
                follower.last_caught_up_ms = max(follower.last_caught_up_ms, now)
            elif fetch_offset >= follower.last_fetch_leader_end:
                follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
            follower.last_fetch_leader_end = leader_end
            follower.last_fetch_ms = now
            if (
                replica_id not in self.isr
                and fetch_offset >= self.log.high_watermark
                and fetch_offset >= self.leader_epoch_start_offset
            ):
                self._write_isr((*self.isr, replica_id), write_isr, f"{replica_id} caught up")
            return self._maybe_increment_high_watermark()

    def record_follower_log_start(self, replica_id: int, log_start: int) -> bool:
        """A follower's fetch said where its log starts; True when that moved."""
        with self._lock:
            follower = self._followers.get(replica_id)
            if follower is None or log_start <= follower.log_start_offset:
                return False
            follower.log_start_offset = log_start
            return True

    def low_watermark(self) -> int:
        """The smallest log start offset of the leader and its in-sync followers
        (-1 while one of them has not said)."""
        with self._lock:
            starts = [self.log.log_start_offset]
            for replica in self.isr:
                if replica != self.broker_id:
                    follower = self._followers.get(replica)
                    starts.append(-1 if follower is None else follower.log_start_offset)
            return min(starts)

    def maybe_shrink_isr(self, max_lag_ms: int, write_isr: IsrWriter) -> bool:
        """Drop followers not caught up for ``max_lag_ms``.  True when the high
        watermark moved as a result."""
        with self._lock:
            if self.leader != self.broker_id:
                return False
            now = self._clock_ms()
            lagging = [
                r
                for r in self.isr
                if r != self.broker_id
                and now - self._followers.get(r, FollowerState()).last_caught_up_ms > max_lag_ms
            ]
            if not lagging:
                return False
            kept = tuple(r for r in self.isr if r not in lagging)
            self._write_isr(kept, write_isr, f"{lagging} not caught up for {max_lag_ms} ms")
            return self._maybe_increment_high_watermark()

    def _write_isr(self, isr: tuple[int, ...], write_isr: IsrWriter, why: str) -> None:
        state = PartitionState(self.broker_id, self.leader_epoch, isr, self.controller_epoch)
        try:
            self.zk_version = write_isr(self.tp, state, self.zk_version)
        except StaleVersionError as exc:
            logger.info("ISR of %s stays %s: %s", self.tp, list(self.isr), exc)
            return
        except ZkError as exc:
            logger.warning("ISR of %s stays %s: %s", self.tp, list(self.isr), exc)
            return
        logger.info("ISR of %s: %s -> %s (%s)", self.tp, list(self.isr), list(isr), why)
        self.isr = isr

    def _maybe_increment_high_watermark(self) -> bool:
        log = self.log
        ends = [log.log_end_offset]
        for replica in self.isr:
            if replica != self.broker_id:
                follower = self._followers.get(replica)
                ends.append(-1 if follower is None else follower.log_end_offset)
        high_watermark = min(ends)
        if high_watermark > log.high_watermark:
            log.update_high_watermark(high_watermark)
            return True
        return False
