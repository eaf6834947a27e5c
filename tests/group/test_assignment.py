"""The range assignment every group member computes alike, and topic filters."""

from __future__ import annotations

import pytest
from annal.consumer.assignment import (
    Blacklist,
    Whitelist,
    range_assign,
    subscribed_topics,
    thread_ids,
)


def test_range_assignment_as_kafka() -> None:
    threads = {"t": thread_ids("b", 1) + thread_ids("a", 2)}  # sorted: a-0, a-1, b-0
    got = range_assign({"t": [4, 0, 1, 2, 3]}, threads)
    assert got == {"a-0": [("t", 0), ("t", 1)], "a-1": [("t", 2), ("t", 3)], "b-0": [("t", 4)]}
    # more threads than partitions: the last ones get nothing
    assert range_assign({"t": [0]}, {"t": ["x-0", "y-0"]}) == {"x-0": [("t", 0)], "y-0": []}
    # every partition exactly once, whatever the counts
    for partitions in range(0, 9):
        for members in range(1, 5):
            threads = {"t": [f"c{i}-0" for i in range(members)]}
            owned = [tp for tps in range_assign({"t": range(partitions)}, threads).values()
                     for tp in tps]  # fmt: skip
            assert sorted(owned) == [("t", p) for p in range(partitions)]


def test_topics_assigned_separately() -> None:
    got = range_assign({"a": [0, 1], "b": [0, 1, 2]}, {"a": ["c-0"], "b": ["c-0", "d-0"]})
    assert got == {"c-0": [("a", 0), ("a", 1), ("b", 0), ("b", 1)], "d-0": [("b", 2)]}


def test_filters() -> None:
    topics = ["events", "events-eu", "audit", "__consumer_offsets"]
    assert subscribed_topics({"events.*": 2}, "white_list", topics) == {
        "events": 2,
        "events-eu": 2,
    }
    assert subscribed_topics({"events.*": 1}, "black_list", topics) == {"audit": 1}
    assert subscribed_topics({"audit": 3}, "static", topics) == {"audit": 3}
    assert Whitelist(".*").matches("x") and not Whitelist(".*").matches("__consumer_offsets")
    assert Blacklist("a.*").matches("b")
    with pytest.raises(ValueError, match="bad topic filter"):
        Whitelist("(")
