"""Records inside v2 batches: encoding and decoding, exact to the byte.

The batch header is described in ``batch.py``.  After it come the records,
compressed as one block when the codec is not NONE.  One record::

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

Varints are zig-zag encoded, 7 bits a byte, least significant group first
(as protobuf's sint64).  Encoding runs on tables of precomputed varints;
decoding takes the one-byte case inline.  Neither is on the broker's path:
brokers store batches without decoding them.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c

from .batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
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
from .compression import compress, decompress
from .errors import CorruptRecordError


class Header(NamedTuple):
    """A record header: a UTF-8 key and an optional value."""

    key: str
    value: bytes | None


class Record(NamedTuple):
    """One decoded record, with its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# -- varints ---------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_TABLE_SIZE = 1 << 16
_VARINTS: list[bytes] = [encode_varint(n) for n in range(-1, _TABLE_SIZE)]  # index n + 1


def _varint(value: int) -> bytes:
    if -1 <= value < _TABLE_SIZE:
        return _VARINTS[value + 1]
    return encode_varint(value)


def decode_varint(buf: bytes | memoryview, position: int) -> tuple[int, int]:
    """(value, position after it) for the zig-zag varint at ``position``."""
    result = 0
    shift = 0
    while True:
        try:
            byte = buf[position]
        except IndexError:
            raise CorruptRecordError("varint runs past the end of the records", position) from None
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes", position)


# -- encoding --------------------------------------------------------------


def _encode_headers(headers: Sequence[Header | tuple[str, bytes | None]]) -> bytes:
    parts = [_varint(len(headers))]
    for key, value in headers:
        raw = key.encode("utf-8")
        parts.append(_varint(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(b"\x01")
        else:
            parts.append(_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _encode_records(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: Sequence[int] | None,
    offset_deltas: Sequence[int] | None,
    headers: Sequence[Sequence[Header | tuple[str, bytes | None]]] | None,
) -> list[bytes]:
    """The byte parts of the records section, to be joined.

    ``None`` for timestamp deltas means all 0, for offset deltas 0..n-1, for
    headers none at all: the common producer case takes the shortest path.
    """
    table = _VARINTS
    limit = _TABLE_SIZE
    parts: list[bytes] = []
    add = parts.extend
    for i in range(len(values)):
        key = keys[i]
        value = values[i]
        if timestamp_deltas is None:
            ts = b"\x00"
        else:
            d = timestamp_deltas[i]
            ts = table[d + 1] if -1 <= d < limit else encode_varint(d)
        if offset_deltas is None:
            od = table[i + 1] if i < limit else encode_varint(i)
        else:
            d = offset_deltas[i]
            od = table[d + 1] if -1 <= d < limit else encode_varint(d)
        if key is None:
            kh = b"\x01"
            key = b""
        else:
            kl = len(key)
            kh = table[kl + 1] if kl < limit else encode_varint(kl)
        if value is None:
            vh = b"\x01"
            value = b""
        else:
            vl = len(value)
            vh = table[vl + 1] if vl < limit else encode_varint(vl)
        hd = b"\x00" if headers is None or not headers[i] else _encode_headers(headers[i])
        size = 1 + len(ts) + len(od) + len(kh) + len(key) + len(vh) + len(value) + len(hd)
        add(
            (
                table[size + 1] if size < limit else encode_varint(size),
                b"\x00",
                ts,
                od,
                kh,
                key,
                vh,
                value,
                hd,
            )
        )
    return parts


def _assemble(
    body: bytes,
    count: int,
    *,
    base_offset: int,
    compression: Compression,
    timestamp_type: TimestampType,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    is_control: bool,
    partition_leader_epoch: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
) -> bytes:
    if compression != Compression.NONE:
        body = compress(compression, body)
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
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
    crc = crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])
    crc = crc32c.crc32c(body, crc)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


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

    ``last_offset_delta``, ``first_timestamp`` and ``max_timestamp`` default
    to what the records imply; the cleaner overrides them to keep a filtered
    batch's original offset range.  An empty batch is allowed.
    """
    if records:
        first_ts = records[0].timestamp if first_timestamp is None else first_timestamp
        max_ts = max(r.timestamp for r in records) if max_timestamp is None else max_timestamp
        deltas = [r.offset - base_offset for r in records]
        if deltas[0] < 0 or any(b <= a for a, b in itertools.pairwise(deltas)):
            raise ValueError(f"record offsets must increase from base offset {base_offset}")
        last_delta = deltas[-1] if last_offset_delta is None else last_offset_delta
        if last_delta < deltas[-1]:
            raise ValueError(
                f"last offset delta {last_delta} is below the last record's {deltas[-1]}"
            )
    else:
        first_ts = NO_TIMESTAMP if first_timestamp is None else first_timestamp
        max_ts = NO_TIMESTAMP if max_timestamp is None else max_timestamp
        deltas = []
        last_delta = 0 if last_offset_delta is None else last_offset_delta
    parts = _encode_records(
        [r.key for r in records],
        [r.value for r in records],
        [r.timestamp - first_ts for r in records],
        deltas,
        [r.headers for r in records] if any(r.headers for r in records) else None,
    )
    return _assemble(
        b"".join(parts),
        len(records),
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        last_offset_delta=last_delta,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
    )


class BatchBuilder:
    """Accumulates a producer batch record by record; ``build`` encodes it once.

    Offsets are 0..n-1 (the leader assigns real ones).  ``estimated_size`` is
    exact for uncompressed batches and an upper bound otherwise, so a producer
    can close the batch at ``batch.size``.  Not thread-safe.
    """

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
        self._headers: list[Sequence[Header | tuple[str, bytes | None]]] = []
        self._has_headers = False
        self._same_timestamp = True
        self._size = RECORD_BATCH_OVERHEAD

    @property
    def record_count(self) -> int:
        return len(self._values)

    @property
    def estimated_size(self) -> int:
        return self._size

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header | tuple[str, bytes | None]] = (),
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        n = len(self._values)
        if timestamp_ms is None:
            timestamp_ms = self._timestamps[-1] if self._timestamps else NO_TIMESTAMP
        if self._timestamps and timestamp_ms != self._timestamps[0]:
            self._same_timestamp = False
        self._keys.append(key)
        self._values.append(value)
        self._timestamps.append(timestamp_ms)
        self._headers.append(headers)
        if headers:
            self._has_headers = True
        # length varint + attributes + deltas (at most 3 + 3 + 3) + key + value + headers
        body = 7 + (len(key) if key else 0) + (len(value) if value else 0)
        body += len(_encode_headers(headers)) if headers else 0
        self._size += body + (1 if body < 64 else 2 if body < 8192 else 3) + (n >= 64) + (n >= 8192)
        return n

    def build(self) -> bytes:
        timestamps = self._timestamps
        first = timestamps[0] if timestamps else NO_TIMESTAMP
        parts = _encode_records(
            self._keys,
            self._values,
            None if self._same_timestamp else [t - first for t in timestamps],
            None,
            self._headers if self._has_headers else None,
        )
        count = len(self._values)
        return _assemble(
            b"".join(parts),
            count,
            base_offset=0,
            compression=self.compression,
            timestamp_type=TimestampType.CREATE_TIME,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            is_transactional=self.is_transactional,
            is_control=False,
            partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
            last_offset_delta=max(count - 1, 0),
            first_timestamp=first,
            max_timestamp=max(timestamps) if timestamps else NO_TIMESTAMP,
        )


# -- decoding --------------------------------------------------------------


def decode_batch(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at ``position`` and decode all its records."""
    header = check_batch(buf, position, len(buf))
    start = position + RECORD_BATCH_OVERHEAD
    end = position + header.size
    if header.compression == Compression.NONE:
        body: bytes | memoryview = memoryview(buf)[start:end]
        body = bytes(body)
    else:
        body = decompress(header.compression, memoryview(buf)[start:end])
    try:
        records = _decode_records(body, header)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{exc.reason} (record byte {exc.position} of the batch)", position
        ) from None
    return header, records


