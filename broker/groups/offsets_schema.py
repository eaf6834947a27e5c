"""Records of ``__consumer_offsets``, in Kafka's binary schemas.

A committed offset is a record whose key names the group and partition and
whose value holds the offset (Kafka's OffsetCommit key version 1 and value
version 3, so Kafka's tools read annal's offsets topic and the reverse)::

    key    int16 version = 1 | string group | string topic | int32 partition
    value  int16 version = 3 | int64 offset | int32 leader_epoch |
           string metadata | int64 commit_timestamp

Strings are an int16 length and UTF-8 bytes.  A null value (a tombstone)
deletes the offset; compaction keeps the latest value per key.  Values of
versions 0 to 2 (older Kafka) are read too; keys of other versions (group
metadata, version 2) are not offsets and are skipped by the reader.
"""

from __future__ import annotations

from dataclasses import dataclass

from annal.broker.schema_codec import INT16, INT32, INT64, SchemaReader, encode_string

KEY_VERSION = 1
VALUE_VERSION = 3



class OffsetsSchemaError(ValueError):
    """Bytes that are not an offset commit record; the message says where."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``: Kafka's
    ``Utils.abs(group.hashCode) % partitions`` (abs maps MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    return encode_string(text, OffsetsSchemaError)


def encode_key(key: OffsetKey) -> bytes:
    return (
        INT16.pack(KEY_VERSION)
        + _string(key.group)
        + _string(key.topic)
        + INT32.pack(key.partition)
    )


def encode_value(value: OffsetValue) -> bytes:
    return (
        INT16.pack(VALUE_VERSION)
        + INT64.pack(value.offset)
        + INT32.pack(value.leader_epoch)
        + _string(value.metadata)
        + INT64.pack(value.commit_timestamp)
    )


def _reader(data: bytes, what: str) -> SchemaReader:
    return SchemaReader(data, what, OffsetsSchemaError)


def decode_key(data: bytes) -> OffsetKey | None:
    """The offset key, or None for another kind of key (group metadata)."""
    reader = _reader(data, "offset commit key")
    version = reader.take(INT16)
    if version not in (0, 1):
        return None
    return OffsetKey(reader.string(), reader.string(), reader.take(INT32))


def decode_value(data: bytes) -> OffsetValue:
    reader = _reader(data, "offset commit value")
    version = reader.take(INT16)
    if not 0 <= version <= 3:
        raise OffsetsSchemaError(f"offset commit value version {version} is unknown")
    offset = reader.take(INT64)
    leader_epoch = reader.take(INT32) if version >= 3 else -1
    metadata = reader.string()
    timestamp = reader.take(INT64)
    if version == 1:
        reader.take(INT64)  # expire_timestamp, dropped in version 2
    return OffsetValue(offset, leader_epoch, metadata, timestamp)


# -- group metadata (the classic membership protocol's groups) ------------------
#
# A group's state after each rebalance (Kafka's GroupMetadata key version 2 and
# value version 3), so that a new coordinator knows its members:
#
#     key    int16 version = 2 | string group
#     value  int16 version = 3 | string protocol_type | int32 generation |
#            nullable string protocol | nullable string leader |
#            int64 current_state_timestamp |
#            int32 count, then per member: string member_id |
#              nullable string group_instance_id | string client_id |
#              string client_host | int32 rebalance_timeout |
#              int32 session_timeout | bytes subscription | bytes assignment
#
# Nullable strings have length -1 for null; bytes are an int32 length.  A null
# value (a tombstone) deletes the group.  Values of versions 0 to 2 are read too.

GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


def _nullable(text: str | None) -> bytes:
    return INT16.pack(-1) if text is None else _string(text)


def _bytes(raw: bytes) -> bytes:
    return INT32.pack(len(raw)) + raw


def encode_group_key(group: str) -> bytes:
    return INT16.pack(GROUP_KEY_VERSION) + _string(group)


def encode_group_value(value: GroupMetadataValue) -> bytes:
    parts = [
        INT16.pack(GROUP_VALUE_VERSION),
        _string(value.protocol_type),
        INT32.pack(value.generation),
        _nullable(value.protocol),
        _nullable(value.leader),
        INT64.pack(value.current_state_timestamp),
        INT32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _nullable(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            INT32.pack(m.rebalance_timeout_ms),
            INT32.pack(m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def decode_group_key(data: bytes) -> str | None:
    """The group of a group metadata key, or None for another kind of key."""
    reader = _reader(data, "group metadata key")
    if reader.take(INT16) != GROUP_KEY_VERSION:
        return None
    return reader.string()


def decode_group_value(data: bytes) -> GroupMetadataValue:
    reader = _reader(data, "group metadata value")
    version = reader.take(INT16)
    if not 0 <= version <= 3:
        raise OffsetsSchemaError(f"group metadata value version {version} is unknown")
    protocol_type = reader.string()
    generation = reader.take(INT32)
    protocol = reader.nullable()
    leader = reader.nullable()
    timestamp = reader.take(INT64) if version >= 2 else -1
    members = []
    for _ in range(reader.take(INT32)):
        member_id = reader.string()
        instance = reader.nullable() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance = reader.take(INT32) if version >= 1 else -1
        session = reader.take(INT32)
        members.append(
            MemberMetadata(
                member_id, instance, client_id, client_host, rebalance if rebalance >= 0
                else session, session, reader.raw(), reader.raw(),
            )
        )  # fmt: skip
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )
