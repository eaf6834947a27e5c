"""Batches a buggy or hostile client can send: CRCs that match, records that do not."""

from __future__ import annotations

import struct

import zstandard
from annal.storage.batch import CRC_OFFSET, RECORD_BATCH_OVERHEAD, Compression, compute_crc
from annal.storage.records import Record, encode_batch

_FIELDS = {
    "attributes": (">h", 21),
    "last_offset_delta": (">i", 23),
    "first_timestamp": (">q", 27),
    "max_timestamp": (">q", 35),
    "producer_id": (">q", 43),
    "base_sequence": (">i", 53),
    "count": (">i", 57),
}


def resealed(data: bytes | bytearray, records: bytes | None = None, **fields: int) -> bytes:
    """``data`` (one batch) with its records section and header fields replaced,
    and a batch length and CRC that match again."""
    out = bytearray(data[:RECORD_BATCH_OVERHEAD] if records is not None else data)
    if records is not None:
        out += records
        struct.pack_into(">i", out, 8, len(out) - 12)
    for name, value in fields.items():
        fmt, position = _FIELDS[name]
        struct.pack_into(fmt, out, position, value)
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


def poison_batches(timestamp: int) -> dict[str, tuple[bytes, str]]:
    """The batches leaders once stored and must now refuse: name → (batch, error code)."""
    one = encode_batch([Record(0, timestamp, b"k", b"v")])
    records = bytearray(one[RECORD_BATCH_OVERHEAD:])
    records[-1] = 0x03  # header count -2
    zstd_one = encode_batch([Record(0, timestamp, b"k", b"v")], compression=Compression.ZSTD)
    return {
        "garbage record body": (resealed(one, records=b"\xff" * 40), "CORRUPT_MESSAGE"),
        "negative header count": (resealed(one, records=bytes(records)), "CORRUPT_MESSAGE"),
        "gzip that does not inflate": (
            resealed(one, records=b"\x1f\x8b" + b"\x00" * 30, attributes=1),
            "CORRUPT_MESSAGE",
        ),
        "codec 7": (resealed(one, attributes=7), "CORRUPT_MESSAGE"),
        "zstd claiming 2^31-1 records": (
            resealed(
                zstd_one,
                records=zstandard.ZstdCompressor().compress(bytes(one[RECORD_BATCH_OVERHEAD:])),
                count=2**31 - 1,
                last_offset_delta=2**31 - 2,
            ),
            "CORRUPT_MESSAGE",
        ),
        "zstd bomb": (
            resealed(
                zstd_one,
                records=zstandard.ZstdCompressor(write_content_size=False).compress(
                    b"\x00" * (32 << 20)
                ),
            ),
            "MESSAGE_TOO_LARGE",
        ),
        "control batch": (resealed(one, attributes=0x20), "INVALID_RECORD"),
    }
