"""Sparse segment indexes: ``.index`` (offset → position) and ``.timeindex``.

File format (big-endian, fixed-size entries, no header)::

    .index      8-byte entries:  relative offset int32 | position int32
    .timeindex  12-byte entries: timestamp int64      | relative offset int32

A relative offset is the absolute offset minus the segment's base offset, the
20-digit number in the file name; it must fit a non-negative int32.  A
position is a byte position in the segment's ``.log``.

* An ``.index`` entry names the last offset of the batch that starts at
  ``position``.  Offsets strictly increase from entry to entry.
* A ``.timeindex`` entry holds the largest timestamp seen so far in the
  segment and the offset of the record that carries it.  Timestamps strictly
  increase; offsets never go backwards.

Entries are added once per ``index.interval.bytes`` of log, so both files are
sparse: a lookup gives a position at or before the wanted batch and the reader
scans forward in the ``.log``.

Size.  While a segment is the writable (active) one its indexes may hold up
to ``segment.index.bytes`` of entries (rounded down to whole entries: the
capacity, whose end rolls the segment) and are memory-mapped.  The file is
allocated ahead of the entries in steps: it starts at ``FIRST_ALLOCATION``
bytes and doubles whenever the entries reach its end, up to the capacity.
Kafka preallocates the whole capacity at once; allocating in steps ends in the
same file, but trimming it at close then costs the kernel microseconds, where
cutting a sparse 10 MiB file back costs close to a millisecond: the difference
is seconds for a broker closing thousands of logs.  ``trim_to_valid_size``
cuts each file to exactly its entries when the segment rolls or is closed.
On open, the entry count is the file length divided by the entry size.  An
existing file is never grown on open; the log resizes the active segment's
indexes itself.

Crashes.  Indexes are not checksummed: they are derived from the ``.log`` and
rebuilt on recovery.  A process that dies while a segment is active leaves an
allocated file whose tail is zero-filled (unless its entries fill it); once reopened its entry count
includes those zero entries, and ``sanity_check`` rejects it (last offset not
above the base offset), which makes recovery rebuild it.

Memory maps are opened lazily: an index of an old segment costs no file
descriptor and no mapping until a lookup needs it, since a log may have
hundreds of segments.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import ClassVar, NamedTuple

from . import files
from .errors import CorruptIndexError

INT32_MAX = 2**31 - 1
# A new index file's first allocation; it doubles as entries fill it.
FIRST_ALLOCATION = 16 * 1024
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class OffsetPosition(NamedTuple):
    """An ``.index`` entry with its absolute offset.  Immutable, so thread-safe."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A ``.timeindex`` entry with its absolute offset.  Immutable, so thread-safe."""

    timestamp: int
    offset: int


