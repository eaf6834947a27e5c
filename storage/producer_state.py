"""Idempotent producers' state of one partition, and its ``<offset>.snapshot`` files.

For every producer id seen in the log the partition keeps its newest epoch
and the sequence ranges of its last five batches (``ProducerStateEntry``),
after Kafka's ProducerStateManager.  Everything here is derived from the
batch headers in the ``.log`` (producerId, producerEpoch, baseSequence,
lastOffsetDelta, maxTimestamp): one update per batch, never per record.

The leader checks a client's batch against it before storing it
(``check_append``), with Kafka's rules (Kafka 2.5+ / 3.x):

* an epoch older than the newest seen: INVALID_PRODUCER_EPOCH;
* the same epoch and exactly the first and last sequence of one of the
  last five batches: a duplicate.  Nothing is stored; the append answers
  the offsets the batch was first stored at;
* the same epoch: the first sequence must follow the last one
  (``last + 1``; after 2^31-1 comes 0), else OUT_OF_ORDER_SEQUENCE_NUMBER;
* a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
* a producer id the partition holds no state for (never seen, expired, or
  its batches deleted by retention) is accepted at any sequence, as Kafka
  does since 2.5 (KIP-360); Kafka 2.0-2.4 answered UNKNOWN_PRODUCER_ID.

Followers do not check: they record what their leader stored.

Snapshot file (Kafka's ProducerSnapshot, version 1; big-endian)::

    offset  size  field
         0     2  version              1
         2     4  crc                  CRC-32C of every byte after this field
         6     4  entry count
        10    46  per entry: producerId int64, epoch int16, lastSequence int32,
                  lastOffset int64, offsetDelta int32 (last minus first offset
                  of the last batch), timestamp int64 (its max timestamp),
                  coordinatorEpoch int32 (-1), currentTxnFirstOffset int64 (-1)

``<offset>.snapshot`` holds the state of every batch below ``offset``.  It
keeps only each producer's last batch, so after a load from a snapshot
only that one batch can be recognised as a duplicate, as in Kafka.
Snapshots are written tmp → fsync → rename → fsync dir when a segment
rolls (named by the new segment's base offset) and at a clean shutdown (at
the log end).  A snapshot that fails its CRC is deleted and an older one
used; recovery replays the log after the snapshot it loaded.

Thread safety: none of its own.  The owning ``Log``'s lock guards every
call.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import crc32c

from . import files
from .batch import BatchHeader
from .errors import CorruptSnapshotError, InvalidProducerEpochError, OutOfOrderSequenceError

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

SNAPSHOT_VERSION = 1
_PREFIX = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_END = 6  # the CRC covers the bytes from here to the end


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping from 2^31-1 to 0 as producers do."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement``, wrapping below 0 to 2^31-1."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def last_sequence(header: BatchHeader) -> int:
    """The sequence of a batch's last record."""
    return increment_sequence(header.base_sequence, header.last_offset_delta)


