"""Whether this broker may act as a partition leader now: a deposed leader's fence.

ZooKeeper mode alone lets a leader cut off from ZooKeeper and from its
followers go on leading for as long as clients can reach it: the controller
elects new leaders once the broker's session expires, but the old leader
never hears of it, keeps appending and holds acks=all produce requests it
can never complete, and clients that still reach it wait for their whole
request timeout.  annal goes beyond Kafka's ZooKeeper mode here, as KRaft
does with fenced brokers (KIP-631): a broker that no longer holds a live
ZooKeeper session stops acting as a leader (docs/architecture.md, "A leader
cut off from the cluster"):

1. its session is SUSPENDED (no answer from ZooKeeper for two thirds of
   ``zookeeper.session.timeout.ms``, kazoo's read timeout) for one third of
   the session timeout more, when ZooKeeper has expired the session if
   nothing got through, or
2. its session is LOST (expired, or closed);

then produce requests, consumer fetches and DeleteRecords on the partitions
it leads are answered NOT_LEADER_OR_FOLLOWER (retriable: every Kafka client
refreshes its metadata and finds the new leader), the requests waiting in its
purgatories are answered the same way at once, and its Metadata answers
name no leader (LEADER_NOT_AVAILABLE) for those partitions.  Followers may
still fetch from it; the controller's next decision cuts back what they copied.

The fence lifts when the same session comes back (CONNECTED after
SUSPENDED: ZooKeeper never expired it, so nothing was decided about this
broker), or, after a LOST session, with the first LeaderAndIsr the
controller sends once the broker has registered again (the controller then
tells it what it leads now).

Thread-safe: ``self._lock`` guards the state; ``reason`` is read without it
on the request paths (one attribute read).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)


class FenceState(enum.Enum):
    OPEN = "open"  # a live session: lead as the controller said
    SUSPENDED = "suspended"  # fenced; lifts when the same session comes back
    LOST = "lost"  # fenced; lifts with a LeaderAndIsr after registering again
    REGISTERED = "registered"  # fenced; registered again, awaiting the controller


class LeadershipFence:
    """See the module docstring."""

    def __init__(self, broker_id: int, on_change: Callable[[bool], None] | None = None) -> None:
        self.broker_id = broker_id
        self._on_change = on_change or (lambda fenced: None)
        self._lock = threading.Lock()
        self._state = FenceState.OPEN
        self.reason: str | None = None  # why the broker may not lead now; None: it may

    @property
    def state(self) -> FenceState:
        with self._lock:
            return self._state

    @property
    def fenced(self) -> bool:
        return self.reason is not None

    def refusal(self, tp: TopicPartition) -> str | None:
        """Why this broker may not act as ``tp``'s leader now; None: it may."""
        reason = self.reason
        return None if reason is None else f"{reason} (it led {tp})"

    def session_suspended_too_long(self, suspended_s: float) -> None:
        """The session has been SUSPENDED past the time ZooKeeper would keep it."""
        self._fence(
            FenceState.SUSPENDED,
            f"broker {self.broker_id} has had no answer from ZooKeeper for "
            f"{suspended_s:.1f} s: its session may have expired and its leaderships moved",
        )

    def session_lost(self) -> None:
        self._fence(
            FenceState.LOST,
            f"broker {self.broker_id} lost its ZooKeeper session: its leaderships may have moved",
        )

    def session_back(self) -> None:
        """The same session is CONNECTED again: nothing was decided about this broker."""
        with self._lock:
            if self._state is not FenceState.SUSPENDED:
                return
        self._lift("its ZooKeeper session lived through the suspension")

    def registered_again(self) -> None:
        """A new session registered the broker again; the controller will tell it more."""
        with self._lock:
            if self._state is FenceState.LOST:
                self._state = FenceState.REGISTERED

    def controller_spoke(self) -> None:
        """A LeaderAndIsr from the controller was applied."""
        with self._lock:
            if self._state is not FenceState.REGISTERED:
                return
        self._lift("the controller told it what it leads")

    def _fence(self, state: FenceState, reason: str) -> None:
        with self._lock:
            if self._state is state or (
                self._state is not FenceState.OPEN and state is FenceState.SUSPENDED
            ):
                return  # fenced already, for this reason or a stronger one
            was_open = self._state is FenceState.OPEN
            self._state = state
            self.reason = reason
        if was_open:
            logger.warning("stops acting as a leader: %s", reason)
            self._on_change(True)

    def _lift(self, why: str) -> None:
        with self._lock:
            if self._state is FenceState.OPEN:
                return
            self._state = FenceState.OPEN
            self.reason = None
        logger.info("broker %d acts as a leader again: %s", self.broker_id, why)
        self._on_change(False)
