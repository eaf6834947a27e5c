"""Offset and time indexes: lookups, ordering rules, fullness, trimming, damage."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.storage.errors import CorruptIndexError
from annal.storage.index import (
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    read_offset_index_entries,
    read_time_index_entries,
)

BASE = 1000


def offset_index(tmp_path: Path, entries: int = 0, max_size: int = 800) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_size)
    for i in range(entries):
        index.append(BASE + 10 * (i + 1), 100 * (i + 1))
    return index


def test_lookup_finds_largest_entry_at_or_below(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=50)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 9) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 10) == OffsetPosition(BASE + 10, 100)
    assert index.lookup(BASE + 255) == OffsetPosition(BASE + 250, 2500)
    assert index.lookup(BASE + 10**6) == OffsetPosition(BASE + 500, 5000)
    assert index.lookup(0) == OffsetPosition(BASE, 0)
    index.close()


def test_append_must_increase_and_names_the_file(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=2)
    with pytest.raises(
        CorruptIndexError, match=r"offset 1017 is not larger than last offset 1020 in .*1000\.index"
    ):
        index.append(BASE + 17, 999)
    index.close()


def test_full_index(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=3, max_size=24)
    assert index.is_full and index.max_entries == 3
    with pytest.raises(CorruptIndexError, match="full"):
        index.append(BASE + 100, 1)
    index.close()


def test_truncate_to_and_trim(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=10)
    index.truncate_to(BASE + 55)
    assert index.entries == 5 and index.last_offset == BASE + 50
    index.truncate_to(BASE + 50)
    assert index.entries == 4
    assert index.path.stat().st_size == 800  # preallocated while writable
    index.trim_to_valid_size()
    assert index.path.stat().st_size == 4 * 8
    index.resize(800)
    index.append(BASE + 41, 4100)
    assert index.lookup(BASE + 45).offset == BASE + 41
    index.close()
    assert index.path.stat().st_size == 5 * 8
    reopened = OffsetIndex(index.path, BASE, 800)
    assert reopened.entries == 5 and reopened.last_offset == BASE + 41
    reopened.sanity_check()
    reopened.close()


def test_unclean_close_leaves_a_zero_tail_that_fails_the_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(b"\0" * 800)
    index = OffsetIndex(path, BASE, 800)
    with pytest.raises(CorruptIndexError, match="not above base offset"):
        index.sanity_check()
    index.close()
    path.write_bytes(b"\0" * 13)
    index = OffsetIndex(path, BASE, 800)
    with pytest.raises(CorruptIndexError, match="not a multiple of 8"):
        index.sanity_check()
    index.delete()
    assert not path.exists()


def test_time_index_rules(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, 12 * 5)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 2)  # not greater: ignored
    index.maybe_append(90, BASE + 3)  # smaller: ignored
    index.maybe_append(200, BASE + 4)
    assert index.entries == 2
    with pytest.raises(CorruptIndexError, match="below last offset"):
        index.maybe_append(300, BASE + 3)
    assert index.lookup(150) == TimestampOffset(100, BASE + 1)
    assert index.lookup(99) == TimestampOffset(-1, BASE)
    assert index.lookup(10**15) == TimestampOffset(200, BASE + 4)
    index.maybe_append(300, BASE + 5)
    index.maybe_append(400, BASE + 6)
    assert index.is_full  # one slot stays free for the final entry
    with pytest.raises(CorruptIndexError, match="full"):
        index.maybe_append(500, BASE + 7)
    index.maybe_append(500, BASE + 7, skip_full_check=True)
    index.truncate_to(BASE + 5)
    assert index.last_entry == TimestampOffset(200, BASE + 4)
    index.close()
    assert index.path.stat().st_size == 2 * 12


def test_readers_for_the_dump_tool(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=3)
    index.flush()
    # still preallocated: the zero tail is ignored
    assert read_offset_index_entries(index.path) == [
        OffsetPosition(BASE + 10, 100),
        OffsetPosition(BASE + 20, 200),
        OffsetPosition(BASE + 30, 300),
    ]
    index.close()
    time_index = TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, 120)
    time_index.maybe_append(5, BASE + 2)
    time_index.flush()
    assert read_time_index_entries(time_index.path) == [TimestampOffset(5, BASE + 2)]
    time_index.close()
    with pytest.raises(CorruptIndexError, match="20-digit"):
        read_offset_index_entries(tmp_path / "x.index")