class _Index:
    """Shared machinery of both indexes: the file, its lazy memory map, trimming.

    Thread safety: writers (append, truncate, resize, trim, rename, close,
    delete) are serialised by the owning log's lock.  ``self._lock`` guards the
    file descriptor, the memory map and ``path``, so that a concurrent lookup
    never sees the map replaced, closed or half-opened, and never opens a file
    that is being renamed.  Lookups may run from any thread.
    """

    entry_size: ClassVar[int]
    suffix: ClassVar[str]
    _ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._lock = threading.Lock()
        # Missing on open: the segment rebuilds it when the log holds data.
        self.created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = capacity = os.fstat(fd).st_size
            if self.created:
                capacity = self._round(max_index_size)
                length = self._allocation(capacity, 0)
                os.ftruncate(fd, length)
                # The first page written through the map of a new sparse file
                # costs milliseconds (the file's first block is allocated in
                # the page fault); written here it costs microseconds.
                os.pwrite(fd, bytes(min(length, mmap.PAGESIZE)), 0)
        finally:
            os.close(fd)
        self._size = length
        self.max_entries = capacity // self.entry_size  # the capacity; read on every append
        self._entries = 0 if self.created else length // self.entry_size
        self._fd: int | None = None
        self._mmap: mmap.mmap | None = None
        # (entries, last entry): a cache, valid while the entry count matches.
        self._last: tuple[int, tuple[int, int]] | None = None
        self.closed = False

    # -- size and state ----------------------------------------------------

    def _round(self, size: int) -> int:
        return max(size // self.entry_size, 1) * self.entry_size

    def _allocation(self, capacity: int, at_least: int) -> int:
        """The file's length for ``at_least`` bytes: at least the first step, at
        most the capacity (both whole entries)."""
        return min(capacity, max(at_least, self._round(FIRST_ALLOCATION)))

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    @property
    def is_mapped(self) -> bool:
        """True once the file is open and memory-mapped."""
        return self._mmap is not None

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise CorruptIndexError(
                f"offset {offset} does not fit index {self.path} with base offset "
                f"{self.base_offset} (relative offset {relative} is not a non-negative int32)"
            )
        return relative

    # -- the map (callers hold self._lock) ---------------------------------

    def _map_locked(self) -> mmap.mmap:
        if self._mmap is None:
            if self.closed:
                raise CorruptIndexError(f"index {self.path} is closed")
            if self._size == 0:
                raise CorruptIndexError(f"index {self.path} has no room for entries")
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR)
            self._mmap = mmap.mmap(self._fd, self._size)
        return self._mmap

    def _mapped(self) -> mmap.mmap:
        mm = self._mmap
        if mm is None:
            with self._lock:
                mm = self._map_locked()
        return mm

    def _unmap_locked(self, sync: bool = True) -> None:
        """Drop the map; ``sync`` writes its pages to disk first (msync).  Without
        it they stay in the kernel's cache, to be written by a later fsync or
        msync of the file (the page cache is the file's, not the map's)."""
        if self._mmap is not None:
            if sync:
                self._mmap.flush()
            self._mmap.close()
            self._mmap = None

    def _release_locked(self, sync: bool = True) -> None:
        self._unmap_locked(sync)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _set_length_locked(
        self, length: int, capacity: int | None = None, *, sync: bool = True
    ) -> None:
        """The file cut or extended to ``length`` bytes, holding at most ``capacity``
        bytes of entries (``length`` when None: the index is then full); ``sync``
        as for ``_unmap_locked``."""
        self._unmap_locked(sync)
        if self._fd is not None:
            os.ftruncate(self._fd, length)
        else:
            os.truncate(self.path, length)
        self._size = length
        self.max_entries = (length if capacity is None else capacity) // self.entry_size
        self._entries = min(self._entries, length // self.entry_size)
        self._last = None

    def _make_room(self, entries: int) -> None:
        """Allocate the file further when entry ``entries`` (0-based) lies past its
        end: double it, at most to the capacity (the caller checked it fits)."""
        if (entries + 1) * self.entry_size <= self._size:
            return
        capacity = self.max_entries * self.entry_size
        length = self._allocation(capacity, 2 * self._size)
        with self._lock:
            last = self._last
            # the next flush's msync of the new map writes these pages too
            self._set_length_locked(length, capacity, sync=False)
            self._last = last  # the entries are unchanged

    def _file_length_locked(self) -> int:
        if self._fd is not None:
            return os.fstat(self._fd).st_size
        return os.stat(self.path).st_size

    def _record_locked(self, n: int) -> tuple[int, int]:
        """Raw fields of entry ``n``; reads the file without mapping it when unmapped."""
        if self._mmap is not None:
            fields: tuple[int, int] = self._ENTRY.unpack_from(self._mmap, n * self.entry_size)
            return fields
        with open(self.path, "rb") as f:
            f.seek(n * self.entry_size)
            data = f.read(self.entry_size)
        if len(data) != self.entry_size:
            raise CorruptIndexError(f"index {self.path} has no entry {n}")
        fields = self._ENTRY.unpack(data)
        return fields

    def _last_record(self) -> tuple[int, int]:
        """Raw fields of the last entry (there is one)."""
        cached = self._last
        if cached is not None and cached[0] == self._entries:
            return cached[1]
        with self._lock:
            fields = self._record_locked(self._entries - 1)
        self._last = (self._entries, fields)
        return fields

    def _slot_locked(self, mm: mmap.mmap, target: int, key: struct.Struct, at: int) -> int:
        """Largest entry number whose key (``key`` unpacked at byte ``at`` of the entry)
        is <= ``target``, keys being non-decreasing; -1 if none.  Runs once per
        read, so the loop stays on locals."""
        unpack = key.unpack_from
        stride = self.entry_size
        lo, hi = 0, self._entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if unpack(mm, mid * stride + at)[0] <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    # -- lifecycle -----------------------------------------------------------

    def truncate(self) -> None:
        """Drop every entry (the file keeps its size)."""
        self._entries = 0
        self._last = None

    def resize(self, new_size: int) -> None:
        """Give the index a capacity of ``new_size`` bytes, rounded down to whole
        entries (at least one); the file is allocated as for a new index.

        Entries beyond the new capacity are dropped.  The log calls this to give
        the active segment's indexes room again (``segment.index.bytes``).
        """
        capacity = self._round(new_size) if new_size > 0 else 0
        held = self._entries * self.entry_size
        length = self._allocation(capacity, held)
        with self._lock:
            if length != self._size or capacity != self.max_entries * self.entry_size:
                self._set_length_locked(length, capacity)

    def trim_to_valid_size(self, *, sync: bool = True) -> None:
        """Cut the file to exactly ``entries * entry_size`` bytes (no longer written);
        ``sync`` writes what the map held to disk first."""
        with self._lock:
            length = self._entries * self.entry_size
            if length != self._size:
                self._set_length_locked(length, sync=sync)

    def flush(self) -> None:
        """Write the mapped pages to disk (nothing to do when unmapped)."""
        with self._lock:
            if self._mmap is not None:
                self._mmap.flush()

    def close(self, *, sync: bool = True) -> None:
        """Trim the file to its entries and release the map and the descriptor.
        ``sync=False`` leaves what the map wrote in the kernel's cache: for a
        caller that syncs the file system next (a clean shutdown) or deletes the
        file."""
        if self.closed:
            return
        try:
            self.trim_to_valid_size(sync=sync)
        except FileNotFoundError:
            # an unopened file already removed (a ``.deleted`` segment past its
            # delay) has nothing left to trim
            if self._fd is not None:
                raise
        with self._lock:
            self._release_locked(sync)
            self.closed = True

    def delete(self) -> None:
        """Release the file without trimming it and remove it."""
        with self._lock:
            self._release_locked(sync=False)
            self.closed = True
            self.path.unlink(missing_ok=True)

    def rename_to(self, new_path: Path) -> None:
        """Rename the file (``.deleted``, ``.swap`` and other suffix changes); a map stays valid."""
        with self._lock:
            os.replace(self.path, new_path)
            self.path = new_path

    def _check_length(self) -> None:
        with self._lock:
            length = self._file_length_locked()
        if length % self.entry_size:
            raise CorruptIndexError(
                f"index file {self.path} has length {length}, not a multiple of {self.entry_size}"
            )


class OffsetIndex(_Index):
    """``.index``: offset → position in the ``.log``.

    Thread safety as for every index: appends and truncations run under the
    owning log's lock; ``self._lock`` guards the map, the descriptor and the
    path, so lookups may run from any thread.
    """

    entry_size = 8
    suffix = files.INDEX_SUFFIX
    _ENTRY = struct.Struct(">ii")

    def entry(self, n: int) -> OffsetPosition:
        """Entry number ``n`` (0-based) with its absolute offset."""
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} out of range: {self.path} has {self._entries} entries")
        with self._lock:
            relative, position = self._record_locked(n)
        return OffsetPosition(self.base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        """Offset of the last entry; the base offset when empty."""
        if self._entries == 0:
            return self.base_offset
        return self.base_offset + self._last_record()[0]

    @property
    def last_entry(self) -> OffsetPosition | None:
        """The last entry, None when empty (read without mapping the file)."""
        if self._entries == 0:
            return None
        relative, position = self._last_record()
        return OffsetPosition(self.base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase and fit the index."""
        entries = self._entries
        if entries:
            cached = self._last
            last = (
                self.base_offset + cached[1][0]
                if cached is not None and cached[0] == entries
                else self.last_offset
            )
            if offset <= last:
                raise CorruptIndexError(
                    f"offset {offset} is not larger than last offset {last} in {self.path}"
                )
        if entries >= self.max_entries:
            raise CorruptIndexError(
                f"index {self.path} is full ({entries} entries); cannot add offset {offset}"
            )
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            self._relative(offset)  # raises, naming the index
        self._make_room(entries)
        # No index lock for the write: resize, trim, close and the allocation
        # above, the only calls that replace the map, run under the owning log's
        # lock like appends; readers see the entry once ``_entries`` counts it.
        self._ENTRY.pack_into(self._mmap or self._mapped(), entries * 8, relative, position)
        self._entries = entries + 1
        self._last = (entries + 1, (relative, position))

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= ``target_offset``; (base offset, 0) if none."""
        with self._lock:
            if self._entries == 0 or self.closed:
                return OffsetPosition(self.base_offset, 0)
            mm = self._map_locked()
            slot = self._slot_locked(mm, target_offset - self.base_offset, _INT32, 0)
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            relative, position = self._ENTRY.unpack_from(mm, slot * 8)
        return OffsetPosition(self.base_offset + relative, position)

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 when none is): a
        batch boundary from which a reader can walk forward."""
        with self._lock:
            if self._entries == 0 or self.closed:
                return 0
            mm = self._map_locked()
            slot = self._slot_locked(mm, position, _INT32, 4)
            return 0 if slot < 0 else int(_INT32.unpack_from(mm, slot * 8 + 4)[0])

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        with self._lock:
            if self._entries == 0 or self.closed:
                return
            mm = self._map_locked()
            self._entries = self._slot_locked(mm, offset - 1 - self.base_offset, _INT32, 0) + 1
            self._last = None

    def sanity_check(self) -> None:
        """Raise CorruptIndexError for a torn file or a zero-filled preallocated tail."""
        self._check_length()
        if self._entries and self.last_offset <= self.base_offset:
            raise CorruptIndexError(
                f"corrupt index {self.path}: {self._entries} entries but last offset "
                f"{self.last_offset} is not above base offset {self.base_offset}"
            )


class TimeIndex(_Index):
    """``.timeindex``: timestamp → offset.

    ``is_full`` keeps one slot free, so the final entry written when the
    segment rolls or closes (``skip_full_check=True``) always fits.

    Thread safety as for every index: appends and truncations run under the
    owning log's lock; ``self._lock`` guards the map, the descriptor and the
    path, so lookups may run from any thread.
    """

    entry_size = 12
    suffix = files.TIME_INDEX_SUFFIX
    _ENTRY = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        """Entry number ``n`` (0-based) with its absolute offset."""
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} out of range: {self.path} has {self._entries} entries")
        with self._lock:
            timestamp, relative = self._record_locked(n)
        return TimestampOffset(timestamp, self.base_offset + relative)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry; (-1, base offset) when empty."""
        if self._entries == 0:
            return TimestampOffset(-1, self.base_offset)
        timestamp, relative = self._last_record()
        return TimestampOffset(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) when ``timestamp`` is above the last entry's.

        The same timestamp again is ignored (a segment repeats its last entry
        when it rolls or closes).  A smaller timestamp, or an offset below the
        last entry's, is an error.  A negative timestamp (no timestamp) is
        never indexed.
        """
        cached = self._last
        if (
            cached is not None
            and cached[0] == self._entries
            and timestamp == cached[1][0]
            and offset >= self.base_offset + cached[1][1]
        ):
            return  # the usual append: no newer timestamp to index
        last = self.last_entry
        if self._entries:
            if offset < last.offset:
                raise CorruptIndexError(
                    f"offset {offset} (timestamp {timestamp}) is below last offset "
                    f"{last.offset} in {self.path}"
                )
            if timestamp < last.timestamp:
                raise CorruptIndexError(
                    f"timestamp {timestamp} (offset {offset}) is below last timestamp "
                    f"{last.timestamp} in {self.path}"
                )
        if timestamp <= last.timestamp or timestamp < 0:
            return
        entries = self._entries
        if entries >= self.max_entries or (not skip_full_check and self.is_full):
            raise CorruptIndexError(
                f"time index {self.path} is full ({entries} entries); "
                f"cannot add timestamp {timestamp} at offset {offset}"
            )
        relative = self._relative(offset)
        self._make_room(entries)
        self._ENTRY.pack_into(self._mapped(), entries * 12, timestamp, relative)
        self._entries = entries + 1
        self._last = (entries + 1, (timestamp, relative))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= target; (-1, base offset) if none."""
        with self._lock:
            if self._entries == 0 or self.closed:
                return TimestampOffset(-1, self.base_offset)
            mm = self._map_locked()
            slot = self._slot_locked(mm, target_timestamp, _INT64, 0)
            if slot < 0:
                return TimestampOffset(-1, self.base_offset)
            timestamp, relative = self._ENTRY.unpack_from(mm, slot * 12)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        with self._lock:
            if self._entries == 0 or self.closed:
                return
            mm = self._map_locked()
            self._entries = self._count_below(mm, offset - self.base_offset)
            self._last = None

    def _count_below(self, mm: mmap.mmap, relative: int) -> int:
        """Number of leading entries whose relative offset is < ``relative`` (offsets never
        go backwards, so a binary search applies); the caller holds ``self._lock``."""
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self._ENTRY.unpack_from(mm, mid * 12)[1] < relative:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def sanity_check(self) -> None:
        """Raise CorruptIndexError for a torn file or entries that break the ordering."""
        self._check_length()
        if not self._entries:
            return
        last = self.last_entry
        first = self.entry(0)
        if last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: last offset {last.offset} is below "
                f"base offset {self.base_offset}"
            )
        if last.timestamp < first.timestamp:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: last timestamp {last.timestamp} is below "
                f"first timestamp {first.timestamp}"
            )
        if self._entries > 1 and last.timestamp <= first.timestamp:
            # Strictly increasing timestamps: equal ends mean a zero-filled tail.
            raise CorruptIndexError(
                f"corrupt time index {self.path}: {self._entries} entries but last timestamp "
                f"{last.timestamp} is not above first timestamp {first.timestamp} "
                f"(zero-filled entries?)"
            )


