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

from annal.broker.schema_codec import INT8, INT16, INT32, INT64, SchemaReader, encode_string

from annal.topic_partition import TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 0
TRANSACTION_STATE_TOPIC = "__transaction_state"



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
    return encode_string(text, TxnLogSchemaError)


def encode_key(transactional_id: str) -> bytes:
    return INT16.pack(KEY_VERSION) + _string(transactional_id)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics


def encode_value(value: TxnLogValue) -> bytes:
    if value.state == TxnState.EMPTY and value.partitions:
        raise TxnLogSchemaError("an Empty transaction has no partitions")
    parts = [
        INT16.pack(VALUE_VERSION),
        INT64.pack(value.producer_id),
        INT16.pack(value.producer_epoch),
        INT32.pack(value.timeout_ms),
        INT8.pack(int(value.state)),
    ]
    if value.state == TxnState.EMPTY:
        parts.append(INT32.pack(-1))
    else:
        topics = _by_topic(value.partitions)
        parts.append(INT32.pack(len(topics)))
        for topic, indexes in topics.items():
            parts.append(_string(topic))
            parts.append(INT32.pack(len(indexes)))
            parts.append(struct.pack(f">{len(indexes)}i", *indexes))
    parts.append(INT64.pack(value.last_update_ms))
    parts.append(INT64.pack(value.start_ms))
    return b"".join(parts)


def decode_key(data: bytes) -> str:
    """The transactional id a key names."""
    reader = SchemaReader(data, "transaction log key", TxnLogSchemaError)
    version = reader.take(INT16)
    if version != KEY_VERSION:
        raise TxnLogSchemaError(f"transaction log key of unknown version {version}")
    return reader.string()


def decode_value(data: bytes) -> TxnLogValue:
    reader = SchemaReader(data, "transaction log value", TxnLogSchemaError)
    version = reader.take(INT16)
    if version != VALUE_VERSION:
        raise TxnLogSchemaError(f"transaction log value of unknown version {version}")
    producer_id = reader.take(INT64)
    epoch = reader.take(INT16)
    timeout_ms = reader.take(INT32)
    byte = reader.take(INT8)
    try:
        state = TxnState(byte)
    except ValueError:
        raise TxnLogSchemaError(f"transaction log value has unknown state {byte}") from None
    partitions: set[TopicPartition] = set()
    for _ in range(max(0, reader.count(nullable=True, item_size=2))):
        topic = reader.string()
        for _ in range(reader.count(item_size=4)):
            partitions.add(TopicPartition(topic, reader.take(INT32)))
    last_update_ms = reader.take(INT64)
    start_ms = reader.take(INT64)
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
