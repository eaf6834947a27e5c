"""Offset and time indexes: lookups, ordering rules, fullness, trimming, damage."""

from __future__ import annotations

import bisect
import os
import struct
import threading
from pathlib import Path

import pytest
from annal.storage.errors import CorruptIndexError
from annal.storage.index import (
    FIRST_ALLOCATION,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    read_offset_index_entries,
    read_time_index_entries,
)
from hypothesis import given, settings
from hypothesis import strategies as st

BASE = 1000
INDEX_NAME = "00000000000000001000.index"
TIME_INDEX_NAME = "00000000000000001000.timeindex"


def offset_index(tmp_path: Path, entries: int = 0, max_size: int = 800) -> OffsetIndex:
    """An index with entries (BASE + 10k, 100k) for k = 1..entries."""
    index = OffsetIndex(tmp_path / INDEX_NAME, BASE, max_size)
    for i in range(entries):
        index.append(BASE + 10 * (i + 1), 100 * (i + 1))
    return index


def time_index(tmp_path: Path, max_size: int = 12 * 100) -> TimeIndex:
    return TimeIndex(tmp_path / TIME_INDEX_NAME, BASE, max_size)


# -- offset index: lookups -------------------------------------------------------


def test_lookup_on_an_empty_index_gives_the_base_offset(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    assert index.entries == 0 and index.last_offset == BASE
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 10**6) == OffsetPosition(BASE, 0)
    index.close()


def test_lookup_finds_largest_entry_at_or_below(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=50)
    assert index.lookup(0) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 9) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 10) == OffsetPosition(BASE + 10, 100)
    assert index.lookup(BASE + 255) == OffsetPosition(BASE + 250, 2500)
    assert index.lookup(BASE + 500) == OffsetPosition(BASE + 500, 5000)
    assert index.lookup(BASE + 10**6) == OffsetPosition(BASE + 500, 5000)
    index.close()


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 8, 16, 33])
def test_lookup_every_exact_and_between_target(tmp_path: Path, count: int) -> None:
    # Odd and even sizes, powers of two and their neighbours: the binary search's edges.
    index = offset_index(tmp_path, entries=count)
    for k in range(1, count + 1):
        assert index.lookup(BASE + 10 * k) == OffsetPosition(BASE + 10 * k, 100 * k)
        assert index.lookup(BASE + 10 * k - 1) == (
            OffsetPosition(BASE + 10 * (k - 1), 100 * (k - 1)) if k > 1 else OffsetPosition(BASE, 0)
        )
        assert index.lookup(BASE + 10 * k + 1) == OffsetPosition(BASE + 10 * k, 100 * k)
    assert [index.entry(n) for n in range(count)] == [
        OffsetPosition(BASE + 10 * k, 100 * k) for k in range(1, count + 1)
    ]
    index.close()


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 1000), max_size=40),
    targets=st.lists(st.integers(BASE - 5, BASE + 41_000), max_size=20),
)
def test_lookup_against_bisect(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[int], targets: list[int]
) -> None:
    index = OffsetIndex(tmp_path_factory.mktemp("idx") / INDEX_NAME, BASE, 8 * 64)
    offsets: list[int] = []
    offset = BASE
    for position, gap in enumerate(gaps):
        offset += gap
        index.append(offset, position)
        offsets.append(offset)
    for target in targets:
        slot = bisect.bisect_right(offsets, target) - 1
        expected = OffsetPosition(offsets[slot], slot) if slot >= 0 else OffsetPosition(BASE, 0)
        assert index.lookup(target) == expected
    index.close()


def test_entry_out_of_range(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=2)
    with pytest.raises(IndexError, match="entry 2 out of range"):
        index.entry(2)
    index.close()


# -- offset index: append rules --------------------------------------------------


def test_append_must_increase_and_names_values_and_file(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=2)
    with pytest.raises(
        CorruptIndexError,
        match=r"offset 1017 is not larger than last offset 1020 in .*00000000000000001000\.index",
    ):
        index.append(BASE + 17, 999)
    with pytest.raises(CorruptIndexError, match="offset 1020 is not larger than last offset 1020"):
        index.append(BASE + 20, 999)
    assert index.entries == 2
    index.close()


