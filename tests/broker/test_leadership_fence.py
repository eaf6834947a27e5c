"""The leadership fence's states (broker/replication/leadership_fence.py) and what a fenced
leader answers, with a real log and partition (no network)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from annal.broker.replication.leadership_fence import FenceState, LeadershipFence
from annal.broker.replication.partition import LeaderAndIsrState, Partition, PartitionStateError
from annal.storage.files import TopicPartition

from annal import errors

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from logutil import batch, open_log

TP = TopicPartition("t", 0)


def fence_and_calls() -> tuple[LeadershipFence, list[bool]]:
    calls: list[bool] = []
    return LeadershipFence(1, calls.append), calls


def test_a_suspension_that_ends_in_the_same_session_lifts_the_fence() -> None:
    fence, calls = fence_and_calls()
    fence.session_suspended_too_long(6.0)
    assert fence.fenced and fence.state is FenceState.SUSPENDED
    assert "no answer from ZooKeeper for 6.0 s" in (fence.reason or "")
    fence.session_suspended_too_long(7.0)  # once is enough
    fence.controller_spoke()  # the controller's word alone does not lift a suspension
    assert fence.fenced
    fence.session_back()
    assert not fence.fenced and fence.state is FenceState.OPEN
    assert calls == [True, False]


def test_a_lost_session_lifts_only_with_the_controllers_word_after_registering() -> None:
    fence, calls = fence_and_calls()
    fence.session_suspended_too_long(6.0)
    fence.session_lost()  # the suspension ended in an expiry
    assert fence.state is FenceState.LOST
    fence.session_back()  # a new session's CONNECTED: not the same session
    fence.controller_spoke()  # a LeaderAndIsr from before registering again
    assert fence.fenced
    fence.registered_again()
    assert fence.state is FenceState.REGISTERED and fence.fenced
    fence.controller_spoke()
    assert not fence.fenced
    assert calls == [True, False]


def test_a_fenced_leader_refuses_producers_and_consumers_but_not_followers(
    tmp_path: Path,
) -> None:
    fence, _ = fence_and_calls()
    partition = Partition(TP, open_log(tmp_path / "t-0"), 1, fence=fence)
    partition.apply(LeaderAndIsrState("t", 0, 1, 1, 5, (1, 2), (1, 2), 0))
    partition.append_as_leader(batch([b"a"]), acks=1)
    assert partition.leads_now

    fence.session_lost()
    assert partition.is_leader and not partition.leads_now
    with pytest.raises(PartitionStateError, match="lost its ZooKeeper session") as info:
        partition.append_as_leader(batch([b"b"]), acks=1)
    assert info.value.code is errors.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(PartitionStateError) as info:
        partition.fetch_bound(-1, 5)  # a consumer
    assert info.value.code is errors.NOT_LEADER_OR_FOLLOWER
    assert partition.fetch_bound(2, 5) is None  # a follower still copies
    assert partition.log.log_end_offset == 1  # nothing appended while fenced
