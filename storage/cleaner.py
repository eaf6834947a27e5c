"""Log compaction: keep at least the last record of every key.

A compacted log has a *clean* head, already compacted, and a *dirty* tail
that starts at the offset recorded in ``cleaner-offset-checkpoint``.  The part
of the tail that may be cleaned ends at the *first uncleanable offset*: the
active segment's base, the first segment younger than
``min.compaction.lag.ms``, or the log's first unstable offset (an undecided
transaction), whichever is lower.  A log is cleaned when::

    dirty ratio = cleanable bytes / (clean bytes + cleanable bytes)
               >= min.cleanable.dirty.ratio

One pass over a log:

1. Build an ``OffsetMap`` (key → last offset) over the cleanable range, up to
   its capacity; the range actually covered ends at a segment boundary.
2. Group the segments from the log start to that end so each group fits one
   segment (``segment.bytes``, index sizes, int32 relative offsets).
3. Copy each group into a ``.cleaned`` segment, keeping a record unless the
   map holds a later offset for its key, or it is a tombstone (null value)
   in a segment older than ``delete.retention.ms``.  Batches that keep every
   record are copied byte for byte; others are re-encoded with their original
   base offset, last offset, epoch, codec and producer fields, so offsets and
   order never change.  A producer's last batch and last data batch, and
   each group's last batch, are kept even when emptied.

   Transactions (as Kafka's cleaner, ``_TxnCleaning``): every record of an
   aborted transaction is removed (its batches found from the ``.txnindex``
   entries overlapping the range), and its keys never enter the offset map.
   A COMMIT or ABORT marker goes once no batch of its transaction is left
   and its segment is older than ``delete.retention.ms`` (the tombstone
   rule); until then an ABORT marker whose transaction still has a batch
   keeps its ``.txnindex`` entry in the cleaned segment.
4. Swap each group in with ``Log.replace_segments`` (the ``.cleaned`` →
   ``.swap`` → rename protocol; each step is crash-safe, see docs/storage.md).
5. Record the new first dirty offset in ``cleaner-offset-checkpoint``.

Thread safety: ``LogCleaner`` runs on one thread (the log manager's
scheduler); ``self._lock`` guards the checkpoint cache.  Logs guard
themselves; a swap that races with truncation or retention is refused by the
log and the pass is abandoned, leaving the log as it was.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import files
from .batch import BatchHeader, Compression, read_header
from .checkpoints import OffsetCheckpointFile
from .control import ControlRecordType, marker_of_batch
from .errors import CorruptRecordError, StorageError
from .log import Clock, Log, wall_clock_ms
from .records import decode_batch, decode_keys, encode_batch
from .segment import INT32_MAX, LogSegment
from .txn_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from .manager import LogManager

logger = logging.getLogger(__name__)

DEFAULT_MAP_CAPACITY = 4_000_000  # keys one pass can de-duplicate


class OffsetMap:
    """Key → latest offset, for one cleaning pass.

    Slots are addressed by a hash of the key, but every lookup also compares
    the stored key, so two keys whose hashes collide never shadow each other
    (the loser goes to an exact side table).  With the default hash this is
    exactly a Python dict, which hashes and then compares keys itself; a
    custom ``hash_fn`` (tests force collisions with one) takes the explicit
    slot path.  Not thread-safe; one pass owns it.
    """

    def __init__(self, capacity: int, hash_fn: Callable[[bytes], int] | None = None) -> None:
        self.capacity = capacity
        self._hash = hash_fn
        self._exact: dict[bytes, int] = {}
        self._slots: dict[int, tuple[bytes, int]] = {}
        if hash_fn is None:
            self.put = self._exact.__setitem__  # type: ignore[method-assign,assignment]
            self.get = self._exact.get  # type: ignore[method-assign,assignment]

    def __len__(self) -> int:
        return len(self._slots) + len(self._exact)

    @property
    def is_full(self) -> bool:
        return len(self) >= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        assert self._hash is not None
        h = self._hash(key)
        slot = self._slots.get(h)
        if slot is None or slot[0] == key:
            self._slots[h] = (key, offset)
        else:
            self._exact[key] = offset

    def get(self, key: bytes) -> int | None:
        assert self._hash is not None
        slot = self._slots.get(self._hash(key))
        if slot is not None and slot[0] == key:
            return slot[1]
        return self._exact.get(key)


@dataclass
class CleanerStats:
    """Totals of one or more passes, for logs and benchmarks."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    passes: int = 0
    seconds: float = 0.0
    cleaned_logs: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CleanableLog:
    """A log with its dirty range, as the cleaner ranks them."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


class LogCleaner:
    """Compacts the dirtiest eligible log of a LogManager on each ``clean_once``."""

    def __init__(
        self,
        manager: LogManager,
        *,
        time_ms: Clock | None = None,
        map_capacity: int = DEFAULT_MAP_CAPACITY,
        hash_fn: Callable[[bytes], int] | None = None,
    ) -> None:
        self._manager = manager
        self._time_ms = time_ms or wall_clock_ms
        self._map_capacity = map_capacity
        self._hash_fn = hash_fn
        self._lock = threading.Lock()
        self.stats = CleanerStats()

    def _checkpoint_file(self, log_dir: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(log_dir / files.CLEANER_CHECKPOINT)

    def first_dirty_offsets(self) -> dict[files.TopicPartition, int]:
        offsets: dict[files.TopicPartition, int] = {}
        for log_dir in self._manager.log_dirs:
            offsets.update(self._checkpoint_file(log_dir).read())
        return offsets

    def _write_checkpoint(self, tp: files.TopicPartition, offset: int) -> None:
        log_dir = self._manager.log_dir_of(tp)
        if log_dir is None:
            return
        with self._lock:
            checkpoint = self._checkpoint_file(log_dir)
            offsets = checkpoint.read()
            offsets[tp] = offset
            live = self._manager.all_logs()
            checkpoint.write({k: v for k, v in offsets.items() if k in live})

    def cleanable_logs(self) -> list[CleanableLog]:
        """Every compacted log whose dirty ratio reaches its threshold, dirtiest first."""
        compacted = self._manager.compacted_logs()
        if not compacted:
            return []  # nothing to read the checkpoints for
        now = self._time_ms()
        checkpoints = self.first_dirty_offsets()
        found: list[CleanableLog] = []
        for tp, log in compacted.items():
            candidate = describe_dirty_range(log, checkpoints.get(tp, 0), now)
            config = log.config
            forced = candidate.cleanable_bytes > 0 and _oldest_dirty_age(candidate, now) > (
                config.max_compaction_lag_ms
            )
            if candidate.cleanable_bytes > 0 and (
                candidate.dirty_ratio >= config.min_cleanable_dirty_ratio or forced
            ):
                found.append(candidate)
        found.sort(key=lambda c: c.dirty_ratio, reverse=True)
        return found

    def clean_once(self) -> bool:
        """Clean the dirtiest log, if any is due; returns whether one was cleaned."""
        candidates = self.cleanable_logs()
        if not candidates:
            return False
        target = candidates[0]
        try:
            end = clean_log(
                target.log,
                target.first_dirty_offset,
                target.first_uncleanable_offset,
                now_ms=self._time_ms(),
                map_capacity=self._map_capacity,
                hash_fn=self._hash_fn,
                stats=self.stats,
            )
        except StorageError as exc:
            logger.warning("compaction of %s abandoned: %s", target.log.name, exc)
            return False
        self._write_checkpoint(target.log.topic_partition, end)
        return True


def describe_dirty_range(log: Log, checkpoint: int, now_ms: int) -> CleanableLog:
    """Where the dirty range of ``log`` starts and ends, and its byte counts."""
    segments = log.segments()
    first_dirty = checkpoint
    if first_dirty < log.log_start_offset or first_dirty > log.log_end_offset:
        first_dirty = log.log_start_offset
    uncleanable = segments[-1].base_offset
    unstable = log.first_unstable_offset
    if unstable is not None:  # never past an undecided transaction
        uncleanable = min(uncleanable, unstable)
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment in segments[:-1]:
            if segment.base_offset >= first_dirty and segment.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    clean = sum(s.size for s in _segments_in(segments, log.log_start_offset, first_dirty))
    dirty = sum(s.size for s in _segments_in(segments, first_dirty, uncleanable))
    return CleanableLog(log, first_dirty, max(uncleanable, first_dirty), clean, dirty)


def _oldest_dirty_age(candidate: CleanableLog, now_ms: int) -> int:
    for segment in _segments_in(
        candidate.log.segments(), candidate.first_dirty_offset, candidate.first_uncleanable_offset
    ):
        return now_ms - segment.largest_timestamp
    return 0


def _segments_in(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Segments holding offsets in [start, end): whole segments below ``end``."""
    chosen = []
    for i, segment in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if following is not None and following <= start:
            continue
        if segment.base_offset >= end or following is None or following > end:
            break
        chosen.append(segment)
    return chosen


