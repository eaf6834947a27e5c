"""v2 record batches: exact layout, round trips, every codec, corrupt input."""

from __future__ import annotations

import struct

import pytest
from annal.consumer.simple import ConsumerRecord
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
    decode_keys,
    decode_located,
    decode_varint,
    encode_batch,
    encode_values,
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
    # CRC-32C (Castagnoli) of attributes .. end, checked against a bitwise reference
    assert data[17:21] == crc32c_reference(data[21:]).to_bytes(4, "big")


def crc32c_reference(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def reference_records(records: list[Record], base_offset: int, first_timestamp: int) -> bytes:
    """The records section, field by field, as the format describes it."""
    out = bytearray()

    def field(raw: bytes | None) -> bytes:
        return encode_varint(-1) if raw is None else encode_varint(len(raw)) + raw

    for r in records:
        body = b"\x00" + encode_varint(r.timestamp - first_timestamp)
        body += encode_varint(r.offset - base_offset) + field(r.key) + field(r.value)
        body += encode_varint(len(r.headers))
        for h in r.headers:
            body += field(h.key.encode()) + field(h.value)
        out += encode_varint(len(body)) + body
    return bytes(out)


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


KEY_SHAPES = {
    "null": lambda i: None,
    "same length": lambda i: b"key-%04d" % (i % 10_000),
    "mixed lengths": lambda i: b"k" * (i % 7),
    "some null": lambda i: None if i % 4 == 0 else b"key-%d" % i,
}


@pytest.mark.parametrize("keys", list(KEY_SHAPES))
@pytest.mark.parametrize("count", [1, 63, 64, 65, 151, 8192, 8193])
@pytest.mark.parametrize("timestamps", ["same", "small deltas", "large and negative"])
def test_every_encoding_path_matches_the_reference(keys: str, count: int, timestamps: str) -> None:
    """The table-driven paths (null keys, keys of one length, small timestamp
    deltas, 1- and 2-byte offset deltas) and the general path all write what
    the format says, byte for byte."""
    key = KEY_SHAPES[keys]
    ts = {
        "same": lambda i: 5_000,
        "small deltas": lambda i: 5_000 + i % 64,
        "large and negative": lambda i: 5_000 + (i * 7919) % 100_000 - 50_000,
    }[timestamps]
    records = [Record(i, ts(i), key(i), b"v%d" % i * (i % 13)) for i in range(count)]
    data = encode_batch(records)
    assert data[61:] == reference_records(records, 0, records[0].timestamp)
    assert decode_batch(data)[1] == records
    if timestamps == "same" and keys != "some null":
        values = [r.value for r in records]
        key_column = None if keys == "null" else [r.key for r in records]
        assert encode_values(values, key_column, timestamp_ms=5_000) == data
        builder = BatchBuilder()
        for r in records:
            builder.append(r.key, r.value, r.timestamp)
        assert builder.build() == data


@pytest.mark.parametrize("size", [0, 63, 64, 8175, 8176, 8192, 70_000])
def test_value_and_key_sizes_around_the_table_limits(size: int) -> None:
    records = [
        Record(0, 1, None, b"x" * size),
        Record(1, 1, b"y" * size, b"z"),
        Record(2, 1, b"k", b"x" * size, (Header("h" * size, b"w" * size),)),
    ]
    for sample in (records[:1], records[:2], records):
        data = encode_batch(sample)
        assert data[61:] == reference_records(sample, 0, 1)
        assert decode_batch(data)[1] == sample


def test_offset_gaps_and_overridden_ranges() -> None:
    records = [Record(100, 7, b"a", b"1"), Record(103, 9, b"b", None), Record(200, 8, None, b"")]
    data = encode_batch(records, base_offset=99, last_offset_delta=150, first_timestamp=6)
    header, decoded = decode_batch(data)
    assert decoded == records
    assert (header.base_offset, header.last_offset, header.first_timestamp) == (99, 249, 6)
    assert header.max_timestamp == 9
    assert data[61:] == reference_records(records, 99, 6)
    with pytest.raises(ValueError, match="increase"):
        encode_batch([Record(5, 0, None, b""), Record(5, 0, None, b"")], base_offset=5)
    with pytest.raises(ValueError, match="increase"):
        encode_batch([Record(4, 0, None, b"")], base_offset=5)
    with pytest.raises(ValueError, match="below the last record"):
        encode_batch([Record(0, 0, None, b""), Record(3, 0, None, b"")], last_offset_delta=2)


def test_log_append_time_gives_every_record_the_batch_time() -> None:
    records = [Record(i, 100 + i, None, b"v") for i in range(3)]
    data = encode_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=999)
    header, decoded = decode_batch(data)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decoded] == [999] * 3


