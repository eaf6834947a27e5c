"""Records inside v2 batches: encoding and decoding, exact to the byte.

The 61-byte batch header is described in ``batch.py``.  After it come the
records, compressed as one block when the codec is not NONE (the header
itself is never compressed).  One record::

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch firstTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         per header: varint key length, UTF-8 key,
                                varint value length (-1 null), value

Varints are zig-zag encoded (``varint.py``).  A batch with LogAppendTime
gives every record the batch's maxTimestamp, whatever its delta says.

Encoding works on whole columns (all keys, all values) with C-level maps
over precomputed varint tables and one ``b"".join`` of a parts list filled
by slice assignment: no Python-level work per record on the common shapes
(no headers, one timestamp, offsets 0..n-1).  Decoding reads one-byte and
two-byte varints inline.  Brokers store batches without decoding them; the
codec serves producers, consumers, the cleaner and tools.

All functions here are pure and thread-safe; a ``BatchBuilder`` is not.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator, Sequence
from operator import add, lt
from typing import Any, NamedTuple, TypeVar, cast

import crc32c

from .batch import (
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Compression,
    TimestampType,
    check_batch,
)
from .compiled import compiled
from .compression import compress, decompress
from .errors import CorruptRecordError
from .varint import FIELD_SIZES, LENGTHS, TABLE_SIZE, VARINTS, decode_varint, encode_varint, varint

__all__ = [
    "BatchBuilder",
    "Header",
    "Record",
    "decode_batch",
    "decode_keys",
    "decode_located",
    "decode_varint",
    "encode_batch",
    "encode_values",
    "encode_varint",
    "iter_batches_records",
    "iter_records",
]

INT32_MAX = (1 << 31) - 1


class Header(NamedTuple):
    """A record header: a UTF-8 key and an optional value.  Immutable."""

    key: str
    value: bytes | None


class Record(NamedTuple):
    """One decoded record, with its absolute offset.  Immutable.

    A named tuple rather than a frozen dataclass: decoding builds one per
    record, and a tuple is built several times faster.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


HeaderLike = Header | tuple[str, bytes | None]

# Builds a Record from a 5-tuple without the Python-level __new__ (the decoders' hot path).
_new_record = cast(Callable[[type[Record], tuple[Any, ...]], Record], tuple.__new__)

T = TypeVar("T", bound=tuple[Any, ...])
Located = tuple[type[Any], str, int]
"""What ``decode_located`` builds: the record type, its topic and partition."""
_new_located = cast(Callable[[type[T], tuple[Any, ...]], T], tuple.__new__)

# -- encoding tables -----------------------------------------------------------
# Records shorter than _SHORT bytes (a 1- or 2-byte length varint) in batches
# of at most _SHORT records (a 1- or 2-byte offset delta) with timestamp
# deltas in [0, _SMALL_TS) (one byte) take the table-driven path; keys and
# values shorter than _SHORT_FIELD keep their records that short.
_SHORT = 1 << 13
_SHORT_FIELD = _SHORT - 16
_SMALL_TS = 64
_LEN_ATTR = [varint(size) + b"\x00" for size in range(_SHORT)]  # length, attributes
_NEXT_LEN_ATTR = [b"\x00" + head for head in _LEN_ATTR]  # after the previous header count 0
_TS0_DELTA = [b"\x00" + varint(i) for i in range(_SHORT)]  # ts delta 0, offset delta
_TS0_DELTA_NULL_KEY = [delta + b"\x01" for delta in _TS0_DELTA]  # ..., key length -1
_DELTA_NULL_KEY = [varint(i) + b"\x01" for i in range(_SHORT)]
# bytes of a record besides its key and value fields: attributes, one-byte
# ts delta, offset delta, header count 0
_FIXED = [len(varint(i)) + 3 for i in range(_SHORT)]
# Null keys: a record's size is a function of its value length alone within
# each run of offset deltas whose varint has one size (1 byte below 64,
# 2 bytes up to _SHORT), so one table per run maps value length to the
# record's first part.
_DELTA_RUNS = ((0, 64), (64, _SHORT))
_NULL_KEY_HEADS = [
    [_NEXT_LEN_ATTR[_FIXED[first] + 1 + FIELD_SIZES[size]] for size in range(_SHORT_FIELD)]
    for first, _ in _DELTA_RUNS
]
_PLUS_ONE = (1).__add__


