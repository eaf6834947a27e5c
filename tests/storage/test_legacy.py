"""Legacy message sets (magic 0 and 1) built by kafka-python: reading and up-conversion."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from annal.storage.batch import Compression, TimestampType, count_records, iter_batches
from annal.storage.errors import CorruptRecordError
from annal.storage.legacy import iter_legacy_records, upconvert
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch, iter_records
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from logutil import read_all


def legacy_set(magic: int, codec: int, wrapper_offset: int | None = None, count: int = 5) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, 1_000 + i if magic else None, b"k%d" % i, None if i == 2 else b"v%d" % i)
    data = bytearray(builder.build())
    if wrapper_offset is not None:
        struct.pack_into(">q", data, 0, wrapper_offset)  # as a broker assigns it
    return bytes(data)


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_sets(magic: int) -> None:
    records = list(iter_legacy_records(legacy_set(magic, 0)))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (i, b"k%d" % i, None if i == 2 else b"v%d" % i) for i in range(5)
    ]
    assert [r.timestamp for r in records] == ([1_000 + i for i in range(5)] if magic else [-1] * 5)


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_v1_compressed_wrapper_has_relative_inner_offsets(codec: int) -> None:
    records = list(iter_legacy_records(legacy_set(1, codec, wrapper_offset=104)))
    assert [r.offset for r in records] == [100, 101, 102, 103, 104]
    assert [r.timestamp for r in records] == [1_000 + i for i in range(5)]


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_v0_compressed_wrapper_keeps_absolute_inner_offsets(codec: int) -> None:
    records = list(iter_legacy_records(legacy_set(0, codec, wrapper_offset=4)))
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.key for r in records] == [b"k%d" % i for i in range(5)]


@pytest.mark.parametrize(("magic", "codec"), [(m, c) for m in (0, 1) for c in (0, 1, 2, 3)])
def test_upconversion_to_v2_reads_the_same_in_annal_and_kafka_python(
    magic: int, codec: int
) -> None:
    data = legacy_set(magic, codec, wrapper_offset=4 if codec else None)
    converted = upconvert(data)
    assert converted[16] == 2
    expected = [(r.offset, r.timestamp, r.key, r.value) for r in iter_legacy_records(data)]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(converted)] == expected
    headers = list(iter_batches(converted))
    assert all(h.compression == Compression(codec) for h in headers)
    theirs = []
    position = 0
    for header in headers:
        batch = DefaultRecordBatch(converted[position : position + header.size])
        theirs.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
        position += header.size
    assert theirs == expected


def test_legacy_produce_is_upconverted_by_the_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append_as_leader(legacy_set(1, 1, wrapper_offset=0), 0)
    log.append_as_leader(legacy_set(0, 0), 0)
    assert [r.offset for r in read_all(log)] == list(range(10))
    assert [r.key for r in read_all(log)] == [b"k%d" % i for i in range(5)] * 2
    log.close()


def test_corrupt_legacy_messages() -> None:
    data = bytearray(legacy_set(1, 0))
    data[30] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"legacy message CRC mismatch.* at position 0"):
        list(iter_legacy_records(bytes(data)))
    with pytest.raises(CorruptRecordError, match="declares"):
        list(iter_legacy_records(legacy_set(1, 0)[:-5]))


def with_attributes(entry: bytes, attributes: int, timestamp: int | None = None) -> bytes:
    """A copy of a one-entry v1 set with new attributes (and wrapper timestamp), CRC refreshed."""
    data = bytearray(entry)
    data[17] = attributes
    if timestamp is not None:
        struct.pack_into(">q", data, 18, timestamp)
    struct.pack_into(">I", data, 12, zlib.crc32(bytes(data[16:])))
    return bytes(data)


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_v1_log_append_time_wrapper_stamps_every_inner_message(codec: int) -> None:
    data = with_attributes(legacy_set(1, codec, wrapper_offset=9), codec | 0x08, 77_777)
    ours = [(r.offset, r.timestamp) for r in iter_legacy_records(data)]
    theirs = [(r.offset, r.timestamp) for r in kafka_python_records(data)]
    assert ours == theirs == [(5 + i, 77_777) for i in range(5)]
    converted = upconvert(data)
    (header,) = iter_batches(converted)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [(r.offset, r.timestamp) for r in iter_records(converted)] == ours


def kafka_python_records(data: bytes) -> list[Any]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.extend(batch)
    return out


def test_mixed_magics_and_offset_gaps_upconvert_in_order() -> None:
    v0 = legacy_set(0, 0, count=2)  # offsets 0, 1
    v1_gzip = legacy_set(1, 1, wrapper_offset=6)  # offsets 2..6
    v1_plain = bytearray(legacy_set(1, 0, count=3))
    position = 0
    for offset in (10, 20, 21):  # a compacted stretch: gaps
        struct.pack_into(">q", v1_plain, position, offset)
        position += 12 + struct.unpack_from(">i", v1_plain, position + 8)[0]
    data = v0 + v1_gzip + bytes(v1_plain)
    records = list(iter_legacy_records(data))
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 5, 6, 10, 20, 21]
    assert [r.timestamp for r in records[:2]] == [-1, -1]
    converted = upconvert(data)
    headers = list(iter_batches(converted))
    assert [(h.base_offset, h.last_offset, h.compression) for h in headers] == [
        (0, 1, Compression.NONE),
        (2, 6, Compression.GZIP),
        (10, 21, Compression.NONE),
    ]
    assert list(iter_records(converted)) == records
    assert [r.offset for r in iter_records(upconvert(data, renumber=True))] == list(range(10))
    assert list(iter_records(data)) == records


def test_bad_wrappers_are_corrupt_records_at_the_wrapper_position() -> None:
    first = legacy_set(1, 0, count=1)
    at = len(first)
    # an inner message with a broken CRC inside a gzip wrapper
    inner = bytearray(legacy_set(1, 0, count=3))
    inner[30] ^= 0xFF
    wrapper = wrap(bytes(inner), 1, offset=2)
    with pytest.raises(CorruptRecordError) as info:
        list(iter_legacy_records(first + wrapper))
    assert info.value.position == at and "CRC mismatch" in info.value.reason
    # a compressed message inside a compressed message
    nested = wrap(legacy_set(1, 1, wrapper_offset=2), 1, offset=2)
    with pytest.raises(CorruptRecordError, match="nested") as info:
        list(iter_legacy_records(first + nested))
    assert info.value.position == at
    # a wrapper whose value does not decompress
    garbage = wrap(b"\x00" * 40, 1, offset=2, compress=False)
    with pytest.raises(CorruptRecordError, match="cannot decompress gzip") as info:
        upconvert(first + garbage)
    assert info.value.position == at
    # codec bits no legacy message can carry (4 is zstd, v2 only)
    for codec in (4, 5, 7):
        with pytest.raises(CorruptRecordError, match=f"codec {codec} is not valid") as info:
            list(iter_legacy_records(first + wrap(legacy_set(1, 0), codec, offset=9)))
        assert info.value.position == at
    # offsets that go backwards
    with pytest.raises(CorruptRecordError, match="does not follow"):
        upconvert(legacy_set(1, 0) + legacy_set(1, 0))


def wrap(inner: bytes, codec: int, offset: int, compress: bool = True) -> bytes:
    """A v1 wrapper message holding ``inner`` (an uncompressed message set)."""
    value = gzip.compress(inner) if compress else inner
    body = struct.pack(">bbqi", 1, codec, 1_000, -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def test_count_records_reads_headers_of_every_format() -> None:
    v2 = encode_batch([Record(i, 1000, None, b"v") for i in range(7)]) + encode_batch(
        [Record(7, 1000, None, b"w")], base_offset=7
    )
    assert count_records(v2) == 8
    assert count_records(v2[:-5]) == 7  # a torn last batch is not counted
    assert count_records(b"") == 0
    assert count_records(legacy_set(1, 0)) == 5  # one per uncompressed entry
    assert count_records(legacy_set(0, 0) + v2) == 13
