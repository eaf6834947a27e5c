"""Idempotent and transactional producers' state of one partition, and its
``<offset>.snapshot`` files.

For every producer id seen in the log the partition keeps its newest epoch
and the sequence ranges of its last five batches (``ProducerStateEntry``),
after Kafka's ProducerStateManager.  Everything here is derived from the
batch headers in the ``.log`` (producerId, producerEpoch, baseSequence,
lastOffsetDelta, maxTimestamp, the transactional and control bits) and from
the one record of each control batch: one update per batch, never per record.

Transactions (KIP-98): a transactional data batch opens a transaction for
its producer (at the batch's first offset) when none is open; a COMMIT or
ABORT marker (``control.py``) closes it and yields a ``CompletedTxn``.  The
open transactions, by first offset, give the log its first unstable offset;
a completed one stays unstable until the high watermark passes its marker
(Kafka's "unreplicated" transactions).  An aborted transaction becomes an
entry of the marker's segment's ``.txnindex``, with the last stable offset
of that moment (``complete_txn``).

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
  does since 2.5 (KIP-360); Kafka 2.0-2.4 answered UNKNOWN_PRODUCER_ID;
* a non-transactional batch from a producer whose transaction is open:
  INVALID_TXN_STATE;
* a marker with an older producer epoch: INVALID_PRODUCER_EPOCH; one with a
  coordinator epoch older than the last marker's: the coordinator is a
  zombie, TRANSACTION_COORDINATOR_FENCED.

Appends from the broker's coordinators (``AppendOrigin.COORDINATOR``) are
checked for epochs only, not sequences or duplicates, as in Kafka.
Followers do not check: they record what their leader stored.

Snapshot file (Kafka's ProducerSnapshot, version 1; big-endian)::

    offset  size  field
         0     2  version              1
         2     4  crc                  CRC-32C of every byte after this field
         6     4  entry count
        10    46  per entry: producerId int64, epoch int16, lastSequence int32,
                  lastOffset int64, offsetDelta int32 (last minus first offset
                  of the last batch), timestamp int64 (its max timestamp),
                  coordinatorEpoch int32 (of the last marker, else -1),
                  currentTxnFirstOffset int64 (the open transaction's first
                  offset, else -1)

``<offset>.snapshot`` holds the state of every batch below ``offset``.  It
keeps only each producer's last batch, so after a load from a snapshot
only that one batch can be recognised as a duplicate, as in Kafka; the open
transactions are restored from it.  A producer whose transaction is open
never expires.
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
from .batch import TRANSACTIONAL_FLAG, BatchHeader
from .control import AppendOrigin, EndTransactionMarker
from .errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TXN = -1  # current_txn_first_offset when no transaction is open
NO_TXN_END = 2**63 - 1
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


class CompletedTxn(NamedTuple):
    """A transaction a marker closed: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateEntry:
    """One producer id's epoch and last batches (newest last, at most five),
    the coordinator epoch of its last marker and its open transaction."""

    __slots__ = (
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_timestamp: int = -1,
        batches: Iterable[BatchMetadata] = (),
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = NO_TXN,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_timestamp = last_timestamp
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

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

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            self.batches,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def _key(self) -> tuple[object, ...]:
        return (
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            list(self.batches),
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerStateEntry) and self._key() == other._key()

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"last_timestamp={self.last_timestamp}, batches={list(self.batches)}, "
            f"coordinator_epoch={self.coordinator_epoch}, "
            f"current_txn_first_offset={self.current_txn_first_offset})"
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
        return ProducerStateEntry(
            self.producer_id,
            self.epoch,
            self.timestamp,
            batches,
            self.coordinator_epoch,
            self.current_txn_first_offset if self.current_txn_first_offset >= 0 else NO_TXN,
        )


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
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
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


class _Staged(NamedTuple):
    """A producer as an append's earlier batches leave it (``check_append``)."""

    epoch: int
    last_seq: int
    in_txn: bool
    coordinator_epoch: int


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
        # open transactions: first offset -> producer id
        self.ongoing: dict[int, int] = {}
        # completed transactions whose marker the high watermark has not passed:
        # first offset -> (producer id, marker offset)
        self.unreplicated: dict[int, tuple[int, int]] = {}

    # -- the leader's check ------------------------------------------------------

    def check_append(
        self,
        headers: Sequence[BatchHeader],
        origin: AppendOrigin = AppendOrigin.CLIENT,
        markers: Sequence[EndTransactionMarker | None] | None = None,
    ) -> BatchMetadata | None:
        """Check a leader's batches (``base_offset`` not yet assigned) in order;
        ``markers[i]`` is the marker of control batch ``headers[i]``.

        Returns the stored batch a client's duplicate repeats (the first
        found; the append then stores nothing), or None when every batch may
        be stored.  Raises InvalidProducerEpochError, OutOfOrderSequenceError,
        InvalidTxnStateError or TransactionCoordinatorFencedError."""
        staged: dict[int, _Staged] = {}  # producer id -> its state after this append's batches
        producers = self.producers
        client = origin is AppendOrigin.CLIENT
        for i, header in enumerate(headers):
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            entry = producers.get(producer_id)
            current = staged.get(producer_id)
            if current is None:
                current = (
                    _Staged(
                        entry.producer_epoch,
                        entry.last_seq,
                        entry.in_transaction,
                        entry.coordinator_epoch,
                    )
                    if entry is not None
                    else _Staged(NO_PRODUCER_EPOCH, NO_SEQUENCE, False, -1)
                )
            epoch = header.producer_epoch
            if header.is_control:
                marker = markers[i] if markers is not None else None
                if marker is None:
                    continue  # an empty control batch changes nothing
                self._check_epoch(header, current.epoch)
                if current.coordinator_epoch > marker.coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"marker for producer {producer_id} in {self.name} has coordinator "
                        f"epoch {marker.coordinator_epoch}, older than the last one "
                        f"{current.coordinator_epoch} (a zombie coordinator)",
                        header.position,
                    )
                last_seq = current.last_seq if epoch == current.epoch else NO_SEQUENCE
                staged[producer_id] = _Staged(epoch, last_seq, False, marker.coordinator_epoch)
                continue
            first_seq = header.base_sequence
            last_seq = increment_sequence(first_seq, header.last_offset_delta)
            if client and entry is not None:
                duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            self._check_epoch(header, current.epoch)
            if client:
                self._check_sequence(header, current.epoch, current.last_seq)
            transactional = bool(header.attributes & TRANSACTIONAL_FLAG)
            if current.in_txn and not transactional:
                raise InvalidTxnStateError(
                    f"producer {producer_id} in {self.name} sent a non-transactional batch "
                    f"while its transaction is open",
                    header.position,
                )
            staged[producer_id] = _Staged(
                epoch, last_seq, current.in_txn or transactional, current.coordinator_epoch
            )
        return None

    def _check_epoch(self, header: BatchHeader, current_epoch: int) -> None:
        if header.producer_epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"epoch {header.producer_epoch} of producer {header.producer_id} in {self.name} "
                f"is older than its last epoch {current_epoch}",
                header.position,
            )

    def _check_sequence(self, header: BatchHeader, current_epoch: int, current_last: int) -> None:
        epoch, first_seq = header.producer_epoch, header.base_sequence
        who = f"producer {header.producer_id} in {self.name}"
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

    def update(
        self,
        header: BatchHeader,
        base_offset: int,
        timestamp: int,
        marker: EndTransactionMarker | None = None,
    ) -> CompletedTxn | None:
        """Record a stored batch of a producer (``producer_id >= 0``) whose first
        offset is ``base_offset``; ``marker`` is a control batch's marker.
        Returns the transaction a marker closed, for the caller to pass to
        ``complete_txn`` (after any batch before it, before any after it)."""
        producer_id = header.producer_id
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if header.is_control:
            return self._end_txn(entry, header, base_offset, timestamp, marker)
        delta = header.last_offset_delta
        entry.add_batch(
            header.producer_epoch,
            increment_sequence(header.base_sequence, delta),
            base_offset + delta,
            delta,
            timestamp,
        )
        if header.attributes & TRANSACTIONAL_FLAG and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self.ongoing[base_offset] = producer_id
        return None

    @staticmethod
    def _end_txn(
        entry: ProducerStateEntry,
        header: BatchHeader,
        offset: int,
        timestamp: int,
        marker: EndTransactionMarker | None,
    ) -> CompletedTxn | None:
        if marker is None:
            return None  # emptied by the cleaner: the transaction is long gone
        completed = None
        if entry.current_txn_first_offset >= 0:
            # a marker of a transaction with no data here completes nothing
            completed = CompletedTxn(
                entry.producer_id, entry.current_txn_first_offset, offset, marker.is_abort
            )
        if header.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        entry.current_txn_first_offset = NO_TXN
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = timestamp
        return completed

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is decided: the first offset of the oldest
        other open transaction, else the offset after its marker."""
        pid = completed.producer_id
        return min(
            (first for first, owner in self.ongoing.items() if owner != pid),
            default=completed.last_offset + 1,
        )

    def complete_txn(self, completed: CompletedTxn) -> int:
        """Close ``completed`` (it stays unstable until the high watermark passes
        its marker); returns the last stable offset for its ``.txnindex`` entry."""
        lso = self.last_stable_offset(completed)
        self.ongoing.pop(completed.first_offset, None)
        self.unreplicated[completed.first_offset] = (completed.producer_id, completed.last_offset)
        return lso

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open, or closed by a
        marker at or above the high watermark; None when there is none."""
        if not self.ongoing and not self.unreplicated:
            return None
        return min(
            min(self.ongoing, default=NO_TXN_END), min(self.unreplicated, default=NO_TXN_END)
        )

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker lies below ``high_watermark``."""
        if self.unreplicated:
            self.unreplicated = {
                first: done
                for first, done in self.unreplicated.items()
                if done[1] >= high_watermark
            }

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms``; how many went."""
        expired = [pid for pid, entry in self.producers.items() if self._is_expired(entry, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset < 0
            and now_ms - entry.last_timestamp >= self.expiration_ms
        )

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
        self.ongoing = {}
        self.unreplicated = {}
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
                    if entry.current_txn_first_offset >= 0:
                        self.ongoing[entry.current_txn_first_offset] = entry.producer_id
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
        self.ongoing = {}
        self.unreplicated = {}
        self.delete_snapshots(range(0))

    def entries(self) -> dict[int, ProducerStateEntry]:
        """A copy of the table, by producer id."""
        return {pid: entry.copy() for pid, entry in self.producers.items()}


__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerStateEntry",
    "ProducerStateManager",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
    "increment_sequence",
    "last_sequence",
    "read_snapshot",
]