class BatchMetadata(NamedTuple):
    """One stored batch of a producer: its last sequence and offset, and how many
    offsets (and so sequences) before those it starts."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer id's epoch and last batches (newest last, at most five)."""

    __slots__ = ("batches", "last_timestamp", "producer_epoch", "producer_id")

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_timestamp: int = -1,
        batches: Iterable[BatchMetadata] = (),
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_timestamp = last_timestamp
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The stored batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()  # a new epoch: the old sequences mean nothing now
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, self.last_timestamp, self.batches
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerStateEntry) and (
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            list(self.batches),
        ) == (other.producer_id, other.producer_epoch, other.last_timestamp, list(other.batches))

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"last_timestamp={self.last_timestamp}, batches={list(self.batches)})"
        )


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer in a snapshot file, as written (Kafka's ProducerEntry)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def first_sequence(self) -> int:
        if self.last_offset < 0:
            return NO_SEQUENCE
        return decrement_sequence(self.last_sequence, self.offset_delta)

    def to_entry(self) -> ProducerStateEntry:
        batches = (
            [BatchMetadata(self.last_sequence, self.last_offset, self.offset_delta, self.timestamp)]
            if self.last_offset >= 0
            else []
        )
        return ProducerStateEntry(self.producer_id, self.epoch, self.timestamp, batches)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a snapshot file holding ``entries``."""
    body = bytearray()
    count = 0
    for entry in entries:
        last = entry.batches[-1] if entry.batches else None
        body += _ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            last.last_seq if last else NO_SEQUENCE,
            last.last_offset if last else -1,
            last.offset_delta if last else 0,
            entry.last_timestamp,
            -1,
            -1,
        )
        count += 1
    tail = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(tail)) + tail


def decode_snapshot(data: bytes, source: str = "<snapshot>") -> list[SnapshotEntry]:
    """Parse a snapshot file; CorruptSnapshotError naming ``source`` when its
    version, length or CRC is wrong."""
    if len(data) < _PREFIX.size:
        raise CorruptSnapshotError(f"{source}: {len(data)} bytes, shorter than the header")
    version, crc, count = _PREFIX.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}")
    if count < 0 or len(data) != _PREFIX.size + count * _ENTRY.size:
        raise CorruptSnapshotError(
            f"{source}: {len(data)} bytes do not hold the {count} entries it declares"
        )
    actual = crc32c.crc32c(memoryview(data)[_CRC_END:])
    if actual != crc:
        raise CorruptSnapshotError(
            f"{source}: CRC mismatch: stored {crc:#010x}, computed {actual:#010x}"
        )
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, _PREFIX.size + i * _ENTRY.size))
        for i in range(count)
    ]


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorruptSnapshotError(f"cannot read {path}: {exc}") from exc
    return decode_snapshot(data, str(path))


class ProducerStateManager:
    """The producer table of one log and the snapshot files in its directory.
    The log keeps the table up to date with its end: every append under the
    log's lock updates both."""

    def __init__(
        self,
        directory: Path,
        name: str,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.directory = directory
        self.name = name
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}

    # -- the leader's check ------------------------------------------------------

    def check_append(self, headers: Sequence[BatchHeader]) -> BatchMetadata | None:
        """Check a client's batches (``base_offset`` not yet assigned) in order.

        Returns the stored batch a duplicate repeats (the first found; the
        append then stores nothing), or None when every batch may be stored.
        Raises InvalidProducerEpochError or OutOfOrderSequenceError."""
        staged: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) this append
        producers = self.producers
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            epoch = header.producer_epoch
            first_seq = header.base_sequence
            last_seq = increment_sequence(first_seq, header.last_offset_delta)
            entry = producers.get(producer_id)
            if entry is not None:
                duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            if producer_id in staged:
                current_epoch, current_last = staged[producer_id]
            elif entry is not None:
                current_epoch, current_last = entry.producer_epoch, entry.last_seq
            else:
                current_epoch, current_last = NO_PRODUCER_EPOCH, NO_SEQUENCE
            self._check_sequence(header, current_epoch, current_last)
            staged[producer_id] = (epoch, last_seq)
        return None

    def _check_sequence(self, header: BatchHeader, current_epoch: int, current_last: int) -> None:
        epoch, first_seq = header.producer_epoch, header.base_sequence
        who = f"producer {header.producer_id} in {self.name}"
        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of {who} is older than its last epoch {current_epoch}",
                header.position,
            )
        if current_epoch == NO_PRODUCER_EPOCH:
            return  # no state for this producer (new, expired, or retention took it)
        if epoch != current_epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"new epoch {epoch} of {who} starts at sequence {first_seq}, not 0 "
                    f"(last epoch {current_epoch})",
                    header.position,
                )
            return
        if not (first_seq == current_last + 1 or (first_seq == 0 and current_last == INT32_MAX)):
            raise OutOfOrderSequenceError(
                f"out of order sequence for {who}: {first_seq} (incoming), "
                f"{current_last} (last stored), epoch {epoch}",
                header.position,
            )

    # -- updates ------------------------------------------------------------------

    def update(self, header: BatchHeader, base_offset: int, timestamp: int) -> None:
        """Record a stored batch of a producer (``producer_id >= 0``) whose first
        offset is ``base_offset``."""
        producer_id = header.producer_id
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        delta = header.last_offset_delta
        entry.add_batch(
            header.producer_epoch,
            increment_sequence(header.base_sequence, delta),
            base_offset + delta,
            delta,
            timestamp,
        )

    def update_stored(self, headers: Iterable[BatchHeader]) -> None:
        """Record batches as they lie in the log (a follower's copy, a replay)."""
        for header in headers:
            if header.producer_id >= 0 and not header.is_control:
                self.update(header, header.base_offset, header.max_timestamp)

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms``; how many went."""
        expired = [pid for pid, entry in self.producers.items() if self._is_expired(entry, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return now_ms - entry.last_timestamp >= self.expiration_ms

    # -- snapshots ----------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files in the directory, ascending."""
        found = []
        for path in self.directory.iterdir():
            offset = files.parse_snapshot_file_name(path.name)
            if offset is not None:
                found.append(offset)
        return sorted(found)

    def _path(self, offset: int) -> Path:
        return self.directory / files.snapshot_file_name(offset)

    def take_snapshot(self, offset: int, *, sync: bool = True) -> Path:
        """Write the table, which must describe exactly the batches below
        ``offset``, as ``<offset>.snapshot`` (tmp → fsync → rename → fsync dir;
        ``sync=False`` leaves the fsyncs to the caller, ``files.atomic_write``).
        A snapshot of that offset already on disk describes the same batches and
        is kept, as Kafka's takeSnapshot keeps it: a log restarted and stopped
        with nothing appended writes nothing."""
        path = self._path(offset)
        if not path.exists():
            files.atomic_write(path, encode_snapshot(self.producers.values()), sync=sync)
        return path

    def load(self, limit: int, start_offset: int, now_ms: int) -> int:
        """Replace the table by the newest snapshot at or below ``limit`` (expired
        producers left out) and return its offset: where a replay of the log
        must start.  Snapshots that fail their checks are deleted and the next
        older one tried; with none, the table is empty from ``start_offset``."""
        self.producers = {}
        for offset in reversed([o for o in self.snapshot_offsets() if o <= limit]):
            if offset < start_offset:
                break
            path = self._path(offset)
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as exc:
                logger.warning("deleting producer snapshot: %s", exc)
                path.unlink(missing_ok=True)
                continue
            for snap in entries:
                entry = snap.to_entry()
                if not self._is_expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
            return offset
        return start_offset

    def delete_snapshots(self, keep: range) -> None:
        """Delete every snapshot whose offset lies outside ``keep``."""
        for offset in self.snapshot_offsets():
            if offset not in keep:
                self._path(offset).unlink(missing_ok=True)

    def truncate_fully(self) -> None:
        """Forget every producer and delete every snapshot (the log restarts empty)."""
        self.producers = {}
        self.delete_snapshots(range(0))

    def entries(self) -> dict[int, ProducerStateEntry]:
        """A copy of the table, by producer id."""
        return {pid: entry.copy() for pid, entry in self.producers.items()}


__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "ProducerStateEntry",
    "ProducerStateManager",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
    "increment_sequence",
    "last_sequence",
    "read_snapshot",
]
