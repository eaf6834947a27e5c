"""One hosted partition: its log, who leads it, and, on the leader, how far each
follower has copied, which decides the ISR and the high watermark.

The rules are Kafka's (ZooKeeper era, 2.x):

* A follower's fetch offset is its log end offset: it holds everything below.
* A follower is caught up when it fetched up to the leader's log end (or up to
  where the log ended at its previous fetch); one that has not been caught up
  for ``replica.lag.time.max.ms`` leaves the ISR.  One that holds the whole
  log stays caught up while its broker keeps fetching from this leader
  (``isr_expiry.py``, which also decides which partitions are looked at).
* A follower outside the ISR rejoins once its log end reaches both the high
  watermark and the first offset of the current leader epoch.
* The high watermark is the smallest log end over the ISR, and never goes back.

An ISR change the leader decides is not written from the request or task
that decided it: the partition records it as pending and hands an
``IsrChange`` to the broker's one writer (``isr_changes.py``), which writes
the partition's state znode, conditioned on the version the leader last
knew, and reports back with ``complete_isr_change``.  While a change is
pending the high watermark is computed over the larger of the two sets (the
current ISR and the pending one), so it never passes a replica that may
still count; a second change waits until the first is settled.  When the
znode's version has moved (the controller wrote in between) the leader keeps
its ISR and waits for the controller's next LeaderAndIsr, as Kafka's does.

Leader-side appends happen under the partition's lock
(``append_as_leader``, Kafka's ``Partition.appendRecordsToLeader``), so a
LeaderAndIsr that makes this broker a follower cannot land in the middle of
one; which offsets a reader may see (the high watermark for consumers, the
last stable offset for read_committed ones, the log end for followers,
nothing for a broker that is not a replica) is decided in one place,
``fetch_bound``.  The transaction coordinator's markers (KIP-98) are leader
appends too (``append_control_as_leader``).

Thread safety: ``self._lock`` guards leadership, ISR, the pending change,
follower states and the high watermark's moves, and is held across a
leader's append.  Nothing under it waits for ZooKeeper.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from annal.broker.replication.leadership_fence import LeadershipFence
from annal.storage.control import AppendOrigin, ControlRecordType
from annal.storage.files import TopicPartition
from annal.storage.log import Log, LogAppendInfo
from annal.zk.layout import PartitionState

from annal import errors
from annal.errors import AnnalError, ErrorCode

if TYPE_CHECKING:
    from annal.broker.replication.isr_expiry import IsrWatch

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IsrChange:
    """An ISR change a leader decided, to be written to its state znode."""

    tp: TopicPartition
    state: PartitionState  # the state to write: this leader, its epoch, the new ISR
    expected_version: int  # the znode version the leader last knew
    why: str


class PartitionStateError(AnnalError):
    """A request this partition's state refuses, with the code to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# Takes a leader's ISR change for writing; must not block (it is called from requests).
IsrChangeSink = Callable[[IsrChange], None]


def _drop_isr_change(change: IsrChange) -> None:
    logger.warning("ISR change of %s not written (no writer): %s", change.tp, change.why)


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


_UNKNOWN_FOLLOWER = FollowerState()  # a follower not heard from (never changed)


