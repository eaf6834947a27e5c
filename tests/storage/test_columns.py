"""Fetched records as column buffers: the compiled walk, its pure-Python twin,
and the records the consumer's decoder reads from the same bytes."""

from __future__ import annotations

import struct
from array import array

import pytest
from annal.storage import columns
from annal.storage.batch import (
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    compute_crc,
)
from annal.storage.columns import BinaryColumn, Columns, Section, decode_fetched
from annal.storage.errors import CorruptRecordError
from annal.storage.records import Header, Record, decode_batch, encode_batch, encode_values
from environment import require_module
from hypothesis import given, settings
from hypothesis import strategies as st

require_module("annal.storage._columns")

NOW = 1_700_000_000_000

WALKS = {
    "c": columns._choose()[0] if columns.IMPLEMENTATION == "c" else None,
    "python": columns.decode_sections_py,
}


def values_of(column: BinaryColumn, n: int) -> list[bytes | None]:
    ends = array("i")
    ends.frombytes(column.offsets)
    assert len(ends) == n + 1 and ends[0] == 0
    out: list[bytes | None] = []
    for i in range(n):
        valid = column.validity is None or column.validity[i >> 3] >> (i & 7) & 1
        out.append(column.data[ends[i] : ends[i + 1]] if valid else None)
    assert out.count(None) == column.null_count
    return out


