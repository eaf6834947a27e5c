"""Cross-checks against an independent implementation: kafka-python's ``kafka.record``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.storage.batch import Compression
from annal.storage.records import (
    BatchBuilder,
    Header,
    Record,
    decode_batch,
    encode_batch,
    encode_values,
)
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = {
    Compression.NONE: 0,
    Compression.GZIP: 1,
    Compression.SNAPPY: 2,
    Compression.LZ4: 3,
    Compression.ZSTD: 4,
}

ROWS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"key-1", b"value-1", []),
    (None, b"no key", [("trace", b"abc")]),
    (b"tombstone", None, []),
    (None, None, [("a", b""), ("b", b"\x00\x01")]),
    (b"\xff\xfe", b"x" * 1000, []),
]


def kafka_python_batch(codec: Compression, base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (key, value, headers) in enumerate(ROWS):
        builder.append(i, 1_600_000_000_000 + i, key, value, headers)
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")
    return bytes(data)


def annal_batch(codec: Compression) -> bytes:
    records = [
        Record(i, 1_600_000_000_000 + i, key, value, tuple(Header(k, v) for k, v in headers))
        for i, (key, value, headers) in enumerate(ROWS)
    ]
    return encode_batch(records, compression=codec)


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_decode_identically(codec: Compression) -> None:
    data = kafka_python_batch(codec, base_offset=100)
    header, records = decode_batch(data)
    assert header.compression == codec
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (100 + i, 1_600_000_000_000 + i, k, v) for i, (k, v, _) in enumerate(ROWS)
    ]
    assert [[(h.key, h.value) for h in r.headers] for r in records] == [h for _, _, h in ROWS]


@pytest.mark.parametrize("codec", list(Compression))
def test_annal_batches_decode_identically_in_kafka_python(codec: Compression) -> None:
    data = annal_batch(codec)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == CODECS[codec]
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [
        (i, 1_600_000_000_000 + i, k, v, [tuple(x) for x in h]) for i, (k, v, h) in enumerate(ROWS)
    ]
    records = MemoryRecords(data + data)
    assert records.has_next()


def test_uncompressed_bytes_are_identical() -> None:
    """Same input, same parameters: the same bytes, but for the partition leader
    epoch, which the Java client (and annal) leave at -1 and kafka-python at 0."""
    ours = bytearray(annal_batch(Compression.NONE))
    theirs = bytearray(kafka_python_batch(Compression.NONE))
    assert ours[12:16] == b"\xff\xff\xff\xff"
    ours[12:16] = theirs[12:16]  # outside the CRC
    assert bytes(ours) == bytes(theirs)


def test_builder_fast_path_is_byte_identical() -> None:
    values = [b"%010d" % i + b"v" * 90 for i in range(300)]
    ours = BatchBuilder()
    ours.extend(values, None, 1234)
    theirs = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, value in enumerate(values):
        theirs.append(i, 1234, None, value, [])
    a, b = bytearray(ours.build()), bytearray(theirs.build())
    a[12:16] = b[12:16]
    assert bytes(a) == bytes(b)


SHAPES = {
    "null keys": lambda i: (None, b"value-%d" % i * 9, []),
    "same-length keys": lambda i: (b"user-%04d" % i, b"v" * (i % 300), []),
    "mixed keys, null values": lambda i: (
        None if i % 3 == 0 else b"k" * (i % 11),
        None if i % 5 == 0 else b"%d" % i,
        [],
    ),
    "headers": lambda i: (b"k%d" % i, b"v", [(f"h{i % 3}", None if i % 2 else b"x" * i)]),
}


def both_builders(
    shape: str, count: int, timestamp: Callable[[int], int], codec: Compression
) -> tuple[bytes, bytes, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]]:
    rows = [SHAPES[shape](i) for i in range(count)]
    ours = BatchBuilder(codec, producer_id=7, producer_epoch=2, base_sequence=100)
    theirs = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=False,
        producer_id=7,
        producer_epoch=2,
        base_sequence=100,
        batch_size=1 << 30,
    )
    for i, (key, value, headers) in enumerate(rows):
        ours.append(key, value, timestamp(i), headers)
        theirs.append(i, timestamp(i), key, value, headers)
    a, b = bytearray(ours.build()), bytearray(theirs.build())
    a[12:16] = b[12:16]  # partition leader epoch: -1 here, 0 in kafka-python; outside the CRC
    return bytes(a), bytes(b), rows


TIMESTAMPS: dict[str, Callable[[int], int]] = {
    "one timestamp": lambda i: 1_700_000_000_000,
    "a few ms apart": lambda i: 1_700_000_000_000 + i // 40,
    "out of order": lambda i: 1_700_000_000_000 + (i * 7919) % 10_000 - 5_000,
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("count", [1, 64, 65, 300])
@pytest.mark.parametrize("timestamps", list(TIMESTAMPS))
def test_same_input_same_bytes(shape: str, count: int, timestamps: str) -> None:
    ours, theirs, _ = both_builders(shape, count, TIMESTAMPS[timestamps], Compression.NONE)
    assert ours == theirs


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_side_reads_the_other_for_every_codec(codec: Compression, shape: str) -> None:
    ours, theirs, rows = both_builders(shape, 150, TIMESTAMPS["a few ms apart"], codec)
    expected = [
        (i, TIMESTAMPS["a few ms apart"](i), k, v, [tuple(h) for h in hs])
        for i, (k, v, hs) in enumerate(rows)
    ]
    for data in (ours, theirs):
        header, records = decode_batch(data)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 100)
        assert header.compression == codec
        assert [
            (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in records
        ] == expected
        batch = DefaultRecordBatch(data)
        assert batch.validate_crc()
        got = [(r.offset, r.timestamp, r.key, r.value, list(map(tuple, r.headers))) for r in batch]
        assert got == expected


def test_encode_values_matches_kafka_python() -> None:
    values = [b"%010d" % i + b"v" * 90 for i in range(151)]
    keys = [b"key-%03d" % i for i in range(151)]
    for key_column in (None, keys):
        theirs = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for i, value in enumerate(values):
            theirs.append(i, 99, None if key_column is None else key_column[i], value, [])
        b = bytes(theirs.build())
        ours = encode_values(values, key_column, timestamp_ms=99, partition_leader_epoch=0)
        assert ours == b