def _encode_headers(headers: Sequence[HeaderLike]) -> bytes:
    parts = [varint(len(headers))]
    for key, value in headers:
        raw = key.encode("utf-8")
        parts.append(varint(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(b"\x01")
        else:
            parts.append(varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _varints(numbers: Sequence[int]) -> list[bytes]:
    """The varint of each number: table lookups when all are in the table."""
    if numbers and min(numbers) >= -1 and max(numbers) < TABLE_SIZE - 1:
        return list(map(VARINTS.__getitem__, map(_PLUS_ONE, numbers)))
    return list(map(varint, numbers))


def _fields(items: Sequence[bytes | None]) -> tuple[list[bytes], Sequence[bytes], list[int]]:
    """Length varints, payloads (b"" for null) and field sizes of a column of keys or values."""
    try:
        lengths = list(map(len, items))  # type: ignore[arg-type]
    except TypeError:  # len(None): some are null
        heads = [b"\x01" if item is None else varint(len(item)) for item in items]
        payloads = [b"" if item is None else item for item in items]
        return heads, payloads, list(map(add, map(len, heads), map(len, payloads)))
    present = cast(Sequence[bytes], items)
    if lengths and max(lengths) < TABLE_SIZE:
        heads = list(map(LENGTHS.__getitem__, lengths))
        return heads, present, list(map(FIELD_SIZES.__getitem__, lengths))
    heads = list(map(varint, lengths))
    return heads, present, list(map(add, map(len, heads), lengths))


def _encode_common(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: Sequence[int] | None,
) -> bytes | None:
    """The records section for the producer's common batch, or None if it is not one.

    Common: no headers, offsets 0..n-1, timestamp deltas all 0 (None) or
    within [0, 64), no null value, keys all null or all present, keys and
    values under 8 KiB.  A record is 4 parts (null keys) or 6, most of them
    table entries: [previous header count, length, attributes] [ts delta,
    offset delta(, null key)] ([key length] [key]) [value length] [value].
    """
    n = len(values)
    if not 0 < n <= _SHORT:
        return None
    if timestamp_deltas is not None and (
        min(timestamp_deltas) < 0 or max(timestamp_deltas) >= _SMALL_TS
    ):
        return None
    try:
        vls = list(map(len, values))  # type: ignore[arg-type]  # len(None) raises
    except TypeError:
        return None
    if max(vls) >= _SHORT_FIELD:
        return None
    present = cast(Sequence[bytes], values)
    try:
        kls = list(map(len, keys))  # type: ignore[arg-type]
    except TypeError:
        if keys.count(None) != n:
            return None
        parts = [b"\x00"] * (4 * n + 1)  # the last is the final record's header count
        heads: list[bytes] = []
        for (first, end), table in zip(_DELTA_RUNS, _NULL_KEY_HEADS, strict=True):
            if first < n:
                heads += map(table.__getitem__, vls[first:end])
        heads[0] = heads[0][1:]  # the first record has no header count before it
        parts[0 : 4 * n : 4] = heads
        if timestamp_deltas is None:
            parts[1::4] = _TS0_DELTA_NULL_KEY[:n]
        else:
            parts[1::4] = map(add, map(LENGTHS.__getitem__, timestamp_deltas), _DELTA_NULL_KEY)
        parts[2::4] = map(LENGTHS.__getitem__, vls)
        parts[3::4] = present
        return b"".join(parts)
    if max(kls) >= _SHORT_FIELD:
        return None
    get = FIELD_SIZES.__getitem__
    if kls.count(kls[0]) == n:  # keys of one length: one key length varint
        key_heads = [LENGTHS[kls[0]]] * n
        sizes = list(map(add, _FIXED[:n], map(get(kls[0]).__add__, map(get, vls))))
    else:
        key_heads = list(map(LENGTHS.__getitem__, kls))
        sizes = list(map(add, map(add, _FIXED[:n], map(get, kls)), map(get, vls)))
    parts = [b"\x00"] * (6 * n + 1)
    parts[0 : 6 * n : 6] = map(_NEXT_LEN_ATTR.__getitem__, sizes)
    parts[0] = _LEN_ATTR[sizes[0]]
    if timestamp_deltas is None:
        parts[1::6] = _TS0_DELTA[:n]
    else:
        parts[1::6] = map(add, map(LENGTHS.__getitem__, timestamp_deltas), VARINTS[1 : n + 1])
    parts[2::6] = key_heads
    parts[3::6] = cast(Sequence[bytes], keys)
    parts[4::6] = map(LENGTHS.__getitem__, vls)
    parts[5::6] = present
    return b"".join(parts)


# ``annal.storage._encoder.encode_section``: the section of records with
# offsets 0..n-1 and no headers, which is what producers send, in one call;
# None without it (``compiled``), and ``_encode_common`` and the column-wise
# path below give the same bytes.
_encode_section: Callable[..., object] | None = compiled("_encoder", "encode_section")


def _encode_records(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: Sequence[int] | None,
    offset_deltas: Sequence[int] | None,
    headers: Sequence[Sequence[HeaderLike]] | None,
) -> bytes:
    """The records section, uncompressed.

    ``None`` for timestamp deltas means all 0, for offset deltas 0..n-1, for
    headers none at all.  Shapes that ``_encode_common`` does not take go
    column by column too: eight parts per record, sizes summed with C-level
    maps; only headers and numbers outside the varint table are encoded
    one by one.
    """
    if offset_deltas is None and headers is None:
        if _encode_section is not None:
            section = _encode_section(keys, values, timestamp_deltas)
            if section is not NotImplemented:
                return cast(bytes, section)
        common = _encode_common(keys, values, timestamp_deltas)
        if common is not None:
            return common
    n = len(values)
    if n == 0:
        return b""
    # [length, attributes] [ts delta] [offset delta] [key length] [key]
    # [value length] [value] [headers]; defaults are b"\x00" (0 or no headers)
    parts: list[bytes] = [b"\x00"] * (8 * n)
    if offset_deltas is None:
        ods = VARINTS[1 : n + 1] if n < TABLE_SIZE else _varints(range(n))
    else:
        ods = _varints(offset_deltas)
    parts[2::8] = ods
    sizes = list(map(len, ods))  # the record's bytes after its length, built field by field
    if timestamp_deltas is None:
        sizes = list(map(_PLUS_ONE, sizes))
    else:
        tss = _varints(timestamp_deltas)
        parts[1::8] = tss
        sizes = list(map(add, sizes, map(len, tss)))
    khs, kps, kfs = _fields(keys)
    vhs, vps, vfs = _fields(values)
    parts[3::8] = khs
    parts[4::8] = kps
    parts[5::8] = vhs
    parts[6::8] = vps
    sizes = list(map(add, sizes, map(add, kfs, vfs)))
    if headers is None:
        sizes = list(map((2).__add__, sizes))  # attributes, header count
    else:
        hds = [_encode_headers(h) if h else b"\x00" for h in headers]
        parts[7::8] = hds
        sizes = list(map(add, sizes, map(_PLUS_ONE, map(len, hds))))
    if max(sizes) < _SHORT:
        parts[0::8] = map(_LEN_ATTR.__getitem__, sizes)
    else:
        parts[0::8] = [varint(size) + b"\x00" for size in sizes]
    return b"".join(parts)


def _attributes(
    compression: Compression,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
) -> int:
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    return attributes


def _assemble(
    body: bytes,
    count: int,
    attributes: int,
    base_offset: int,
    partition_leader_epoch: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """Header + (compressed) records, with the CRC-32C filled in."""
    codec = attributes & 0x07
    if codec:
        body = compress(Compression(codec), body)
    header = bytearray(
        HEADER.pack(
            base_offset,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(header[CRC_OFFSET + 4 :]))
    struct.pack_into(">I", header, CRC_OFFSET, crc)
    return b"".join((header, body))


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
    first_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` at their own offsets (relative to ``base_offset``).

    Offsets must increase strictly from ``base_offset``; gaps are allowed
    (a compacted batch).  ``last_offset_delta``, ``first_timestamp`` and
    ``max_timestamp`` default to what the records imply; the cleaner
    overrides them to keep a filtered batch's original offset range.  An
    empty batch is allowed (timestamps -1, lastOffsetDelta 0 by default).
    Raises ValueError for offsets that do not fit the batch.
    """
    n = len(records)
    if n:
        columns = cast(list[tuple[Any, ...]], list(zip(*records, strict=True)))
        offsets = cast(tuple[int, ...], columns[0])
        timestamps = cast(tuple[int, ...], columns[1])
        keys = cast(tuple[bytes | None, ...], columns[2])
        values = cast(tuple[bytes | None, ...], columns[3])
        headers = cast(tuple[tuple[HeaderLike, ...], ...], columns[4])
        first_ts = timestamps[0] if first_timestamp is None else first_timestamp
        max_ts = max(timestamps) if max_timestamp is None else max_timestamp
        record_last_delta = offsets[-1] - base_offset
        if offsets[0] < base_offset or not all(map(lt, offsets, offsets[1:])):
            raise ValueError(f"record offsets must increase from base offset {base_offset}")
        last_delta = record_last_delta if last_offset_delta is None else last_offset_delta
        if last_delta < record_last_delta:
            raise ValueError(
                f"last offset delta {last_delta} is below the last record's {record_last_delta}"
            )
        offset_deltas = (
            None
            if record_last_delta == n - 1  # strictly increasing from base: exactly 0..n-1
            else [offset - base_offset for offset in offsets]
        )
        timestamp_deltas = (
            None if timestamps.count(first_ts) == n else list(map(first_ts.__rsub__, timestamps))
        )
        body = _encode_records(
            keys, values, timestamp_deltas, offset_deltas, headers if any(headers) else None
        )
    else:
        first_ts = NO_TIMESTAMP if first_timestamp is None else first_timestamp
        max_ts = NO_TIMESTAMP if max_timestamp is None else max_timestamp
        last_delta = 0 if last_offset_delta is None else last_offset_delta
        body = b""
    if not 0 <= last_delta <= INT32_MAX:
        raise ValueError(f"last offset delta {last_delta} does not fit an int32")
    return _assemble(
        body,
        n,
        _attributes(compression, timestamp_type, is_transactional, is_control),
        base_offset,
        partition_leader_epoch,
        last_delta,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
    )


def encode_values(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    timestamp_ms: int,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One batch of ``values`` (with ``keys``, or null keys) at offsets
    ``base_offset``.., all stamped ``timestamp_ms``, without headers.

    The producer's bulk path: no Record objects and no per-record Python work.
    """
    n = len(values)
    if keys is None:
        keys = [None] * n
    elif len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} values")
    return _assemble(
        _encode_records(keys, values, None, None, None),
        n,
        _attributes(compression, TimestampType.CREATE_TIME, is_transactional, False),
        base_offset,
        partition_leader_epoch,
        max(n - 1, 0),
        timestamp_ms if n else NO_TIMESTAMP,
        timestamp_ms if n else NO_TIMESTAMP,
        producer_id,
        producer_epoch,
        base_sequence,
    )


# Upper bound of a record's bytes besides its key, value and headers, while the
# record is under 8 KiB, the batch under 8,192 records and timestamps within 18
# hours of the first: length 2, attributes 1, timestamp delta 4, offset delta 2,
# key and value lengths 2 each, header count 1.
_RECORD_OVERHEAD_ESTIMATE = 14


class BatchBuilder:
    """Accumulates a producer batch record by record; ``build`` encodes it once.

    Offsets are 0..n-1 (the leader assigns real ones), the timestamp type
    is CreateTime.  ``append`` only stores its arguments; ``estimated_size``
    catches up on the records appended since it was last read, so a producer
    can close the batch at ``batch.size``: it errs high, by a few bytes a
    record, and is exact for compressed batches only before compression.
    Not thread-safe: one builder belongs to one producer thread at a time.
    """

    __slots__ = (
        "_headers",
        "_keys",
        "_size",
        "_sized",
        "_timestamps",
        "_values",
        "base_sequence",
        "compression",
        "is_transactional",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        compression: Compression = Compression.NONE,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
    ) -> None:
        self.compression = compression
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._timestamps: list[int] = []
        self._headers: dict[int, tuple[HeaderLike, ...]] = {}
        self._size = RECORD_BATCH_OVERHEAD  # covers the first _sized records
        self._sized = 0

    @property
    def record_count(self) -> int:
        return len(self._values)

    @property
    def estimated_size(self) -> int:
        """Bytes of the batch built now, uncompressed; an estimate that errs high."""
        n = len(self._values)
        if self._sized < n:
            start = self._sized
            self._size += (
                _RECORD_OVERHEAD_ESTIMATE * (n - start)
                + sum(map(len, filter(None, self._values[start:])))
                + sum(map(len, filter(None, self._keys[start:])))
            )
            self._sized = n
        return self._size

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Sequence[HeaderLike] = (),
    ) -> None:
        """Add a record; ``timestamp_ms`` None means now (wall clock)."""
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        if headers:
            encoded = tuple(headers)
            self._headers[len(self._values)] = encoded
            self._size += len(_encode_headers(encoded)) - 1  # the count byte is estimated
        self._keys.append(key)
        self._values.append(value)
        self._timestamps.append(timestamp_ms)

    def extend(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Add records with one timestamp and no headers in one call."""
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        self._values.extend(values)
        self._keys.extend([None] * n if keys is None else keys)
        self._timestamps.extend([timestamp_ms] * n)

    def build(self) -> bytes:
        """The batch; the builder can keep growing and build again."""
        timestamps = self._timestamps
        count = len(timestamps)
        first = timestamps[0] if count else NO_TIMESTAMP
        headers = None
        if self._headers:
            get = self._headers.get
            headers = [get(i, ()) for i in range(count)]
        body = _encode_records(
            self._keys,
            self._values,
            None if timestamps.count(first) == count else list(map(first.__rsub__, timestamps)),
            None,
            headers,
        )
        return _assemble(
            body,
            count,
            _attributes(self.compression, TimestampType.CREATE_TIME, self.is_transactional, False),
            0,
            NO_PARTITION_LEADER_EPOCH,
            max(count - 1, 0),
            first,
            max(timestamps) if count else NO_TIMESTAMP,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
        )


# -- decoding ------------------------------------------------------------------


def _records_section(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The records of a checked batch, decompressed."""
    start = header.position + RECORD_BATCH_OVERHEAD
    end = header.position + header.size
    codec = header.attributes & 0x07
    if codec > Compression.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {codec}", header.position)
    with memoryview(buf) as view:
        if codec == 0:
            return bytes(view[start:end])
        try:
            return decompress(Compression(codec), view[start:end])
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, header.position) from exc


def decode_batch(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at ``position`` (``batch.check_batch``) and decode all its records.

    Raises CorruptRecordError naming the batch's position (and the byte
    within its records section) for a bad CRC, a truncated batch or record,
    a bad varint, or a record count that does not match the records.
    """
    header = check_batch(buf, position, len(buf))
    return header, _decode_checked(buf, header)


def _decode_checked(
    buf: bytes | bytearray | memoryview, header: BatchHeader, located: Located | None = None
) -> list[Any]:
    """The records of a batch ``check_batch`` passed."""
    body = _records_section(buf, header)
    try:
        return _decode_records(body, header, located)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{exc.reason} (byte {exc.position} of the records section)", header.position
        ) from None


_ZIGZAG = [(z >> 1) ^ -(z & 1) for z in range(0x80)]  # one-byte varints, decoded
# Two-byte varints b0 b1 (b0 >= 0x80, b1 < 0x80), decoded, at index b0 + (b1 << 7):
# the zig-zag value z = (b0 - 0x80) + (b1 << 7) sits at z + 0x80.
_ZIGZAG2 = [0] * 0x80 + [(z >> 1) ^ -(z & 1) for z in range(1 << 14)]


def _decode_records(body: bytes, header: BatchHeader, located: Located | None = None) -> list[Any]:
    """Every record of a records section; one- and two-byte varints are read inline.

    Records are ``Record`` tuples, or with ``located`` = (cls, topic,
    partition) ``cls`` tuples that lead with the topic and partition, built
    in one step (a consumer's records, without a second tuple each).

    A field that runs past the end surfaces as an IndexError (the slices of
    keys and values do not check; the next field's byte does), and every
    record's fields must add up to its declared length.
    """
    cls, topic, partition = located if located is not None else (Record, "", 0)
    base = header.base_offset
    first_ts = header.first_timestamp
    zigzag = _ZIGZAG
    zigzag2 = _ZIGZAG2
    new = _new_record
    records: list[Record] = []
    append = records.append
    count = header.record_count
    pos = 0
    end = len(body)
    try:
        for _ in range(count):
            start = pos
            b = body[pos]
            if b < 0x80:
                length = zigzag[b]
                pos += 1
            elif body[pos + 1] < 0x80:  # two bytes: records of 64 B .. 8 KiB
                length = zigzag2[b + (body[pos + 1] << 7)]
                pos += 2
            else:
                length, pos = decode_varint(body, pos)
            record_end = pos + length
            b = body[pos + 1]  # after the attributes byte: the timestamp delta
            if b < 0x80:
                ts_delta = zigzag[b]
                pos += 2
            else:
                ts_delta, pos = decode_varint(body, pos + 1)
            b = body[pos]
            if b < 0x80:
                offset_delta = zigzag[b]
                pos += 1
            elif body[pos + 1] < 0x80:
                offset_delta = zigzag2[b + (body[pos + 1] << 7)]
                pos += 2
            else:
                offset_delta, pos = decode_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                key_length = zigzag[b]
                pos += 1
            else:
                key_length, pos = decode_varint(body, pos)
            if key_length < 0:
                key = None
            else:
                key = body[pos : pos + key_length]
                pos += key_length
            b = body[pos]
            if b < 0x80:
                value_length = zigzag[b]
                pos += 1
            elif body[pos + 1] < 0x80:
                value_length = zigzag2[b + (body[pos + 1] << 7)]
                pos += 2
            else:
                value_length, pos = decode_varint(body, pos)
            if value_length < 0:
                value = None
            else:
                value = body[pos : pos + value_length]
                pos += value_length
            if body[pos] == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(body, pos, record_end)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record {len(records)} declares {length} bytes but its fields take "
                    f"{pos - record_end + length}",
                    start,
                )
            if located is None:
                append(new(Record, (base + offset_delta, first_ts + ts_delta, key, value, headers)))
            else:
                offset = base + offset_delta
                timestamp = first_ts + ts_delta
                append(new(cls, (topic, partition, offset, timestamp, key, value, headers)))
    except IndexError:
        raise CorruptRecordError(
            f"records end early: {len(records)} of {count} decoded", min(pos, end)
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes left after the {count} records the header counts", pos
        )
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: the batch's time for all
        max_ts = header.max_timestamp
        at = 0 if located is None else 2  # where the offset sits
        records = [new(cls, (*r[:at], r[at], max_ts, *r[at + 2 :])) for r in records]
    return records


def _decode_headers(body: bytes, pos: int, record_end: int) -> tuple[tuple[Header, ...], int]:
    count, pos = decode_varint(body, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}", pos)
    out = []
    for _ in range(count):
        key_length, pos = decode_varint(body, pos)
        if key_length < 0 or pos + key_length > record_end:
            raise CorruptRecordError(f"header key length {key_length} does not fit", pos)
        try:
            key = body[pos : pos + key_length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}", pos) from None
        pos += key_length
        value_length, pos = decode_varint(body, pos)
        if value_length < 0:
            value = None
        else:
            if pos + value_length > record_end:
                raise CorruptRecordError(f"header value length {value_length} does not fit", pos)
            value = body[pos : pos + value_length]
            pos += value_length
        out.append(Header(key, value))
    return tuple(out), pos


def decode_keys(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> tuple[BatchHeader, list[tuple[int, bytes | None, bool]]]:
    """(offset, key, value is null) of every record of the batch at ``position``.

    The log cleaner's view of a batch: values and headers are skipped, not
    copied.  Validates the CRC like ``decode_batch``.
    """
    header = check_batch(buf, position, len(buf))
    body = _records_section(buf, header)
    base = header.base_offset
    out: list[tuple[int, bytes | None, bool]] = []
    pos = 0
    size = len(body)
    try:
        for _ in range(header.record_count):
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                z = (b & 0x7F) | (body[pos + 1] << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = decode_varint(body, pos)
            record_end = pos + length
            p = pos + 1  # attributes
            if body[p] < 0x80:  # timestamp delta, skipped
                p += 1
            else:
                _, p = decode_varint(body, p)
            b = body[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = decode_varint(body, p)
            b = body[p]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                key_length, p = decode_varint(body, p)
            if key_length < 0:
                key = None
            else:
                key = body[p : p + key_length]
                p += key_length
            if length < 6 or record_end > size or p >= record_end:
                raise CorruptRecordError(f"record length {length} does not fit the batch", position)
            # a null value is the varint -1: the single byte 0x01
            out.append((base + offset_delta, key, body[p] == 1))
            pos = record_end
    except IndexError:
        raise CorruptRecordError("records end early", position) from None
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, position) from None
    if pos != size:
        raise CorruptRecordError("record sizes do not add up to the batch", position)
    return header, out


def iter_batches_records(
    buf: bytes | bytearray | memoryview,
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every v2 batch in ``buf`` with its records."""
    position = 0
    end = len(buf)
    while position < end:
        header, records = decode_batch(buf, position)
        yield header, records
        position += header.size


def decode_located(
    buf: bytes | bytearray | memoryview, cls: type[T], topic: str, partition: int, start: int
) -> list[T]:
    """The records of ``buf`` at offsets from ``start`` on, as ``cls`` tuples
    (topic, partition, offset, timestamp, key, value, headers): a fetch's
    answer decoded for a consumer.  Batches wholly before ``start`` (a fetch
    answers from the batch that holds its offset) are skipped undecoded."""
    out: list[T] = []
    position = 0
    end = len(buf)
    located = (cls, topic, partition)
    legacy: bytes | None = None  # buf as bytes, made once the first legacy entry shows up
    while position < end:
        if position + MAGIC_OFFSET < end and buf[position + MAGIC_OFFSET] < CURRENT_MAGIC:
            from .legacy import decode_legacy_entry

            if legacy is None:
                legacy = buf if isinstance(buf, bytes) else bytes(buf)
            records, position = decode_legacy_entry(legacy, position)
            where = (topic, partition)
            out += [_new_located(cls, where + r) for r in records if r.offset >= start]
            continue
        header = check_batch(buf, position, end)
        if header.last_offset >= start:
            decoded = _decode_checked(buf, header, located)
            if header.base_offset < start:
                decoded = [r for r in decoded if r[2] >= start]
            out += decoded
        position += header.size
    return out


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record in ``buf``, entry by entry: v2 batches and legacy (v0/v1)
    messages alike (the magic byte at position 16 of each entry tells them apart)."""
    position = 0
    end = len(buf)
    legacy: bytes | None = None  # buf as bytes, made once the first legacy entry shows up
    while position < end:
        if position + MAGIC_OFFSET < end and buf[position + MAGIC_OFFSET] < CURRENT_MAGIC:
            from .legacy import decode_legacy_entry

            if legacy is None:
                legacy = buf if isinstance(buf, bytes) else bytes(buf)
            records, position = decode_legacy_entry(legacy, position)
            yield from records
        else:
            header, records = decode_batch(buf, position)
            yield from records
            position += header.size
