"""Fetched records as column buffers, laid out as Arrow's arrays take them.

``decode_fetched(buf, start, end, with_headers)`` reads the batches of a
fetched buffer and returns the records with offsets in ``[start, end)``
column by column, with the offset after the last whole batch:

- ``offsets`` and ``timestamps_us`` (int64), ``timestamp_types`` (int32),
  native byte order; a LogAppendTime batch's records take its max timestamp;
- ``keys`` and ``values``: binary columns, each a validity bitmap (None when
  nothing is null), its null count, int32 end offsets (leading 0) and the
  bytes;
- ``headers`` (only with ``with_headers``): int32 list offsets per record,
  then the headers' UTF-8 keys (offsets and bytes) and their values (a binary
  column).

Batches are checked (CRC, sizes) and inflated one at a time; the records of
all of them are then walked in one call.  That walk has two implementations:
``annal.storage._columns`` (C, built by ``pip install``; no Python object per
record) and ``decode_sections_py`` below, the fallback when the extension is
missing or ``ANNAL_PURE_PYTHON=1``.  They agree on every valid input; on
bytes that do not parse each raises (or the fallback, more lenient, returns
what it could read).  Old-format (v0/v1) batches, rare, are decoded record by
record.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from .batch import (
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    TimestampType,
    check_batch,
)
from .compiled import compiled
from .errors import CorruptRecordError
from .records import Header, _decode_records, _records_section, iter_records


class BinaryColumn(NamedTuple):
    validity: bytes | None
    null_count: int
    offsets: bytes
    data: bytes


class HeaderColumns(NamedTuple):
    lists: bytes  # int32: where each record's headers start and end
    key_offsets: bytes
    key_data: bytes
    values: BinaryColumn
    length: int


class Columns(NamedTuple):
    length: int
    offsets: bytes
    timestamps_us: bytes
    timestamp_types: bytes
    keys: BinaryColumn
    values: BinaryColumn
    headers: HeaderColumns | None


Section = tuple[bytes | memoryview, int, int, int, int, int]
"""One batch: (records section, record count, base offset, first timestamp,
timestamp type, max timestamp)."""

Decode = Callable[[list[Section], int, int, bool], Columns]

_Row = tuple[int, int, bytes | None, bytes | None, Sequence[Header], int]


def _wrap64(value: int) -> int:
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def _binary(items: Iterable[bytes | None]) -> BinaryColumn:
    validity = bytearray()
    nulls = 0
    ends = array("i", [0])
    parts: list[bytes] = []
    size = 0
    for i, item in enumerate(items):
        if i % 8 == 0:
            validity.append(0)
        if item is None:
            nulls += 1
        else:
            validity[i >> 3] |= 1 << (i & 7)
            size += len(item)
            parts.append(item)
        ends.append(size)
    return BinaryColumn(bytes(validity) if nulls else None, nulls, ends.tobytes(), b"".join(parts))


def _from_rows(rows: Sequence[_Row], with_headers: bool) -> Columns:
    """Columns of decoded records, record by record (the fallback's way)."""
    headers: HeaderColumns | None = None
    if with_headers:
        lists = array("i", [0])
        every = [h for row in rows for h in row[4]]
        for row in rows:
            lists.append(lists[-1] + len(row[4]))
        keys = _binary([h.key.encode("utf-8") for h in every])
        headers = HeaderColumns(
            lists.tobytes(), keys.offsets, keys.data, _binary([h.value for h in every]), len(every)
        )
    return Columns(
        len(rows),
        array("q", [row[0] for row in rows]).tobytes(),
        array("q", [_wrap64(row[1] * 1000) for row in rows]).tobytes(),
        array("i", [row[5] for row in rows]).tobytes(),
        _binary([row[2] for row in rows]),
        _binary([row[3] for row in rows]),
        headers,
    )


def _rows(sections: Sequence[Section], start: int, end: int) -> list[_Row]:
    """The records of ``sections`` in ``[start, end)``; raises
    ValueError(batch index, byte of its records section, reason)."""
    rows: list[_Row] = []
    for index, (body, count, base_offset, first_ts, ts_type, max_ts) in enumerate(sections):
        attributes = TIMESTAMP_TYPE_MASK if ts_type else 0
        header = BatchHeader(base_offset, 0, 0, CURRENT_MAGIC, 0, attributes, 0, first_ts,
                             max_ts, -1, -1, -1, count)  # fmt: skip
        try:
            records = _decode_records(bytes(body), header)
        except CorruptRecordError as exc:
            raise ValueError(index, exc.position, exc.reason) from None
        for r in records:
            if start <= r.offset < end:
                rows.append((r.offset, r.timestamp, r.key, r.value, r.headers, ts_type))
    return rows


def decode_sections_py(
    sections: list[Section], start: int, end: int, with_headers: bool
) -> Columns:
    """The pure-Python walk; see the module docstring."""
    return _from_rows(_rows(sections, start, end), with_headers)


def _choose() -> tuple[Decode, str]:
    decode = compiled("_columns", "decode")
    if decode is None:
        return decode_sections_py, "python"

    def in_c(sections: list[Section], start: int, end: int, with_headers: bool) -> Columns:
        count, offsets, timestamps, types, keys, values, headers = decode(
            sections, start, end, with_headers
        )
        header_columns = None
        if headers is not None:
            lists, key_offsets, key_data, validity, nulls, value_offsets, data, m = headers
            header_columns = HeaderColumns(
                lists, key_offsets, key_data, BinaryColumn(validity, nulls, value_offsets, data), m
            )
        return Columns(
            count, offsets, timestamps, types, BinaryColumn(*keys), BinaryColumn(*values),
            header_columns,
        )  # fmt: skip

    return in_c, "c"


decode_sections, IMPLEMENTATION = _choose()
"""The walk in use, and which one it is: ``"c"`` or ``"python"``."""


def _section(buf: bytes, header: BatchHeader) -> bytes | memoryview:
    """A batch's records, inflated; uncompressed ones are not copied."""
    if header.attributes & COMPRESSION_MASK:
        return _records_section(buf, header)
    return memoryview(buf)[header.position + RECORD_BATCH_OVERHEAD : header.position + header.size]


def decode_fetched(
    buf: bytes, start: int, end: int, with_headers: bool, decode: Decode | None = None
) -> tuple[Columns, int]:
    """The records of ``buf`` in ``[start, end)`` as columns, and the offset
    after the last whole batch (``start`` when there is none).  Raises
    CorruptRecordError naming the batch for anything that does not parse."""
    sections: list[Section] = []
    positions: list[int] = []  # where each section's batch starts in buf
    legacy: list[_Row] = []
    position = 0
    size = len(buf)
    next_offset = start
    while position < size:
        if position + MAGIC_OFFSET < size and buf[position + MAGIC_OFFSET] < CURRENT_MAGIC:
            records = list(iter_records(buf[position:]))  # v0/v1: decoded whole
            create_time = int(TimestampType.CREATE_TIME)
            legacy = [(*r[:4], r.headers, create_time) for r in records if start <= r.offset < end]
            if records:
                next_offset = max(next_offset, records[-1].offset + 1)
            break
        header = check_batch(buf, position, size)
        if header.last_offset >= start and header.base_offset < end:
            positions.append(position)
            sections.append(
                (
                    _section(buf, header),
                    header.record_count,
                    header.base_offset,
                    header.first_timestamp,
                    int(header.timestamp_type),
                    header.max_timestamp,
                )
            )
        next_offset = header.next_offset
        position += header.size
    try:
        if legacy:
            return _from_rows(_rows(sections, start, end) + legacy, with_headers), next_offset
        return (decode or decode_sections)(sections, start, end, with_headers), next_offset
    except ValueError as exc:
        index, byte, reason = exc.args
        raise CorruptRecordError(
            f"{reason} (byte {byte} of the records section)", positions[index]
        ) from None
