"""Sparse segment indexes: ``.index`` (offset → position) and ``.timeindex``.

    .index      8-byte entries:  relative offset int32 | position int32
    .timeindex  12-byte entries: timestamp int64      | relative offset int32

Big-endian; offsets are relative to the segment's base offset (the file name).
An ``.index`` entry names the last offset of the batch that starts at
``position``; offsets strictly increase.  A ``.timeindex`` entry holds the
largest timestamp seen so far in the segment and the offset that carries it;
timestamps strictly increase.  Entries are added every ``index.interval.bytes``
of log, so both files are sparse.

The writable (active) index is preallocated to ``segment.index.bytes`` and
memory-mapped; ``trim_to_valid_size`` cuts it to its entries when the segment
rolls or closes.  On open, the entry count is the file length over the entry
size.  Indexes are not checksummed: they are derived from the ``.log`` and
rebuilt on recovery, or whenever ``sanity_check`` fails — for example a
preallocated, zero-filled file left by a crash.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from . import files
from .errors import CorruptIndexError

INT32_MAX = 2**31 - 1


class OffsetPosition(NamedTuple):
    """An ``.index`` entry, with the absolute offset."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A ``.timeindex`` entry, with the absolute offset."""

    timestamp: int
    offset: int


class _Index:
    """Shared machinery of both indexes.

    Thread safety: the owning log's lock serialises writers; ``self._lock``
    guards the memory map itself, so a lookup never sees it swapped or closed
    halfway (``resize`` and ``close`` replace it under the lock).
    """

    entry_size: ClassVar[int]
    suffix: ClassVar[str]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._lock = threading.Lock()
        self.created = not path.exists()  # missing on open: to be rebuilt if the log has data
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        length = os.fstat(self._fd).st_size
        if length == 0:
            length = self._round(max_index_size)
            os.ftruncate(self._fd, length)
            self._entries = 0
        else:
            self._entries = length // self.entry_size
        self._mmap: mmap.mmap | None = None
        self._size = 0
        self._map(length)
        self.closed = False

    def _round(self, size: int) -> int:
        return max(size // self.entry_size, 1) * self.entry_size

    def _map(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
        self._mmap = mmap.mmap(self._fd, length) if length > 0 else None
        self._size = length

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._size // self.entry_size

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise CorruptIndexError(
                f"offset {offset} does not fit index {self.path} "
                f"with base offset {self.base_offset}"
            )
        return relative

    _last: tuple[int, Any] | None = None  # (entries, last entry): valid while entries match

    def truncate(self) -> None:
        """Drop every entry."""
        self._entries = 0
        self._last = None

    def resize(self, new_size: int) -> None:
        """Make the file ``new_size`` bytes (rounded down to whole entries)."""
        length = self._round(new_size) if new_size > 0 else 0
        with self._lock:
            if length == self._size:
                return
            if self._mmap is not None:
                self._mmap.flush()
                self._mmap.close()
                self._mmap = None
            os.ftruncate(self._fd, length)
            self._map(length)
            self._entries = min(self._entries, length // self.entry_size)
            self._last = None

    def trim_to_valid_size(self) -> None:
        """Cut the file to exactly its entries (the segment is no longer written)."""
        with self._lock:
            if self._size == self._entries * self.entry_size:
                return
            if self._mmap is not None:
                self._mmap.flush()
                self._mmap.close()
                self._mmap = None
            length = self._entries * self.entry_size
            os.ftruncate(self._fd, length)
            self._map(length)

    def flush(self) -> None:
        with self._lock:
            if self._mmap is not None:
                self._mmap.flush()

    def close(self) -> None:
        """Trim to the entries and release the file."""
        if self.closed:
            return
        self.trim_to_valid_size()
        with self._lock:
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None
            os.close(self._fd)
            self.closed = True

    def delete(self) -> None:
        """Release the file without trimming and remove it."""
        with self._lock:
            if not self.closed:
                if self._mmap is not None:
                    self._mmap.close()
                    self._mmap = None
                os.close(self._fd)
                self.closed = True
        self.path.unlink(missing_ok=True)

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def _check_length(self) -> None:
        length = os.fstat(self._fd).st_size
        if length % self.entry_size:
            raise CorruptIndexError(
                f"index file {self.path} has length {length}, not a multiple of {self.entry_size}"
            )

    def _slot(self, target: int, key_of: object) -> int:
        """Largest entry index whose key is <= ``target``; -1 when none (callers hold the lock)."""
        lo, hi = 0, self._entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if key_of(mid) <= target:  # type: ignore[operator]
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found


class OffsetIndex(_Index):
    """``.index``: offset → file position.  See ``_Index`` for thread safety."""

    entry_size = 8
    suffix = files.INDEX_SUFFIX
    _ENTRY = struct.Struct(">ii")

    def entry(self, n: int) -> OffsetPosition:
        with self._lock:
            return self._entry(n)

    def _entry(self, n: int) -> OffsetPosition:
        assert self._mmap is not None
        relative, position = self._ENTRY.unpack_from(self._mmap, n * 8)
        return OffsetPosition(self.base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        if self._entries == 0:
            return self.base_offset
        if self._last is None or self._last[0] != self._entries:
            self._last = (self._entries, self.entry(self._entries - 1))
        return self._last[1].offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase."""
        entries = self._entries
        if entries:
            last = self.last_offset
            if offset <= last:
                raise CorruptIndexError(
                    f"offset {offset} is not larger than last offset {last} in {self.path}"
                )
        if entries * 8 >= self._size:
            raise CorruptIndexError(f"index {self.path} is full ({entries} entries)")
        relative = offset - self.base_offset
        if relative > INT32_MAX:
            raise CorruptIndexError(
                f"offset {offset} does not fit index {self.path} "
                f"with base offset {self.base_offset}"
            )
        # No lock: only resize and close replace the map, and they run, like
        # appends, under the owning log's lock; readers see the entry once
        # ``_entries`` counts it.
        assert self._mmap is not None
        self._ENTRY.pack_into(self._mmap, entries * 8, relative, position)
        self._entries = entries + 1
        self._last = (entries + 1, OffsetPosition(offset, position))

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= ``target_offset``; (base offset, 0) if none."""
        with self._lock:
            if self._entries == 0 or self._mmap is None:
                return OffsetPosition(self.base_offset, 0)
            mm = self._mmap
            unpack = self._ENTRY.unpack_from
            relative_target = target_offset - self.base_offset
            slot = self._slot(relative_target, lambda n: unpack(mm, n * 8)[0])
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            return self._entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        with self._lock:
            if self._entries == 0 or self._mmap is None:
                return
            mm = self._mmap
            unpack = self._ENTRY.unpack_from
            self._entries = (
                self._slot(offset - 1 - self.base_offset, lambda n: unpack(mm, n * 8)[0]) + 1
            )
            self._last = None

    def sanity_check(self) -> None:
        self._check_length()
        if self._entries and self.last_offset <= self.base_offset:
            raise CorruptIndexError(
                f"corrupt index {self.path}: last offset {self.last_offset} is not above base "
                f"offset {self.base_offset}"
            )


class TimeIndex(_Index):
    """``.timeindex``: timestamp → offset.  See ``_Index`` for thread safety.

    One slot is always kept free, so the final entry written when a segment
    rolls or closes (``skip_full_check``) always fits.
    """

    entry_size = 12
    suffix = files.TIME_INDEX_SUFFIX
    _ENTRY = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        with self._lock:
            return self._entry(n)

    def _entry(self, n: int) -> TimestampOffset:
        assert self._mmap is not None
        timestamp, relative = self._ENTRY.unpack_from(self._mmap, n * 12)
        return TimestampOffset(timestamp, self.base_offset + relative)

    @property
    def last_entry(self) -> TimestampOffset:
        if self._entries == 0:
            return TimestampOffset(-1, self.base_offset)
        if self._last is None or self._last[0] != self._entries:
            self._last = (self._entries, self.entry(self._entries - 1))
        return self._last[1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add an entry when ``timestamp`` is above the last one."""
        if self._entries:
            last = self.last_entry
            if timestamp <= last.timestamp:
                if offset < last.offset:
                    raise CorruptIndexError(
                        f"offset {offset} is below last offset {last.offset} in {self.path}"
                    )
                return
            if offset < last.offset:
                raise CorruptIndexError(
                    f"offset {offset} is below last offset {last.offset} in {self.path}"
                )
        if timestamp < 0:
            return
        if self._entries >= self.max_entries or (not skip_full_check and self.is_full):
            raise CorruptIndexError(f"time index {self.path} is full ({self._entries} entries)")
        relative = self._relative(offset)
        with self._lock:
            assert self._mmap is not None
            self._ENTRY.pack_into(self._mmap, self._entries * 12, timestamp, relative)
            self._entries += 1
            self._last = (self._entries, TimestampOffset(timestamp, offset))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= target; (-1, base offset) if none."""
        with self._lock:
            if self._entries == 0 or self._mmap is None:
                return TimestampOffset(-1, self.base_offset)
            mm = self._mmap
            unpack = self._ENTRY.unpack_from
            slot = self._slot(target_timestamp, lambda n: unpack(mm, n * 12)[0])
            if slot < 0:
                return TimestampOffset(-1, self.base_offset)
            return self._entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        with self._lock:
            n = self._entries
            while n > 0 and self._entry(n - 1).offset >= offset:
                n -= 1
            self._entries = n
            self._last = None

    def sanity_check(self) -> None:
        self._check_length()
        if self._entries:
            last = self.last_entry
            first = self.entry(0)
            if last.offset < self.base_offset or last.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: last entry {tuple(last)} against first "
                    f"{tuple(first)} and base offset {self.base_offset}"
                )
            if last.timestamp <= 0 and self._entries > 1:
                raise CorruptIndexError(f"corrupt time index {self.path}: zero-filled entries")


def _base_offset_of(path: Path) -> int:
    parsed = files.parse_segment_file_name(path.name)
    if parsed is None:
        raise CorruptIndexError(f"{path} is not named like a segment file (20-digit base offset)")
    return parsed[0]


def read_offset_index_entries(path: Path) -> list[OffsetPosition]:
    """Entries of an ``.index`` file, with absolute offsets; a zero-filled tail is ignored."""
    base = _base_offset_of(path)
    data = path.read_bytes()
    out = []
    for relative, position in struct.iter_unpack(">ii", data[: len(data) - len(data) % 8]):
        if relative == 0 and position == 0:
            break
        out.append(OffsetPosition(base + relative, position))
    return out


def read_time_index_entries(path: Path) -> list[TimestampOffset]:
    """Entries of a ``.timeindex`` file, with absolute offsets; a zero-filled tail is ignored."""
    base = _base_offset_of(path)
    data = path.read_bytes()
    out = []
    for timestamp, relative in struct.iter_unpack(">qi", data[: len(data) - len(data) % 12]):
        if timestamp == 0 and relative == 0:
            break
        out.append(TimestampOffset(timestamp, base + relative))
    return out