def rows_of(cs: Columns) -> list[tuple[object, ...]]:
    """The records the columns hold: (offset, timestamp ms, type, key, value, headers)."""
    n = cs.length
    offsets, micros, types = array("q"), array("q"), array("i")
    offsets.frombytes(cs.offsets)
    micros.frombytes(cs.timestamps_us)
    types.frombytes(cs.timestamp_types)
    headers: list[tuple[Header, ...]] = [()] * n
    if cs.headers is not None:
        h = cs.headers
        lists = array("i")
        lists.frombytes(h.lists)
        keys = values_of(BinaryColumn(None, 0, h.key_offsets, h.key_data), h.length)
        values = values_of(h.values, h.length)
        every = [Header(k.decode(), v) for k, v in zip(keys, values, strict=True) if k is not None]
        headers = [tuple(every[lists[i] : lists[i + 1]]) for i in range(n)]
    keys, values = values_of(cs.keys, n), values_of(cs.values, n)
    return [
        (offsets[i], micros[i] // 1000, types[i], keys[i], values[i], headers[i]) for i in range(n)
    ]


def expected(
    buf: bytes, start: int, end: int, with_headers: bool
) -> tuple[list[tuple[object, ...]], int]:
    """What decode_batch reads from ``buf``, and the offset after its last batch."""
    out = []
    position = 0
    next_offset = start
    while position < len(buf):
        header, records = decode_batch(buf, position)
        for r in records:
            if start <= r.offset < end:
                headers = r.headers if with_headers else ()
                row = (r.offset, r.timestamp, int(header.timestamp_type), r.key, r.value, headers)
                out.append(row)
        position += header.size
        next_offset = header.next_offset
    return out, next_offset


records = st.lists(
    st.builds(
        lambda gap, ts, key, value, headers: (gap, ts, key, value, headers),
        st.integers(1, 3),
        st.integers(-5, 5),
        st.none() | st.binary(max_size=12),
        st.none() | st.binary(max_size=300),
        st.lists(
            st.builds(Header, st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2
        ),
    ),
    min_size=0,
    max_size=8,
)


def build(base: int, items: list, codec: int, log_append: bool) -> bytes:
    offsets = []
    offset = base
    for gap, *_ in items:
        offsets.append(offset)
        offset += gap  # gaps, as in a compacted batch
    return encode_batch(
        [
            Record(o, NOW + ts, k, v, tuple(h))
            for o, (_, ts, k, v, h) in zip(offsets, items, strict=True)
        ],
        base_offset=base,
        compression=Compression(codec),
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        max_timestamp=NOW + 7 if log_append else None,
    )


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(
        st.tuples(records, st.sampled_from([0, 0, 1, 3, 4]), st.booleans()), max_size=4
    ),
    start=st.integers(0, 30),
    length=st.integers(0, 40),
    with_headers=st.booleans(),
)
def test_both_walks_read_what_the_records_decoder_reads(
    batches: list, start: int, length: int, with_headers: bool
) -> None:
    buf = b""
    base = 0
    for items, codec, log_append in batches:
        buf += build(base, items, codec, log_append)
        base += sum(gap for gap, *_ in items) + 1
    want, want_next = expected(buf, start, start + length, with_headers)
    for name, walk in WALKS.items():
        if walk is None:
            continue
        cs, next_offset = decode_fetched(buf, start, start + length, with_headers, decode=walk)
        assert rows_of(cs) == want, name
        assert (cs.headers is not None) == with_headers
        assert next_offset == want_next


GOOD = encode_values([b"v" * 20] * 8, [b"k"] * 8, timestamp_ms=NOW)


@settings(max_examples=800, deadline=None)
@given(
    body=st.binary(max_size=120)
    | st.builds(
        lambda good, cut, junk: good[:cut] + junk,
        st.just(
            encode_values([b"v" * 20] * 8, [b"k"] * 8, timestamp_ms=NOW)[RECORD_BATCH_OVERHEAD:]
        ),
        st.integers(0, 300),
        st.binary(max_size=6),
    ),
    count=st.integers(0, 10),
    with_headers=st.booleans(),
)
def test_random_bytes_are_refused_or_read_alike_never_a_crash(
    body: bytes, count: int, with_headers: bool
) -> None:
    sections: list[Section] = [(body, count, 100, NOW, 0, NOW)]
    outcomes = []
    for walk in WALKS.values():
        if walk is None:
            continue
        try:
            outcomes.append(walk(sections, 0, 1 << 40, with_headers))
        except ValueError as exc:
            index, byte, reason = exc.args
            assert index == 0 and isinstance(byte, int) and isinstance(reason, str)
            outcomes.append(None)
    if None not in outcomes:
        assert outcomes[0] == outcomes[-1]


def test_a_broken_record_names_its_batch_and_byte() -> None:
    good = encode_values([b"v" * 20] * 3, timestamp_ms=NOW)
    batch = bytearray(encode_values([b"v" * 20] * 3, timestamp_ms=NOW, base_offset=3))
    section = bytes(batch[RECORD_BATCH_OVERHEAD:])
    broken = section[:-1] + b"\x7f"  # the last record's header count: -64
    for walk in WALKS.values():
        if walk is None:
            continue
        with pytest.raises(ValueError) as caught:
            walk([(section, 3, 3, NOW, 0, NOW), (broken, 3, 3, NOW, 0, NOW)], 0, 10, False)
        assert caught.value.args[0] == 1
    # through decode_fetched the batch is named by its position in the fetch
    mended = bytearray(batch[:RECORD_BATCH_OVERHEAD] + broken)
    struct.pack_into(">I", mended, CRC_OFFSET, compute_crc(mended, 0, len(mended)))
    with pytest.raises(CorruptRecordError) as refused:
        decode_fetched(good + bytes(mended), 0, 10, False)
    assert refused.value.position == len(good)
    assert "of the records section" in str(refused.value)


def test_a_large_column_keeps_its_offsets_and_nulls() -> None:
    values = [None if i % 7 == 0 else bytes([i % 251]) * (i % 300) for i in range(2000)]
    buf = encode_values(values, timestamp_ms=NOW)
    cs, _ = decode_fetched(buf, 0, 2000, False)
    assert values_of(cs.values, 2000) == values
    assert cs.values.null_count == sum(v is None for v in values)
    assert cs.keys.validity is not None and cs.keys.null_count == 2000