def build_offset_map(
    log: Log, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats
) -> int:
    """Fill ``offset_map`` from whole segments of [start, end); returns where it
    stopped.  Aborted transactions' records are left out."""
    stop = start
    txns = _TxnCleaning(log.collect_aborted_transactions(start, end))
    for segment in _segments_in(log.segments(), start, end):
        if offset_map.is_full:
            break
        for header in segment.iter_headers():
            if header.is_control:
                txns.on_control_batch(header, segment)
                continue
            if txns.on_data_batch(header) or header.last_offset < start:
                continue
            _, keys = decode_keys(segment.read_batch(header))
            put = offset_map.put
            for offset, key, _ in keys:
                if key is not None and offset >= start:
                    put(key, offset)
            stats.bytes_read += header.size
        stop = segments_end(log, segment)
    return stop


def segments_end(log: Log, segment: LogSegment) -> int:
    """The base offset of the segment after ``segment`` (the log end when last)."""
    segments = log.segments()
    for i, s in enumerate(segments):
        if s is segment:
            return segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
    raise StorageError(f"{segment} is no longer part of {log.name}")


def group_segments(
    segments: Sequence[LogSegment], max_size: int, max_index_size: int
) -> list[list[LogSegment]]:
    """Consecutive groups whose total log size, index size and offset span fit one segment."""
    groups: list[list[LogSegment]] = []
    current: list[LogSegment] = []
    size = index_size = 0
    for segment in segments:
        seg_index = segment.offset_index.entries * 8 + segment.time_index.entries * 12
        fits = (
            current
            and size + segment.size <= max_size
            and index_size + seg_index <= max_index_size
            and segment.read_next_offset() - 1 - current[0].base_offset <= INT32_MAX
        )
        if current and not fits:
            groups.append(current)
            current, size, index_size = [], 0, 0
        current.append(segment)
        size += segment.size
        index_size += seg_index
    if current:
        groups.append(current)
    return groups


