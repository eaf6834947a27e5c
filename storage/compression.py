"""Record compression codecs, as Kafka frames them.

In a v2 batch everything after the 61-byte header is one compressed block;
in a legacy message set a wrapper message's value is the compressed inner set.

    gzip     RFC 1952 (zlib)
    snappy   xerial framing: the 8-byte magic ``\\x82SNAPPY\\x00``, int32 version
             and int32 compatible version, then blocks, each an int32
             big-endian length and that many bytes of raw snappy.  Plain
             unframed snappy is accepted when decompressing, as Kafka does.
    lz4      the LZ4 frame format
    zstd     a zstd frame
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from .batch import Compression
from .errors import CorruptRecordError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")

_zstd_compressor = zstandard.ZstdCompressor(level=3)


def compress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` with ``codec`` (NONE returns it unchanged)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return gzip.compress(bytes(data), compresslevel=6, mtime=0)
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return bytes(lz4.frame.compress(bytes(data)))
    if codec == Compression.ZSTD:
        return bytes(_zstd_compressor.compress(bytes(data)))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress ``data``; a damaged block raises CorruptRecordError."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return zlib.decompress(bytes(data), 47)  # 47: gzip or zlib header, auto-detected
        if codec == Compression.SNAPPY:
            return _xerial_decompress(bytes(data))
        if codec == Compression.LZ4:
            return bytes(lz4.frame.decompress(bytes(data)))
        if codec == Compression.ZSTD:
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data)))
    except CorruptRecordError:
        raise
    except Exception as exc:  # each codec library raises its own error type
        raise CorruptRecordError(f"cannot decompress {codec.name.lower()} data: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start : start + _XERIAL_BLOCK])))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    position = _XERIAL_HEADER.size
    out = []
    while position < len(data):
        if position + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _I32.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise CorruptRecordError(f"xerial snappy block of {length} bytes overruns the data")
        out.append(bytes(cramjam.snappy.decompress_raw(data[position : position + length])))
        position += length
    return b"".join(out)
