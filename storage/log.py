"""A partition's log: an ordered list of segments under ``<topic>-<partition>/``.

Offsets are dense per partition and assigned here, by ``append_as_leader``;
followers keep the leader's offsets (``append_as_follower``).  The newest
segment is the active one; appends go there and it rolls (see ``_maybe_roll``)
when any of Kafka's four conditions holds.

Crash safety (details in docs/storage.md): everything after the recovery point
is re-validated on open unless the log was shut down cleanly; every segment
that is not re-validated has its indexes and its tail checked, and is
recovered when they fail (``_passes_load_checks``); transient files
(``.cleaned``, ``.swap``, ``.deleted``) are resolved by ``_load_segments``.

Thread safety: ``self._lock`` guards every mutation (append, roll, truncate,
retention, compaction swaps, config and start-offset changes).  Readers never
take it: they work on ``self._view``, an immutable snapshot of the segment list
that mutations replace as a whole, and on segment files that stay open until
their delayed removal.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import shutil
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from . import files
from .batch import (
    CONTROL_FLAG,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    TimestampType,
    check_batch,
    iter_batches,
    patch_log_append_time,
    patch_offsets,
)
from .checkpoints import LeaderEpochCheckpointFile
from .config import LogConfig
from .control import (
    AppendOrigin,
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
    marker_of_batch,
)
from .dir_failure import LogDirFailureChannel
from .dirty import DirtyMarks
from .epoch_cache import LeaderEpochFileCache
from .errors import (
    CorruptIndexError,
    CorruptRecordError,
    LogDirError,
    LogDirOfflineError,
    NonMonotonicOffsetError,
    OffsetOutOfRangeError,
    StorageError,
)
from .index import TimestampOffset
from .producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
)
from .segment import INT32_MAX, LogSegment
from .txn_index import AbortedTxn, TransactionIndex
from .validator import RecordValidator

logger = logging.getLogger(__name__)

_PREFIX16 = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

Clock = Callable[[], int]
Executor = Callable[[Callable[[], None]], None]

NEVER_MS = 2**63 - 1  # flush.ms when only the OS flushes (Kafka's default)
_TXN_BITS = CONTROL_FLAG | TRANSACTIONAL_FLAG


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


F = TypeVar("F", bound=Callable[..., Any])


def _io(what: str) -> Callable[[F], F]:
    """A Log method whose OSError (a full disk, an I/O error, a short write) takes
    the log's dir offline (``storage/dir_failure.py``) and raises
    LogDirOfflineError instead."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def guarded(self: Log, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                raise self._io_failed(what, exc) from exc

        return guarded  # type: ignore[return-value]

    return wrap


def run_inline(task: Callable[[], None]) -> None:
    task()


class LogAppendInfo(NamedTuple):
    """What one append stored."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # NO_TIMESTAMP unless the log uses LogAppendTime
    num_batches: int
    num_records: int
    valid_bytes: int
    duplicate: bool = False  # an idempotent producer's retry: nothing stored, original offsets


@dataclass(frozen=True, slots=True)
class _View:
    """An immutable snapshot of the segment list, for lock-free readers."""

    segments: tuple[LogSegment, ...]
    base_offsets: tuple[int, ...]

    @classmethod
    def of(cls, segments: Sequence[LogSegment]) -> _View:
        ordered = tuple(sorted(segments, key=lambda s: s.base_offset))
        return cls(ordered, tuple(s.base_offset for s in ordered))

    def floor_index(self, offset: int) -> int:
        """Index of the segment that would hold ``offset`` (0 when before all)."""
        return max(bisect.bisect_right(self.base_offsets, offset) - 1, 0)


class Log:
    """One partition's log.  Thread-safe; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        time_ms: Clock,
        background: Executor,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        failure: LogDirFailureChannel | None = None,
        marks: DirtyMarks | None = None,
    ) -> None:
        self.directory = directory
        self._failure = failure  # where an I/O error takes the log's dir offline
        # where this log tells its dir's manager what changed (storage/dirty.py)
        self._marks = marks if marks is not None else DirtyMarks()
        self._flush_pending = False  # on the marks' list of logs to flush in time
        self._log_dir = directory.parent
        self._offline_reason: str | None = None  # this log's own failure, without a channel
        parsed = files.parse_partition_dir_name(directory.name)
        if parsed is None:
            raise LogDirError(
                f"{directory} is not a partition directory: its name must be <topic>-<partition>"
            )
        self.topic_partition = files.TopicPartition(*parsed)
        self._config = config
        self._cache_config()
        self._time_ms = time_ms
        self._background = background
        self._lock = threading.RLock()
        self._view = _View.of(())
        self._log_end_offset = 0
        self._log_start_offset = 0
        self._recovery_point = 0
        self._high_watermark = 0
        self._first_unstable_offset: int | None = None  # oldest undecided transaction
        self._unflushed_records = 0
        self._last_flush_ms = time_ms()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._epoch_hint: int | None = None  # the epoch the last leader append assigned
        self._closed = False
        self.leader_epoch_cache = LeaderEpochFileCache(
            self.topic_partition,
            LeaderEpochCheckpointFile(directory / files.LEADER_EPOCH_CHECKPOINT),
        )
        self._producers = ProducerStateManager(
            directory, str(self.topic_partition), producer_id_expiration_ms
        )

    # -- opening ---------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        time_ms: Clock | None = None,
        background: Executor | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        failure: LogDirFailureChannel | None = None,
        marks: DirtyMarks | None = None,
    ) -> Log:
        """Open (creating when missing) the log in ``directory`` and recover it.

        ``recovery_point`` and ``log_start_offset`` come from the log dir's
        checkpoint files; with ``had_clean_shutdown`` recovery is skipped
        except for segments whose indexes or tail fail their checks.  Producer
        state is loaded from the newest snapshot at or below the recovery
        point (the log end after a clean shutdown) and the batches after it.
        """
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise LogDirError(f"{directory} is not a directory")
        if files.parse_partition_dir_name(directory.name) is None:
            raise LogDirError(
                f"{directory} is not a partition directory: its name must be <topic>-<partition>"
            )
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(
            directory,
            config or LogConfig(),
            time_ms=time_ms or wall_clock_ms,
            background=background or run_inline,
            producer_id_expiration_ms=producer_id_expiration_ms,
            failure=failure,
            marks=marks,
        )
        with log._lock:
            log._load(recovery_point, log_start_offset, had_clean_shutdown)
            if log._compact:  # loaded: the cleaner may look at it
                log._marks.compacted(log, True)
        return log

    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self._config.index_interval_bytes,
            max_index_size=self._config.segment_index_bytes,
            suffix=suffix,
            time_ms=self._time_ms,
        )

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> None:
        segments = self._load_segments()
        if not segments:
            segments = [self._new_segment(log_start_offset)]
        self._view = _View.of(segments)
        segments = list(self._view.segments)
        rebuild: list[LogSegment] = []  # recovered: their .txnindex is rebuilt by the replay
        epochs_lost = self.leader_epoch_cache.lost  # rebuilt from every segment's batches
        for i, segment in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            needs_recovery = epochs_lost or (
                not clean and (next_base is None or next_base > recovery_point)
            )
            if not needs_recovery:
                needs_recovery = not self._passes_load_checks(segment)
            if needs_recovery:
                result = segment.recover()
                rebuild.append(segment)
                for header in result.headers:
                    if header.partition_leader_epoch >= 0:
                        self._assign_epoch(header.partition_leader_epoch, header.base_offset)
                if result.truncated_bytes and next_base is not None:
                    doomed = segments[i + 1 :]
                    logger.warning(
                        "%s was cut by recovery; removing %d later segments",
                        segment.log_path,
                        len(doomed),
                    )
                    for later in doomed:
                        later.close_and_delete()
                    segments = segments[: i + 1]
                    break
                if next_base is not None:
                    segment.on_became_inactive()
        self._view = _View.of(segments)
        active = self._view.segments[-1]
        active.offset_index.resize(self._config.segment_index_bytes)
        active.time_index.resize(self._config.segment_index_bytes)
        self._log_end_offset = active.read_next_offset()
        self._log_start_offset = min(
            max(log_start_offset, self._view.segments[0].base_offset), self._log_end_offset
        )
        self._recovery_point = self._log_end_offset
        self._high_watermark = self._log_end_offset
        if self._recovery_point != recovery_point:  # the dir's checkpoints are behind
            self._marks.recovery_points = True
        if self._log_start_offset != log_start_offset:
            self._marks.log_start_offsets = True
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.leader_epoch_cache.sync()  # entries recovery rebuilt, below the new recovery point
        kept = set(segments)
        self._load_producer_state(
            min(recovery_point, self._log_end_offset),
            clean,
            [s for s in rebuild if s in kept],
        )
        self._producers.on_high_watermark_updated(self._high_watermark)
        self._update_first_unstable_offset()

    def _load_producer_state(
        self, recovery_point: int, clean: bool, rebuild: Sequence[LogSegment] = ()
    ) -> None:
        """Rebuild the producer table (recovery; docs/storage.md).

        1. Snapshots past the log end describe batches recovery cut: deleted.
        2. After a clean shutdown with no snapshot at all (a log written before
           producer state existed), Kafka's shortcut: an empty snapshot at the
           log end, no scan.
        3. Otherwise the newest snapshot at or below the recovery point (the
           log end after a clean shutdown) is loaded and the batch headers
           after it replayed, one update per batch of a producer.  The replay
           starts at or before the first segment recovery emptied the
           ``.txnindex`` of (``rebuild``), and writes those indexes again:
           the same entries, since the producers (their open transactions)
           are the same at every batch as when it was first appended.
        """
        producers = self._producers
        end = self._log_end_offset
        first_base = self._view.segments[0].base_offset
        producers.delete_snapshots(range(first_base, end + 1))
        if clean and not producers.snapshot_offsets():
            producers.truncate_fully()
            producers.take_snapshot(end)
            return
        limit = end if clean else recovery_point
        if rebuild:
            limit = min(limit, min(s.base_offset for s in rebuild))
        self._rebuild_producer_state(limit, rebuild)

    def _rebuild_producer_state(self, limit: int, rebuild: Sequence[LogSegment] = ()) -> None:
        """Load the newest snapshot at or below ``limit`` and replay the log from
        there to its end (callers hold the lock), writing the ``.txnindex`` of
        the segments in ``rebuild``."""
        producers = self._producers
        start = producers.load(limit, self._view.segments[0].base_offset, self._time_ms())
        view = self._view
        for segment in view.segments[view.floor_index(start) :]:
            position = segment.offset_index.lookup(start).position
            index = segment.txn_index if segment in rebuild else None
            for header in segment.iter_headers(position):
                if header.producer_id < 0 or header.last_offset < start:
                    continue
                marker = None
                if header.attributes & CONTROL_FLAG:
                    try:
                        marker = marker_of_batch(segment.read_batch(header))
                    except CorruptRecordError as exc:
                        logger.warning(
                            "%s: ignoring control batch at offset %d: %s",
                            segment.log_path,
                            header.base_offset,
                            exc,
                        )
                self._apply_producer_batch(
                    header, header.base_offset, header.max_timestamp, marker, index
                )

    def _apply_producer_batch(
        self,
        header: BatchHeader,
        base_offset: int,
        timestamp: int,
        marker: EndTransactionMarker | None,
        index: TransactionIndex | None,
    ) -> None:
        """One stored batch of a producer into the table; a transaction its marker
        closes is completed, and an aborted one entered in ``index`` (the
        marker's segment's ``.txnindex``; None when it holds the entry already)."""
        producers = self._producers
        completed = producers.update(header, base_offset, timestamp, marker)
        if completed is not None:
            lso = producers.complete_txn(completed)
            if completed.is_aborted and index is not None:
                index.append(
                    AbortedTxn(
                        completed.producer_id, completed.first_offset, completed.last_offset, lso
                    )
                )

    def _markers(
        self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]
    ) -> list[EndTransactionMarker | None] | None:
        """The marker of each control batch of a producer in ``buf`` (None for
        the other batches), or None when there is no such batch.  Raises
        CorruptRecordError for a control batch whose record is no marker."""
        if not any(h.attributes & CONTROL_FLAG and h.producer_id >= 0 for h in headers):
            return None
        return [
            marker_of_batch(buf, h.position)
            if h.attributes & CONTROL_FLAG and h.producer_id >= 0
            else None
            for h in headers
        ]

    def _update_first_unstable_offset(self) -> None:
        """The first unstable offset from the producers, never below the log start
        (retention may have deleted the start of a transaction)."""
        first = self._producers.first_unstable_offset()
        if first is not None:
            first = max(first, self._log_start_offset)
        self._first_unstable_offset = first

    @staticmethod
    def _passes_load_checks(segment: LogSegment) -> bool:
        """Whether a segment that is not rescanned on open can be trusted as it is.

        Its indexes must pass their sanity check and its tail (the batches after
        the last ``.index`` entry) must be valid and agree with the indexes; a
        failure is logged with its reason and the caller recovers the segment.
        """
        try:
            segment.sanity_check()
        except CorruptIndexError as exc:
            logger.warning("rebuilding indexes of %s: %s", segment.log_path, exc)
            return False
        try:
            segment.check_tail()
        except (CorruptRecordError, CorruptIndexError) as exc:
            logger.warning(
                "recovering %s: its tail fails the load check: %s", segment.log_path, exc
            )
            return False
        return True

    def _load_segments(self) -> list[LogSegment]:
        """Resolve transient files, then open every segment (protocol steps in docs/storage.md)."""
        logs: set[int] = set()
        swaps: set[int] = set()
        txn_swaps: dict[int, Path] = {}
        indexes: dict[int, list[Path]] = {}
        for path in sorted(self.directory.iterdir()):
            name = path.name
            parsed = files.parse_segment_file_name(name)
            if parsed is None:
                if files.parse_snapshot_file_name(name) is not None:
                    continue  # producer state; _load_producer_state decides
                if name != files.LEADER_EPOCH_CHECKPOINT and not name.endswith(".tmp"):
                    logger.warning(
                        "unknown file %s in log directory %s, left in place", name, self.directory
                    )
                elif name.endswith(".tmp"):
                    path.unlink()
                continue
            base, suffix, transient = parsed
            if transient in (files.DELETED_SUFFIX, files.CLEANED_SUFFIX):
                # .deleted: already out of the log; .cleaned: an uncommitted compaction.
                path.unlink()
            elif transient == files.SWAP_SUFFIX:
                if suffix == files.LOG_SUFFIX:
                    swaps.add(base)
                elif suffix == files.TXN_INDEX_SUFFIX:
                    # the cleaner wrote and synced it before the commit point: kept
                    txn_swaps[base] = path
                else:
                    path.unlink()  # derived; rebuilt from the .swap log below
            elif suffix == files.LOG_SUFFIX:
                logs.add(base)
            else:
                indexes.setdefault(base, []).append(path)
        for base, path in txn_swaps.items():
            if base in swaps:
                continue  # renamed with its .log.swap below
            if base in logs:  # the swap's last rename did not happen: finish it
                path.replace(path.with_name(files.segment_file_name(base, files.TXN_INDEX_SUFFIX)))
            else:
                path.unlink()
        for base, paths in indexes.items():
            if base not in logs:
                for path in paths:
                    logger.warning("removing index %s that has no log file", path)
                    path.unlink()
        segments = {base: self._new_segment(base) for base in sorted(logs)}
        for base in sorted(swaps):
            swap = self._new_segment(base, files.SWAP_SUFFIX)
            swap.recover(keep_txn_index=True)
            swap_end = swap.read_next_offset()
            for old_base in [b for b in segments if base <= b < max(swap_end, base + 1)]:
                segments.pop(old_base).close_and_delete()
            swap.change_suffix("")
            segments[base] = swap
        return list(segments.values())

    # -- properties -------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.topic_partition)

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config
            self._cache_config()
            self._maybe_pend_flush()
            if not self._closed:
                self._marks.compacted(self, self._compact)

    def _cache_config(self) -> None:
        """Flags the append path reads on every call, computed once per config."""
        config = self._config
        self._compact = config.compact
        self._log_append_time = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._max_message_bytes = config.max_message_bytes
        self._flush_messages = config.flush_messages
        self._flush_on_time = config.flush_ms < NEVER_MS
        self._validator = RecordValidator(config)

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log_start_offset, log_end_offset]."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
            if self._producers.unreplicated:
                self._producers.on_high_watermark_updated(self._high_watermark)
                self._update_first_unstable_offset()
            return self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided (open, or
        closed by a marker the high watermark has not passed); None when every
        transaction is decided."""
        return self._first_unstable_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first unstable offset when below the high watermark, else
        the high watermark.  A read_committed consumer reads up to it."""
        first, high = self._first_unstable_offset, self._high_watermark
        return first if first is not None and first < high else high

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``
        (Kafka's collectAbortedTransactions): from the ``.txnindex`` of the
        segment holding ``start_offset`` on, until one entry's last stable
        offset reaches the upper bound.  Reads without the lock."""
        view = self._view
        found: list[AbortedTxn] = []
        for segment in view.segments[view.floor_index(start_offset) :]:
            entries, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    @property
    def size(self) -> int:
        return sum(s.size for s in self._view.segments)

    def segments(self) -> tuple[LogSegment, ...]:
        """A snapshot of the segment list, oldest first."""
        return self._view.segments

    def end_position(self) -> tuple[int, int]:
        """Where the log ends in bytes: (the active segment's base offset, its size).
        Two of these taken at different times tell how many bytes were appended
        in between, while the segment did not roll."""
        active = self._view.segments[-1]
        return active.base_offset, active.size

    @property
    def active_segment(self) -> LogSegment:
        return self._view.segments[-1]

    # -- appending --------------------------------------------------------

    @_io("an append to")
    def append_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate producer batches, assign offsets from the log end, store them.

        Every batch is checked whole (``check_batch``) and record by record
        (``RecordValidator``, Kafka's LogValidator) first.  Raises an
        InvalidRecordError subclass, leaving the log unchanged, when any
        batch is bad.  ``origin`` is who appends: a client (the default) may
        not write control batches; the broker's coordinators
        (``AppendOrigin.COORDINATOR``) may, and are not held to sequences.
        """
        buf = _upconvert_if_legacy(batches)
        size = len(buf)
        if size == 0:
            raise CorruptRecordError("empty append: no record batch", 0)
        first_header = check_batch(buf, 0, size, self._max_message_bytes)
        headers: Sequence[BatchHeader]
        if first_header.batch_length + LOG_OVERHEAD == size:
            headers = (first_header,)
        else:
            headers = self._validate(buf)
        validator = self._validator
        buf, headers = validator.validate(
            buf, headers, self._time_ms() if validator.needs_clock else 0, origin
        )
        size = len(buf)  # recompressed to the topic's compression.type, perhaps
        if (
            len(headers) == 1
            and not self._log_append_time
            and not headers[0].attributes & _TXN_BITS
        ):
            return self._append_one(buf, headers[0], leader_epoch, origin)
        append_time = self._log_append_time
        idempotent = any(h.producer_id >= 0 for h in headers)
        markers = self._markers(buf, headers) if idempotent else None
        with self._lock:
            self._check_open()
            now = self._time_ms() if append_time else NO_TIMESTAMP
            if idempotent:
                duplicate = self._producers.check_append(headers, origin, markers)
                if duplicate is not None:
                    return self._duplicate_info(duplicate)
            first = offset = self._log_end_offset
            max_timestamp, offset_of_max = NO_TIMESTAMP, first
            records = 0
            if append_time:
                copy = bytearray(buf)
                for header in headers:
                    patch_offsets(copy, header.position, offset, leader_epoch)
                    patch_log_append_time(copy, header.position, header.size, now)
                    offset += header.last_offset_delta + 1
                    records += header.record_count
                max_timestamp, offset_of_max = now, offset - 1
                parts: Sequence[bytes | bytearray | memoryview] = (copy,)
            else:
                # baseOffset, batchLength and partitionLeaderEpoch lie outside the
                # CRC: write a new 16-byte prefix and the rest of each batch as is.
                view = memoryview(buf)
                pieces: list[bytes | memoryview] = []
                for header in headers:
                    position = header.position
                    pieces.append(_PREFIX16.pack(offset, header.batch_length, leader_epoch))
                    pieces.append(view[position + 16 : position + header.batch_length + 12])
                    last = offset + header.last_offset_delta
                    if header.max_timestamp > max_timestamp:
                        max_timestamp, offset_of_max = header.max_timestamp, last
                    records += header.record_count
                    offset = last + 1
                parts = pieces
            if leader_epoch >= 0 and leader_epoch != self._epoch_hint:
                self._assign_epoch(leader_epoch, first)
                self._epoch_hint = leader_epoch
            last = offset - 1
            self._append_locked(parts, size, first, last, max_timestamp, offset_of_max, records)
            if idempotent:
                self._record_producer_batches(headers, first, now, markers)
            return LogAppendInfo(
                first,
                last,
                max_timestamp,
                offset_of_max,
                now,
                len(headers),
                records,
                size,
            )

    def _append_one(
        self,
        buf: bytes | bytearray | memoryview,
        header: BatchHeader,
        leader_epoch: int,
        origin: AppendOrigin,
    ) -> LogAppendInfo:
        """``append_as_leader`` for one validated batch with its own timestamps,
        neither transactional nor control: the usual produce request, so it
        does only what that case needs."""
        count = header.record_count
        delta = header.last_offset_delta
        size = header.batch_length + LOG_OVERHEAD
        max_timestamp = header.max_timestamp
        idempotent = header.producer_id >= 0
        with self._lock:
            self._check_open()
            if idempotent:
                duplicate = self._producers.check_append((header,), origin)
                if duplicate is not None:
                    return self._duplicate_info(duplicate)
            first = self._log_end_offset
            last = first + delta
            offset_of_max = last if max_timestamp > NO_TIMESTAMP else first
            # baseOffset, batchLength and partitionLeaderEpoch lie outside the CRC:
            # write a new 16-byte prefix and the rest of the batch as it came.
            parts = (
                _PREFIX16.pack(first, header.batch_length, leader_epoch),
                memoryview(buf)[16:size],
            )
            if leader_epoch >= 0 and leader_epoch != self._epoch_hint:
                self._assign_epoch(leader_epoch, first)
                self._epoch_hint = leader_epoch
            self._append_locked(parts, size, first, last, max_timestamp, offset_of_max, count)
            if idempotent:
                self._producers.update(header, first, max_timestamp)
        return LogAppendInfo(
            first, last, max_timestamp, offset_of_max, NO_TIMESTAMP, 1, count, size
        )

    def _duplicate_info(self, duplicate: BatchMetadata) -> LogAppendInfo:
        """The answer to a retried batch the log already holds: where it was stored."""
        first, last = duplicate.first_offset, duplicate.last_offset
        append_time = duplicate.timestamp if self._log_append_time else NO_TIMESTAMP
        logger.debug("%s: duplicate batch %d..%d, not stored again", self.name, first, last)
        return LogAppendInfo(
            first, last, duplicate.timestamp, last, append_time, 0, 0, 0, duplicate=True
        )

    def _record_producer_batches(
        self,
        headers: Sequence[BatchHeader],
        first_offset: int,
        append_time: int,
        markers: Sequence[EndTransactionMarker | None] | None,
    ) -> None:
        """Producer state after a leader append of ``headers`` from ``first_offset``
        (``markers[i]``: the marker of control batch ``i``); the append went to
        the active segment, whose ``.txnindex`` takes the aborts."""
        index = self._view.segments[-1].txn_index
        offset = first_offset
        for i, header in enumerate(headers):
            if header.producer_id >= 0:
                timestamp = append_time if append_time != NO_TIMESTAMP else header.max_timestamp
                marker = markers[i] if markers is not None else None
                self._apply_producer_batch(header, offset, timestamp, marker, index)
            offset += header.last_offset_delta + 1
        if any(h.attributes & _TXN_BITS for h in headers):
            self._update_first_unstable_offset()

    @_io("an append to")
    def append_control(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: ControlRecordType,
        coordinator_epoch: int,
        leader_epoch: int,
        *,
        timestamp: int | None = None,
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT marker for the producer's transaction as the
        leader (Kafka's WriteTxnMarkers on a partition leader; the transaction
        coordinator's append).  Raises InvalidProducerEpochError for an older
        producer epoch and TransactionCoordinatorFencedError for an older
        coordinator epoch than the producer's last marker."""
        marker = EndTransactionMarker(ControlRecordType(control_type), coordinator_epoch)
        batch = build_control_batch(
            producer_id,
            producer_epoch,
            marker,
            self._time_ms() if timestamp is None else timestamp,
        )
        return self.append_as_leader(batch, leader_epoch, origin=AppendOrigin.COORDINATOR)

    @_io("an append to")
    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Store batches copied from the leader, keeping their offsets and epochs.

        Offsets must start at or after the log end and increase from batch to
        batch; gaps (from a compacted leader) are allowed.
        """
        headers = self._validate(batches)
        markers = self._markers(batches, headers)
        for previous, header in itertools.pairwise(headers):
            if header.base_offset <= previous.last_offset:
                raise NonMonotonicOffsetError(
                    f"batch base offset {header.base_offset} is not above the previous batch's "
                    f"last offset {previous.last_offset}",
                    header.position,
                )
        with self._lock:
            self._check_open()
            if headers[0].base_offset < self._log_end_offset:
                raise NonMonotonicOffsetError(
                    f"first offset {headers[0].base_offset} is below the log end offset "
                    f"{self._log_end_offset} of {self.name}",
                    headers[0].position,
                )
            max_timestamp, offset_of_max = NO_TIMESTAMP, headers[0].base_offset
            for header in headers:
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                if header.partition_leader_epoch >= 0:
                    self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            records = sum(h.record_count for h in headers)
            self._epoch_hint = None
            self._append_locked(
                [batches],
                len(batches),
                headers[0].base_offset,
                headers[-1].last_offset,
                max_timestamp,
                offset_of_max,
                records,
            )
            index = self._view.segments[-1].txn_index
            for i, header in enumerate(headers):
                if header.producer_id >= 0:
                    marker = markers[i] if markers is not None else None
                    self._apply_producer_batch(
                        header, header.base_offset, header.max_timestamp, marker, index
                    )
            if any(h.attributes & _TXN_BITS for h in headers):
                self._update_first_unstable_offset()
            return LogAppendInfo(
                headers[0].base_offset,
                headers[-1].last_offset,
                max_timestamp,
                offset_of_max,
                NO_TIMESTAMP,
                len(headers),
                records,
                len(batches),
            )

    def _validate(self, buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
        if len(buf) == 0:
            raise CorruptRecordError("empty append: no record batch", 0)
        return list(iter_batches(buf, max_batch_size=self._config.max_message_bytes))

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        latest = self.leader_epoch_cache.latest_epoch
        if latest is None or epoch > latest:
            self.leader_epoch_cache.assign(epoch, start_offset)

    def _append_locked(
        self,
        parts: Sequence[bytes | bytearray | memoryview],
        size: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        records: int,
    ) -> None:
        segment = self._maybe_roll(size, first_offset, last_offset, max_timestamp)
        segment.append(last_offset, max_timestamp, offset_of_max_timestamp, parts, size)
        self._log_end_offset = last_offset + 1
        self._unflushed_records += records
        if self._unflushed_records >= self._flush_messages:
            self.flush()
        elif not self._flush_pending:
            self._maybe_pend_flush()

    def _maybe_pend_flush(self) -> None:
        """Put this log on its dir's list of logs to flush by ``flush.ms``, once it
        holds unflushed records under a finite one (caller holds the lock)."""
        if self._unflushed_records and self._flush_on_time and not self._flush_pending:
            self._flush_pending = True
            self._marks.unflushed(self)

    def _set_log_start_offset(self, offset: int) -> None:
        if offset != self._log_start_offset:
            self._log_start_offset = offset
            self._marks.log_start_offsets = True

    def _set_recovery_point(self, offset: int) -> None:
        if offset != self._recovery_point:
            self._recovery_point = offset
            self._marks.recovery_points = True

    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, max_timestamp: int
    ) -> LogSegment:
        segment = self._view.segments[-1]
        config = self._config
        if segment.accepts(size, last_offset, max_timestamp, self._segment_bytes, self._segment_ms):
            return segment
        now = self._time_ms()
        reason = None
        if segment.size > 0 and segment.size + size > config.segment_bytes:
            reason = f"{segment.size} + {size} bytes would exceed segment.bytes"
        elif (
            segment.size > 0
            and segment.time_waited_for_roll(now, max_timestamp) > config.segment_ms
        ):
            reason = f"segment older than segment.ms {config.segment_ms}"
        elif segment.is_full:
            reason = "an index is full"
        elif last_offset - segment.base_offset > INT32_MAX:
            reason = (
                f"offset {last_offset} does not fit a relative offset from {segment.base_offset}"
            )
        if reason is None:
            return segment
        logger.debug("rolling %s: %s", self.name, reason)
        return self._roll_locked(first_offset)

    def roll_due(self, size: int) -> bool:
        """Whether an append of ``size`` bytes would roll the log now: by the
        active segment's size, a full index or its age by the clock.  Read
        without the lock, so an estimate; it lets a caller on a thread that
        must not block (the broker's event loop) hand that append to another."""
        segment = self._view.segments[-1]
        return not segment.accepts(
            size, self._log_end_offset, self._time_ms(), self._segment_bytes, self._segment_ms
        )

    @_io("a roll of")
    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset."""
        with self._lock:
            self._check_open()
            return self._roll_locked(self._log_end_offset)

    def _roll_locked(self, expected_next_offset: int) -> LogSegment:
        old = self._view.segments[-1]
        new_base = max(expected_next_offset, self._log_end_offset)
        if old.base_offset == new_base:
            if old.size == 0:
                return old  # an empty active segment already starts there
            raise StorageError(f"cannot roll {self.name}: a segment at {new_base} exists")
        # Producer state as of the new segment's base: recovery replays from here.
        self._producers.take_snapshot(new_base)
        segment = self._new_segment(new_base)
        old.on_became_inactive()
        self._view = _View.of((*self._view.segments, segment))
        self._background(lambda: self.flush(new_base))
        return segment

    # -- reading ------------------------------------------------------------

    @_io("a read of")
    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes:
        """Whole batches starting with the one that holds ``offset``, read from the
        segment in one piece (nothing is trimmed or copied afterwards).

        At most ``max_bytes`` unless the first batch alone is larger (then it
        is returned whole when ``min_one_message``); ``max_offset`` (exclusive,
        e.g. the high watermark) stops before the batch holding it.  Reading
        at the log end returns b"".
        """
        self._check_online()
        view = self._view
        start, end = self._log_start_offset, self._log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: log start offset "
                f"{start}, log end offset {end}"
            )
        if offset == end or (max_offset is not None and offset >= max_offset):
            return b""
        for segment in view.segments[view.floor_index(offset) :]:
            max_position = None
            if max_offset is not None and max_offset < end:
                hit = segment.translate_offset(
                    max_offset, segment.offset_index.lookup(max_offset).position
                )
                if hit is not None:
                    max_position = hit.position
            data = segment.read(offset, max_bytes, max_position, min_one_message)
            if data:
                return data
            if max_position is not None:
                return b""
        return b""

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """Kafka's ListOffsets: the first offset whose record timestamp is >= ``timestamp``.

        ``EARLIEST_TIMESTAMP`` (-2) gives the log start offset and
        ``LATEST_TIMESTAMP`` (-1) the log end offset, both with timestamp -1.
        None when no record is that recent.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, self._log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, self._log_end_offset)
        if timestamp < 0:
            raise ValueError(f"invalid timestamp {timestamp} for an offset lookup")
        start = self._log_start_offset
        for segment in self._view.segments:
            if segment.largest_timestamp < timestamp or segment.size == 0:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    # -- truncation and retention ---------------------------------------

    @_io("a truncation of")
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch whose last offset is >= ``offset`` (whole batches).

        Returns False when there was nothing to remove.  The log end offset
        becomes the end of the last remaining batch.
        """
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate {self.name} to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return False
            if offset < self._log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            segments = self._view.segments
            doomed = [s for s in segments if s.base_offset >= offset]
            keep = [s for s in segments if s.base_offset < offset]
            if not keep:
                self.truncate_fully_and_start_at(offset)
                return True
            self._remove_segments(doomed, "truncation")
            self._view = _View.of(keep)
            active = keep[-1]
            active.truncate_to(offset)
            active.offset_index.resize(self._config.segment_index_bytes)
            active.time_index.resize(self._config.segment_index_bytes)
            self._log_end_offset = active.read_next_offset()
            if self._log_end_offset < self._log_start_offset:
                # The batch holding the log start offset went: nothing visible remains.
                self.truncate_fully_and_start_at(self._log_start_offset)
                return True
            self._after_truncation()
            end = self._log_end_offset
            producers = self._producers
            producers.delete_snapshots(range(keep[0].base_offset, end + 1))
            if producers.producers or producers.unreplicated:  # truncation adds no producer
                self._rebuild_producer_state(end)
                producers.on_high_watermark_updated(self._high_watermark)
            self._update_first_unstable_offset()
            return True

    @_io("a truncation of")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at ``offset``."""
        with self._lock:
            self._check_open()
            old = list(self._view.segments)
            self._remove_segments(old, "full truncation")
            self._view = _View.of([self._new_segment(offset)])
            self._log_end_offset = offset
            self._set_log_start_offset(offset)
            self.leader_epoch_cache.clear_and_flush()
            self._producers.truncate_fully()
            self._after_truncation()
            self._update_first_unstable_offset()

    def _after_truncation(self) -> None:
        self._epoch_hint = None
        self._set_recovery_point(min(self._recovery_point, self._log_end_offset))
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)

    @_io("deleting records of")
    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset``.

        Segments wholly below it are removed; returns the new log start offset.
        """
        with self._lock:
            self._check_open()
            if offset > self._log_end_offset or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.name} before {offset}: log end offset "
                    f"is {self._log_end_offset}"
                )
            if offset > self._log_start_offset:
                self._set_log_start_offset(offset)
                self._high_watermark = max(self._high_watermark, offset)
                self.leader_epoch_cache.truncate_from_start(offset)
                self._after_start_moved()
            self._delete_segments_where(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset,
                "log start offset",
            )
            return self._log_start_offset

    def retention_due(self, now_ms: int) -> bool:
        """Whether ``delete_old_segments`` could remove anything at ``now_ms``, or
        removed segments wait for their delay.  Every rule removes segments oldest
        first and stops at the first it keeps, so the first segment decides.
        Read without the lock: a cheap first look, which the removal repeats."""
        if any(due <= now_ms for due, _ in self._pending_deletes):
            return True
        segments = self._view.segments
        first = segments[0]
        following = segments[1] if len(segments) > 1 else None
        if following is None:
            if first.size == 0:
                return False
        elif following.base_offset <= self._log_start_offset:
            return True
        config = self._config
        if not config.delete:
            return False
        if config.retention_ms >= 0 and now_ms - first.largest_timestamp > config.retention_ms:
            return True
        return config.retention_bytes >= 0 and self.size - config.retention_bytes >= first.size

    def delete_old_segments(self) -> int:
        """Apply retention (time, size, log start offset); returns segments removed."""
        with self._lock:
            if self._closed:
                return 0
            config = self._config
            deleted = 0
            if config.delete and config.retention_ms >= 0:
                now = self._time_ms()
                deleted += self._delete_segments_where(
                    lambda seg, nxt: now - seg.largest_timestamp > config.retention_ms,
                    f"retention.ms {config.retention_ms}",
                )
            if config.delete and config.retention_bytes >= 0:
                excess = self.size - config.retention_bytes

                def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True

                deleted += self._delete_segments_where(
                    over_size, f"retention.bytes {config.retention_bytes}"
                )
            deleted += self._delete_segments_where(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset,
                "log start offset",
            )
            self.delete_pending_segments()
            return deleted

    def _delete_segments_where(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> int:
        segments = self._view.segments
        doomed: list[LogSegment] = []
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
            if following is None and segment.size == 0:
                break
            if not predicate(segment, following):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if doomed[-1] is segments[-1]:
            self._roll_locked(self._log_end_offset)  # everything expired: roll first
        self._view = _View.of([s for s in self._view.segments if s not in doomed])
        self._remove_segments(doomed, reason)
        first_base = self._view.segments[0].base_offset
        # the snapshots of deleted segments go with them; the producers stay (Kafka 2.5+)
        self._producers.delete_snapshots(range(first_base, self._log_end_offset + 1))
        self._set_log_start_offset(max(self._log_start_offset, first_base))
        self._high_watermark = max(self._high_watermark, self._log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self._after_start_moved()
        return len(doomed)

    def _after_start_moved(self) -> None:
        """Transactions after the log start offset moved: completed ones below it
        are forgotten, and the first unstable offset is not below it."""
        producers = self._producers
        if producers.unreplicated:
            producers.unreplicated = {
                first: done
                for first, done in producers.unreplicated.items()
                if done[1] >= self._log_start_offset
            }
        if producers.ongoing or self._first_unstable_offset is not None:
            self._update_first_unstable_offset()

    def _remove_segments(self, segments: Sequence[LogSegment], reason: str) -> None:
        """Rename to ``.deleted`` now, remove after ``file.delete.delay.ms``.

        Readers holding an older snapshot keep reading: the files stay open
        until the delayed removal.
        """
        due = self._time_ms() + self._config.file_delete_delay_ms
        for segment in segments:
            logger.info("deleting %s (%s)", segment.log_path, reason)
            segment.change_suffix(files.DELETED_SUFFIX)
            self._pending_deletes.append((due, segment))

    def delete_pending_segments(self, force: bool = False) -> int:
        """Remove ``.deleted`` segments whose delay has passed; returns how many."""
        with self._lock:
            now = self._time_ms()
            due = [s for t, s in self._pending_deletes if force or t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if s not in due]
        for segment in due:
            segment.close_and_delete()
        return len(due)

    # -- compaction support ---------------------------------------------

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty ``.cleaned`` segment for the cleaner to fill."""
        path = self.directory / (
            files.segment_file_name(base_offset, files.LOG_SUFFIX) + files.CLEANED_SUFFIX
        )
        for stale in self.directory.glob(path.name.replace(files.LOG_SUFFIX, ".*")):
            stale.unlink()
        return self._new_segment(base_offset, files.CLEANED_SUFFIX)

    def replace_segments(self, cleaned: LogSegment, old: Sequence[LogSegment]) -> None:
        """Swap a compaction output in for the segments it replaces.

        1. ``.cleaned`` → ``.swap``: the commit point.  A crash before it
           leaves the old segments; recovery deletes the ``.cleaned`` files.
        2. old segments → ``.deleted``: recovery deletes them, and also any
           old segment a ``.swap`` overlaps, so a crash here loses nothing.
        3. ``.swap`` → final name: recovery does this too if it finds a ``.swap``.
        """
        with self._lock:
            self._check_open()
            current = self._view.segments
            if any(s not in current for s in old):
                raise StorageError(f"segments of {self.name} changed while cleaning; swap aborted")
            cleaned.flush()
            cleaned.change_suffix(files.SWAP_SUFFIX)
            files.fsync_dir(self.directory)
            self._view = _View.of([s for s in current if s not in old])
            self._remove_segments(old, "replaced by compaction")
            cleaned.change_suffix("")
            self._view = _View.of((*self._view.segments, cleaned))
            files.fsync_dir(self.directory)

    # -- durability and lifecycle ----------------------------------------

    @_io("a flush of")
    def flush(self, offset: int | None = None, *, synced: bool = False) -> None:
        """fsync every segment holding offsets in [recovery point, ``offset``).
        ``synced``: the caller synced the file systems after this log's last
        write (``os.sync``, a clean shutdown): nothing is left to fsync, only
        the recovery point moves."""
        with self._lock:
            if self._closed:
                return
            self._check_online()
            target = self._log_end_offset if offset is None else offset
            if target <= self._recovery_point:
                return
            view = self._view
            dirty = [
                s
                for i, s in enumerate(view.segments)
                if s.base_offset < target
                and (
                    i + 1 == len(view.segments)
                    or view.segments[i + 1].base_offset > self._recovery_point
                )
            ]
            if not synced:
                for segment in dirty:
                    if not segment.closed:
                        segment.flush()
            self.leader_epoch_cache.sync(synced)  # before the recovery point passes them
            self._set_recovery_point(max(self._recovery_point, target))
            if target >= self._log_end_offset:  # a roll's flush leaves the new segment's
                self._unflushed_records = 0
            self._last_flush_ms = self._time_ms()

    # -- producer state ----------------------------------------------------

    def producer_state(self) -> dict[int, ProducerStateEntry]:
        """A copy of the idempotent producers' table, by producer id."""
        with self._lock:
            return self._producers.entries()

    @_io("a producer snapshot of")
    def take_producer_snapshot(self, *, sync: bool = True) -> None:
        """Snapshot the producer table at the log end (a clean shutdown); with
        ``sync=False`` durable only once the caller syncs the file system."""
        with self._lock:
            if not self._closed:
                self._check_online()
                self._producers.take_snapshot(self._log_end_offset, sync=sync)

    def remove_expired_producers(self) -> int:
        """Forget producers silent for ``producer.id.expiration.ms``; how many went."""
        with self._lock:
            return self._producers.remove_expired(self._time_ms())

    def flush_if_due(self) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush.  True while
        records stay unflushed under a finite ``flush.ms``: the caller (the log
        manager's flush tick, which took this log off its dir's list) hands it
        back to ``DirtyMarks.unflushed`` to look again."""
        with self._lock:
            if self._closed:
                self._flush_pending = False
                return False
            if self._time_ms() - self._last_flush_ms >= self._config.flush_ms:
                self.flush()
                if self._log_end_offset <= self._recovery_point:
                    self._unflushed_records = 0
            self._flush_pending = bool(self._unflushed_records) and self._flush_on_time
            return self._flush_pending

    @property
    def has_producers(self) -> bool:
        """Whether the log remembers any idempotent producer (a read without the lock)."""
        return bool(self._producers.producers)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.name} is closed")
        self._check_online()

    def _check_online(self) -> None:
        reason = self._offline_reason
        if reason is None and self._failure is not None:
            reason = self._failure.reason(self._log_dir)
        if reason is not None:
            raise LogDirOfflineError(self._log_dir, reason)

    def _io_failed(self, what: str, exc: OSError) -> LogDirOfflineError:
        """``what`` failed with ``exc``: the dir (this log, without a channel) goes
        offline; the error to raise."""
        doing = f"{what} {self.name}"
        if self._failure is not None:
            return self._failure.fail(self._log_dir, doing, exc)
        if self._offline_reason is None:
            self._offline_reason = f"{doing} failed: {exc.strerror or exc}"
        return LogDirOfflineError(self._log_dir, self._offline_reason)

    @property
    def online(self) -> bool:
        """False once an I/O error took the log's dir offline."""
        try:
            self._check_online()
        except LogDirOfflineError:
            return False
        return True

    def close(self, *, sync_indexes: bool = True) -> None:
        """Flush nothing, close every file; pending deletions are carried out now.
        ``sync_indexes=False``: the indexes' last pages are left to the kernel, for
        a caller that syncs the file system next (a clean shutdown)."""
        with self._lock:
            if self._closed:
                return
            self.delete_pending_segments(force=True)
            self._closed = True
            self._marks.compacted(self, False)
            for segment in self._view.segments:
                segment.close(sync_indexes=sync_indexes)

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion)."""
        with self._lock:
            self.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, start={self._log_start_offset}, end={self._log_end_offset}, "
            f"segments={len(self._view.segments)})"
        )


def _upconvert_if_legacy(buf: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    if len(buf) > MAGIC_OFFSET and buf[MAGIC_OFFSET] < CURRENT_MAGIC:
        from .legacy import upconvert

        return upconvert(bytes(buf), renumber=True)
    return buf


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "Log",
    "LogAppendInfo",
]
