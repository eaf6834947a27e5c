"""One log segment: a ``.log`` file of v2 batches with its two sparse indexes.

    <base>.log         batches back to back, offsets strictly increasing
    <base>.index       (last offset of a batch, its position) every
                       ``index.interval.bytes`` of log
    <base>.timeindex   (largest timestamp so far, offset holding it), same cadence
    <base>.txnindex    aborted transactions whose ABORT marker is here (``txn_index``),
                       written by the owning log, which knows the producers

The ``.log`` is the source of truth.  Indexes are derived: ``recover()``
rebuilds the offset and time indexes from the log, cuts the log at the first
invalid batch and empties the ``.txnindex``, which the owning log rebuilds as
it replays the batches through producer state.
A segment that is not recovered on open (after a clean shutdown, or below
the recovery point) is trusted only once ``check_tail()`` has validated the
batches from its last ``.index`` entry to the end of the file.

Every walk over batch lengths (reads, ``iter_headers``, ``check_tail``)
advances by at least a batch header and stays inside the file, so garbage
in a length field ends the walk or raises CorruptRecordError; it never loops
and never sizes a read beyond the file.

Thread safety: a segment is not thread-safe for writers; its owning Log's
lock serialises append, truncate, roll and recovery.  Readers may call
``read`` and ``find_offset_by_timestamp`` concurrently with an append: reads
use ``os.pread`` and never look past ``size``, which an append only advances
after the bytes are written.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import files
from .batch import (
    CURRENT_MAGIC,
    HEADER,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    check_batch,
    read_header,
    scan_valid_prefix,
)
from .errors import CorruptIndexError, CorruptRecordError
from .index import OffsetIndex, TimeIndex, TimestampOffset
from .txn_index import TransactionIndex

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_OFFSET = 23
_LENGTH = struct.Struct(">i")
_WALK_WINDOW_BYTES = 4608  # batch starts a read's end walk finds without another pread
_SCAN_HEADER_BYTES = 27  # enough for baseOffset, length and lastOffsetDelta
_TAIL_FIELDS = struct.Struct(">qi4xb6xi")  # baseOffset, length, magic, lastOffsetDelta
_TAIL_WINDOW_BYTES = 64 * 1024  # check_tail's header reads: one covers a usual tail
_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # a batchLength that holds the header
RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024
INT32_MAX = 2**31 - 1


class LogOffsetPosition(NamedTuple):
    """Where the batch holding an offset starts, and how large it is (a tuple:
    built on every read)."""

    offset: int  # last offset of that batch
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What ``LogSegment.recover`` found."""

    valid_bytes: int
    truncated_bytes: int
    headers: list[BatchHeader]
    reason: str | None


