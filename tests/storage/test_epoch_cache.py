"""The leader-epoch cache: Kafka's semantics (KIP-101/279), and a check against a list model."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.storage.checkpoints import LeaderEpochCheckpointFile
from annal.storage.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)
from annal.storage.files import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

TP = TopicPartition("t", 0)
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_at(path: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path / "leader-epoch-checkpoint"))


def cache_with(path: Path, entries: list[tuple[int, int]]) -> LeaderEpochFileCache:
    cache = cache_at(path)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_empty_cache(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    assert cache.latest_epoch is None and cache.latest_entry is None
    assert cache.earliest_entry is None and cache.epoch_entries() == []
    assert cache.end_offset_for(0, 10) == UNDEFINED
    assert cache.epoch_for_offset(0) is None
    assert not (tmp_path / "leader-epoch-checkpoint").exists()  # nothing changed yet


def test_assign_and_persistence(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(0, 0)
    cache.assign(0, 5)  # the latest epoch again, later offset: nothing new
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(4, 30)]
    assert cache.latest_epoch == 4
    assert cache.latest_entry == EpochEntry(4, 30)
    assert cache.earliest_entry == EpochEntry(0, 0)
    # a new epoch is kept in memory until the log's flush (docs/storage.md)
    assert not (tmp_path / "leader-epoch-checkpoint").exists()
    cache.sync()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n4 30\n"
    assert cache_at(tmp_path).epoch_entries() == cache.epoch_entries()


def test_assign_rejects_negative_values(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    with pytest.raises(ValueError, match=r"invalid leader epoch entry \(-1, 0\) for t-0"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match=r"\(1, -5\)"):
        cache.assign(1, -5)


def test_latest_epoch_with_a_smaller_offset_replaces_it(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (3, 20)])
    cache.assign(3, 15)
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(3, 15)]


def test_divergent_assign_removes_conflicting_entries(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (2, 10), (3, 20)])
    cache.assign(5, 15)  # start offset below entry (3, 20): the log diverged there
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(5, 15)]
    cache.assign(2, 40)  # epoch below the latest: later epochs go
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(2, 40)]
    cache.sync()
    assert cache_at(tmp_path).epoch_entries() == cache.epoch_entries()


def test_end_offset_for(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(2, 10), (4, 30), (7, 50)])
    assert cache.end_offset_for(7, 65) == (7, 65)  # the latest epoch ends at the log end
    assert cache.end_offset_for(4, 65) == (4, 50)
    assert cache.end_offset_for(2, 65) == (2, 30)
    assert cache.end_offset_for(5, 65) == (4, 50)  # unknown: the largest epoch below it
    assert cache.end_offset_for(6, 65) == (4, 50)
    # Below every entry (history removed from the start): the requested epoch and
    # the first start offset, as Kafka 2.x answers.
    assert cache.end_offset_for(1, 65) == (1, 10)
    assert cache.end_offset_for(0, 65) == (0, 10)
    assert cache.end_offset_for(8, 65) == UNDEFINED  # above the latest
    assert cache.end_offset_for(UNDEFINED_EPOCH, 65) == UNDEFINED


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(2, 10), (4, 30)])
    assert cache.epoch_for_offset(9) is None
    assert cache.epoch_for_offset(10) == 2
    assert cache.epoch_for_offset(29) == 2
    assert cache.epoch_for_offset(30) == 4
    assert cache.epoch_for_offset(10**9) == 4


def test_truncate_from_end(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (2, 10), (3, 20)])
    cache.truncate_from_end(25)  # the latest epoch still starts below: nothing goes
    assert cache.latest_epoch == 3
    cache.truncate_from_end(20)
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(2, 10)]
    cache.truncate_from_end(-1)  # undefined end offset: ignored
    assert cache.latest_epoch == 2
    cache.truncate_from_end(0)
    assert cache.epoch_entries() == []
    assert cache_at(tmp_path).epoch_entries() == []


def test_truncate_from_start(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (2, 10), (3, 20)])
    cache.truncate_from_start(0)  # nothing before the first entry
    assert cache.earliest_entry == EpochEntry(1, 0)
    cache.truncate_from_start(15)
    assert cache.epoch_entries() == [EpochEntry(2, 15), EpochEntry(3, 20)]
    cache.truncate_from_start(20)
    assert cache.epoch_entries() == [EpochEntry(3, 20)]
    cache.truncate_from_start(100)
    assert cache.epoch_entries() == [EpochEntry(3, 100)]
    assert cache_at(tmp_path).epoch_entries() == [EpochEntry(3, 100)]


def test_clear_and_flush(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, [(1, 0), (2, 10)])
    cache.clear_and_flush()
    assert cache.epoch_entries() == []
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n0\n"
    assert cache_at(tmp_path).epoch_entries() == []


# -- the list model ------------------------------------------------------------


def model_end_offset_for(
    model: list[tuple[int, int]], requested: int, log_end_offset: int
) -> tuple[int, int]:
    if requested == UNDEFINED_EPOCH or not model:
        return UNDEFINED
    if requested == model[-1][0]:
        return requested, log_end_offset
    higher = [(e, o) for e, o in model if e > requested]
    lower = [(e, o) for e, o in model if e <= requested]
    if not higher:
        return UNDEFINED
    return (lower[-1][0] if lower else requested), higher[0][1]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 200)),
        st.tuples(st.just("end"), st.integers(-1, 200), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 200), st.just(0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
        st.tuples(st.just("reload"), st.just(0), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(ops=OPS, probes=st.lists(st.integers(-1, 22), min_size=1, max_size=5))
def test_against_a_list_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]], probes: list[int]
) -> None:
    directory = tmp_path_factory.mktemp("epochs")
    cache = cache_at(directory)
    model: list[tuple[int, int]] = []
    for op, a, b in ops:
        if op == "assign":
            cache.assign(a, b)
            if not (model and model[-1][0] == a and b >= model[-1][1]):
                model = [(e, o) for e, o in model if e < a and o < b] + [(a, b)]
        elif op == "end":
            cache.truncate_from_end(a)
            if a >= 0:
                model = [(e, o) for e, o in model if o < a]
        elif op == "start":
            cache.truncate_from_start(a)
            if model and model[0][1] < a:
                before = [(e, o) for e, o in model if o <= a]
                model = [(before[-1][0], a)] + [(e, o) for e, o in model if o > a]
        elif op == "clear":
            cache.clear_and_flush()
            model = []
        else:  # a restart after a clean shutdown, whose flush syncs the cache
            cache.sync()
            cache = cache_at(directory)
        assert [tuple(e) for e in cache.epoch_entries()] == model
        epochs = [e for e, _ in model]
        offsets = [o for _, o in model]
        assert epochs == sorted(set(epochs)) and offsets == sorted(set(offsets))
        assert cache.latest_epoch == (model[-1][0] if model else None)
        log_end = (model[-1][1] + 5) if model else 0
        for probe in probes:
            assert cache.end_offset_for(probe, log_end) == model_end_offset_for(
                model, probe, log_end
            )
    for offset in range(0, 201, 7):
        owners = [e for e, o in model if o <= offset]
        assert cache.epoch_for_offset(offset) == (owners[-1] if owners else None)
    cache.sync()  # the log's flush: what it wrote is what a restart reads
    assert [tuple(e) for e in cache_at(directory).epoch_entries()] == model
