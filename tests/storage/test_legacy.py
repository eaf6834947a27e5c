"""Legacy message sets (magic 0 and 1) built by kafka-python: reading and up-conversion."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from annal.storage.batch import Compression, iter_batches
from annal.storage.errors import CorruptRecordError
from annal.storage.legacy import iter_legacy_records, upconvert
from annal.storage.log import Log
from annal.storage.records import iter_records
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder
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