class LogSegment:
    """A segment file and its indexes; see the module docstring for threading."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        suffix: str = "",
        time_ms: Callable[[], int],
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._suffix = suffix
        self._time_ms = time_ms
        self._max_index_size = max_index_size
        self.log_path = directory / (
            files.segment_file_name(base_offset, files.LOG_SUFFIX) + suffix
        )
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            directory / (files.segment_file_name(base_offset, files.INDEX_SUFFIX) + suffix),
            base_offset,
            max_index_size,
        )
        self.time_index = TimeIndex(
            directory / (files.segment_file_name(base_offset, files.TIME_INDEX_SUFFIX) + suffix),
            base_offset,
            max_index_size,
        )
        self.txn_index = TransactionIndex(
            directory / (files.segment_file_name(base_offset, files.TXN_INDEX_SUFFIX) + suffix),
            base_offset,
        )
        self.created_ms = time_ms()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        last = self.time_index.last_entry
        self.max_timestamp_so_far = last.timestamp
        self.offset_of_max_timestamp = last.offset
        self.closed = False

    # -- reading ---------------------------------------------------------

    def _pread(self, size: int, position: int) -> bytes:
        return os.pread(self._fd, size, position)

    def translate_offset(self, offset: int, start_position: int = 0) -> LogOffsetPosition | None:
        """The first batch at or after ``start_position`` whose last offset is >= ``offset``.

        Raises CorruptRecordError at a batch length that cannot be right."""
        position = start_position
        size = self.size
        while position + _SCAN_HEADER_BYTES <= size:
            head = self._pread(_SCAN_HEADER_BYTES, position)
            base, length = _PREFIX.unpack_from(head)
            (delta,) = _LAST_DELTA.unpack_from(head, _LAST_DELTA_OFFSET)
            following = self._batch_end(length, position, size)
            if base + delta >= offset:
                return LogOffsetPosition(base + delta, position, length + LOG_OVERHEAD)
            position = following
        return None

    def _batch_end(self, length: int, position: int, size: int) -> int:
        """Where the batch at ``position`` declaring ``batchLength`` ``length`` ends.

        Raises CorruptRecordError, naming the file, when the length is too small
        to hold a batch header (a walk would stall or go backwards) or runs past
        ``size``."""
        following = position + LOG_OVERHEAD + length
        if length < _MIN_BATCH_LENGTH:
            raise self._corrupt(
                f"batch length {length} is smaller than the minimum {_MIN_BATCH_LENGTH}", position
            )
        if following > size:
            raise self._corrupt(
                f"batch length {length} runs past the end of the file ({size} bytes)", position
            )
        return following

    def _corrupt(self, reason: str, position: int) -> CorruptRecordError:
        return CorruptRecordError(f"{reason} in {self.log_path}", position)

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> bytes | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size``
        bytes (the first batch whole when ``min_one_message``), never past
        ``max_position``.  None when no batch holds an offset >= ``start_offset``."""
        start = self.translate_offset(start_offset, self.offset_index.lookup(start_offset).position)
        if start is None:
            return None
        limit = self.size if max_position is None else min(max_position, self.size)
        available = limit - start.position
        if available <= 0:
            return b""
        if min_one_message and start.size > max_size:
            return self._pread(min(start.size, available), start.position)
        end = self._whole_batches_end(start.position, start.position + min(max_size, available))
        # One read of exactly the whole batches: no scan of the data, no copy to trim it.
        return self._pread(end - start.position, start.position) if end > start.position else b""

    def _whole_batches_end(self, first: int, end: int) -> int:
        """End of the last whole batch in ``[first, end)``, ``first`` being a batch start.

        The walk over batch lengths starts at the last indexed batch before
        ``end``, so it covers about ``index.interval.bytes``, not the whole read.
        """
        position = max(first, self.offset_index.floor_position(end))
        window_start = position
        window = self._pread(min(end - position, _WALK_WINDOW_BYTES), position)
        window_end = window_start + len(window)
        while position + LOG_OVERHEAD <= end:
            if position + LOG_OVERHEAD <= window_end:
                (length,) = _LENGTH.unpack_from(window, position - window_start + 8)
            else:
                (length,) = _LENGTH.unpack(self._pread(4, position + 8))
            following = position + LOG_OVERHEAD + length
            if following > end or length < _MIN_BATCH_LENGTH:
                break
            position = following
        return position

    def iter_headers(self, start_position: int = 0) -> list[BatchHeader]:
        """Headers of every batch from ``start_position`` to the end.

        Only the lengths are checked (CorruptRecordError for one that cannot be
        right); CRCs and offsets are not.  Bytes after the last whole header are
        ignored."""
        headers: list[BatchHeader] = []
        position = start_position
        size = self.size
        while position + HEADER.size <= size:
            header = read_header(self._pread(HEADER.size, position))
            headers.append(_at(header, position))
            position = self._batch_end(header.batch_length, position, size)
        return headers

    def read_batch(self, header: BatchHeader) -> bytes:
        return self._pread(header.size, header.position)

    def read_all(self) -> bytes:
        return self._pread(self.size, 0)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampOffset | None:
        """The first record at or after ``starting_offset`` with a timestamp >= ``timestamp``."""
        from .records import decode_batch

        hint = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(hint.offset, starting_offset)).position
        for header in self.iter_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            _, records = decode_batch(self.read_batch(header))
            for record in records:
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampOffset(record.timestamp, record.offset)
        return None

    def read_next_offset(self) -> int:
        """The offset after this segment's last batch (base offset when empty).

        Walks from the last ``.index`` entry, trusting the offsets it finds: call
        it on a recovered segment or one whose ``check_tail`` passed."""
        start = (
            self.offset_index.lookup(self.offset_index.last_offset).position
            if self.offset_index.entries
            else 0
        )
        headers = self.iter_headers(start)
        return headers[-1].next_offset if headers else self.base_offset

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's mtime when batches carry none."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log_path).st_mtime * 1000)

    def rolling_based_timestamp(self) -> int | None:
        """The first batch's max timestamp: what ``segment.ms`` is measured from."""
        if self._rolling_based_timestamp is None and self.size >= HEADER.size:
            first = read_header(self._pread(HEADER.size, 0))
            if first.max_timestamp >= 0:
                self._rolling_based_timestamp = first.max_timestamp
        return self._rolling_based_timestamp

    def accepts(
        self, size: int, last_offset: int, max_timestamp: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        """True when an append of ``size`` bytes ending at ``last_offset`` meets none of
        the four roll conditions; the owning log names the one that holds otherwise.
        Runs on every append, so the usual case reads cached fields only."""
        current = self.size
        if (
            current + size > segment_bytes
            or last_offset - self.base_offset > INT32_MAX
            or self.offset_index.is_full
            or self.time_index.is_full
        ):
            return False
        if current == 0:
            return True
        first = self._rolling_based_timestamp
        if first is not None and max_timestamp >= 0:
            return max_timestamp - first <= segment_ms
        return self.time_waited_for_roll(self._time_ms(), max_timestamp) <= segment_ms

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.rolling_based_timestamp()
        if first is not None and message_timestamp >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    # -- writing (under the owning Log's lock) ---------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        parts: Sequence[bytes | bytearray | memoryview],
        size: int,
    ) -> None:
        """Append already-validated batches (given as buffers written back to back,
        ``size`` bytes in all) whose offsets start after the last one."""
        if largest_offset - self.base_offset > INT32_MAX:
            raise ValueError(
                f"offset {largest_offset} does not fit segment {self.log_path} "
                f"with base offset {self.base_offset}"
            )
        position = self.size
        try:
            written = os.writev(self._fd, parts)  # one call, however many parts
        except OSError:
            self._cut_back(position)
            raise
        if written != size:  # a full disk: what was written goes, the size stays right
            self._cut_back(position)
            raise OSError(
                errno.ENOSPC, f"short write to {self.log_path}: {written} of {size} bytes"
            )
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp = offset_of_max_timestamp
        self._bytes_since_last_index_entry += size
        self.size = position + size

    def _cut_back(self, size: int) -> None:
        """After a failed write: the file back to ``size`` bytes, so that its bytes
        and ``self.size`` agree.  Best effort: a failure leaves the torn tail to
        recovery (the dir is offline by then, nothing is appended after it)."""
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            log.warning("cannot cut %s back to %d bytes: %s", self.log_path, size, exc)

    def recover(self, *, keep_txn_index: bool = False) -> RecoveryResult:
        """Rebuild both indexes from the log and cut the log after its last valid batch.

        The ``.txnindex`` is emptied for the owning log to rebuild, unless
        ``keep_txn_index`` (a compaction's output, whose entries the cleaner
        wrote and synced before the swap)."""
        for index in (self.offset_index, self.time_index):
            index.resize(self._max_index_size)
            index.truncate()
        if not keep_txn_index:
            self.txn_index.reset()
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        file_size = os.fstat(self._fd).st_size
        headers: list[BatchHeader] = []
        position = 0
        reason: str | None = None
        want = RECOVERY_CHUNK_BYTES
        while position < file_size:
            chunk_start = position
            chunk = self._pread(min(want, file_size - chunk_start), chunk_start)
            found, valid_end, error = scan_valid_prefix(chunk)
            for header in found:
                expected = headers[-1].next_offset if headers else self.base_offset
                if (
                    header.base_offset < expected
                    or header.last_offset - self.base_offset > INT32_MAX
                ):
                    # The CRC does not cover the base offset: check it against its neighbours.
                    valid_end = header.position
                    error = CorruptRecordError(
                        f"batch offset {header.base_offset} does not follow {expected - 1}",
                        chunk_start + header.position,
                    )
                    break
                header = _at(header, chunk_start + header.position)
                self._index_batch(header)
                headers.append(header)
            position = chunk_start + valid_end
            want = RECOVERY_CHUNK_BYTES
            if error is None:
                continue
            if chunk_start + len(chunk) < file_size:
                # The chunk ended before the file did: a batch cut by the chunk
                # boundary is read again whole, not mistaken for a torn tail.
                rest = len(chunk) - valid_end
                if rest < LOG_OVERHEAD:
                    continue
                _, length = _PREFIX.unpack_from(chunk, valid_end)
                needed = length + LOG_OVERHEAD
                if rest < needed and position + needed <= file_size:
                    want = needed
                    continue
            reason = error.reason
            break
        truncated = file_size - position
        if truncated:
            log.warning(
                "truncating %s at position %d (%d bytes cut): %s",
                self.log_path,
                position,
                truncated,
                reason or "trailing bytes",
            )
            os.ftruncate(self._fd, position)
        self.size = position
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
        )
        return RecoveryResult(position, truncated, headers, reason)

    def _index_batch(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, header.position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset, self.offset_index.lookup(offset).position)
        if found is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - found.position
        os.ftruncate(self._fd, found.position)
        self.size = found.position
        self._bytes_since_last_index_entry = 0
        if self.offset_index.entries:
            self._bytes_since_last_index_entry = (
                self.size - self.offset_index.lookup(self.offset_index.last_offset).position
            )
        if self.size == 0:
            self._rolling_based_timestamp = None
            self.created_ms = self._time_ms()
        last = self.time_index.last_entry
        self.max_timestamp_so_far = last.timestamp
        self.offset_of_max_timestamp = last.offset
        if self.size and self.time_index.entries == 0:
            for header in self.iter_headers():
                if header.max_timestamp > self.max_timestamp_so_far:
                    self.max_timestamp_so_far = header.max_timestamp
                    self.offset_of_max_timestamp = header.last_offset
        return removed

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index is missing or fails its check
        (a ``.txnindex`` may be missing: most segments have none)."""
        for index in (self.offset_index, self.time_index):
            if index.created and self.size > 0:
                raise CorruptIndexError(f"missing index file {index.path}")
            index.sanity_check()
        self.txn_index.sanity_check()

    def check_tail(self) -> int:
        """Validate the segment's tail without recovering it; return its next offset.

        The tail runs from the position of the last ``.index`` entry (the start
        of the file when there is none) to the end of the file: about
        ``index.interval.bytes`` plus the last append, never the whole segment.
        Each batch in it must have a length that holds a batch header and stays
        in the file, magic 2, and offsets that increase, fit an int32 relative
        to the base offset and include the last ``.index`` entry's offset; the
        last batch must pass every check recovery makes (counts, CRC), so the
        file ends exactly at the end of a valid batch.  The last ``.timeindex``
        entry must name an offset the segment holds.

        Raises CorruptRecordError or CorruptIndexError naming the file, the
        position and the values; the caller then recovers the segment.  Call
        ``sanity_check`` first.
        """
        size = self.size
        index = self.offset_index
        indexed = index.last_entry
        position = 0
        if indexed is not None:
            position = indexed.position
            if not 0 <= position < size:
                raise CorruptIndexError(
                    f"last entry of {index.path} (offset {indexed.offset}, position "
                    f"{position}) points outside {self.log_path} ({size} bytes)"
                )
        next_offset = self.base_offset
        found_indexed = indexed is None
        last_position = -1
        # Headers are read in windows: one read covers a usual tail.
        window = b""
        window_start = position
        while position < size:
            remaining = size - position
            if remaining < RECORD_BATCH_OVERHEAD:
                raise self._corrupt(
                    f"truncated batch: {remaining} bytes left, fewer than the "
                    f"{RECORD_BATCH_OVERHEAD}-byte batch header",
                    position,
                )
            if position + _SCAN_HEADER_BYTES > window_start + len(window):
                window_start = position
                window = self._pread(min(remaining, _TAIL_WINDOW_BYTES), position)
            base, length, magic, delta = _TAIL_FIELDS.unpack_from(window, position - window_start)
            following = self._batch_end(length, position, size)
            if magic != CURRENT_MAGIC:
                raise self._corrupt(
                    f"unsupported magic {magic}, expected {CURRENT_MAGIC}", position
                )
            if delta < 0:
                raise self._corrupt(f"negative lastOffsetDelta {delta}", position)
            if base < next_offset:
                raise self._corrupt(
                    f"batch offset {base} does not follow {next_offset - 1}", position
                )
            if base + delta - self.base_offset > INT32_MAX:
                raise self._corrupt(
                    f"last offset {base + delta} does not fit an int32 relative to "
                    f"base offset {self.base_offset}",
                    position,
                )
            if indexed is not None and base + delta == indexed.offset:
                found_indexed = True
            next_offset = base + delta + 1
            last_position = position
            position = following
        if last_position >= 0:
            if last_position < window_start or size > window_start + len(window):
                window_start = last_position
                window = self._pread(size - last_position, last_position)
            try:
                check_batch(window, last_position - window_start, size - window_start)
            except CorruptRecordError as exc:
                raise self._corrupt(exc.reason, last_position) from exc
        if indexed is not None and not found_indexed:
            raise CorruptIndexError(
                f"last entry of {index.path} (offset {indexed.offset}, position "
                f"{indexed.position}) matches no batch of {self.log_path}, whose last offset "
                f"is {next_offset - 1}"
            )
        timed = self.time_index.last_entry
        if self.time_index.entries and timed.offset >= next_offset:
            raise CorruptIndexError(
                f"last entry of {self.time_index.path} (timestamp {timed.timestamp}, offset "
                f"{timed.offset}) is past the last offset {next_offset - 1} of {self.log_path}"
            )
        aborted = self.txn_index.last_offset
        if aborted is not None and aborted >= next_offset:
            raise CorruptIndexError(
                f"last entry of {self.txn_index.path} (an abort at offset {aborted}) is past "
                f"the last offset {next_offset - 1} of {self.log_path}"
            )
        return next_offset

    @property
    def is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def on_became_inactive(self) -> None:
        """Called when the log rolls past this segment: final time entry, trim indexes."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the log and both indexes from the current suffix to ``new_suffix``."""

        def renamed(path: Path) -> Path:
            stem = path.name[: len(path.name) - len(self._suffix)] if self._suffix else path.name
            return path.with_name(stem + new_suffix)

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self._suffix = new_suffix

    @property
    def suffix(self) -> str:
        return self._suffix

    def close(self, *, sync_indexes: bool = True) -> None:
        """Close every file; ``sync_indexes=False`` leaves what the indexes' maps
        wrote to the kernel, for a caller that syncs the file system next."""
        if self.closed:
            return
        self.closed = True
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.close(sync=sync_indexes)
        self.time_index.close(sync=sync_indexes)
        self.txn_index.close()
        os.close(self._fd)

    def close_and_delete(self) -> None:
        """Close and remove all its files (those already gone are ignored)."""
        if not self.closed:
            self.closed = True
            self.offset_index.close(sync=False)
            self.time_index.close(sync=False)
            self.txn_index.close()
            os.close(self._fd)
        for path in (
            self.log_path,
            self.offset_index.path,
            self.time_index.path,
            self.txn_index.path,
        ):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size})"


def _at(header: BatchHeader, position: int) -> BatchHeader:
    return header if header.position == position else header._replace(position=position)