# -- readers for the dump tool ----------------------------------------------


def _base_offset_of(path: Path) -> int:
    parsed = files.parse_segment_file_name(path.name)
    if parsed is None:
        raise CorruptIndexError(f"{path} is not named like a segment file (20-digit base offset)")
    return parsed[0]


def _raw_entries(path: Path, layout: struct.Struct) -> list[tuple[int, int]]:
    """Whole entries of a file, without its trailing all-zero (preallocated) entries."""
    data = path.read_bytes()
    data = data[: len(data) - len(data) % layout.size]
    end = len(data)
    while end >= layout.size and not any(data[end - layout.size : end]):
        end -= layout.size
    return [(a, b) for a, b in layout.iter_unpack(data[:end])]


def read_offset_index_entries(path: Path) -> list[OffsetPosition]:
    """Entries of an ``.index`` file with absolute offsets; a zero-filled tail is ignored.

    The base offset comes from the file name, so any index file can be read
    without its log.
    """
    base = _base_offset_of(path)
    return [
        OffsetPosition(base + relative, position)
        for relative, position in _raw_entries(path, OffsetIndex._ENTRY)
    ]


def read_time_index_entries(path: Path) -> list[TimestampOffset]:
    """Entries of a ``.timeindex`` file with absolute offsets; a zero-filled tail is ignored."""
    base = _base_offset_of(path)
    return [
        TimestampOffset(timestamp, base + relative)
        for timestamp, relative in _raw_entries(path, TimeIndex._ENTRY)
    ]
