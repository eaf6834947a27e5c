"""The leader-epoch cache: Kafka's semantics, and a model check."""

from __future__ import annotations

from pathlib import Path

from annal.storage.checkpoints import LeaderEpochCheckpointFile
from annal.storage.epoch_cache import UNDEFINED_EPOCH, EpochEntry, LeaderEpochFileCache
from annal.storage.files import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

TP = TopicPartition("t", 0)


def cache_at(path: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path / "leader-epoch-checkpoint"))


def test_assign_end_offsets_and_persistence(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch, later offset: nothing new
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(4, 30)]
    assert cache.end_offset_for(4, 55) == (4, 55)
    assert cache.end_offset_for(2, 55) == (2, 30)
    assert cache.end_offset_for(3, 55) == (2, 30)  # unknown epoch: the largest below it
    assert cache.end_offset_for(9, 55) == (UNDEFINED_EPOCH, -1)
    assert cache.epoch_for_offset(15) == 2
    assert cache_at(tmp_path).epoch_entries() == cache.epoch_entries()


def test_divergent_assign_removes_conflicting_entries(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    for epoch, offset in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, offset)
    cache.assign(5, 15)
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(5, 15)]


def test_truncation_from_both_ends(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    for epoch, offset in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(20)
    assert cache.latest_epoch == 2
    cache.truncate_from_start(15)
    assert cache.epoch_entries() == [EpochEntry(2, 15)]
    cache.clear_and_flush()
    assert cache_at(tmp_path).epoch_entries() == []


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 200)),
            st.tuples(st.just("end"), st.integers(0, 200), st.just(0)),
            st.tuples(st.just("start"), st.integers(0, 200), st.just(0)),
        ),
        max_size=30,
    )
)
def test_against_a_list_model(tmp_path_factory: object, ops: list[tuple[str, int, int]]) -> None:
    directory = tmp_path_factory.mktemp("epochs")  # type: ignore[attr-defined]
    cache = cache_at(directory)
    model: list[tuple[int, int]] = []
    for op, a, b in ops:
        if op == "assign":
            cache.assign(a, b)
            if not (model and model[-1][0] == a and b >= model[-1][1]):
                model = [(e, o) for e, o in model if e < a and o < b] + [(a, b)]
        elif op == "end":
            cache.truncate_from_end(a)
            model = [(e, o) for e, o in model if o < a]
        else:
            cache.truncate_from_start(a)
            if model and model[0][1] < a:
                before = [(e, o) for e, o in model if o <= a]
                model = [(before[-1][0], a)] + [(e, o) for e, o in model if o > a]
        assert [tuple(e) for e in cache.epoch_entries()] == model
        epochs = [e for e, _ in model]
        offsets = [o for _, o in model]
        assert epochs == sorted(set(epochs)) and offsets == sorted(set(offsets))
    assert [tuple(e) for e in cache_at(directory).epoch_entries()] == model
