"""Fetch sessions (KIP-227): what a broker remembers of a fetcher between Fetch requests.

A fetcher that asks for thousands of partitions over and over (a follower, a
consumer) would send and be answered every one of them on every Fetch, most
with nothing new.  With a fetch session the broker keeps the partitions and
their fetch positions; each later request (an incremental fetch) names only
the partitions whose position changed, added or dropped
(``forgotten_topics_data``), and each answer carries only the partitions
with something new to say: records, a new high watermark, last stable
offset (KIP-98) or log start offset, an error.

A request says what it wants with (``session_id``, ``session_epoch``):

==============  ======  ==============================================
session_id      epoch   meaning
==============  ======  ==============================================
0 or a session  0       a full fetch asking for a (new) session; a
                        session it names is closed
0 or a session  -1      a full fetch without a session; a session it
                        names is closed
a session       n > 0   an incremental fetch: n must be the session's
                        next epoch (INVALID_FETCH_SESSION_EPOCH
                        otherwise; FETCH_SESSION_ID_NOT_FOUND for an
                        id the broker does not know)
==============  ======  ==============================================

The broker side is ``FetchSessionCache``: at most
``max.incremental.fetch.session.cache.slots`` sessions.  When it is full, a
new session takes the place of one unused for
``min.incremental.fetch.session.eviction.ms``, or else of the least
valuable one it outranks: a consumer's session before a follower's, a
smaller one before a larger one, and only one older than that age unless a
follower's replaces a consumer's (Kafka's FetchSessionCache ranks them the
same way).  No slot: the full fetch is answered without a session.

The cache knows nothing of logs.  What changed on the broker reaches it as
events (``touched``: an append, a moved high watermark, a leadership
change), which mark the partition dirty in every session holding it; an
incremental fetch looks at the partitions it names and the dirty ones only
(``broker/data_api.py``), so an idle session costs nothing per partition.

The fetcher's side is ``FetchSessionHandler``: which partitions the next
request must name, and what to do when an answer refuses the session.

Thread safety: a cache belongs to the broker's event loop; a handler to its
fetcher thread.
"""

from __future__ import annotations

import enum
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from annal.storage.files import TopicPartition

from annal import errors
from annal.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch asking for a new session
FINAL_EPOCH = -1  # a full fetch without a session
MAX_EPOCH = 2**31 - 1

DEFAULT_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_AGE_MS = 120_000  # min.incremental.fetch.session.eviction.ms


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (1 after the largest, 0 being the initial one)."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class FetchKind(enum.Enum):
    NEW_SESSION = "a full fetch asking for a session"
    SESSIONLESS = "a full fetch without a session"
    INCREMENTAL = "an incremental fetch"


def kind_of(epoch: int) -> FetchKind:
    if epoch == INITIAL_EPOCH:
        return FetchKind.NEW_SESSION
    if epoch == FINAL_EPOCH:
        return FetchKind.SESSIONLESS
    return FetchKind.INCREMENTAL


class FetchSessionError(Exception):
    """An incremental fetch the cache refuses, with the code to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Probe(enum.IntEnum):
    """What a session's partition has to tell its fetcher, by a cheap look."""

    NOTHING = 0  # nothing since its last answer
    # a new high watermark or last stable offset: goes with the next answer, no
    # reason to answer now
    METADATA = 1
    DATA = 2  # records past the fetch offset
    NOW = 3  # answer now: leadership or leader epoch changed, the log start moved


class PartitionFetch(NamedTuple):
    """What a request asks of one partition."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1  # the fetcher's own log start (a follower's); -1 unknown
    leader_epoch: int = -1  # the current leader epoch the fetcher knows; -1 none


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: what its fetcher asks for, and what it was last told."""

    fetch: PartitionFetch
    high_watermark: int = -1  # -1: not answered yet, or its last answer was an error
    log_start_offset: int = -1  # the leader's, as last answered
    last_stable_offset: int = -1  # as last answered (KIP-98)

    def has_news(
        self,
        error: int,
        high_watermark: int,
        log_start_offset: int,
        size: int,
        last_stable_offset: int = -1,
    ) -> bool:
        """Whether an answer (its error, offsets and bytes of records) must be sent:
        a moved last stable offset is news too, as in Kafka's CachedPartition."""
        return (
            size > 0
            or error != 0
            or high_watermark != self.high_watermark
            or log_start_offset != self.log_start_offset
            or last_stable_offset != self.last_stable_offset
        )

    def answered(
        self, error: int, high_watermark: int, log_start_offset: int, last_stable_offset: int = -1
    ) -> None:
        """Remember what was sent.  After an error the partition is sent again once
        the error is gone, whatever its offsets."""
        if error != 0:
            self.high_watermark = -1
        else:
            self.high_watermark = high_watermark
            self.log_start_offset = log_start_offset
            self.last_stable_offset = last_stable_offset