def test_relative_offset_must_fit_a_non_negative_int32(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    with pytest.raises(CorruptIndexError, match=r"offset 999 does not fit index .*1000\.index"):
        index.append(BASE - 1, 0)
    with pytest.raises(CorruptIndexError, match="does not fit"):
        index.append(BASE + 2**31, 0)
    index.append(BASE + 2**31 - 1, 0)
    assert index.last_offset == BASE + 2**31 - 1
    index.close()


def test_full_index(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=3, max_size=24 + 5)  # rounded down to 3 entries
    assert index.path.stat().st_size == 24
    assert index.is_full and index.max_entries == 3
    with pytest.raises(CorruptIndexError, match=r"is full \(3 entries\)"):
        index.append(BASE + 100, 1)
    index.close()


# -- offset index: truncation, trimming, reopening -------------------------------


def test_truncate_to(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=10)
    index.truncate_to(BASE + 55)
    assert index.entries == 5 and index.last_offset == BASE + 50
    index.truncate_to(BASE + 50)
    assert index.entries == 4 and index.last_offset == BASE + 40
    index.truncate_to(BASE + 1000)  # beyond the end: nothing to drop
    assert index.entries == 4
    index.append(BASE + 41, 4100)  # appends continue after the new last entry
    assert index.lookup(BASE + 45) == OffsetPosition(BASE + 41, 4100)
    index.truncate_to(BASE)
    assert index.entries == 0 and index.last_offset == BASE
    index.close()


def test_truncate_drops_everything(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=4)
    index.truncate()
    assert index.entries == 0 and index.lookup(BASE + 40) == OffsetPosition(BASE, 0)
    index.append(BASE + 1, 7)
    assert index.entry(0) == OffsetPosition(BASE + 1, 7)
    index.close()


def test_preallocated_then_trimmed_on_close_then_reopened(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=4)
    assert index.path.stat().st_size == 800  # preallocated while writable
    index.trim_to_valid_size()
    assert index.path.stat().st_size == 4 * 8 and index.is_full
    index.resize(800)  # writable again (the log does this for the active segment)
    assert index.max_entries == 100 and index.entries == 4
    index.append(BASE + 41, 4100)
    index.close()
    assert index.path.stat().st_size == 5 * 8
    assert index.closed
    reopened = OffsetIndex(index.path, BASE, 800)
    assert not reopened.created
    assert reopened.entries == 5 and reopened.last_offset == BASE + 41
    assert reopened.path.stat().st_size == 5 * 8  # an existing file is not grown on open
    reopened.sanity_check()
    assert reopened.lookup(BASE + 35) == OffsetPosition(BASE + 30, 300)
    reopened.close()


def test_empty_index_trims_to_zero_bytes_and_reopens_empty(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    assert index.created
    index.close()
    assert index.path.stat().st_size == 0
    reopened = OffsetIndex(index.path, BASE, 800)
    assert reopened.entries == 0 and reopened.max_entries == 0 and reopened.is_full
    reopened.sanity_check()
    reopened.close()


def test_resize_smaller_drops_entries_beyond(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=6)
    index.resize(8 * 3 + 7)
    assert index.path.stat().st_size == 24 and index.entries == 3
    assert index.last_offset == BASE + 30
    index.close()


def test_old_segment_index_is_mapped_only_when_looked_up(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=5)
    index.close()
    old = OffsetIndex(index.path, BASE, 800)
    old.sanity_check()
    assert old.last_offset == BASE + 50
    assert old.entry(1) == OffsetPosition(BASE + 20, 200)
    assert not old.is_mapped
    assert old.lookup(BASE + 33) == OffsetPosition(BASE + 30, 300)
    assert old.is_mapped
    old.close()
    assert not old.is_mapped


def test_reopen_after_unclean_close_fails_the_sanity_check(tmp_path: Path) -> None:
    # A crash while the segment is active leaves the preallocated file untrimmed.
    index = offset_index(tmp_path, entries=3)
    index.flush()
    crashed = OffsetIndex(index.path, BASE, 800)  # what a restart finds on disk
    assert crashed.entries == 100  # length // 8, the zero tail included
    with pytest.raises(CorruptIndexError, match=r"last offset 1000 is not above base offset 1000"):
        crashed.sanity_check()
    crashed.delete()
    index.delete()
    assert not index.path.exists()


def test_zero_filled_file_and_torn_length(tmp_path: Path) -> None:
    path = tmp_path / INDEX_NAME
    path.write_bytes(b"\0" * 800)
    index = OffsetIndex(path, BASE, 800)
    with pytest.raises(CorruptIndexError, match=r"not above base offset"):
        index.sanity_check()
    index.delete()
    path.write_bytes(b"\0" * 13)
    index = OffsetIndex(path, BASE, 800)
    with pytest.raises(CorruptIndexError, match=r"length 13, not a multiple of 8"):
        index.sanity_check()
    index.delete()
    assert not path.exists()


def test_rename_keeps_working(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=3)
    index.trim_to_valid_size()
    deleted = tmp_path / (INDEX_NAME + ".deleted")
    index.rename_to(deleted)
    assert index.path == deleted and deleted.exists()
    assert not (tmp_path / INDEX_NAME).exists()
    assert index.lookup(BASE + 25) == OffsetPosition(BASE + 20, 200)
    index.close()
    assert deleted.stat().st_size == 24


def test_closing_an_index_whose_file_is_gone(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=2)
    index.close()
    old = OffsetIndex(index.path, BASE, 800)
    old.path.unlink()
    old.close()  # nothing to trim
    assert old.closed and old.lookup(BASE + 20) == OffsetPosition(BASE, 0)


# -- time index --------------------------------------------------------------------


def test_time_index_strictly_increasing_timestamps(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    assert index.last_entry == TimestampOffset(-1, BASE)
    index.maybe_append(-1, BASE + 1)  # no timestamp: never indexed
    assert index.entries == 0
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 2)  # the same timestamp again: ignored
    index.maybe_append(200, BASE + 4)
    assert index.entries == 2
    assert index.last_entry == TimestampOffset(200, BASE + 4)
    with pytest.raises(
        CorruptIndexError,
        match=r"timestamp 90 \(offset 1005\) is below last timestamp 200 in .*1000\.timeindex",
    ):
        index.maybe_append(90, BASE + 5)
    with pytest.raises(
        CorruptIndexError,
        match=r"offset 1003 \(timestamp 300\) is below last offset 1004 in .*1000\.timeindex",
    ):
        index.maybe_append(300, BASE + 3)
    assert index.entries == 2
    index.close()


def test_time_index_lookup(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    assert index.lookup(10**15) == TimestampOffset(-1, BASE)
    for k in range(1, 12):
        index.maybe_append(100 * k, BASE + 3 * k)
    assert index.lookup(99) == TimestampOffset(-1, BASE)
    assert index.lookup(100) == TimestampOffset(100, BASE + 3)
    assert index.lookup(150) == TimestampOffset(100, BASE + 3)
    assert index.lookup(1100) == TimestampOffset(1100, BASE + 33)
    assert index.lookup(10**15) == TimestampOffset(1100, BASE + 33)
    for k in range(1, 12):
        assert index.lookup(100 * k + 50) == TimestampOffset(100 * k, BASE + 3 * k)
    assert index.entry(3) == TimestampOffset(400, BASE + 12)
    index.close()


def test_time_index_keeps_a_slot_for_the_final_entry(tmp_path: Path) -> None:
    index = time_index(tmp_path, max_size=12 * 4)
    for k in range(1, 4):
        index.maybe_append(100 * k, BASE + k)
    assert index.is_full and index.max_entries == 4
    with pytest.raises(CorruptIndexError, match=r"time index .*1000\.timeindex is full"):
        index.maybe_append(400, BASE + 4)
    index.maybe_append(300, BASE + 3)  # a repeat of the last entry is not an append
    index.maybe_append(400, BASE + 4, skip_full_check=True)
    assert index.entries == 4
    with pytest.raises(CorruptIndexError, match="full"):
        index.maybe_append(500, BASE + 5, skip_full_check=True)
    index.close()
    assert index.path.stat().st_size == 4 * 12


def test_time_index_truncate_to(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    for k in range(1, 8):
        index.maybe_append(100 * k, BASE + 10 * k)
    index.truncate_to(BASE + 45)
    assert index.entries == 4 and index.last_entry == TimestampOffset(400, BASE + 40)
    index.truncate_to(BASE + 40)
    assert index.last_entry == TimestampOffset(300, BASE + 30)
    index.truncate_to(BASE + 10)
    assert index.entries == 0 and index.last_entry == TimestampOffset(-1, BASE)
    index.maybe_append(50, BASE + 1)  # after truncation, smaller timestamps are fine again
    index.close()
    assert index.path.stat().st_size == 12


def test_time_index_reopen_and_unclean_close(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(200, BASE + 2)
    index.flush()
    crashed = TimeIndex(index.path, BASE, 1200)
    assert crashed.entries == 100
    with pytest.raises(CorruptIndexError, match=r"last timestamp 0 is below first timestamp 100"):
        crashed.sanity_check()
    crashed.close()
    index.close()  # the clean close, this time
    reopened = TimeIndex(index.path, BASE, 1200)
    reopened.sanity_check()
    assert reopened.entries == 2 and reopened.last_entry == TimestampOffset(200, BASE + 2)
    reopened.close()


def test_time_index_sanity_check_rules(tmp_path: Path) -> None:
    path = tmp_path / TIME_INDEX_NAME
    path.write_bytes(b"\0" * 25)
    with pytest.raises(CorruptIndexError, match=r"length 25, not a multiple of 12"):
        TimeIndex(path, BASE, 1200).sanity_check()
    path.write_bytes(struct.pack(">qi", 100, 5) + struct.pack(">qi", 200, -3))
    with pytest.raises(CorruptIndexError, match=r"last offset 997 is below base offset 1000"):
        TimeIndex(path, BASE, 1200).sanity_check()
    path.write_bytes(struct.pack(">qi", 300, 5) + struct.pack(">qi", 200, 6))
    with pytest.raises(CorruptIndexError, match=r"last timestamp 200 is below first timestamp"):
        TimeIndex(path, BASE, 1200).sanity_check()
    path.write_bytes(b"\0" * 1200)  # crashed before its first entry
    with pytest.raises(CorruptIndexError, match=r"100 entries .* \(zero-filled entries\?\)"):
        TimeIndex(path, BASE, 1200).sanity_check()
    path.write_bytes(struct.pack(">qi", 300, 5))
    TimeIndex(path, BASE, 1200).sanity_check()


# -- readers for the dump tool -------------------------------------------------------


def test_readers_for_the_dump_tool(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=3)
    index.flush()
    expected = [
        OffsetPosition(BASE + 10, 100),
        OffsetPosition(BASE + 20, 200),
        OffsetPosition(BASE + 30, 300),
    ]
    assert read_offset_index_entries(index.path) == expected  # preallocated: zero tail ignored
    index.close()
    assert read_offset_index_entries(index.path) == expected
    times = time_index(tmp_path)
    times.maybe_append(5, BASE + 2)
    times.maybe_append(9, BASE + 4)
    times.flush()
    assert read_time_index_entries(times.path) == [
        TimestampOffset(5, BASE + 2),
        TimestampOffset(9, BASE + 4),
    ]
    times.close()
    with pytest.raises(CorruptIndexError, match="20-digit"):
        read_offset_index_entries(tmp_path / "x.index")


def test_reader_keeps_a_zero_entry_before_real_ones(tmp_path: Path) -> None:
    # Only the trailing zero entries are preallocation; one in the middle is data.
    path = tmp_path / "00000000000000000007.index"
    path.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 4, 90) + b"\0" * 16 + b"\0\0\0")
    assert read_offset_index_entries(path) == [OffsetPosition(7, 0), OffsetPosition(11, 90)]
    empty = tmp_path / "00000000000000000007.timeindex"
    empty.write_bytes(b"\0" * 120)
    assert read_time_index_entries(empty) == []


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_a_new_index_has_its_first_page_on_disk(tmp_path: Path, kind: type) -> None:
    """The file is sparse past its first page, which is written at creation: the
    first entry written through the map would otherwise allocate the file's
    first block inside a page fault, milliseconds on the append that rolled."""
    index = kind(tmp_path / f"{BASE:020d}{kind.suffix}", BASE, 10 << 20)
    fd = os.open(index.path, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        assert os.fstat(fd).st_blocks * 512 < 1 << 20  # the rest stays a hole
    finally:
        os.close(fd)
        index.close()


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_the_file_is_allocated_in_doubling_steps_up_to_the_capacity(
    tmp_path: Path, kind: type
) -> None:
    """A new index's file starts at FIRST_ALLOCATION and doubles as entries reach
    its end, so closing thousands of barely written logs trims small files."""
    capacity = 10 << 20
    index = kind(tmp_path / f"{BASE:020d}{kind.suffix}", BASE, capacity)
    size = kind.entry_size
    first = FIRST_ALLOCATION // size * size
    assert index.path.stat().st_size == first
    assert index.max_entries == capacity // size  # the capacity, not the file's length
    sizes = set()
    n = 3 * first // size + 5
    for i in range(n):
        if kind is OffsetIndex:
            index.append(BASE + i + 1, 10 * i)
        else:
            index.maybe_append(i + 1, BASE + i)
        sizes.add(index.path.stat().st_size)
    assert sorted(sizes) == [first, 2 * first, 4 * first]
    assert index.entries == n and not index.is_full
    if kind is OffsetIndex:  # entries written before each step are still there
        assert [index.entry(k) for k in (0, first // size, n - 1)] == [
            OffsetPosition(BASE + k + 1, 10 * k) for k in (0, first // size, n - 1)
        ]
        assert index.lookup(BASE + n) == OffsetPosition(BASE + n, 10 * (n - 1))
    else:
        assert [index.entry(k) for k in (0, first // size, n - 1)] == [
            TimestampOffset(k + 1, BASE + k) for k in (0, first // size, n - 1)
        ]
    index.close()
    assert index.path.stat().st_size == n * size
    reopened = kind(index.path, BASE, capacity)
    assert reopened.entries == n
    reopened.sanity_check()
    reopened.resize(capacity)  # writable again: room in steps, entries kept
    assert reopened.path.stat().st_size == n * size and reopened.max_entries == capacity // size
    reopened.close()


def test_the_capacity_still_ends_at_segment_index_bytes(tmp_path: Path) -> None:
    capacity = FIRST_ALLOCATION * 2 + 8 * 3  # not a power of two of the first step
    index = OffsetIndex(tmp_path / INDEX_NAME, BASE, capacity)
    for i in range(capacity // 8):
        index.append(BASE + i + 1, i)
    assert index.is_full and index.path.stat().st_size == capacity
    with pytest.raises(CorruptIndexError, match="is full"):
        index.append(BASE + capacity, 0)
    index.close()


def test_lookups_from_another_thread_while_appends_grow_the_file(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / INDEX_NAME, BASE, 1 << 20)
    stop = threading.Event()
    wrong: list[object] = []

    def look() -> None:
        while not stop.is_set():
            entries = index.entries
            if entries:
                try:
                    found = index.lookup(BASE + entries)
                except Exception as exc:  # a map closed under the lookup
                    wrong.append(exc)
                    return
                if found.offset > BASE + entries or found.offset - BASE != found.position + 1:
                    wrong.append(found)

    reader = threading.Thread(target=look)
    reader.start()
    try:
        for i in range(20_000):
            index.append(BASE + i + 1, i)
    finally:
        stop.set()
        reader.join()
    assert not wrong
    index.close()


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_closing_without_sync_keeps_every_entry(tmp_path: Path, kind: type) -> None:
    """``close(sync=False)`` leaves the map's pages to the kernel (a clean shutdown
    syncs the file system next): reopened, the file holds every entry."""
    index = kind(tmp_path / f"{BASE:020d}{kind.suffix}", BASE, 1 << 20)
    n = 5000  # past the first allocation: pages written through two maps
    for i in range(n):
        if kind is OffsetIndex:
            index.append(BASE + i + 1, i)
        else:
            index.maybe_append(i + 1, BASE + i)
    index.close(sync=False)
    reopened = kind(index.path, BASE, 1 << 20)
    assert reopened.entries == n
    reopened.sanity_check()
    if kind is OffsetIndex:
        assert reopened.entry(n - 1) == OffsetPosition(BASE + n, n - 1)
    else:
        assert reopened.entry(n - 1) == TimestampOffset(n, BASE + n - 1)
    reopened.close()