def _decode_records(body: bytes, header: BatchHeader) -> list[Record]:
    base = header.base_offset
    first_ts = header.first_timestamp
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    records: list[Record] = []
    append = records.append
    pos = 0
    end = len(body)
    try:
        for _ in range(header.record_count):
            # length
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = decode_varint(body, pos)
            record_end = pos + length
            if length < 6 or record_end > end:
                raise CorruptRecordError(f"record length {length} does not fit the batch", pos)
            pos += 1  # attributes
            b = body[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = decode_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = decode_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                kl = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                kl, pos = decode_varint(body, pos)
            if kl < 0:
                key = None
            else:
                key = body[pos : pos + kl]
                pos += kl
            b = body[pos]
            if b < 0x80:
                vl = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vl, pos = decode_varint(body, pos)
            if vl < 0:
                value = None
            else:
                value = body[pos : pos + vl]
                pos += vl
            b = body[pos]
            if b == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(body, pos)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record declares {length} bytes but its fields take "
                    f"{pos - record_end + length}",
                    pos,
                )
            timestamp = header.max_timestamp if log_append else first_ts + ts_delta
            append(Record(base + off_delta, timestamp, key, value, headers))
    except IndexError:
        raise CorruptRecordError(
            f"records end early: {len(records)} of {header.record_count} decoded", pos
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes left after the {header.record_count} records the header counts",
            pos,
        )
    return records


def _decode_headers(body: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    count, pos = decode_varint(body, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}", pos)
    out = []
    for _ in range(count):
        kl, pos = decode_varint(body, pos)
        if kl < 0 or pos + kl > len(body):
            raise CorruptRecordError(f"header key length {kl} does not fit", pos)
        try:
            key = body[pos : pos + kl].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}", pos) from None
        pos += kl
        vl, pos = decode_varint(body, pos)
        if vl < 0:
            value = None
        else:
            if pos + vl > len(body):
                raise CorruptRecordError(f"header value length {vl} does not fit", pos)
            value = body[pos : pos + vl]
            pos += vl
        out.append(Header(key, value))
    return tuple(out), pos


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


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record in ``buf``: v2 batches, or a legacy (v0/v1) message set."""
    if len(buf) > MAGIC_OFFSET and buf[MAGIC_OFFSET] < CURRENT_MAGIC:
        from .legacy import iter_legacy_records

        yield from iter_legacy_records(bytes(buf))
        return
    for _, records in iter_batches_records(buf):
        yield from records