def clean_log(
    log: Log,
    first_dirty_offset: int,
    first_uncleanable_offset: int,
    *,
    now_ms: int,
    map_capacity: int = DEFAULT_MAP_CAPACITY,
    hash_fn: Callable[[bytes], int] | None = None,
    stats: CleanerStats | None = None,
) -> int:
    """One compaction pass over ``log``; returns the new first dirty offset."""
    stats = stats if stats is not None else CleanerStats()
    started = time.monotonic()
    offset_map = OffsetMap(map_capacity, hash_fn)
    end = build_offset_map(log, first_dirty_offset, first_uncleanable_offset, offset_map, stats)
    if end <= first_dirty_offset:
        return first_dirty_offset
    horizon = now_ms - log.config.delete_retention_ms
    to_clean = _segments_in(log.segments(), log.log_start_offset, end)
    producer_batches = _last_batches_of_producers(to_clean)
    txns = _TxnCleaning(log.collect_aborted_transactions(log.log_start_offset, end))
    config = log.config
    for group in group_segments(to_clean, config.segment_bytes, config.segment_index_bytes):
        cleaned = log.new_cleaned_segment(group[0].base_offset)
        txns.cleaned_index = cleaned.txn_index
        swapped = False
        try:
            for segment in group:
                # tombstones and transaction markers go after delete.retention.ms
                keep_tombstones = segment.largest_timestamp > horizon
                headers = segment.iter_headers()
                for header in headers:
                    # Keep a producer's last batch and last data batch, and the
                    # group's last batch, even when emptied: the first two for
                    # producer state, the last so the output ends at the group's
                    # last offset and recovery of a .swap knows exactly which old
                    # segments it replaces.
                    keep_empty = header.base_offset in producer_batches.get(
                        header.producer_id, ()
                    ) or (segment is group[-1] and header is headers[-1])
                    data: bytes | None
                    if header.is_control:
                        done = txns.on_control_batch(header, segment)
                        drop = done and not keep_tombstones and not keep_empty
                        data = None if drop else segment.read_batch(header)
                    else:
                        data = _filter_batch(
                            segment.read_batch(header),
                            header,
                            offset_map,
                            keep_tombstones,
                            keep_empty,
                            stats,
                            aborted=txns.on_data_batch(header),
                        )
                    if data is not None:
                        written = read_header(data)
                        cleaned.append(
                            written.last_offset,
                            written.max_timestamp,
                            written.last_offset,
                            [data],
                            len(data),
                        )
                        stats.bytes_written += len(data)
            cleaned.on_became_inactive()
            log.replace_segments(cleaned, group)
            swapped = True
        finally:
            if not swapped:
                cleaned.close_and_delete()
    stats.passes += 1
    stats.seconds += time.monotonic() - started
    stats.cleaned_logs.append(log.name)
    logger.info(
        "compacted %s up to offset %d: %d map keys, %d of %d records kept",
        log.name,
        end,
        len(offset_map),
        stats.records_retained,
        stats.records_read,
    )
    return end


