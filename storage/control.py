"""Control records: the COMMIT and ABORT markers that end a transaction.

A control batch has attributes bit 5 (control) and bit 4 (transactional)
set, the producer id and epoch of the transaction it ends, base sequence -1,
no compression, and exactly one record (Kafka's formats, KIP-98)::

    key    version int16 (0) | type int16 (0 ABORT, 1 COMMIT)
    value  version int16 (0) | coordinatorEpoch int32

A key or value of a newer version is read as version 0 (its first fields
keep their meaning), as Kafka does; a negative version, a short field or a
type that is not a transaction marker is corrupt (``CorruptRecordError``,
CORRUPT_MESSAGE).

Only the leader writes markers (``Log.append_control``), and only for an
append whose origin is ``AppendOrigin.COORDINATOR``: a client's control
batch is refused (INVALID_RECORD), as Kafka's LogValidator refuses it.
Followers copy the leader's markers (``AppendOrigin.REPLICATION``).

Everything here works per batch: a marker batch holds one record, decoded
once when the batch is appended, replayed or dumped.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from .batch import TimestampType
from .errors import CorruptRecordError
from .records import Record, decode_batch, encode_batch

__all__ = [
    "CONTROL_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "AppendOrigin",
    "ControlRecordType",
    "EndTransactionMarker",
    "build_control_batch",
    "decode_control_type",
    "decode_end_txn_marker",
    "encode_control_key",
    "marker_of_batch",
]

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
NO_SEQUENCE = -1


class AppendOrigin(enum.Enum):
    """Who appends to a leader's log, which decides what is checked (Kafka's
    AppendOrigin).  ``CLIENT``: a producer, fully validated, no control
    batch.  ``COORDINATOR``: the broker's own coordinators (transaction
    markers, offset commits), checked for producer epochs but not sequences.
    ``REPLICATION``: a follower copying its leader, not checked."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class ControlRecordType(enum.IntEnum):
    """The ``type`` of a control record key (transaction markers only)."""

    ABORT = 0
    COMMIT = 1


class EndTransactionMarker(NamedTuple):
    """A COMMIT or ABORT marker and the epoch of the coordinator that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type is ControlRecordType.ABORT

    def key(self) -> bytes:
        return encode_control_key(self.control_type)

    def value(self) -> bytes:
        return _VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)


def encode_control_key(control_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record of ``control_type``."""
    return _KEY.pack(CONTROL_KEY_VERSION, ControlRecordType(control_type))


def decode_control_type(key: bytes | None) -> int:
    """The type id of a control record key (any int16: a caller that wants a
    transaction marker checks it).  CorruptRecordError for a missing or short
    key, or a negative version."""
    if key is None or len(key) < _KEY.size:
        found = "no key" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(
            f"control record key must hold at least {_KEY.size} bytes (version, type), "
            f"found {found}"
        )
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has a negative version {version}")
    return int(type_id)


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """The marker a control record's key and value hold; CorruptRecordError for
    bad bytes or a control type that is not COMMIT or ABORT."""
    type_id = decode_control_type(key)
    if type_id not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise CorruptRecordError(
            f"control record type {type_id} is not a transaction marker (0 ABORT, 1 COMMIT)"
        )
    if value is None or len(value) < _VALUE.size:
        found = "no value" if value is None else f"{len(value)} bytes"
        raise CorruptRecordError(
            f"end transaction marker value must hold at least {_VALUE.size} bytes "
            f"(version, coordinatorEpoch), found {found}"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end transaction marker has a negative version {version}")
    return EndTransactionMarker(ControlRecordType(type_id), coordinator_epoch)


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTransactionMarker,
    timestamp: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding ``marker`` for the producer's transaction
    (transactional and control bits set, base sequence -1, CreateTime)."""
    if producer_id < 0:
        raise ValueError(f"a transaction marker needs a producer id, not {producer_id}")
    record = Record(base_offset, timestamp, marker.key(), marker.value())
    return encode_batch(
        [record],
        base_offset=base_offset,
        timestamp_type=TimestampType.CREATE_TIME,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def marker_of_batch(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> EndTransactionMarker | None:
    """The marker of the control batch at ``position`` of ``buf``; None when
    the batch is empty (the cleaner emptied it).  CorruptRecordError, naming
    the batch's offset, when its record is not a transaction marker."""
    header, records = decode_batch(buf, position)
    if not records:
        return None
    try:
        return decode_end_txn_marker(records[0].key, records[0].value)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"control batch at offset {header.base_offset}: {exc.reason}", position
        ) from None
