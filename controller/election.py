"""Leader election and partition states, as pure functions and closed enums.

A partition moves through Kafka's states::

    NonExistent → New → Online ⇄ Offline
                         ↑ └──────┘
    any state  → NonExistent (topic deletion)

``transition`` refuses anything else with an error naming the partition and
both states.  ``elect_leader`` is a pure function of the assignment, the ISR
and the live brokers: the first live replica of the assignment that is in the
ISR; with unclean election allowed, the first live replica at all.
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