def _last_batches_of_producers(segments: Sequence[LogSegment]) -> dict[int, tuple[int, int]]:
    """Producer id -> base offsets of its last batch and its last data batch."""
    last: dict[int, int] = {}
    last_data: dict[int, int] = {}
    for segment in segments:
        for header in segment.iter_headers():
            if header.producer_id >= 0:
                last[header.producer_id] = header.base_offset
                if not header.is_control:
                    last_data[header.producer_id] = header.base_offset
    return {pid: (offset, last_data.get(pid, offset)) for pid, offset in last.items()}


class _TxnCleaning:
    """What one pass knows of the transactions in the range it reads, batch by
    batch in offset order (after Kafka's CleanedTransactionMetadata).

    ``aborted`` are the ``.txnindex`` entries overlapping the range.  A
    transactional batch of a producer whose aborted transaction has begun
    (by first offset) is aborted: discarded.  A marker ends its producer's
    transaction; it may go when no batch of that transaction was read in
    this pass.  An ABORT marker that stays writes its entry to
    ``cleaned_index``, the ``.txnindex`` of the segment being written."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._pending = sorted(set(aborted), key=lambda t: t.first_offset, reverse=True)
        self._aborting: dict[int, tuple[AbortedTxn, bool]] = {}  # pid -> (txn, batch read)
        self._committing: set[int] = set()  # pids with a batch of a not-aborted txn read
        self.cleaned_index: TransactionIndex | None = None

    def _begin_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[-1].first_offset <= offset:
            txn = pending.pop()
            self._aborting.setdefault(txn.producer_id, (txn, False))

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Whether the batch belongs to an aborted transaction."""
        self._begin_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborting = self._aborting.get(header.producer_id)
        if aborting is not None:
            self._aborting[header.producer_id] = (aborting[0], True)
            return True
        self._committing.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, segment: LogSegment) -> bool:
        """Whether the marker may go (its transaction has no batch left)."""
        self._begin_up_to(header.last_offset)
        try:
            marker = marker_of_batch(segment.read_batch(header))
        except CorruptRecordError as exc:
            logger.warning("%s: keeping an unreadable control batch: %s", segment.log_path, exc)
            return False
        if marker is None:
            return True  # emptied already
        pid = header.producer_id
        if marker.control_type is ControlRecordType.ABORT:
            aborting = self._aborting.pop(pid, None)
            if aborting is not None and aborting[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(aborting[0])
                return False
            return True
        if pid in self._committing:
            self._committing.discard(pid)
            return False
        return True


def _filter_batch(
    data: bytes,
    header: BatchHeader,
    offset_map: OffsetMap,
    keep_tombstones: bool,
    producer_needs_it: bool,
    stats: CleanerStats,
    *,
    aborted: bool = False,
) -> bytes | None:
    """The batch to write for ``data``: itself, a re-encoded subset, or None
    (``aborted``: every record goes)."""
    if header.is_control:
        return data
    _, keys = decode_keys(data)
    stats.records_read += len(keys)
    keep = [
        not (
            aborted
            or (key is not None and (offset_map.get(key) or -1) > offset)
            or (tombstone and not keep_tombstones)
        )
        for offset, key, tombstone in keys
    ]
    retained = sum(keep)
    stats.records_retained += retained
    if retained == len(keys):
        return data  # untouched: copied byte for byte
    if not retained and not producer_needs_it:
        return None
    _, records = decode_batch(data)
    kept = [record for record, wanted in zip(records, keep, strict=True) if wanted]
    return encode_batch(
        kept,
        base_offset=header.base_offset,
        compression=Compression(header.compression),
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
        first_timestamp=header.first_timestamp if not kept else None,
        max_timestamp=header.max_timestamp if not kept else None,
    )