def test_control_batch_keeps_producer_fields() -> None:
    # an end-transaction marker: key = version 0, type 1 (commit)
    marker = Record(40, 1234, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
    data = encode_batch(
        [marker],
        base_offset=40,
        producer_id=9_000_000_000,
        producer_epoch=32_000,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )
    header, decoded = decode_batch(data)
    assert header.is_control and header.is_transactional
    assert header.attributes == 0x30
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        9_000_000_000,
        32_000,
        -1,
    )
    assert decoded == [marker]


@pytest.mark.parametrize("codec", list(Compression))
def test_empty_batches_for_every_codec(codec: Compression) -> None:
    data = encode_batch([], base_offset=50, compression=codec, producer_id=3, base_sequence=7)
    header, records = decode_batch(data)
    assert records == []
    assert (header.record_count, header.first_timestamp, header.max_timestamp) == (0, -1, -1)
    assert (header.producer_id, header.base_sequence, header.compression) == (3, 7, codec)
    assert encode_values([], timestamp_ms=1) == encode_batch([], first_timestamp=-1)
    assert BatchBuilder().build() == encode_batch([])


def test_builder_estimate_and_now() -> None:
    import time

    builder = BatchBuilder()
    before = time.time_ns() // 1_000_000
    for i in range(300):
        builder.append(b"key-%d" % i if i % 2 else None, b"x" * (i % 200))
        assert builder.estimated_size >= len(builder.build())
    builder.append(b"k", b"v", 1, [Header("trace", b"t" * 500)])
    data = builder.build()
    assert len(data) <= builder.estimated_size < len(data) * 1.1
    assert builder.record_count == 301
    timestamps = [r.timestamp for r in iter_records(data)]
    assert before <= min(timestamps[:-1]) <= max(timestamps) <= time.time_ns() // 1_000_000
    assert timestamps[-1] == 1


def test_decode_keys_matches_decode_batch() -> None:
    records = [
        Record(i, i, None if i % 3 == 0 else b"k%d" % i, None if i % 4 == 0 else b"v" * i)
        for i in range(200)
    ]
    for codec in (Compression.NONE, Compression.ZSTD):
        data = b"junk" + encode_batch(records, compression=codec)
        _, keys = decode_keys(data, 4)
        assert keys == [(r.offset, r.key, r.value is None) for r in records]


def corrupt_position(data: bytes, position: int = 0) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        decode_batch(data, position)
    return info.value


