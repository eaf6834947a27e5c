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
import io
import struct
import zlib
from collections.abc import Callable
from typing import Protocol

import cramjam
import lz4.frame
import zstandard

from .batch import Compression
from .errors import CorruptRecordError, RecordTooLargeError

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


def decompress_bounded(
    codec: Compression, data: bytes | bytearray | memoryview, limit: int
) -> bytes:
    """Inflate ``data`` as ``decompress`` does, but never past ``limit`` bytes.

    The leader's validator inflates what clients send: a batch that would
    inflate past ``limit`` (a decompression bomb, or just too big) raises
    RecordTooLargeError after at most ``limit`` + 1 bytes were produced.
    Concatenated frames or members are read as one stream; a damaged or
    truncated stream raises CorruptRecordError.
    """
    name = codec.name.lower()
    try:
        if codec == Compression.GZIP:
            out = _inflate_members(lambda: zlib.decompressobj(47), bytes(data), limit, name)
        elif codec == Compression.LZ4:
            out = _inflate_members(lz4.frame.LZ4FrameDecompressor, bytes(data), limit, name)
        elif codec == Compression.ZSTD:
            out = _zstd_bounded(bytes(data), limit)
        elif codec == Compression.SNAPPY:
            out = _xerial_decompress(bytes(data), limit)
        elif codec == Compression.NONE:
            out = bytes(data)
        else:
            raise CorruptRecordError(f"unknown compression codec {int(codec)}")
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except Exception as exc:  # each codec library raises its own error type
        raise CorruptRecordError(f"cannot decompress {name} data: {exc}") from exc
    if len(out) > limit:
        raise RecordTooLargeError(f"{name} records inflate past {limit} bytes")
    return out


class _Inflater(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _inflate_members(
    new: Callable[[], _Inflater],
    data: bytes,
    limit: int,
    name: str,
) -> bytes:
    """gzip members or lz4 frames one after another, at most ``limit`` + 1 bytes out."""
    chunks = []
    produced = 0
    while data and produced <= limit:
        inflater = new()
        chunk = inflater.decompress(data, limit + 1 - produced)
        chunks.append(chunk)
        produced += len(chunk)
        if produced > limit:
            break
        if not inflater.eof:
            raise CorruptRecordError(f"{name} stream ends early")
        data = inflater.unused_data
    return b"".join(chunks)


def _zstd_bounded(data: bytes, limit: int) -> bytes:
    """One zstd frame.  A declared content size is checked before anything is
    allocated; without one (streaming writers) the output is capped, and a
    frame that does not fit is read again, bounded, to tell too big from damaged."""
    declared = zstandard.frame_content_size(data)
    if declared > limit:
        raise RecordTooLargeError(f"zstd records declare {declared} bytes, past {limit}")
    decompressor = zstandard.ZstdDecompressor()
    try:
        return bytes(
            decompressor.decompress(data, max_output_size=limit + 1, allow_extra_data=False)
        )
    except zstandard.ZstdError:
        if declared >= 0:
            raise
        reader = decompressor.stream_reader(io.BytesIO(data))
        produced = 0
        while produced <= limit:
            chunk = reader.read(min(limit + 1 - produced, 1 << 20))
            if not chunk:
                raise
            produced += len(chunk)
        raise RecordTooLargeError(f"zstd records inflate past {limit} bytes") from None


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start : start + _XERIAL_BLOCK])))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: bytes, limit: int | None = None) -> bytes:
    """Snappy, xerial-framed or plain; with ``limit``, each block's declared size
    is added up before it is inflated, and past ``limit`` RecordTooLargeError."""
    if not data.startswith(XERIAL_MAGIC):
        if limit is not None and cramjam.snappy.decompress_raw_len(data) > limit:
            raise RecordTooLargeError(f"snappy records inflate past {limit} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    position = _XERIAL_HEADER.size
    out = []
    produced = 0
    while position < len(data):
        if position + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _I32.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise CorruptRecordError(f"xerial snappy block of {length} bytes overruns the data")
        block = data[position : position + length]
        if limit is not None:
            produced += cramjam.snappy.decompress_raw_len(block)
            if produced > limit:
                raise RecordTooLargeError(f"snappy records inflate past {limit} bytes")
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        position += length
    return b"".join(out)
