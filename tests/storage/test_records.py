"""v2 record batches: exact layout, round trips, every codec, corrupt input."""

from __future__ import annotations

import struct

import pytest
from annal.storage.batch import (
    CRC_OFFSET,
    Compression,
    TimestampType,
    check_batch,
    compute_crc,
    last_header,
    read_header,
)
from annal.storage.compression import XERIAL_MAGIC, compress, decompress
from annal.storage.errors import CorruptRecordError
from annal.storage.records import (
    BatchBuilder,
    Header,
    Record,
    decode_batch,
    decode_varint,
    encode_batch,
    encode_varint,
    iter_records,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def test_exact_bytes_of_a_small_batch() -> None:
    data = encode_batch([Record(0, 1000, b"k", b"v")])
    # record: length 8 (zig-zag 0x10), attributes, ts delta 0, offset delta 0,
    # key length 1 (0x02) "k", value length 1 (0x02) "v", no headers
    record = bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x00])
    assert data[61:] == record
    # header: base 0, length 49 + 9, epoch -1, magic 2, crc, attributes 0, lastOffsetDelta 0,
    # first/max timestamp 1000, producer -1/-1/-1, count 1
    expected_header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + 9, -1, 2, 0, 0, 0, 1000, 1000, -1, -1, -1, 1
    )
    assert data[:17] == expected_header[:17]
    assert data[21:61] == expected_header[21:61]
    assert read_header(data).crc == compute_crc(data, 0, len(data))


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**62])
def test_varints_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert decode_varint(raw + b"junk", 0) == (value, len(raw))


def test_varint_known_encodings() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(64) == b"\x80\x01"


@pytest.mark.parametrize("codec", list(Compression))
def test_every_codec_round_trips(codec: Compression) -> None:
    records = [
        Record(
            i, 1_000 + i, None if i % 3 == 0 else b"key-%d" % i, None if i % 5 == 0 else b"v" * i
        )
        for i in range(50)
    ]
    data = encode_batch(records, compression=codec)
    header, decoded = decode_batch(data)
    assert header.compression == codec
    assert decoded == records


def test_headers_and_flags_are_preserved() -> None:
    records = [
        Record(10, 5, b"k", b"v", (Header("trace", b"\x00\xff"), Header("empty", None))),
        Record(12, 7, b"k2", b"", ()),
    ]
    data = encode_batch(
        records,
        base_offset=10,
        producer_id=42,
        producer_epoch=3,
        base_sequence=100,
        is_transactional=True,
        partition_leader_epoch=9,
        timestamp_type=TimestampType.CREATE_TIME,
        last_offset_delta=4,
    )
    header, decoded = decode_batch(data)
    assert decoded == records
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 100)
    assert header.is_transactional and not header.is_control
    assert header.partition_leader_epoch == 9
    assert header.last_offset == 14 and header.record_count == 2
    control = decode_batch(encode_batch([Record(0, 1, b"\x00\x00\x00\x00", None)], is_control=True))
    assert control[0].is_control


def test_empty_batch() -> None:
    data = encode_batch([], base_offset=7, last_offset_delta=3, producer_id=5)
    header, records = decode_batch(data)
    assert records == [] and header.record_count == 0 and header.last_offset == 10


def test_builder_matches_encode_batch() -> None:
    builder = BatchBuilder()
    builder.append(None, b"a", 100)
    builder.append(b"k", b"b", 100, [("h", b"x")])
    builder.append(b"k", None, 105)
    built = builder.build()
    expected = encode_batch(
        [
            Record(0, 100, None, b"a"),
            Record(1, 100, b"k", b"b", (Header("h", b"x"),)),
            Record(2, 105, b"k", None),
        ]
    )
    assert built == expected
    assert builder.estimated_size >= len(built)


