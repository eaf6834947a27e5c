"""Cross-checks against an independent implementation: kafka-python's ``kafka.record``."""

from __future__ import annotations

import pytest
from annal.storage.batch import Compression
from annal.storage.records import BatchBuilder, Header, Record, decode_batch, encode_batch
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
