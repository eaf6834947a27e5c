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
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, repeat
from operator import add
from typing import NamedTuple, cast

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
# Merged constant runs for the common record shapes (record sizes < _SHORT):
_SHORT = 1 << 14
_LEN_ATTR_TS0 = [encode_varint(n) + b"\x00\x00" for n in range(_SHORT)]  # length, attributes, ts 0
# the same, behind the previous record's header count (0)
_END_LEN_ATTR_TS0 = [b"\x00" + head for head in _LEN_ATTR_TS0]
_DELTA_NULL_KEY = [encode_varint(n) + b"\x01" for n in range(_SHORT)]  # offset delta, null key
_DELTA_FIELDS_LEN = [len(encode_varint(n)) + 4 for n in range(_SHORT)]  # + attr, ts, key, headers
_VALUE_FIELD_LEN = [len(encode_varint(n)) + n for n in range(_SHORT)]  # value varint + value


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


def _lengths(
    items: Sequence[bytes | None],
) -> tuple[list[bytes], Sequence[bytes], list[int]]:
    """Length varints, the payloads (b"" for null) and payload sizes, C-level where possible."""
    table = _VARINTS
    if None in items:
        heads = [b"\x01" if x is None else _varint(len(x)) for x in items]
        payloads: Sequence[bytes] = [b"" if x is None else x for x in items]
    else:
        payloads = items  # type: ignore[assignment]
        sizes = list(map(len, payloads))
        if sizes and max(sizes) >= _TABLE_SIZE:
            heads = [_varint(n) for n in sizes]
        else:
            heads = list(map(table.__getitem__, map(_PLUS_ONE, sizes)))
        return heads, payloads, sizes
    return heads, payloads, list(map(len, payloads))


_PLUS_ONE = (1).__add__


def _encode_records(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: Sequence[int] | None,
    offset_deltas: Sequence[int] | None,
    headers: Sequence[Sequence[Header | tuple[str, bytes | None]]] | None,
) -> bytes:
    """The records section, uncompressed.

    ``None`` for timestamp deltas means all 0, for offset deltas 0..n-1, for
    headers none at all.  Without headers every step is a C-level map over
    the whole batch (lengths, varint table lookups, one join); only records
    with headers take a per-record path.
    """
    if headers is not None:
        return _encode_records_one_by_one(keys, values, timestamp_deltas, offset_deltas, headers)
    n = len(values)
    table = _VARINTS
    get = table.__getitem__
    if (
        timestamp_deltas is None
        and offset_deltas is None
        and 0 < n < _SHORT
        and keys.count(None) == n
        and None not in values
    ):
        # The producer's commonest batch: null keys, one timestamp, offsets 0..n-1.
        # Per record: [length|attr|ts] [delta|null key] [value length] value [0 headers].
        present = cast(Sequence[bytes], values)
        vls = list(map(len, present))
        if max(vls, default=0) < _SHORT - 8:
            # length = attributes + ts + delta + key + headers (delta fields) + value field
            sizes = list(map(add, _DELTA_FIELDS_LEN[:n], map(_VALUE_FIELD_LEN.__getitem__, vls)))
            heads = list(map(_END_LEN_ATTR_TS0.__getitem__, sizes))
            heads[0] = _LEN_ATTR_TS0[sizes[0]]  # the first record has no predecessor
            parts: Iterable[tuple[bytes, ...]]
            if vls.count(vls[0]) == n:
                # one value size: merge [delta|null key] with the shared value varint
                mids = list(map(add, _DELTA_NULL_KEY[:n], repeat(get(vls[0] + 1))))
                parts = zip(heads, mids, present, strict=True)
            else:
                vheads = map(get, map(_PLUS_ONE, vls))
                parts = zip(heads, _DELTA_NULL_KEY[:n], vheads, present, strict=True)
            return b"".join(chain.from_iterable(parts)) + b"\x00"
    if offset_deltas is None:
        ods: Sequence[bytes] = (
            table[1 : n + 1] if n < _TABLE_SIZE else [_varint(i) for i in range(n)]
        )
    else:
        ods = [_varint(d) for d in offset_deltas]
    if timestamp_deltas is None:
        tss: Sequence[bytes] = repeat(b"\x00", n)  # type: ignore[assignment]
        ts_lens: Sequence[int] = repeat(1, n)  # type: ignore[assignment]
    else:
        tss = [_varint(d) for d in timestamp_deltas]
        ts_lens = list(map(len, tss))
    vhs, vps, vls = _lengths(values)
    if keys.count(None) == n:
        khs: Sequence[bytes] = repeat(b"\x01", n)  # type: ignore[assignment]
        kps: Sequence[bytes] = repeat(b"", n)  # type: ignore[assignment]
        key_lens: Sequence[int] = repeat(1, n)  # type: ignore[assignment]
    else:
        khs, kps, kls = _lengths(keys)
        key_lens = list(map(sum, zip(map(len, khs), kls, strict=True)))
    # body = attributes(1) + ts + od + key varint + key + value varint + value + headers(1)
    bodies = list(map(sum, zip(ts_lens, map(len, ods), key_lens, map(len, vhs), vls, strict=True)))
    if max(bodies, default=0) + 2 < _TABLE_SIZE:
        size_heads = list(map(get, map((3).__add__, bodies)))  # index = (body + 2) + 1
    else:
        size_heads = [_varint(b + 2) for b in bodies]
    return b"".join(
        chain.from_iterable(
            zip(size_heads, repeat(b"\x00"), tss, ods, khs, kps, vhs, vps, repeat(b"\x00"))
        )
    )