class Partition:
    """A hosted partition; see the module docstring."""

    def __init__(
        self,
        tp: TopicPartition,
        log: Log,
        broker_id: int,
        clock_ms: Callable[[], int] = wall_clock_ms,
        submit_isr_change: IsrChangeSink = _drop_isr_change,
        watch: IsrWatch | None = None,
        fence: LeadershipFence | None = None,
    ) -> None:
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self._fence = fence or LeadershipFence(broker_id)
        self._clock_ms = clock_ms
        self._submit_isr_change = submit_isr_change
        self._pending_isr: IsrChange | None = None
        # the ISR expiration's watch (isr_expiry.py); this partition is on it while
        # an in-sync follower may not hold the whole log
        self._watch = watch
        self._watched = False
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

    @property
    def leads_now(self) -> bool:
        """Leads, and may act on it (no fence: broker/replication/leadership_fence.py)."""
        return self.leader == self.broker_id and not self._fence.fenced

    def _check_leads(self, fenced_too: bool = True) -> None:
        """PartitionStateError (NOT_LEADER_OR_FOLLOWER) unless this broker leads
        ``tp`` and (``fenced_too``) may act as a leader now."""
        if self.leader != self.broker_id:
            raise PartitionStateError(
                errors.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} does not lead {self.tp}"
            )
        if fenced_too and (refusal := self._fence.refusal(self.tp)) is not None:
            raise PartitionStateError(errors.NOT_LEADER_OR_FOLLOWER, refusal)

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
            self._pending_isr = None  # the controller's word replaces whatever was pending
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
            self._keep_watch()  # the followers' log ends are unknown
            return Applied.NEW

    def follower_log_end(self, replica_id: int) -> int:
        """The follower's log end as its last fetch told (-1 when unknown)."""
        with self._lock:
            found = self._followers.get(replica_id)
            return -1 if found is None else found.log_end_offset

    # -- the leader's requests -----------------------------------------------------

    def append_as_leader(
        self, records: bytes, acks: int, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Append a producer's batches as this partition's leader, under the lock.
        With ``acks`` -1 the ISR must hold at least ``min.insync.replicas``
        first.  Raises PartitionStateError (NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS; nothing stored) or the log's InvalidRecordError.
        ``origin``: the broker's coordinators append as ``COORDINATOR``."""
        with self._lock:
            self._check_leads()
            if acks == -1:
                self._check_min_isr()
            info = self.log.append_as_leader(records, self.leader_epoch, origin=origin)
            self._maybe_increment_high_watermark()
            if not self._watched:
                self._keep_watch()  # the followers are behind now
            return info

    def append_control_as_leader(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: ControlRecordType,
        coordinator_epoch: int,
    ) -> LogAppendInfo:
        """Write a transaction marker (COMMIT or ABORT, KIP-98) as this partition's
        leader, under the lock, as the transaction coordinator asks with
        WriteTxnMarkers: as an acks=-1 append, so the ISR must hold at least
        ``min.insync.replicas`` first.  Raises PartitionStateError
        (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS; nothing stored) or the
        log's InvalidRecordError (a stale producer or coordinator epoch)."""
        with self._lock:
            self._check_leads()
            self._check_min_isr()
            info = self.log.append_control(
                producer_id, producer_epoch, control_type, coordinator_epoch, self.leader_epoch
            )
            self._maybe_increment_high_watermark()
            if not self._watched:
                self._keep_watch()  # the followers are behind now
            return info

    def _check_min_isr(self) -> None:
        """PartitionStateError (NOT_ENOUGH_REPLICAS) when the ISR is smaller than
        ``min.insync.replicas`` (caller holds the lock)."""
        needed = self.log.config.min_insync_replicas
        if len(self.isr) < needed:
            raise PartitionStateError(
                errors.NOT_ENOUGH_REPLICAS,
                f"the ISR of {self.tp} is {list(self.isr)}, fewer than "
                f"min.insync.replicas {needed}",
            )

    def fetch_bound(
        self,
        replica_id: int,
        leader_epoch: int,
        only_leader: bool = True,
        read_committed: bool = False,
    ) -> int | None:
        """Where a fetch must stop: the high watermark for a consumer (its last
        stable offset when ``read_committed``, KIP-98), None (the log end) for
        one of this partition's followers.  Raises PartitionStateError when this
        broker does not lead, the fetch's epoch is not the current one
        (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), or a broker that is not a
        follower asks to read as one.

        A consumer's fetch that carries client metadata (Fetch v11+, KIP-392:
        ``only_leader`` False) may read this broker's copy when it follows the
        partition, up to its own high watermark (last stable offset); on the
        leader it is read as any consumer's, fence included."""
        with self._lock:
            log = self.log
            if not only_leader and replica_id < 0 and self.leader != self.broker_id:
                self._check_epoch(leader_epoch)
                return log.last_stable_offset if read_committed else log.high_watermark
            self._check_leads(fenced_too=replica_id < 0)  # followers may still copy
            self._check_epoch(leader_epoch)
            if replica_id < 0:
                return log.last_stable_offset if read_committed else log.high_watermark
            if replica_id == self.broker_id or replica_id not in self.replicas:
                # Kafka's rule: only an assigned follower reads past the high watermark.
                # With a matching epoch the follower may be newer than this leader's
                # state (a reassignment): UNKNOWN_LEADER_EPOCH makes it ask again.
                raise PartitionStateError(
                    errors.UNKNOWN_LEADER_EPOCH
                    if leader_epoch >= 0
                    else errors.NOT_LEADER_OR_FOLLOWER,
                    f"replica {replica_id} is not a follower of {self.tp} "
                    f"(replicas {list(self.replicas)})",
                )
            return None

    def _check_epoch(self, leader_epoch: int) -> None:
        """PartitionStateError unless ``leader_epoch`` (when given) is the current one
        (caller holds the lock)."""
        if leader_epoch >= 0 and leader_epoch != self.leader_epoch:
            stale = leader_epoch < self.leader_epoch
            raise PartitionStateError(
                errors.FENCED_LEADER_EPOCH if stale else errors.UNKNOWN_LEADER_EPOCH,
                f"leader epoch {leader_epoch} vs {self.leader_epoch}",
            )

    def read_replica_views(self, fetch_offset: int) -> list[tuple[int, int, int]]:
        """The in-sync followers that hold ``fetch_offset`` (their log start at or
        below it, their log end at or above it), as (broker id, log end, ms since
        last caught up): the followers a replica selector may pick for a consumer
        (KIP-392; Kafka's ``findPreferredReadReplica``).  Empty unless this broker
        leads."""
        with self._lock:
            if self.leader != self.broker_id:
                return []
            now_ms = self._clock_ms()
            found = []
            for replica in self.isr:
                follower = self._followers.get(replica)
                if replica == self.broker_id or follower is None:
                    continue
                if follower.log_end_offset >= fetch_offset >= follower.log_start_offset:
                    since = now_ms - follower.last_caught_up_ms
                    found.append((replica, follower.log_end_offset, since))
            return found

    # -- the leader's bookkeeping --------------------------------------------------

    def after_leader_append(self) -> bool:
        """True when the high watermark moved (an ISR of the leader alone)."""
        with self._lock:
            if not self._watched:
                self._keep_watch()
            return self._maybe_increment_high_watermark()

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, leader_end: int) -> bool:
        """A follower fetched from ``fetch_offset`` while the log ended at
        ``leader_end``; may propose it for the ISR.  True when the high watermark moved."""
        change = None
        with self._lock:
            follower = self._followers.get(replica_id)
            if self.leader != self.broker_id or follower is None:
                return False
            now = self._clock_ms()
            if self._watch is not None:
                self._watch.fetched(replica_id, now)
                if fetch_offset != leader_end and not self._watched and replica_id in self.isr:
                    self._keep_watch()
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
                change = self._propose_isr((*self.isr, replica_id), f"{replica_id} caught up")
            moved = self._maybe_increment_high_watermark()
        if change is not None:
            self._submit_isr_change(change)
        return moved

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

    def maybe_shrink_isr(self, max_lag_ms: int) -> bool:
        """Propose dropping the in-sync followers not caught up for ``max_lag_ms``
        (isr_expiry.py says what caught up means).  True while the partition must
        be looked at again; False, and off the ISR expiration's watch, once every
        in-sync follower holds the whole log (or this broker no longer leads)."""
        change = None
        with self._lock:
            if self.leader != self.broker_id:
                self._leave_watch()
                return False
            now = self._clock_ms()
            leader_end = self.log.log_end_offset
            lagging = []
            behind = False
            for r in self.isr:
                if r == self.broker_id:
                    continue
                follower = self._followers.get(r, _UNKNOWN_FOLLOWER)
                caught_up_ms = follower.last_caught_up_ms
                if follower.log_end_offset != leader_end:
                    behind = True
                elif self._watch is not None:  # it holds the whole log: fetching is enough
                    caught_up_ms = max(caught_up_ms, self._watch.last_fetch_ms(r))
                if now - caught_up_ms > max_lag_ms:
                    lagging.append(r)
            if lagging:
                kept = tuple(r for r in self.isr if r not in lagging)
                change = self._propose_isr(kept, f"{lagging} not caught up for {max_lag_ms} ms")
            elif not behind:
                self._leave_watch()
            watched = self._watched
        if change is not None:
            self._submit_isr_change(change)
        return watched

    def watch_isr(self) -> None:
        """Have the ISR expiration look at this partition (a follower broker fell silent)."""
        with self._lock:
            if self.leader == self.broker_id:
                self._keep_watch()

    def _keep_watch(self) -> None:
        """Join the ISR expiration's watch while leading with followers in the ISR
        (caller holds the lock)."""
        if (
            not self._watched
            and self._watch is not None
            and self.leader == self.broker_id
            and len(self.isr) > 1
        ):
            self._watched = True
            self._watch.add(self)

    def _leave_watch(self) -> None:
        if self._watched and self._watch is not None:
            self._watched = False
            self._watch.discard(self)

    @property
    def isr_change_pending(self) -> bool:
        with self._lock:
            return self._pending_isr is not None

    def _propose_isr(self, isr: tuple[int, ...], why: str) -> IsrChange | None:
        """Record ``isr`` as pending; the change to hand to the writer, or None while
        another change is still pending (it is proposed again after that one)."""
        if self._pending_isr is not None:
            return None
        state = PartitionState(self.broker_id, self.leader_epoch, isr, self.controller_epoch)
        self._pending_isr = IsrChange(self.tp, state, self.zk_version, why)
        return self._pending_isr

    def complete_isr_change(self, change: IsrChange, new_version: int | None) -> bool:
        """The writer's report: the znode's new version, or None when the write was
        refused (a stale version) or failed.  True when the high watermark moved."""
        with self._lock:
            if self._pending_isr is not change:
                return False  # a LeaderAndIsr came in between: the controller decided
            self._pending_isr = None
            if new_version is None:
                logger.info(
                    "ISR of %s stays %s (%s not written)", self.tp, list(self.isr), change.why
                )
                return False
            logger.info(
                "ISR of %s: %s -> %s (%s)",
                self.tp,
                list(self.isr),
                list(change.state.isr),
                change.why,
            )
            self.isr = change.state.isr
            self.zk_version = new_version
            self._keep_watch()
            return self._maybe_increment_high_watermark()

    def _maybe_increment_high_watermark(self) -> bool:
        log = self.log
        ends = [log.log_end_offset]
        counted = self.isr
        if self._pending_isr is not None:  # the larger set: a pending change may not hold
            counted = (*counted, *self._pending_isr.state.isr)
        for replica in set(counted):
            if replica != self.broker_id:
                follower = self._followers.get(replica)
                ends.append(-1 if follower is None else follower.log_end_offset)
        high_watermark = min(ends)
        if high_watermark > log.high_watermark:
            log.update_high_watermark(high_watermark)
            return True
        return False
