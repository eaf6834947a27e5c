"""``<base>.txnindex``: the aborted transactions whose ABORT marker lies in a segment.

Kafka's TransactionIndex format: 34-byte entries, big-endian, back to back::

    offset  size  field
         0     2  version            0
         2     8  producerId
        10     8  firstOffset        the transaction's first offset (maybe in an earlier segment)
        18     8  lastOffset         the ABORT marker's offset (in this segment)
        26     8  lastStableOffset   the LSO once the abort was written

Entries are appended in ``lastOffset`` order when the leader or a follower
appends an ABORT marker (``Log``), and rebuilt by recovery, which replays
the batches through producer state.  A fetch at read_committed asks
``collect(fetch_offset, upper_bound)`` for the aborted transactions
overlapping its range (Kafka's collectAbortedTxns): an entry qualifies when
``lastOffset >= fetch_offset`` and ``firstOffset < upper_bound``, and the
search may stop at the first entry whose ``lastStableOffset >= upper_bound``
(no later segment can hold a transaction that overlaps the range).

The file is created with its first entry; most segments never have one.
Truncation cuts the entries whose ``lastOffset`` is at or past the new end.

Thread safety: appends, truncation and renames run under the owning log's
lock; ``entries`` and ``collect`` may run at the same time (they read with
``pread`` up to the size published after a whole entry is written).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import NamedTuple

from .errors import CorruptIndexError

__all__ = ["ENTRY_SIZE", "TXN_INDEX_VERSION", "AbortedTxn", "TransactionIndex", "read_entries"]

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    """One entry of a ``.txnindex`` file."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = TXN_INDEX_VERSION

    def pack(self) -> bytes:
        return _ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


def parse_entries(data: bytes, source: str) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes; CorruptIndexError naming
    ``source`` for a partial entry or an unknown version."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index {source}: {len(data)} bytes is not a whole number of "
            f"{ENTRY_SIZE}-byte entries"
        )
    out = []
    for i, (version, pid, first, last, lso) in enumerate(_ENTRY.iter_unpack(data)):
        if version != TXN_INDEX_VERSION:
            raise CorruptIndexError(
                f"transaction index {source}: entry {i} has version {version}, "
                f"expected {TXN_INDEX_VERSION}"
            )
        out.append(AbortedTxn(pid, first, last, lso, version))
    return out


def read_entries(path: Path) -> list[AbortedTxn]:
    """Every entry of a ``.txnindex`` file (for tools); CorruptIndexError when
    it does not parse."""
    return parse_entries(path.read_bytes(), str(path))


class TransactionIndex:
    """The ``.txnindex`` of one segment; see the module docstring."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd: int | None = None
        self._size = 0
        self._last_offset: int | None = None
        try:
            self._fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return
        size = os.fstat(self._fd).st_size
        self._size = size
        if size >= ENTRY_SIZE and size % ENTRY_SIZE == 0:
            tail = os.pread(self._fd, ENTRY_SIZE, size - ENTRY_SIZE)
            self._last_offset = _ENTRY.unpack(tail)[3]

    @property
    def exists(self) -> bool:
        return self._fd is not None

    @property
    def size(self) -> int:
        return self._size

    @property
    def last_offset(self) -> int | None:
        """The last entry's ``last_offset`` (its ABORT marker); None without entries."""
        return self._last_offset

    def _open_for_append(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry; its ``last_offset`` must be above the last one's."""
        if self._last_offset is not None and entry.last_offset <= self._last_offset:
            raise ValueError(
                f"aborted transaction ending at {entry.last_offset} does not follow the last "
                f"entry of {self.path}, which ends at {self._last_offset}"
            )
        fd = self._open_for_append()
        data = entry.pack()
        written = os.pwrite(fd, data, self._size)
        if written != len(data):
            raise OSError(errno.ENOSPC, f"short write to {self.path}: {written} of {len(data)}")
        self._size += len(data)
        self._last_offset = entry.last_offset

    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first."""
        fd, size = self._fd, self._size
        if fd is None or size == 0:
            return []
        return parse_entries(os.pread(fd, size, 0), str(self.path))

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)`` and
        whether the search is complete (no later segment needs a look)."""
        found = []
        for entry in self.entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose ``last_offset`` is at or above ``offset``."""
        kept = [e for e in self.entries() if e.last_offset < offset]
        size = len(kept) * ENTRY_SIZE
        if self._fd is not None and size < self._size:
            os.ftruncate(self._fd, size)
            self._size = size
            self._last_offset = kept[-1].last_offset if kept else None

    def reset(self) -> None:
        """Remove every entry and the file itself (recovery rebuilds them)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self._size = 0
        self._last_offset = None

    def sanity_check(self, next_offset: int | None = None) -> None:
        """CorruptIndexError when the file holds a partial entry, an unknown
        version, an entry ending below the base offset (or at or past
        ``next_offset``, the segment's end, when given), or entries whose last
        offsets do not rise."""
        previous = None
        for i, entry in enumerate(self.entries()):
            if entry.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"transaction index {self.path}: entry {i} ends at {entry.last_offset}, "
                    f"below the base offset {self.base_offset}"
                )
            if next_offset is not None and entry.last_offset >= next_offset:
                raise CorruptIndexError(
                    f"transaction index {self.path}: entry {i} ends at {entry.last_offset}, "
                    f"past the segment's last offset {next_offset - 1}"
                )
            if previous is not None and entry.last_offset <= previous:
                raise CorruptIndexError(
                    f"transaction index {self.path}: entry {i} ends at {entry.last_offset}, "
                    f"not after the entry before it ({previous})"
                )
            previous = entry.last_offset

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def rename_to(self, path: Path) -> None:
        """Rename the file (when there is one) and keep using it under ``path``."""
        try:
            os.replace(self.path, path)
        except FileNotFoundError:
            if self._fd is not None:
                raise
        self.path = path

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path}, {self._size // ENTRY_SIZE} entries)"
