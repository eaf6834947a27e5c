"""Down-conversion of stored v2 batches to legacy message sets (Fetch v0-v3):
round trips through up-conversion for every legacy codec, the size limit, the
fetch offset, timestamps, dropped fields, zstd, and what kafka-python's own
legacy reader makes of the bytes."""

from __future__ import annotations

import struct
import zlib

import kafka.record
import pytest
import xxhash
from annal.storage.batch import CONTROL_FLAG, Compression, TimestampType, iter_batches
from annal.storage.compression import XERIAL_MAGIC
from annal.storage.downconvert import UnsupportedCompressionError, down_convert
from annal.storage.errors import CorruptRecordError
from annal.storage.legacy import (
    LZ4_MAGIC0_HEADER_CHECKSUM,
    encode_legacy,
    iter_legacy_records,
    upconvert,
)
from annal.storage.records import Header, Record, encode_batch, iter_records

pytestmark = pytest.mark.timeout(60)

LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
BASE_TS = 1_700_000_000_000

# (offset, timestamp, key, value) as both sides compare them
Row = tuple[int, int, bytes | None, bytes | None]


def records_at(first: int, n: int, tag: str = "r") -> list[Record]:
    """Keys (a null one every 5th), a null value every 7th, headers on every other
    record, timestamps that go up and down."""
    return [
        Record(
            first + i,
            BASE_TS + (i * 37) % 11,
            None if i % 5 == 4 else f"{tag}-k{first + i}".encode(),
            None if i % 7 == 3 else f"{tag}-value-{first + i}".encode() * (1 + i % 4),
            (Header("h", b"%d" % i),) if i % 2 else (),
        )
        for i in range(n)
    ]


def stored(codecs: list[Compression], per_batch: int = 20, **fields: int) -> bytes:
    """Batches one after another, as a log stores them, one per codec."""
    parts = []
    for i, codec in enumerate(codecs):
        base = i * per_batch
        parts.append(
            encode_batch(records_at(base, per_batch), base_offset=base, compression=codec, **fields)
        )
    return b"".join(parts)


def rows(records: list[Record], magic: int) -> list[Row]:
    return [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in records]


def legacy_rows(data: bytes) -> list[Row]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in iter_legacy_records(data)]


def entries(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, magic, attributes) of each top-level entry of a legacy message set."""
    out = []
    position = 0
    while position < len(data):
        offset, size = struct.unpack_from(">qi", data, position)
        out.append((offset, data[position + 16], data[position + 17]))
        position += 12 + size
    assert position == len(data)
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name.lower())
def test_down_then_up_conversion_keeps_keys_values_offsets_and_timestamps(
    magic: int, codec: Compression
) -> None:
    buf = stored([codec] * 4)
    result = down_convert(buf, magic, 0, max_bytes=1 << 20)
    expected = rows(list(iter_records(buf)), magic)
    assert legacy_rows(result.records) == expected
    assert result.converted == len(expected) == 80
    back = upconvert(result.records)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(back)] == expected
    assert all(h.compression == codec for h in iter_batches(back))
    found = entries(result.records)
    assert {m for _, m, _ in found} == {magic}
    assert {a & 0x07 for _, _, a in found} == {int(codec)}
    if codec != Compression.NONE:  # one wrapper per batch, at its last offset
        assert [o for o, _, _ in found] == [19, 39, 59, 79]


@pytest.mark.parametrize("magic", [0, 1])
def test_batches_of_every_codec_in_one_answer(magic: int) -> None:
    buf = stored([Compression.SNAPPY, Compression.NONE, Compression.LZ4, Compression.GZIP])
    result = down_convert(buf, magic, 0, max_bytes=1 << 20)
    assert legacy_rows(result.records) == rows(list(iter_records(buf)), magic)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_reads_the_converted_messages(magic: int, codec: Compression) -> None:
    """kafka-python's legacy reader: CRCs, relative offsets, xerial snappy and
    magic 0 LZ4 with Kafka's old header checksum (KAFKA-3160) all as it expects."""
    buf = stored([codec] * 3)
    data = down_convert(buf, magic, 0, max_bytes=1 << 20).records
    seen: list[Row] = []
    records = kafka.record.MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.magic == magic
        for record in batch:
            assert record.validate_crc()
            timestamp = -1 if record.timestamp is None else record.timestamp
            seen.append((record.offset, timestamp, record.key, record.value))
    assert seen == rows(list(iter_records(buf)), magic)


