"""Leader election, partition state transitions and replica assignment: pure functions."""

from __future__ import annotations

import pytest
from annal.controller.election import (
    IllegalStateTransition,
    PartitionState,
    assign_replicas,
    elect_leader,
    transition,
)
from hypothesis import given
from hypothesis import strategies as st


def test_first_live_replica_in_the_isr_leads() -> None:
    assert elect_leader((1, 2, 3), isr=(2, 3), live={1, 2, 3}).leader == 2
    assert elect_leader((1, 2, 3), isr=(1, 2, 3), live={2, 3}).leader == 2
    offline = elect_leader((1, 2), isr=(1,), live={2})
    assert offline.leader == -1 and not offline.unclean
    unclean = elect_leader((1, 2), isr=(1,), live={2}, unclean_allowed=True)
    assert (unclean.leader, unclean.isr, unclean.unclean) == (2, (2,), True)


def test_transitions_are_closed() -> None:
    assert transition("t", 0, PartitionState.NON_EXISTENT, PartitionState.NEW) is PartitionState.NEW
    assert transition("t", 0, PartitionState.NEW, PartitionState.ONLINE) is PartitionState.ONLINE
    assert (
        transition("t", 0, PartitionState.ONLINE, PartitionState.OFFLINE) is PartitionState.OFFLINE
    )
    with pytest.raises(
        IllegalStateTransition, match="t-0 cannot go from NonExistentPartition to OnlinePartition"
    ):
        transition("t", 0, PartitionState.NON_EXISTENT, PartitionState.ONLINE)
    with pytest.raises(IllegalStateTransition):
        transition("t", 0, PartitionState.ONLINE, PartitionState.NEW)


@given(brokers=st.integers(1, 7), partitions=st.integers(1, 40), data=st.data())
def test_assignment_spreads_without_duplicates(
    brokers: int, partitions: int, data: st.DataObject
) -> None:
    factor = data.draw(st.integers(1, brokers))
    ids = list(range(10, 10 + brokers))
    assignment = assign_replicas(partitions, factor, ids)
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(set(replicas)) == factor and set(replicas) <= set(ids)
    leaders = [r[0] for r in assignment.values()]
    assert max(leaders.count(b) for b in ids) - min(leaders.count(b) for b in ids) <= 1


def test_assignment_refuses_too_few_brokers() -> None:
    with pytest.raises(ValueError, match="replication factor 3 is larger than the 2 live brokers"):
        assign_replicas(1, 3, [1, 2])
    with pytest.raises(ValueError, match="no live brokers"):
        assign_replicas(1, 1, [])
