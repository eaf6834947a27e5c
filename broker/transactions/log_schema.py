"""Records of ``__transaction_state``, in Kafka's binary schemas (KIP-98).

One record per transactional id and change of its state; compaction keeps the
latest, a null value (a tombstone) forgets the id::

    key    int16 version = 0 | string transactional_id
    value  int16 version = 0 | int64 producer_id | int16 producer_epoch |
           int32 transaction_timeout_ms | int8 state |
           array partitions (nullable: null when the state is Empty) of
               (string topic | array of int32 partition) |
           int64 last_update_timestamp_ms | int64 start_timestamp_ms

Strings are an int16 length and UTF-8 bytes, arrays an int32 count (-1:
null).  The state byte is Kafka's: Empty 0, Ongoing 1, PrepareCommit 2,
PrepareAbort 3, CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7
(the last two are never written).  Kafka's tools read annal's transaction
log and the reverse.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from annal.topic_partition import TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 0
TRANSACTION_STATE_TOPIC = "__transaction_state"

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class TxnLogSchemaError(ValueError):
    """A ``__transaction_state`` record that is not Kafka's schema."""


class TxnState(enum.IntEnum):
    """A transaction's state, by Kafka's byte and name."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def by_kafka_name(cls, name: str) -> TxnState | None:
        return next((s for s in cls if s.kafka_name == name), None)


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """What one record says of a transactional id."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise TxnLogSchemaError(f"string of {len(raw)} bytes is too long for the schema")
    return _INT16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _string(transactional_id)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics


def encode_value(value: TxnLogValue) -> bytes:
    if value.state == TxnState.EMPTY and value.partitions:
        raise TxnLogSchemaError("an Empty transaction has no partitions")
    parts = [
        _INT16.pack(VALUE_VERSION),
        _INT64.pack(value.producer_id),
        _INT16.pack(value.producer_epoch),
        _INT32.pack(value.timeout_ms),
        _INT8.pack(int(value.state)),
    ]
    if value.state == TxnState.EMPTY:
        parts.append(_INT32.pack(-1))
    else:
        topics = _by_topic(value.partitions)
        parts.append(_INT32.pack(len(topics)))
        for topic, indexes in topics.items():
            parts.append(_string(topic))
            parts.append(_INT32.pack(len(indexes)))
            parts.append(struct.pack(f">{len(indexes)}i", *indexes))
    parts.append(_INT64.pack(value.last_update_ms))
    parts.append(_INT64.pack(value.start_ms))
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.at = 0
        self.what = what

    def take(self, layout: struct.Struct) -> int:
        if self.at + layout.size > len(self.data):
            raise TxnLogSchemaError(f"{self.what} ends at byte {len(self.data)}, mid-field")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return int(value)

    def count(self, nullable: bool = False) -> int:
        n = self.take(_INT32)
        if n < (-1 if nullable else 0) or n * 2 > len(self.data) - self.at:
            raise TxnLogSchemaError(f"{self.what} has a bad array length {n}")
        return n

    def string(self) -> str:
        length = self.take(_INT16)
        if length < 0 or self.at + length > len(self.data):
            raise TxnLogSchemaError(f"{self.what} has a bad string length {length}")
        raw = self.data[self.at : self.at + length]
        self.at += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TxnLogSchemaError(f"{self.what} has a string that is not UTF-8: {exc}") from None


def decode_key(data: bytes) -> str:
    """The transactional id a key names."""
    reader = _Reader(data, "transaction log key")
    version = reader.take(_INT16)
    if version != KEY_VERSION:
        raise TxnLogSchemaError(f"transaction log key of unknown version {version}")
    return reader.string()


def decode_value(data: bytes) -> TxnLogValue:
    reader = _Reader(data, "transaction log value")
    version = reader.take(_INT16)
    if version != VALUE_VERSION:
        raise TxnLogSchemaError(f"transaction log value of unknown version {version}")
    producer_id = reader.take(_INT64)
    epoch = reader.take(_INT16)
    timeout_ms = reader.take(_INT32)
    byte = reader.take(_INT8)
    try:
        state = TxnState(byte)
    except ValueError:
        raise TxnLogSchemaError(f"transaction log value has unknown state {byte}") from None
    partitions: set[TopicPartition] = set()
    for _ in range(max(0, reader.count(nullable=True))):
        topic = reader.string()
        for _ in range(reader.count()):
            partitions.add(TopicPartition(topic, reader.take(_INT32)))
    last_update_ms = reader.take(_INT64)
    start_ms = reader.take(_INT64)
    if reader.at != len(data):
        raise TxnLogSchemaError(f"transaction log value has {len(data) - reader.at} extra bytes")
    return TxnLogValue(
        producer_id, epoch, timeout_ms, state, frozenset(partitions), last_update_ms, start_ms
    )


def describe_record(key: bytes, value: bytes | None) -> tuple[str, str]:
    """A record as dump-log shows it (Kafka's DumpLogSegments words)."""
    transactional_id = decode_key(key)
    if value is None:
        return f"transaction_metadata::transactionalId={transactional_id}", "<DELETE>"
    v = decode_value(value)
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(v.partitions))
    return (
        f"transaction_metadata::transactionalId={transactional_id}",
        f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},"
        f"state={v.state.kafka_name},partitions=[{partitions}],"
        f"txnLastUpdateTimestamp={v.last_update_ms},txnTimeoutMs={v.timeout_ms}",
    )