def test_magic0_lz4_frames_carry_kafkas_old_header_checksum() -> None:
    """Magic 0: xxHash32 over the frame's magic number too (KAFKA-3160), as old
    clients check it; magic 1: the LZ4 frame format's own checksum."""
    records = records_at(0, 10)
    for magic, covered in ((0, slice(0, 6)), (1, slice(4, 6))):
        wrapper = encode_legacy(records, magic, Compression.LZ4)
        value_at = 12 + 4 + 2 + (8 if magic else 0) + 4 + 4  # key -1, then the value's length
        frame = wrapper[value_at:]
        assert frame[:6] == b"\x04\x22\x4d\x18\x60\x40"  # independent 64 KiB blocks
        assert frame[6] == (xxhash.xxh32(frame[covered]).intdigest() >> 8) & 0xFF
    assert (xxhash.xxh32(frame[:6]).intdigest() >> 8) & 0xFF == LZ4_MAGIC0_HEADER_CHECKSUM


def test_legacy_snappy_is_xerial_framed_as_old_clients_expect() -> None:
    wrapper = encode_legacy(records_at(0, 5), 1, Compression.SNAPPY)
    assert wrapper[12 + 4 + 2 + 8 + 4 + 4 :].startswith(XERIAL_MAGIC)


@pytest.mark.parametrize("magic", [0, 1])
def test_the_size_limit_cuts_between_whole_messages(magic: int) -> None:
    buf = stored([Compression.NONE, Compression.GZIP, Compression.NONE, Compression.LZ4])
    everything = down_convert(buf, magic, 0, max_bytes=1 << 20).records
    limit = len(everything) // 2
    result = down_convert(buf, magic, 0, max_bytes=limit)
    assert 0 < len(result.records) <= limit
    assert everything.startswith(result.records)
    got = legacy_rows(result.records)  # whole messages only: they all parse
    assert got == legacy_rows(everything)[: len(got)]
    assert result.converted == len(got)


@pytest.mark.parametrize("magic", [0, 1])
def test_by_default_the_answer_keeps_the_size_of_what_was_read(magic: int) -> None:
    """Small records grow in the old formats (a v1 message's 34 bytes of overhead
    against a few in a v2 batch): the answer keeps to the bytes read."""
    buf = stored([Compression.NONE] * 6, per_batch=50)
    result = down_convert(buf, magic, 0)
    assert len(result.records) <= len(buf)
    assert 50 < result.converted < 300
    assert legacy_rows(result.records) == rows(list(iter_records(buf)), magic)[: result.converted]


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name.lower())
def test_the_first_batch_is_answered_whole_past_the_limit(codec: Compression) -> None:
    buf = stored([codec] * 3)
    result = down_convert(buf, 1, 0, max_bytes=10)
    assert legacy_rows(result.records) == rows(records_at(0, 20), 1)


def test_uncompressed_records_before_the_fetch_offset_are_left_out() -> None:
    """Kafka leaves them out of an uncompressed batch (librdkafka relies on it) and
    keeps a compressed batch whole (clients skip the first ones themselves)."""
    plain = stored([Compression.NONE])
    assert [r[0] for r in legacy_rows(down_convert(plain, 1, 13).records)] == list(range(13, 20))
    packed = stored([Compression.GZIP])
    assert [r[0] for r in legacy_rows(down_convert(packed, 1, 13).records)] == list(range(20))
    assert down_convert(plain, 0, 20).records == b""  # nothing at or after the offset


def test_log_append_time_is_kept_in_magic_1() -> None:
    append_time = BASE_TS + 5000
    for codec in (Compression.NONE, Compression.SNAPPY):
        buf = encode_batch(
            records_at(0, 10),
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            max_timestamp=append_time,
        )
        data = down_convert(buf, 1, 0).records
        assert all(a & 0x08 for _, _, a in entries(data))  # the timestamp-type flag
        assert {r.timestamp for r in iter_legacy_records(data)} == {append_time}
        back = list(iter_batches(upconvert(data)))
        assert {h.timestamp_type for h in back} == {TimestampType.LOG_APPEND_TIME}
        magic0 = down_convert(buf, 0, 0).records
        assert {r.timestamp for r in iter_legacy_records(magic0)} == {-1}
        assert not any(a & 0x08 for _, _, a in entries(magic0))


def test_a_wrapper_carries_the_largest_timestamp_of_its_records() -> None:
    records = records_at(0, 10)
    data = encode_legacy(records, 1, Compression.GZIP)
    (wrapper_timestamp,) = struct.unpack_from(">q", data, 18)
    assert wrapper_timestamp == max(r.timestamp for r in records)