def test_builder_extend_and_size_estimate() -> None:
    values = [b"%05d" % i * 20 for i in range(500)]
    builder = BatchBuilder()
    builder.extend(values, None, 77)
    data = builder.build()
    assert [r.value for r in iter_records(data)] == values
    assert len(data) <= builder.estimated_size < len(data) * 1.1


@pytest.mark.parametrize("codec", list(Compression))
def test_codecs(codec: Compression) -> None:
    payload = b"hello kafka " * 1000
    assert decompress(codec, compress(codec, payload)) == payload


def test_snappy_uses_xerial_framing_and_reads_raw_snappy() -> None:
    import cramjam

    framed = compress(Compression.SNAPPY, b"abc" * 50_000)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, framed) == b"abc" * 50_000
    raw = bytes(cramjam.snappy.compress_raw(b"plain"))
    assert decompress(Compression.SNAPPY, raw) == b"plain"


def test_damaged_compressed_data_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecordError, match="cannot decompress gzip"):
        decompress(Compression.GZIP, b"not gzip at all")


def refresh_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_OFFSET, compute_crc(data, 0, len(data)))
    return bytes(data)


def test_corrupt_inputs_name_the_reason_and_position() -> None:
    good = encode_batch([Record(i, 0, None, b"value") for i in range(3)])
    two = good + good
    bad_crc = bytearray(two)
    bad_crc[len(good) + 70] ^= 1
    with pytest.raises(CorruptRecordError, match=rf"CRC mismatch.* at position {len(good)}"):
        list(iter_records(bytes(bad_crc)))
    with pytest.raises(CorruptRecordError, match=r"truncated batch.*at position 0"):
        check_batch(good[:-1], 0, len(good) - 1)
    # the header counts 3 records but the body holds 2: a valid CRC, a wrong count
    short = bytearray(encode_batch([Record(i, 0, None, b"value") for i in range(2)]))
    struct.pack_into(">i", short, 57, 3)
    struct.pack_into(">i", short, 23, 2)
    with pytest.raises(CorruptRecordError, match="2 of 3 decoded"):
        decode_batch(refresh_crc(short))
    # fewer counted than present: bytes left over
    extra = bytearray(good)
    struct.pack_into(">i", extra, 57, 2)
    with pytest.raises(CorruptRecordError, match="bytes left after the 2 records"):
        decode_batch(refresh_crc(extra))
    # a varint that never ends
    endless = bytearray(good[:61]) + b"\xff" * 12
    struct.pack_into(">i", endless, 8, len(endless) - 12)
    struct.pack_into(">i", endless, 57, 1)
    struct.pack_into(">i", endless, 23, 0)
    with pytest.raises(CorruptRecordError, match="varint"):
        decode_batch(refresh_crc(endless))


def test_last_header_walks_lengths_only() -> None:
    a = encode_batch([Record(0, 0, None, b"a")])
    b = encode_batch([Record(5, 0, None, b"b"), Record(6, 0, None, b"c")], base_offset=5)
    header = last_header(a + b + b[:30])
    assert header is not None and header.next_offset == 7 and header.position == len(a)
    assert last_header(b"") is None


keys = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(
    st.builds(Header, st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(keys, keys, st.integers(0, 10**13), headers), min_size=1, max_size=30),
    gaps=st.lists(st.integers(1, 1000), min_size=30, max_size=30),
    codec=st.sampled_from(list(Compression)),
    base=st.integers(0, 2**40),
)
def test_encode_decode_property(
    rows: list[tuple[bytes | None, bytes | None, int, list[Header]]],
    gaps: list[int],
    codec: Compression,
    base: int,
) -> None:
    offset = base
    records = []
    for (key, value, timestamp, hs), gap in zip(rows, gaps, strict=False):
        records.append(Record(offset, timestamp, key, value, tuple(hs)))
        offset += gap
    data = encode_batch(records, base_offset=base, compression=codec)
    header, decoded = decode_batch(data)
    assert decoded == records
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.last_offset == records[-1].offset
