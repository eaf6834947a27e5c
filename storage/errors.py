"""The storage engine's error tree.

Every error the log raises for bad input or a bad directory is one of these,
so callers (the broker, the CLI, tests) catch exactly what they mean::

    StorageError                         base; never raised itself
    ├── InvalidRecordError               a batch that must not be stored
    │   ├── CorruptRecordError           bad CRC, magic, length, count, truncation  (CORRUPT_MESSAGE)
    │   ├── RecordTooLargeError          batch over max.message.bytes              (MESSAGE_TOO_LARGE)
    │   ├── NonMonotonicOffsetError      follower batch at or below the log end    (OFFSET_OUT_OF_RANGE)
    │   └── KeylessRecordError           null key into a compacted log             (INVALID_RECORD)
    ├── OffsetOutOfRangeError            read or truncate outside the log          (OFFSET_OUT_OF_RANGE)
    ├── LogDirError                      not a log dir, unknown files, meta mismatch (KAFKA_STORAGE_ERROR)
    ├── CorruptIndexError                an index file that fails its sanity check (rebuilt, never fatal)
    └── CheckpointError                  a checkpoint file that cannot be parsed

Each class carries ``code``, Kafka's wire error name, and ``retriable``.
Errors about a batch name the file or buffer position they refer to.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage error."""

    code: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False


class InvalidRecordError(StorageError):
    """A batch that was refused; the log is unchanged."""

    code = "INVALID_RECORD"

    def __init__(self, reason: str, position: int | None = None) -> None:
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{reason}{where}")
        self.reason = reason
        self.position = position


class CorruptRecordError(InvalidRecordError):
    """Bytes that are not a valid v2 record batch (CRC, magic, sizes, counts)."""

    code = "CORRUPT_MESSAGE"


class RecordTooLargeError(InvalidRecordError):
    """A batch larger than ``max.message.bytes``."""

    code = "MESSAGE_TOO_LARGE"


class NonMonotonicOffsetError(InvalidRecordError):
    """A follower append whose offsets do not follow the log end offset."""

    code = "OFFSET_OUT_OF_RANGE"


class KeylessRecordError(InvalidRecordError):
    """A record with a null key sent to a compacted log."""

    code = "INVALID_RECORD"


class OffsetOutOfRangeError(StorageError):
    """An offset outside ``[log_start_offset, log_end_offset]``."""

    code = "OFFSET_OUT_OF_RANGE"


class LogDirError(StorageError):
    """A directory that is not a usable log directory."""

    code = "KAFKA_STORAGE_ERROR"


class CorruptIndexError(StorageError):
    """An index file that fails its sanity check; recovery rebuilds it."""

    code = "CORRUPT_MESSAGE"


class CheckpointError(StorageError):
    """A checkpoint file that cannot be parsed."""

    code = "KAFKA_STORAGE_ERROR"
