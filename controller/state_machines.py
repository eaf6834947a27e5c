"""The partition and replica state machines, as Kafka's controller has them.

Both work on many partitions at once: they read the current states from
ZooKeeper in one batched round (leaders change their ISRs themselves, so the
controller's copy may be behind), decide each partition with a pure strategy
(``election.elect``), write every new state in one batched round (fenced by
the controller epoch, conditioned on each state's zkVersion), read again and
decide again for the few whose state moved meanwhile, and add what brokers
must hear to the event's ``RequestBatch``.  Nothing is sent from here.

``PartitionStateMachine.handle_state_changes(partitions, target, reason)``
answers per partition: the new ``PartitionUpdate``, or why it was not moved.

* → Online from New: the first live replica leads, every live replica is in
  the ISR (none holds anything yet); with no live replica the state is
  written leaderless and the partition is Offline.
* → Online from Offline/Online: the leader ``reason``'s strategy picks.  For
  ``OFFLINE`` a partition whose leader is still live and online keeps it;
  one where nobody can lead is written leaderless (so brokers stop naming a
  dead leader) and goes Offline; unclean election is allowed per topic.
  Other reasons leave a partition they cannot move as it is.

``ReplicaStateMachine.handle_state_changes(replicas, target)``:

* → Online: the broker hears the partition's LeaderAndIsr.
* → Offline: the broker (if live) stops its replica, logs kept, and leaves
  the ISR of each partition led by another broker; the other replicas hear
  the new state.  A partition whose leader is among them, or that has none,
  keeps its ISR: electing its leader is the partition state machine's part.
* → DeletionStarted: the broker stops its replica and deletes its log.
* → NonExistent: forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from annal.zk.batched import Versioned, Written, stale
from annal.zk.client import ControllerEpoch, StaleVersionError
from annal.zk.layout import PartitionState

from annal.topic_partition import TopicPartition

from .context import ControllerContext
from .election import Candidates, Reason, ReplicaState, elect
from .election import PartitionState as State
from .requests import PartitionUpdate, RequestBatch

logger = logging.getLogger(__name__)

STALE_STATE_ATTEMPTS = 3


class PartitionStore(Protocol):
    """The batched ZooKeeper reads and writes the state machines make
    (``zk.batched.BatchedZk``)."""

    def partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Versioned]: ...

    def update_partition_states(
        self, states: Mapping[TopicPartition, Versioned], fence: ControllerEpoch
    ) -> dict[TopicPartition, Written]: ...

    def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], fence: ControllerEpoch
    ) -> dict[TopicPartition, Written]: ...


# the topics among those given that allow unclean leader election
UncleanTopics = Callable[[Sequence[str]], set[str]]


# decides one partition from its current state and version: the state to
# write, or None to leave it as it is
Decide = Callable[[TopicPartition, PartitionState, int], PartitionState | None]


class _StateMachine:
    def __init__(
        self,
        ctx: ControllerContext,
        store: PartitionStore,
        batch: RequestBatch,
        fence: Callable[[], ControllerEpoch],
        *,
        just_read: bool = False,
        fresh: set[TopicPartition] | None = None,
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.fence = fence
        # partitions whose context state was read or written in this event (shared
        # by the event's state machines): as good as just read
        self.fresh: set[TopicPartition] = set() if fresh is None else fresh
        # The context's states were read from ZooKeeper in this same event
        # (taking office): the first round decides from them instead of reading
        # again; a state that moved since fails its write on the zkVersion and is
        # read and decided again, as in any round.
        self.just_read = just_read

    def _write_in_rounds(
        self, partitions: Sequence[TopicPartition], decide: Decide
    ) -> tuple[
        dict[TopicPartition, Versioned], dict[TopicPartition, Versioned], list[TopicPartition]
    ]:
        """Take the partitions' states, ``decide`` each, write the decisions (one
        batched round); read and decide again those whose state moved meanwhile,
        a few times.  The states written with their new versions, the states
        last read, and the partitions still moving.

        The first round decides from the context's states, each with the
        zkVersion it was written or read at: a write from a state that moved
        since fails on that version, and the partition is read and decided
        again.  A decision to write nothing cannot fail that way, so a partition
        the context says needs no change is read from ZooKeeper and decided
        again at once (unless the context was read in this same event,
        ``just_read``, or the partition was read or written in it, ``fresh``),
        as the context may lag a leader's ISR change.  With
        thousands of partitions (a broker's controlled shutdown), that saves a
        ZooKeeper read per partition."""
        written: dict[TopicPartition, Versioned] = {}
        seen: dict[TopicPartition, Versioned] = {}
        remaining = list(partitions)
        for attempt in range(1, STALE_STATE_ATTEMPTS + 1):
            if not remaining:
                break
            current, cached = self._states(remaining, first=attempt == 1)
            decided = _decisions(remaining, current, decide)
            unsure = [tp for tp in remaining if tp in cached and tp not in decided]
            if unsure:
                current.update(self._read(unsure))
                decided.update(_decisions(unsure, current, decide))
            seen.update(current)
            outcomes = self.store.update_partition_states(decided, self.fence()) if decided else {}
            self.fresh.update(
                tp for tp, o in outcomes.items() if not isinstance(o, StaleVersionError)
            )
            remaining = []
            for tp, outcome in outcomes.items():
                if isinstance(outcome, StaleVersionError):
                    logger.warning("%s (attempt %d of %d)", outcome, attempt, STALE_STATE_ATTEMPTS)
                    remaining.append(tp)
                else:
                    written[tp] = (decided[tp][0], outcome)
        return written, seen, remaining

    def _states(
        self, partitions: Sequence[TopicPartition], first: bool
    ) -> tuple[dict[TopicPartition, Versioned], set[TopicPartition]]:
        """The states to decide from, and those of them taken from the context
        without being just read (see ``_write_in_rounds``)."""
        if not first:
            return self._read(partitions), set()
        known = self.ctx.leadership
        found = {tp: (known[tp].state, known[tp].zk_version) for tp in partitions if tp in known}
        cached = set() if self.just_read else set(found) - self.fresh
        missing = [tp for tp in partitions if tp not in found]
        if missing:
            found.update(self._read(missing))
        return found, cached

    def _read(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Versioned]:
        states = self.store.partition_states(partitions)
        self.fresh.update(states)
        return states


def _decisions(
    partitions: Iterable[TopicPartition], states: Mapping[TopicPartition, Versioned], decide: Decide
) -> dict[TopicPartition, Versioned]:
    """The state each partition is to be written with, and the version it was decided
    from; partitions ``decide`` leaves as they are, or with no state, left out."""
    decided: dict[TopicPartition, Versioned] = {}
    for tp in partitions:
        if tp in states and (new := decide(tp, *states[tp])) is not None:
            decided[tp] = (new, states[tp][1])
    return decided


class PartitionStateMachine(_StateMachine):
    def __init__(
        self,
        ctx: ControllerContext,
        store: PartitionStore,
        batch: RequestBatch,
        fence: Callable[[], ControllerEpoch],
        unclean_topics: UncleanTopics,
        *,
        just_read: bool = False,
        fresh: set[TopicPartition] | None = None,
    ) -> None:
        super().__init__(ctx, store, batch, fence, just_read=just_read, fresh=fresh)
        self.unclean_topics = unclean_topics

    def handle_state_changes(
        self, partitions: Iterable[TopicPartition], target: State, reason: Reason = Reason.OFFLINE
    ) -> dict[TopicPartition, PartitionUpdate | str]:
        """Move ``partitions`` to ``target`` (Online or Offline; NonExistent is
        ``forget``); the new state of each, or why it did not move."""
        ctx = self.ctx
        wanted = sorted(set(partitions))
        if target is State.OFFLINE:
            for tp in wanted:
                ctx.move(tp, State.OFFLINE)
            return {}
        results: dict[TopicPartition, PartitionUpdate | str] = {}
        fresh = [tp for tp in wanted if ctx.state_of(tp) in (State.NON_EXISTENT, State.NEW)]
        for tp in fresh:
            if ctx.state_of(tp) is State.NON_EXISTENT:
                ctx.move(tp, State.NEW)
        results.update(self._initialize(fresh))
        existing = [tp for tp in wanted if tp not in results]
        results.update(self._elect(existing, reason))
        return results

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.ctx.move(tp, State.NON_EXISTENT)
            del self.ctx.partition_states[tp]

    # -- New → Online ----------------------------------------------------------------

    def _initialize(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionUpdate | str]:
        ctx = self.ctx
        states: dict[TopicPartition, PartitionState] = {}
        for tp in partitions:
            replicas = ctx.replicas(tp)
            live = [r for r in replicas if r in ctx.candidates(tp)]
            leader = live[0] if live else -1
            isr = tuple(r for r in replicas if r in ctx.live) if live else replicas
            states[tp] = PartitionState(leader, 0, isr, ctx.epoch)
        if not states:
            return {}
        written = self.store.create_partition_states(states, self.fence())
        results: dict[TopicPartition, PartitionUpdate | str] = {}
        exists = stale(written)
        for tp, version in written.items():
            if isinstance(version, int):
                results[tp] = self._decided(tp, states[tp], version, "new partition")
        if exists:  # read it as it is, and decide as for a partition that existed
            for tp in exists:
                ctx.move(tp, State.OFFLINE)
            results.update(self._elect(exists, Reason.OFFLINE))
        return results

    # -- Offline/Online → Online -------------------------------------------------------

    def _elect(
        self, partitions: Sequence[TopicPartition], reason: Reason
    ) -> dict[TopicPartition, PartitionUpdate | str]:
        results: dict[TopicPartition, PartitionUpdate | str] = {}

        def decide(
            tp: TopicPartition, state: PartitionState, version: int
        ) -> PartitionState | None:
            outcome = self._decide(tp, state, reason)
            if outcome == state:
                results[tp] = self._decided(tp, state, version, None)
            elif isinstance(outcome, str):
                results[tp] = outcome
            else:
                return outcome
            return None

        written, seen, moving = self._write_in_rounds(partitions, decide)
        for tp, (state, version) in written.items():
            results[tp] = self._decided(tp, state, version, reason.value)
        for tp in moving:
            results[tp] = "its state kept changing; will retry on the next event"
        for tp in partitions:
            if tp not in seen:
                results[tp] = "it has no state in ZooKeeper"
            elif isinstance(results.get(tp), str) and tp not in self.ctx.leadership:
                state, version = seen[tp]  # known to brokers as it stands
                replicas = self.ctx.replicas(tp)
                self.ctx.leadership[tp] = PartitionUpdate(*tp, state, replicas, version)
        return results

    def _decide(
        self, tp: TopicPartition, state: PartitionState, reason: Reason
    ) -> PartitionState | str:
        """The state to write for ``tp``, ``state`` itself when nothing changes,
        or why it cannot move."""
        ctx = self.ctx
        live = ctx.candidates(tp)
        if reason is Reason.OFFLINE and state.leader in live:
            return state  # its leader lives: nothing to elect
        if reason is Reason.CONTROLLED_SHUTDOWN and state.leader in live:
            # led elsewhere already: the brokers shutting down only leave the ISR
            isr = tuple(r for r in state.isr if r not in ctx.shutting_down) or state.isr
            if isr == state.isr:
                return state
            return PartitionState(state.leader, state.leader_epoch + 1, isr, ctx.epoch)
        candidates = Candidates(
            ctx.replicas(tp), state.isr, live, ctx.shutting_down,
            target=ctx.replicas(tp),
        )  # fmt: skip
        election = elect(reason, candidates)
        unclean = election.leader < 0 and reason is Reason.OFFLINE
        if unclean and tp.topic in self.unclean_topics([tp.topic]):
            election = elect(reason, _unclean(candidates))
        if election.leader < 0:
            if reason is not Reason.OFFLINE:
                return f"no live in-sync replica can lead it ({reason.value})"
            if state.leader < 0:
                return state  # leaderless already
        elif election.leader == state.leader and election.isr == state.isr:
            return state
        if election.unclean:
            logger.warning(
                "unclean election of %s: %d was not in the ISR %s; records only the lost "
                "replicas had are gone", tp, election.leader, list(state.isr),
            )  # fmt: skip
        return PartitionState(election.leader, state.leader_epoch + 1, election.isr, ctx.epoch)

    def _decided(
        self, tp: TopicPartition, state: PartitionState, version: int, why: str | None
    ) -> PartitionUpdate:
        """Record ``tp``'s state; when it changed (``why`` says how) its replicas
        and every broker's cache will hear."""
        ctx = self.ctx
        update = PartitionUpdate(tp.topic, tp.partition, state, ctx.replicas(tp), version)
        changed = ctx.leadership.get(tp) != update
        ctx.leadership[tp] = update
        ctx.move(tp, State.ONLINE if state.leader >= 0 else State.OFFLINE)
        if changed:
            self.batch.add_leader_and_isr(ctx.recipients(tp), update)
            if why is not None:
                logger.info("partition %s: leader %d, epoch %d, isr %s (%s)", tp, state.leader,
                            state.leader_epoch, list(state.isr), why)  # fmt: skip
        return update


def _unclean(c: Candidates) -> Candidates:
    return Candidates(c.assignment, c.isr, c.live, c.shutting_down, c.target, unclean_allowed=True)


class ReplicaStateMachine(_StateMachine):
    def handle_state_changes(
        self, replicas: Iterable[tuple[int, TopicPartition]], target: ReplicaState
    ) -> None:
        ctx = self.ctx
        wanted = sorted(set(replicas), key=lambda r: (r[1], r[0]))
        if target is ReplicaState.OFFLINE:
            self._offline(wanted)
        for broker, tp in wanted:
            if target is ReplicaState.ONLINE and broker in ctx.live:
                known = ctx.leadership.get(tp)
                if known is not None and broker not in ctx.shutting_down:
                    self.batch.add_leader_and_isr([broker], known)
            elif target is ReplicaState.DELETION_STARTED and broker in ctx.live:
                self.batch.add_stop_replica(broker, tp, delete=True)
            ctx.move_replica(tp, broker, target)

    def _offline(self, replicas: Sequence[tuple[int, TopicPartition]]) -> None:
        """Stop the live ones (logs kept) and take them all out of their ISRs."""
        for broker, tp in replicas:
            if broker in self.ctx.live:
                self.batch.add_stop_replica(broker, tp, delete=False)
        self.remove_from_isr(replicas)

    def remove_from_isr(self, replicas: Iterable[tuple[int, TopicPartition]]) -> None:
        """Take the replicas out of the ISRs of partitions led by another broker
        (a leaderless partition keeps its ISR: the partition state machine
        decides for those); the remaining replicas hear the new state."""
        ctx = self.ctx
        leaving: dict[TopicPartition, set[int]] = {}
        for broker, tp in replicas:
            leaving.setdefault(tp, set()).add(broker)

        def decide(
            tp: TopicPartition, state: PartitionState, version: int
        ) -> PartitionState | None:
            if state.leader < 0 or state.leader in leaving[tp]:
                return None
            isr = tuple(r for r in state.isr if r not in leaving[tp])
            if isr == state.isr:
                return None
            return PartitionState(state.leader, state.leader_epoch + 1, isr, ctx.epoch)

        written, _, remaining = self._write_in_rounds(sorted(leaving), decide)
        for tp, (state, version) in written.items():
            update = PartitionUpdate(tp.topic, tp.partition, state, ctx.replicas(tp), version)
            ctx.leadership[tp] = update
            recipients = [b for b in ctx.recipients(tp) if b not in leaving[tp]]
            self.batch.add_leader_and_isr(recipients, update)
            logger.info("partition %s: isr %s, leader %d, epoch %d (replicas %s offline)",
                        tp, list(state.isr), state.leader, state.leader_epoch,
                        sorted(leaving[tp]))  # fmt: skip
        for tp in remaining:
            logger.warning("partition %s: its state kept changing; the ISR shrinks on a "
                           "later event", tp)  # fmt: skip