@dataclass(eq=False, slots=True)
class FetchSession:
    """A session in the cache; ``dirty`` holds its partitions touched since looked at."""

    id: int
    replica_id: int  # >= 0: a follower's session
    principal: str
    partitions: dict[TopicPartition, CachedPartition]
    created: float
    last_used: float
    epoch: int = 1  # the epoch its next incremental fetch must carry
    dirty: set[TopicPartition] = field(default_factory=set)
    swept: float = 0.0  # when every partition was last looked at (data_api)

    @property
    def follower(self) -> bool:
        return self.replica_id >= 0

    def take_dirty(self) -> set[TopicPartition]:
        taken, self.dirty = self.dirty, set()
        return taken


class FetchSessionCache:
    """The broker's fetch sessions; see the module docstring."""

    def __init__(
        self,
        max_slots: int = DEFAULT_SLOTS,
        eviction_age_ms: int = DEFAULT_EVICTION_AGE_MS,
        clock: Callable[[], float] = time.monotonic,
        new_id: Callable[[], int] | None = None,
    ) -> None:
        self.max_slots = max_slots
        self._eviction_age_s = eviction_age_ms / 1000
        self._clock = clock
        self._new_id = new_id or (lambda: random.randint(1, MAX_EPOCH))
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._holding: dict[TopicPartition, set[FetchSession]] = {}
        self.partitions_cached = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    # -- requests ------------------------------------------------------------------

    def create(
        self, replica_id: int, principal: str, partitions: dict[TopicPartition, CachedPartition]
    ) -> FetchSession | None:
        """A new session holding ``partitions``, or None when no slot can be had.
        Every partition starts dirty: its first incremental fetch looks at each
        once (what was answered may have moved while the full fetch waited)."""
        now = self._clock()
        if not partitions or not self._make_room(replica_id >= 0, len(partitions), now):
            return None
        session_id = self._new_id()
        while session_id in self._sessions or session_id == INVALID_SESSION_ID:
            session_id = self._new_id()
        session = FetchSession(session_id, replica_id, principal, partitions, now, now)
        session.dirty = set(partitions)
        session.swept = now
        self._sessions[session_id] = session
        for tp in partitions:
            self._holding.setdefault(tp, set()).add(session)
        self.partitions_cached += len(partitions)
        return session

    def incremental(
        self,
        session_id: int,
        epoch: int,
        replica_id: int,
        principal: str,
        changed: Mapping[TopicPartition, PartitionFetch],
        forgotten: Iterable[TopicPartition],
    ) -> FetchSession | None:
        """Apply an incremental fetch to its session: ``changed`` partitions added or
        updated, then ``forgotten`` ones dropped, the epoch moved on.  None when that
        left the session empty (it is closed: the fetch goes on without one).
        FetchSessionError when the session is unknown (to this fetcher) or the
        epoch is not the one expected."""
        session = self._sessions.get(session_id)
        if session is None or (session.replica_id, session.principal) != (replica_id, principal):
            raise FetchSessionError(
                errors.FETCH_SESSION_ID_NOT_FOUND, f"no fetch session {session_id}"
            )
        if epoch != session.epoch:
            raise FetchSessionError(
                errors.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}",
            )
        for tp, wanted in changed.items():
            cached = session.partitions.get(tp)
            if cached is None:
                session.partitions[tp] = CachedPartition(wanted)
                self._holding.setdefault(tp, set()).add(session)
                self.partitions_cached += 1
            else:
                cached.fetch = wanted
        for tp in forgotten:  # after the changes, as Kafka does: forgotten wins
            if session.partitions.pop(tp, None) is not None:
                self._release(session, tp)
        if not session.partitions:
            self.remove(session_id)
            return None
        session.epoch = next_epoch(epoch)
        session.last_used = self._clock()
        self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int, principal: str | None = None) -> bool:
        """Close a session (with ``principal``: only one of that principal's)."""
        session = self._sessions.get(session_id)
        if session is None or principal not in (None, session.principal):
            return False
        del self._sessions[session_id]
        for tp in list(session.partitions):
            self._release(session, tp)
        return True

    # -- events --------------------------------------------------------------------

    def touched(self, tp: TopicPartition) -> Sequence[FetchSession]:
        """Something happened to ``tp``: mark it dirty in every session holding it,
        and return those sessions."""
        holding = self._holding.get(tp)
        if not holding:
            return ()
        for session in holding:
            session.dirty.add(tp)
        return tuple(holding)

    # -- internals -----------------------------------------------------------------

    def _release(self, session: FetchSession, tp: TopicPartition) -> None:
        session.dirty.discard(tp)
        self.partitions_cached -= 1
        holding = self._holding.get(tp)
        if holding is not None:
            holding.discard(session)
            if not holding:
                del self._holding[tp]

    def _make_room(self, follower: bool, size: int, now: float) -> bool:
        """True when a new session of this kind and size may have a slot (evicting one
        for it if needed)."""
        if len(self._sessions) < self.max_slots:
            return True
        if not self._sessions:
            return False  # no slots at all
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used > self._eviction_age_s:
            return self._evict(oldest)
        ranked = [
            s
            for s in self._sessions.values()
            if now - s.created > self._eviction_age_s or (follower and not s.follower)
        ]
        if not ranked:
            return False
        least = min(ranked, key=_worth)
        if (follower, size) < _worth(least):
            return False
        return self._evict(least)

    def _evict(self, session: FetchSession) -> bool:
        self.remove(session.id)
        self.evictions += 1
        return True


