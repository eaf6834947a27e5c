"""Leader election and the partition and replica states, as pure functions and closed enums.

A partition moves through Kafka's states::

    NonExistent → New → Online ⇄ Offline
                         ↑ └──────┘
    any state  → NonExistent (topic deletion)

and each replica (one partition on one broker) through Kafka's replica states::

    NonExistent → New → Online ⇄ Offline → DeletionStarted → NonExistent

``transition`` and ``replica_transition`` refuse anything else with an error
naming the partition (and broker) and both states.

Leader choice is one pure strategy per reason, as Kafka's
PartitionLeaderElectionAlgorithms:

* ``OFFLINE`` (the leader's broker died or its log dir failed; a new
  partition): the first live replica of the assignment that is in the ISR;
  with unclean election allowed, the first live replica at all.
* ``REASSIGNMENT``: the first replica of the *target* list that is live and
  in the ISR.
* ``PREFERRED``: the first replica of the assignment, if live and in the ISR.
* ``CONTROLLED_SHUTDOWN``: the first replica of the assignment that is live,
  in the ISR and not shutting down; the brokers shutting down leave the ISR.

"Live" never includes a broker that is shutting down or a replica on an
offline log dir: the callers leave those out.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


LEGAL_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NON_EXISTENT: frozenset(PartitionState),
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.OFFLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
}


class IllegalStateTransition(Exception):
    """A partition asked to move between states that are not connected."""


def transition(
    topic: str, partition: int, current: PartitionState, target: PartitionState
) -> PartitionState:
    if current not in LEGAL_PREVIOUS[target]:
        raise IllegalStateTransition(
            f"partition {topic}-{partition} cannot go from {current.value} to {target.value}"
        )
    return target


@dataclass(frozen=True, slots=True)
class Election:
    """The outcome of an election: a leader (or -1) and the ISR to write."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


def elect_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    unclean_allowed: bool = False,
) -> Election:
    """Pick the leader for a partition; leader -1 means offline."""
    live_isr = [r for r in assignment if r in live and r in isr]
    if live_isr:
        return Election(live_isr[0], tuple(r for r in isr if r in live))
    if unclean_allowed:
        live_replicas = [r for r in assignment if r in live]
        if live_replicas:
            return Election(live_replicas[0], (live_replicas[0],), unclean=True)
    return Election(-1, tuple(isr))


class Reason(enum.Enum):
    """Why a leader is being chosen: which strategy chooses it."""

    OFFLINE = "offline"
    REASSIGNMENT = "reassignment"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled shutdown"


@dataclass(frozen=True, slots=True)
class Candidates:
    """What every strategy decides from: one partition as the controller sees it."""

    assignment: Sequence[int]
    isr: Sequence[int]
    live: Collection[int]  # brokers that may lead it (not shutting down, dir online)
    shutting_down: Collection[int] = ()
    target: Sequence[int] = ()  # a reassignment's target replicas
    unclean_allowed: bool = False


def elect(reason: Reason, c: Candidates) -> Election:
    """The leader ``reason``'s strategy picks (-1: none) and the ISR to write."""
    if reason is Reason.OFFLINE:
        return elect_leader(c.assignment, c.isr, c.live, c.unclean_allowed)
    if reason is Reason.REASSIGNMENT:
        leader = next((r for r in c.target if r in c.live and r in c.isr), -1)
        return Election(leader, tuple(c.isr))
    if reason is Reason.PREFERRED:
        preferred = c.assignment[0] if c.assignment else -1
        ok = preferred in c.live and preferred in c.isr
        return Election(preferred if ok else -1, tuple(c.isr))
    isr = tuple(r for r in c.isr if r not in c.shutting_down)
    leader = next((r for r in c.assignment if r in c.live and r in isr), -1)
    return Election(leader, isr)


class ReplicaState(enum.Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"


REPLICA_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.NON_EXISTENT: frozenset(ReplicaState),
    ReplicaState.NEW: frozenset({ReplicaState.NON_EXISTENT}),
    ReplicaState.ONLINE: frozenset({ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE}),
    ReplicaState.OFFLINE: frozenset({ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE}),
    ReplicaState.DELETION_STARTED: frozenset({ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED}),
}


def replica_transition(
    topic: str, partition: int, broker: int, current: ReplicaState, target: ReplicaState
) -> ReplicaState:
    if current not in REPLICA_PREVIOUS[target]:
        raise IllegalStateTransition(
            f"replica of {topic}-{partition} on broker {broker} cannot go from "
            f"{current.value} to {target.value}"
        )
    return target


def assign_replicas(
    partitions: int, replication_factor: int, brokers: Sequence[int], start: int = 0
) -> dict[int, tuple[int, ...]]:
    """Spread replicas round robin over the sorted brokers, shifting followers
    per partition, as Kafka's assignment without racks does."""
    live = sorted(brokers)
    if not live:
        raise ValueError("no live brokers to assign replicas to")
    if replication_factor > len(live):
        raise ValueError(
            f"replication factor {replication_factor} is larger than the {len(live)} live brokers"
        )
    out: dict[int, tuple[int, ...]] = {}
    n = len(live)
    for p in range(partitions):
        first = (start + p) % n
        shift = p // n
        followers = [
            live[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(replication_factor - 1)
        ]
        out[p] = (live[first], *followers)
    return out
