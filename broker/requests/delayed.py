"""The broker's delayed operations, and the purgatories that hold them.

Each kind answers one waiting request (Kafka's DelayedFetch, DelayedProduce,
DelayedDeleteRecords, and the admin calls' wait for the metadata cache; an
incremental fetch of a fetch session waits as a ``DelayedSessionFetch``,
watched under its session); ``purgatory.py`` says how they wait.  The checks are cheap reads of
in-memory state (log end and high watermark, the ISR, follower log starts,
the metadata snapshot), so running them on every event costs little.

Which events touch which partition, all through ``Purgatories.touch``:

=================================  =======================================
event                              who may be done
=================================  =======================================
an append on the leader (a         fetches (followers; consumers when the
transaction marker too)            high watermark or the last stable
                                   offset moved), acks=all produces
a follower's fetch                 acks=all produces and consumers' fetches
                                   (high watermark), DeleteRecords (the
                                   follower's log start)
the leader moves its log start     followers' fetches (they must follow)
an ISR change written or dropped   acks=all produces, consumers' fetches
LeaderAndIsr, StopReplica          everything on the partition: it answers
                                   NOT_LEADER_OR_FOLLOWER at once
=================================  =======================================

Every touch is also told to the fetch sessions (``Purgatories.add_listener``),
which mark the partition dirty in the sessions holding it and wake their
waiting fetches.

Thread safety: the operations run on the event loop; ``Purgatories.touch``
may be called from any thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from annal.broker.metadata_cache import MetadataCache, MetadataSnapshot
from annal.broker.requests.fetch_sessions import CachedPartition, FetchSession, Probe
from annal.broker.requests.purgatory import DelayedOperation, Parking, Purgatory
from annal.storage.files import TopicPartition

from annal import errors
from annal.errors import ErrorCode

# (error name, message) per partition, as the replica manager reports outcomes
Outcome = tuple[ErrorCode, str]

METADATA_KEY = "metadata"


@dataclass(frozen=True, slots=True)
class FetchStart:
    """One partition of a waiting fetch: where it reads from, and where the log
    ended (segment base offset, byte size) when the fetch began.  A
    read_committed consumer's (KIP-98) counts bytes below the last stable
    offset only."""

    tp: TopicPartition
    fetch_offset: int
    follower_log_start: int
    end_segment: int
    end_position: int
    read_committed: bool = False


class FetchReadiness(Protocol):
    """What a delayed fetch asks of the replica manager."""

    def bytes_available(self, start: FetchStart, follower: bool) -> int | None:
        """Bytes readable now past ``start`` (an estimate from byte positions), or
        None when the fetch must answer at once (an error, a rolled segment, a
        follower that must move its log start)."""


class DelayedFetch(DelayedOperation[bool]):
    """A long poll: done when ``min_bytes`` are readable over all its partitions
    (or one of them must answer now).  True means read now; False, expired."""

    def __init__(
        self, replicas: FetchReadiness, starts: list[FetchStart], min_bytes: int, follower: bool
    ) -> None:
        self._replicas = replicas
        self._starts = starts
        self._min_bytes = max(min_bytes, 1)
        self._follower = follower
        self.saw_nothing = True  # no byte, no error since it began: nothing to read again

    def try_complete(self) -> bool | None:
        total = 0
        for start in self._starts:
            available = self._replicas.bytes_available(start, self._follower)
            if available is None:
                self.saw_nothing = False
                return True
            total += available
            if total >= self._min_bytes:
                self.saw_nothing = False
                return True
        if total:
            self.saw_nothing = False
        return None

    def on_expire(self) -> bool:
        return False


class DelayedSessionFetch(DelayedOperation[bool]):
    """An incremental fetch (a fetch session, KIP-227) with nothing to answer yet.

    It watches its session, not each partition: an event on one of the
    session's partitions marks it dirty there (``FetchSessionCache.touched``)
    and checks this operation, which looks at the dirty partitions only, one
    cheap ``probe`` each.  Records or a change that must be answered now
    complete it (True: read now); a partition with only a new high watermark
    is kept in ``news`` for the read that follows, without waking anyone."""

    def __init__(
        self, session: FetchSession, probe: Callable[[TopicPartition, CachedPartition], Probe]
    ) -> None:
        self._session = session
        self._probe = probe
        self.news: set[TopicPartition] = set()  # to read when the wait ends

    def try_complete(self) -> bool | None:
        session = self._session
        dirty = session.dirty
        while dirty:
            tp = dirty.pop()
            cached = session.partitions.get(tp)
            if cached is None:
                continue
            found = self._probe(tp, cached)
            if found is Probe.NOTHING:
                continue
            self.news.add(tp)
            if found is not Probe.METADATA:
                return True
        return None

    def on_expire(self) -> bool:
        return False


class DelayedProduce(DelayedOperation[dict[TopicPartition, Outcome]]):
    """acks=all: done when every appended partition has its outcome (replicated to
    the ISR, the ISR too small after the append, or leadership lost)."""

    def __init__(
        self,
        outcome_of: Callable[[TopicPartition, int], Outcome | None],
        appended: Mapping[TopicPartition, int],
        timeout_ms: int,
    ) -> None:
        self._outcome_of = outcome_of
        self._appended = appended
        self._timeout_ms = timeout_ms
        self._done: dict[TopicPartition, Outcome] = {}

    def try_complete(self) -> dict[TopicPartition, Outcome] | None:
        for tp, last_offset in self._appended.items():
            if tp not in self._done:
                outcome = self._outcome_of(tp, last_offset)
                if outcome is not None:
                    self._done[tp] = outcome
        return dict(self._done) if len(self._done) == len(self._appended) else None

    def on_expire(self) -> dict[TopicPartition, Outcome]:
        self.try_complete()
        return {
            tp: self._done.get(
                tp,
                (
                    errors.REQUEST_TIMED_OUT,
                    f"{tp} not replicated to the ISR within {self._timeout_ms} ms",
                ),
            )
            for tp in self._appended
        }


class DelayedDeleteRecords(DelayedOperation[dict[TopicPartition, tuple[ErrorCode, int, str]]]):
    """DeleteRecords: done when the in-sync followers have moved their log starts
    to the target too (or leadership is lost).  (error, low watermark, message)."""

    def __init__(
        self,
        outcome_of: Callable[[TopicPartition, int], tuple[ErrorCode, int, str] | None],
        low_watermark_of: Callable[[TopicPartition], int],
        targets: Mapping[TopicPartition, int],
        timeout_ms: int,
    ) -> None:
        self._outcome_of = outcome_of
        self._low_watermark_of = low_watermark_of
        self._targets = targets
        self._timeout_ms = timeout_ms
        self._done: dict[TopicPartition, tuple[ErrorCode, int, str]] = {}

    def try_complete(self) -> dict[TopicPartition, tuple[ErrorCode, int, str]] | None:
        for tp, target in self._targets.items():
            if tp not in self._done:
                outcome = self._outcome_of(tp, target)
                if outcome is not None:
                    self._done[tp] = outcome
        return dict(self._done) if len(self._done) == len(self._targets) else None

    def on_expire(self) -> dict[TopicPartition, tuple[ErrorCode, int, str]]:
        self.try_complete()
        return {
            tp: self._done.get(
                tp,
                (
                    errors.REQUEST_TIMED_OUT,
                    max(self._low_watermark_of(tp), -1),
                    f"records of {tp} before {target} deleted on the leader; in-sync "
                    f"followers had not followed within {self._timeout_ms} ms",
                ),
            )
            for tp, target in self._targets.items()
        }


class MetadataWait(DelayedOperation[bool]):
    """An admin call waiting for this broker's metadata cache to show its result
    (CreateTopics' leaders, a deleted topic gone, an election's outcome)."""

    def __init__(self, cache: MetadataCache, ready: Callable[[MetadataSnapshot], bool]) -> None:
        self._cache = cache
        self._ready = ready

    def try_complete(self) -> bool | None:
        return True if self._ready(self._cache.snapshot()) else None

    def on_expire(self) -> bool:
        return False


class Purgatories:
    """The broker's purgatories, one per kind, on one event loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, loop_thread: int, parking: Parking | None = None
    ) -> None:
        self.loop = loop
        self._loop_thread = loop_thread
        self.fetch: Purgatory[bool] = Purgatory("fetch", loop, parking)
        self.produce: Purgatory[dict[TopicPartition, Outcome]] = Purgatory("produce", loop, parking)
        self.delete_records: Purgatory[dict[TopicPartition, tuple[ErrorCode, int, str]]] = (
            Purgatory("delete-records", loop, parking)
        )
        self.metadata: Purgatory[bool] = Purgatory("metadata", loop, parking)
        self._listeners: list[Callable[[TopicPartition], None]] = []

    def add_listener(self, listener: Callable[[TopicPartition], None]) -> None:
        """Have ``listener(tp)`` told of every touch too, on the loop, after the
        operations watching ``tp`` looked (the fetch sessions' dirty marks)."""
        self._listeners.append(listener)

    def touch(self, tp: TopicPartition) -> None:
        """Something happened to ``tp``: waiting operations on it look again.
        From the loop's thread the checks run at once; from any other thread
        they are handed to the loop."""
        if threading.get_ident() == self._loop_thread:
            self._check(tp)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._check, tp)

    def _check(self, tp: TopicPartition) -> None:
        self.produce.check_and_complete(tp)
        self.fetch.check_and_complete(tp)
        self.delete_records.check_and_complete(tp)
        for listener in self._listeners:
            listener(tp)

    def metadata_changed(self) -> None:
        """The metadata cache changed (called from any thread)."""
        if threading.get_ident() == self._loop_thread:
            self.metadata.check_and_complete(METADATA_KEY)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.metadata.check_and_complete, METADATA_KEY)

    async def wait_for_metadata(
        self, cache: MetadataCache, ready: Callable[[MetadataSnapshot], bool], timeout_ms: int
    ) -> bool:
        """True once ``ready(snapshot)`` holds, False after ``timeout_ms``."""
        return await self.metadata.wait(MetadataWait(cache, ready), [METADATA_KEY], timeout_ms)

    def waiting(self) -> dict[str, int]:
        return {
            p.name: p.waiting
            for p in (self.fetch, self.produce, self.delete_records, self.metadata)
        }