def _worth(session: FetchSession) -> tuple[bool, int]:
    """How much a session is worth keeping: a follower's over a consumer's, then
    the larger one."""
    return session.follower, len(session.partitions)


# -- the fetcher's side -------------------------------------------------------------


W = TypeVar("W")  # how a fetcher describes what it asks of a partition (compared with ==)


@dataclass(frozen=True, slots=True)
class SessionRequest(Generic[W]):
    """What the next Fetch carries: its session fields and the partitions it names."""

    session_id: int
    epoch: int
    partitions: dict[TopicPartition, W]  # to send
    forgotten: tuple[TopicPartition, ...]

    @property
    def full(self) -> bool:
        return kind_of(self.epoch) is not FetchKind.INCREMENTAL


class FetchSessionHandler(Generic[W]):
    """A fetcher's session with one broker (over one connection's life or longer).

    ``request(wanted)`` builds the next request from every partition wanted now
    (what the fetcher asks of each, any value that compares with ==):
    a full fetch asking for a session until the broker hands one out, then
    incremental fetches naming the partitions added or changed since the last
    request and forgetting those no longer wanted.  ``answered`` takes the
    response's session id, ``refused`` a top-level session error, and
    ``reset`` a failed connection (the next request is full, closing the old
    session so its slot is freed)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, W] = {}  # what the session holds

    def request(self, wanted: Mapping[TopicPartition, W]) -> SessionRequest[W]:
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return SessionRequest(self.session_id, INITIAL_EPOCH, dict(wanted), ())
        changed = {tp: w for tp, w in wanted.items() if self._sent.get(tp) != w}
        forgotten = tuple(tp for tp in self._sent if tp not in wanted)
        return SessionRequest(self.session_id, self.epoch, changed, forgotten)

    def answered(self, request: SessionRequest[W], session_id: int) -> None:
        """The broker answered ``request`` (no top-level error) with ``session_id``."""
        if session_id == INVALID_SESSION_ID or (
            not request.full and session_id != request.session_id
        ):
            self._forget_session()  # none handed out, or the broker closed it
        elif request.full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            self._sent = dict(request.partitions)
        else:
            self.epoch = next_epoch(self.epoch)
            for tp in request.forgotten:
                self._sent.pop(tp, None)
            self._sent.update(request.partitions)

    def refused(self, code: ErrorCode) -> None:
        """A top-level error: an unknown session is forgotten, an epoch out of step
        closes the session with the next (full) fetch."""
        if code == errors.FETCH_SESSION_ID_NOT_FOUND:
            self._forget_session()
        else:
            self.reset()

    def reset(self) -> None:
        """The next request is a full fetch that closes this session and asks anew."""
        self.epoch = INITIAL_EPOCH
        self._sent = {}

    def _forget_session(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.reset()