def test_headers_and_producer_fields_are_dropped() -> None:
    buf = encode_batch(
        records_at(0, 6), producer_id=77, producer_epoch=3, base_sequence=10
    )  # fmt: skip
    back = upconvert(down_convert(buf, 1, 0).records)
    assert all(r.headers == () for r in iter_records(back))
    assert {(h.producer_id, h.base_sequence) for h in iter_batches(back)} == {(-1, -1)}


def test_control_batches_are_left_out() -> None:
    control = encode_batch(
        [Record(20, BASE_TS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=20, producer_id=5, producer_epoch=0, is_control=True, is_transactional=True,
    )  # fmt: skip
    assert next(iter_batches(control)).attributes & CONTROL_FLAG
    buf = stored([Compression.NONE]) + control + encode_batch(records_at(21, 3), base_offset=21)
    got = [r[0] for r in legacy_rows(down_convert(buf, 1, 0, max_bytes=1 << 20).records)]
    assert got == [*range(20), 21, 22, 23]


def test_zstd_first_in_line_is_refused_and_later_ends_the_answer() -> None:
    zstd = encode_batch(records_at(20, 5), base_offset=20, compression=Compression.ZSTD)
    with pytest.raises(UnsupportedCompressionError, match="zstd batch at byte 0"):
        down_convert(zstd, 1, 20)
    buf = stored([Compression.LZ4]) + zstd
    result = down_convert(buf, 1, 0, max_bytes=1 << 20)
    assert [r[0] for r in legacy_rows(result.records)] == list(range(20))


def test_a_batch_cut_short_by_the_read_is_left_out() -> None:
    buf = stored([Compression.NONE, Compression.GZIP])
    torn = buf[: len(buf) - 10]
    result = down_convert(torn, 1, 0, max_bytes=1 << 20)
    assert [r[0] for r in legacy_rows(result.records)] == list(range(20))
    assert down_convert(buf[:30], 1, 0).records == b""


def test_bytes_that_are_no_batch_raise_naming_where() -> None:
    buf = bytearray(stored([Compression.NONE, Compression.NONE]))
    second = next(h for h in iter_batches(buf) if h.base_offset == 20).position
    buf[second + 70] ^= 0xFF  # inside the records: the CRC no longer matches
    with pytest.raises(CorruptRecordError) as caught:
        down_convert(bytes(buf), 0, 0, max_bytes=1 << 20)
    assert caught.value.position == second
    assert "CRC" in str(caught.value)


def test_legacy_entries_are_passed_on_or_converted_down() -> None:
    """An entry already in the wanted format (or older) goes out as it is; a
    magic 1 entry for a magic 0 answer is converted (timestamps dropped)."""
    records = records_at(0, 6)
    magic0 = encode_legacy(records[:3], 0, Compression.GZIP)
    magic1 = encode_legacy(records[3:], 1)
    buf = magic0 + magic1
    assert down_convert(buf, 1, 0).records == buf
    as_magic0 = down_convert(buf, 0, 0).records
    assert as_magic0.startswith(magic0)
    assert {m for _, m, _ in entries(as_magic0)} == {0}
    assert legacy_rows(as_magic0) == rows(records, 0)


def test_only_magic_0_and_1_are_targets() -> None:
    with pytest.raises(ValueError, match="magic 0 or 1, not 2"):
        down_convert(stored([Compression.NONE]), 2, 0)
    with pytest.raises(ValueError, match="zstd is not a codec of legacy messages"):
        encode_legacy(records_at(0, 1), 1, Compression.ZSTD)


def test_each_message_crc_covers_magic_to_value() -> None:
    data = encode_legacy(records_at(0, 4), 1)
    position = 0
    while position < len(data):
        _, size, crc = struct.unpack_from(">qiI", data, position)
        assert crc == zlib.crc32(data[position + 16 : position + 12 + size])
        position += 12 + size


@pytest.mark.parametrize("magic", [0, 1])
def test_inner_offsets_are_relative_in_magic_1_and_absolute_in_magic_0(magic: int) -> None:
    """KIP-31: a magic 1 wrapper numbers its inner messages from 0 and sits at the
    absolute offset of the last; magic 0 numbers them absolutely."""
    records = records_at(40, 5)
    wrapper = encode_legacy(records, magic, Compression.GZIP)
    (wrapper_offset,) = struct.unpack_from(">q", wrapper, 0)
    assert wrapper_offset == 44
    value_at = 12 + 4 + 2 + (8 if magic else 0) + 4 + 4
    inner = zlib.decompress(wrapper[value_at:], 47)
    assert [o for o, _, _ in entries(inner)] == (list(range(5)) if magic else list(range(40, 45)))