def _encode_records_one_by_one(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamp_deltas: Sequence[int] | None,
    offset_deltas: Sequence[int] | None,
    headers: Sequence[Sequence[Header | tuple[str, bytes | None]]],
) -> bytes:
    parts: list[bytes] = []
    add = parts.extend
    for i in range(len(values)):
        key = keys[i]
        value = values[i]
        ts = b"\x00" if timestamp_deltas is None else _varint(timestamp_deltas[i])
        od = _varint(i if offset_deltas is None else offset_deltas[i])
        kh = b"\x01" if key is None else _varint(len(key))
        vh = b"\x01" if value is None else _varint(len(value))
        key = key or b""
        value = value or b""
        hd = _encode_headers(headers[i]) if headers[i] else b"\x00"
        size = 1 + len(ts) + len(od) + len(kh) + len(key) + len(vh) + len(value) + len(hd)
        add((_varint(size), b"\x00", ts, od, kh, key, vh, value, hd))
    return b"".join(parts)


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
    body = _encode_records(
        [r.key for r in records],
        [r.value for r in records],
        [r.timestamp - first_ts for r in records],
        deltas,
        [r.headers for r in records] if any(r.headers for r in records) else None,
    )
    return _assemble(
        body,
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
    an upper bound of the uncompressed batch (exact but for a few bytes of
    varints), so a producer can close the batch at ``batch.size``.
    ``extend`` adds many records in one call.  Not thread-safe.
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
        self._headers: dict[int, Sequence[Header | tuple[str, bytes | None]]] = {}
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
        timestamp_ms: int = NO_TIMESTAMP,
        headers: Sequence[Header | tuple[str, bytes | None]] = (),
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        n = len(self._values)
        self._keys.append(key)
        self._values.append(value)
        self._timestamps.append(timestamp_ms)
        if headers:
            self._headers[n] = headers
            self._size += len(_encode_headers(headers))
        # length, attributes, ts delta, offset delta, key and value varints, header count
        self._size += 14 + (len(key) if key else 0) + (len(value) if value else 0)
        return n

    def extend(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        timestamp_ms: int = NO_TIMESTAMP,
    ) -> None:
        """Add records with the same timestamp and no headers in one call."""
        n = len(values)
        self._values.extend(values)
        self._keys.extend(keys if keys is not None else repeat(None, n))
        self._timestamps.extend(repeat(timestamp_ms, n))
        self._size += 14 * n + sum(map(len, filter(None, values)))
        if keys is not None:
            self._size += sum(map(len, filter(None, keys)))

    def build(self) -> bytes:
        timestamps = self._timestamps
        count = len(self._values)
        first = timestamps[0] if timestamps else NO_TIMESTAMP
        same = timestamps.count(first) == count
        headers = None
        if self._headers:
            headers = [self._headers.get(i, ()) for i in range(count)]
        body = _encode_records(
            self._keys,
            self._values,
            None if same else [t - first for t in timestamps],
            None,
            headers,
        )
        return _assemble(
            body,
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
            elif body[pos + 1] < 0x80:  # two bytes: records of 64 B .. 8 KiB
                z = (b & 0x7F) | (body[pos + 1] << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
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
            elif body[pos + 1] < 0x80:
                z = (b & 0x7F) | (body[pos + 1] << 7)
                vl = (z >> 1) ^ -(z & 1)
                pos += 2
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


def decode_keys(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> tuple[BatchHeader, list[tuple[int, bytes | None, bool]]]:
    """(offset, key, value is null) of every record of the batch at ``position``.

    The log cleaner's view of a batch: values and headers are skipped, not
    copied.  Validates the CRC like ``decode_batch``.
    """
    header = check_batch(buf, position, len(buf))
    start = position + RECORD_BATCH_OVERHEAD
    end = position + header.size
    if header.compression == Compression.NONE:
        body = bytes(memoryview(buf)[start:end])
    else:
        body = decompress(header.compression, memoryview(buf)[start:end])
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
            if record_end > size or p >= record_end:
                raise CorruptRecordError(f"record length {length} does not fit the batch", pos)
            # a null value is the varint -1: the single byte 0x01
            out.append((base + offset_delta, key, body[p] == 1))
            pos = record_end
    except IndexError:
        raise CorruptRecordError("records end early", position) from None
    if pos != len(body):
        raise CorruptRecordError("record sizes do not add up to the batch", position)
    return header, out


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
