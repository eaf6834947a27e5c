"""The storage engine's error tree.

Every error the log raises for bad input or a bad directory is one of these,
so callers (the broker, the CLI, tests) catch exactly what they mean::

    StorageError                     base; never raised itself
    ├── InvalidRecordError           a batch refused      (INVALID_RECORD)
    │   ├── CorruptRecordError       CRC, magic, sizes    (CORRUPT_MESSAGE)
    │   ├── RecordTooLargeError      max.message.bytes    (MESSAGE_TOO_LARGE)
    │   ├── NonMonotonicOffsetError  follower offsets     (OFFSET_OUT_OF_RANGE)
    │   ├── KeylessRecordError       null key, compacted  (INVALID_RECORD)
    │   ├── InvalidTimestampError    out of range         (INVALID_TIMESTAMP)
    │   ├── TransactionalRecordError no transaction       (INVALID_PRODUCER_ID_MAPPING)
    │   ├── OutOfOrderSequenceError  a sequence gap       (OUT_OF_ORDER_SEQUENCE_NUMBER)
    │   ├── InvalidProducerEpochError a stale epoch       (INVALID_PRODUCER_EPOCH)
    │   ├── InvalidTxnStateError     non-txn write in a txn (INVALID_TXN_STATE)
    │   └── TransactionCoordinatorFencedError old marker (TRANSACTION_COORDINATOR_FENCED)
    ├── OffsetOutOfRangeError        outside the log      (OFFSET_OUT_OF_RANGE)
    ├── LogDirError                  bad log directory    (KAFKA_STORAGE_ERROR)
    ├── LogDirOfflineError           a write failed there (KAFKA_STORAGE_ERROR)
    ├── CorruptIndexError            bad index; rebuilt   (CORRUPT_MESSAGE)
    ├── CorruptSnapshotError         bad producer snapshot; rebuilt (CORRUPT_MESSAGE)
    └── CheckpointError              unreadable checkpoint (KAFKA_STORAGE_ERROR)
        └── MalformedCheckpointError read, but does not parse

Each class carries ``code``, one of Kafka's error codes (``annal.errors``).
Errors about a batch name the file or buffer position they refer to.  A
batch refused for what some of its records hold (a null key on a compacted
topic, a timestamp out of range) also names each of those records in
``record_errors`` (``RecordError``: its index in the batch and why), for the
broker to hand back to the producer (KIP-467); the batch's other records are
refused with them, since a batch is stored whole or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from annal import errors
from annal.errors import AnnalError


class RecordError(NamedTuple):
    """One record that got its batch refused (KIP-467): its index in the batch
    (0 for the first record) and why it was refused."""

    batch_index: int
    message: str


class StorageError(AnnalError):
    """Base of every storage error."""


class InvalidRecordError(StorageError):
    """A batch that was refused; the log is unchanged."""

    code = errors.INVALID_RECORD

    def __init__(
        self,
        reason: str,
        position: int | None = None,
        record_errors: Iterable[RecordError] = (),
    ) -> None:
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{reason}{where}")
        self.reason = reason
        self.position = position
        # the records refused for themselves, by index; empty for a batch-wide fault
        self.record_errors: tuple[RecordError, ...] = tuple(record_errors)


class CorruptRecordError(InvalidRecordError):
    """Bytes that are not a valid v2 record batch (CRC, magic, sizes, counts)."""

    code = errors.CORRUPT_MESSAGE


class RecordTooLargeError(InvalidRecordError):
    """A batch larger than ``max.message.bytes``."""

    code = errors.MESSAGE_TOO_LARGE


class NonMonotonicOffsetError(InvalidRecordError):
    """A follower append whose offsets do not follow the log end offset."""

    code = errors.OFFSET_OUT_OF_RANGE


class KeylessRecordError(InvalidRecordError):
    """A record with a null key sent to a compacted log."""

    code = errors.INVALID_RECORD


class InvalidTimestampError(InvalidRecordError):
    """A record timestamp outside ``message.timestamp.difference.max.ms`` of the
    broker's clock, or a client batch that claims LogAppendTime."""

    code = errors.INVALID_TIMESTAMP


class TransactionalRecordError(InvalidRecordError):
    """A transactional batch from a client: no transaction owns its producer id."""

    code = errors.INVALID_PRODUCER_ID_MAPPING


class OutOfOrderSequenceError(InvalidRecordError):
    """An idempotent producer's batch whose sequence does not follow the last one
    the log holds from it (a gap), or a new epoch that does not start at 0."""

    code = errors.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(InvalidRecordError):
    """An idempotent producer's batch with an epoch older than the newest the log
    has seen from that producer id (a zombie)."""

    code = errors.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(InvalidRecordError):
    """A non-transactional batch from a producer whose transaction is open."""

    code = errors.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(InvalidRecordError):
    """A transaction marker whose coordinator epoch is older than the last
    marker's for that producer: it comes from a zombie coordinator."""

    code = errors.TRANSACTION_COORDINATOR_FENCED


class OffsetOutOfRangeError(StorageError):
    """An offset outside ``[log_start_offset, log_end_offset]``."""

    code = errors.OFFSET_OUT_OF_RANGE


class LogDirError(StorageError):
    """A directory that is not a usable log directory."""

    code = errors.KAFKA_STORAGE_ERROR


class LogDirOfflineError(StorageError):
    """A log dir where a write or a flush failed (a full disk, an I/O error): it
    is offline, and its logs are neither read nor written until the broker
    restarts (``storage/dir_failure.py``)."""

    code = errors.KAFKA_STORAGE_ERROR

    def __init__(self, log_dir: object, reason: str) -> None:
        super().__init__(f"log dir {log_dir} is offline: {reason}")
        self.log_dir = log_dir
        self.reason = reason


class CorruptIndexError(StorageError):
    """An index file that fails its sanity check; recovery rebuilds it."""

    code = errors.CORRUPT_MESSAGE


class CorruptSnapshotError(StorageError):
    """A producer state snapshot that fails its CRC or its schema; the log
    deletes it and rebuilds the state from an older one and the batches."""

    code = errors.CORRUPT_MESSAGE


class CheckpointError(StorageError):
    """A checkpoint file that cannot be read or parsed."""

    code = errors.KAFKA_STORAGE_ERROR


class MalformedCheckpointError(CheckpointError):
    """A checkpoint file that was read but does not parse (empty, torn, garbled)."""