def test_every_corruption_names_the_batch_position() -> None:
    good = encode_batch([Record(i, 0, b"key", b"value") for i in range(3)])
    prefix = encode_batch([Record(0, 0, None, b"first")])
    at = len(prefix)

    bad_crc = bytearray(prefix + good)
    bad_crc[at + 65] ^= 0x40
    assert corrupt_position(bytes(bad_crc), at).position == at

    error = corrupt_position(prefix + good[:-3], at)
    assert error.position == at and "truncated" in error.reason

    # a record whose length points past the batch, with a valid CRC
    overrun = bytearray(good)
    overrun[61] = 0x7E  # length 63
    error = corrupt_position(prefix + refresh_crc(overrun), at)
    assert error.position == at and "declares 63 bytes but its fields take 14" in error.reason

    # a 10-byte varint that never stops, as the first record's timestamp delta
    endless = bytearray(good[:61]) + b"\x20\x00" + b"\xff" * 11 + b"\x00" * 3
    struct.pack_into(">i", endless, 8, len(endless) - 12)
    struct.pack_into(">i", endless, 57, 1)
    struct.pack_into(">i", endless, 23, 0)
    error = corrupt_position(prefix + refresh_crc(endless), at)
    assert error.position == at and "varint longer than 10 bytes" in error.reason

    # a compressed section that does not decompress
    garbled = bytearray(encode_batch([Record(0, 0, None, b"v" * 100)], compression=Compression.LZ4))
    garbled[70:80] = b"\x00" * 10
    error = corrupt_position(prefix + refresh_crc(garbled), at)
    assert error.position == at and "cannot decompress lz4" in error.reason

    # a header whose key is not UTF-8
    bad_header = bytearray(encode_batch([Record(0, 0, None, b"v", (Header("\u00e9", None),))]))
    index = bad_header.index("\u00e9".encode())
    bad_header[index] = 0xFF
    error = corrupt_position(refresh_crc(bad_header))
    assert error.position == 0 and "UTF-8" in error.reason


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_bits_are_corrupt(codec: int) -> None:
    data = bytearray(encode_batch([Record(0, 0, None, b"v")]))
    data[22] |= codec
    error = corrupt_position(refresh_crc(data))
    assert error.position == 0 and f"unknown compression codec {codec}" in error.reason


def test_iter_records_reads_legacy_and_v2_entries_in_one_buffer() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(0, 10, b"old", b"v1 message")
    v2 = encode_batch([Record(1, 20, b"new", b"v2 record")], base_offset=1)
    both = bytes(legacy.build()) + v2
    expected = [Record(0, 10, b"old", b"v1 message"), Record(1, 20, b"new", b"v2 record")]
    assert list(iter_records(both)) == expected
    assert list(iter_records(memoryview(both))) == expected


Located = ConsumerRecord  # the consumer's record: topic and partition first


def test_decode_located_leads_with_topic_and_partition_from_the_start_offset() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(0, 10, b"old", b"v1 message")
    first = encode_batch([Record(i, 20, None, b"a") for i in range(1, 4)], base_offset=1)
    second = encode_batch(
        [Record(4, 30, b"k", b"b", (Header("h", b"x"),)), Record(5, 31, b"k", None)],
        base_offset=4,
        compression=Compression.LZ4,
    )
    appended = encode_batch(
        [Record(6, 1, None, b"c")],
        base_offset=6,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=999,
    )
    data = bytes(legacy.build()) + first + second + appended
    every = decode_located(data, Located, "t", 3, 0)
    assert every == [Located("t", 3, *r) for r in iter_records(data)]
    assert every[-1] == Located("t", 3, 6, 999, None, b"c", ())
    assert [r.offset for r in decode_located(data, Located, "t", 3, 2)] == [2, 3, 4, 5, 6]
    assert decode_located(data, Located, "t", 3, 7) == []
    assert all(type(r) is Located for r in every)


def test_decode_located_names_a_corrupt_batch_it_must_read() -> None:
    good = encode_batch([Record(0, 0, None, b"v")])
    bad = bytearray(encode_batch([Record(1, 0, None, b"w")], base_offset=1))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(CorruptRecordError) as caught:
        decode_located(good + bytes(bad), Located, "t", 0, 0)
    assert caught.value.position == len(good)


@pytest.mark.timeout(10)
def test_last_header_stops_at_a_length_that_is_no_batchs() -> None:
    """A negative or too small batch length ends the walk (it once looped forever)."""
    good = encode_batch([Record(0, 0, b"k", b"v")])
    for length in (-12, -200, 0, 48):
        bad = bytearray(good)
        struct.pack_into(">i", bad, 8, length)
        assert last_header(bytes(bad) + b"\x00" * 100) is None
        assert last_header(good + bytes(bad)) == read_header(good)
