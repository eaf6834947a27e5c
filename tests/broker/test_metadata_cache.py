"""The broker's metadata cache: full and partial UpdateMetadata, deletions, waiting."""

from __future__ import annotations

import threading

import pytest
from annal.broker.metadata_cache import LiveBroker, MetadataCache, PartitionView

B1, B2 = LiveBroker(1, "h1", 9091), LiveBroker(2, "h2", 9092)


def view(leader: int, epoch: int = 0) -> PartitionView:
    return PartitionView(leader, epoch, (leader,), (1, 2))


def test_full_partial_and_deleted_updates() -> None:
    cache = MetadataCache()
    assert cache.snapshot().topics == {} and cache.snapshot().controller_id == -1
    cache.update(
        1, 3, [B1, B2], [("a", 0, view(1)), ("a", 1, view(2)), ("b", 0, view(1))], full=True
    )
    snap = cache.snapshot()
    assert (snap.controller_id, snap.controller_epoch, sorted(snap.brokers)) == (1, 3, [1, 2])
    assert snap.leader_of("a", 1) == 2 and snap.leader_of("a", 9) == -1

    cache.update(1, 3, [B1], [("a", 1, view(1, epoch=1))], deleted_topics=["b"])
    later = cache.snapshot()
    assert later.leader_of("a", 1) == 1 and later.topics["a"][1].leader_epoch == 1
    assert later.topics["a"][0] == view(1)  # untouched by a partial update
    assert "b" not in later.topics
    assert snap.leader_of("a", 1) == 2  # an old snapshot never changes

    cache.update(2, 4, [B2], [("c", 0, view(1))], full=True)
    full = cache.snapshot()
    assert sorted(full.topics) == ["c"]
    assert full.leader_of("c", 0) == -1  # its leader is not a live broker


@pytest.mark.timeout(10)
def test_wait_until_wakes_on_update() -> None:
    cache = MetadataCache()
    assert not cache.wait_until(lambda s: "t" in s.topics, 0.05)
    timer = threading.Timer(0.1, lambda: cache.update(1, 1, [B1], [("t", 0, view(1))]))
    timer.start()
    assert cache.wait_until(lambda s: s.leader_of("t", 0) == 1, 5)
    timer.join()
