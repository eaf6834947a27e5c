"""Legacy message sets (magic 0 and 1): reading and up-conversion to v2.

A message set is a sequence of log entries::

    offset      int64
    size        int32    bytes of the message that follows
    crc         uint32   CRC-32 (zlib) of magic .. end of the message
    magic       int8     0 or 1
    attributes  int8     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4),
                         bit 3 timestamp type (v1 only)
    timestamp   int64    v1 only
    key         int32 length (-1 null) + bytes
    value       int32 length (-1 null) + bytes

A compressed message is a *wrapper*: its value is a compressed message set
(the inner messages).  In v1 the inner offsets are relative (0..n-1) and the
wrapper carries the absolute offset of the last inner message; in v0 the
inner offsets are absolute.  With LogAppendTime the wrapper's timestamp
applies to every inner message.  Magic 0 has no timestamps (-1).

Compressed values are framed as Kafka frames them in these formats: gzip,
snappy in xerial framing (``compression.py``), and LZ4 frames of
independent 64 KiB blocks.  Kafka wrote magic 0 LZ4 frames with a wrong
header checksum (KAFKA-3160: computed over the frame's magic number too);
readers of magic 0 accept any, and ``encode_legacy`` writes the one old
clients expect.  ``upconvert`` turns a legacy message set into v2 batches
(what a leader stores from Produce v0-v2); ``encode_legacy`` writes one
(what Fetch v0-v3 answers, ``downconvert.py``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence

import lz4.block
import lz4.frame

from .batch import NO_TIMESTAMP, Compression, TimestampType
from .compression import compress, decompress
from .errors import CorruptRecordError
from .records import Record, encode_batch

_ENTRY = struct.Struct(">qi")
_MESSAGE_V0 = struct.Struct(">Ibb")
_TIMESTAMP = struct.Struct(">q")
_I32 = struct.Struct(">i")
_INT32_MAX = (1 << 31) - 1
_MIN_MESSAGE = {0: 14, 1: 22}  # crc .. value length, with null key and value
_V1_HEAD = struct.Struct(">bbq")  # magic, attributes, timestamp: what a v1 CRC covers first
_ENTRY_CRC = struct.Struct(">qiI")  # offset, size, crc
_NULL = b"\xff\xff\xff\xff"  # length -1: a null key or value
_TIMESTAMP_TYPE_FLAG = 0x08
# The LZ4 frame header Kafka writes in legacy messages: magic number, FLG
# (version 01, independent blocks, no checksums, no content size), BD (64 KiB
# blocks), then the header checksum: xxHash32 of FLG and BD, second byte.
_LZ4_HEADER = b"\x04\x22\x4d\x18\x60\x40"
_LZ4_CHECKSUM_POSITION = len(_LZ4_HEADER)
# For magic 0 Kafka hashed the magic number too (KAFKA-3160): the byte of
# xxHash32(_LZ4_HEADER), as old clients and Kafka's brokers write it.
LZ4_MAGIC0_HEADER_CHECKSUM = 0x1A


def iter_legacy_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record of a legacy message set, compressed wrappers unpacked.

    Raises CorruptRecordError naming the position of the first bad entry.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    for _, _, _, records in _iter_entries(data, 0, len(data)):
        yield from records


def decode_legacy_entry(
    buf: bytes | bytearray | memoryview, position: int = 0
) -> tuple[list[Record], int]:
    """The records of the one legacy entry at ``position`` (a wrapper yields
    all its inner records) and the position of the next entry."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    offset, size, message_start = _entry_prefix(data, position, len(data))
    _, _, records = _decode_message(data, message_start, size, offset, position)
    return records, message_start + size


def _entry_prefix(buf: bytes, position: int, end: int) -> tuple[int, int, int]:
    """(offset, size, message start) of the entry at ``position``, checked against ``end``."""
    if position + _ENTRY.size > end:
        raise CorruptRecordError("truncated legacy entry header", position)
    offset, size = _ENTRY.unpack_from(buf, position)
    message_start = position + _ENTRY.size
    if size < 0 or message_start + size > end:
        raise CorruptRecordError(
            f"legacy message declares {size} bytes but {end - message_start} remain", position
        )
    return offset, size, message_start


def _iter_entries(
    buf: bytes, start: int, end: int, inner: bool = False
) -> Iterator[tuple[int, int, TimestampType, list[Record]]]:
    """(position, magic, timestamp type, records) for each entry of ``buf[start:end]``."""
    position = start
    while position < end:
        offset, size, message_start = _entry_prefix(buf, position, end)
        yield position, *_decode_message(buf, message_start, size, offset, position, inner)
        position = message_start + size


def _decode_message(
    buf: bytes, start: int, size: int, offset: int, entry_position: int, inner: bool = False
) -> tuple[int, TimestampType, list[Record]]:
    if size < 6:
        raise CorruptRecordError(f"legacy message of {size} bytes is too short", entry_position)
    crc, magic, attributes = _MESSAGE_V0.unpack_from(buf, start)
    if magic not in (0, 1):
        raise CorruptRecordError(
            f"unexpected magic {magic} in a legacy message set", entry_position
        )
    if size < _MIN_MESSAGE[magic]:
        raise CorruptRecordError(f"legacy message of {size} bytes is too short", entry_position)
    actual = zlib.crc32(buf[start + 4 : start + size]) & 0xFFFFFFFF
    if actual != crc:
        raise CorruptRecordError(
            f"legacy message CRC mismatch: stored {crc:#010x}, computed {actual:#010x}",
            entry_position,
        )
    position = start + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _TIMESTAMP.unpack_from(buf, position)
        position += 8
    key, position = _read_bytes(buf, position, start + size, entry_position)
    value, position = _read_bytes(buf, position, start + size, entry_position)
    if position != start + size:
        raise CorruptRecordError("legacy message has trailing bytes", entry_position)
    timestamp_type = (
        TimestampType.LOG_APPEND_TIME
        if magic == 1 and attributes & 0x08
        else TimestampType.CREATE_TIME
    )
    codec = attributes & 0x07
    if codec == 0:
        return magic, timestamp_type, [Record(offset, timestamp, key, value)]
    if codec > Compression.LZ4:
        raise CorruptRecordError(f"codec {codec} is not valid in a legacy message", entry_position)
    if inner:
        raise CorruptRecordError("compressed message nested inside a wrapper", entry_position)
    if value is None:
        raise CorruptRecordError("compressed legacy wrapper has no value", entry_position)
    data = _decompress_legacy(Compression(codec), value, magic, entry_position)
    try:
        records = [r for _, _, _, rs in _iter_entries(data, 0, len(data), True) for r in rs]
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{exc.reason} (byte {exc.position} of the wrapper's inner messages)", entry_position
        ) from None
    if not records:
        return magic, timestamp_type, []
    if magic == 1:
        base = offset - records[-1].offset
        records = [
            r._replace(
                offset=base + r.offset,
                timestamp=timestamp
                if timestamp_type == TimestampType.LOG_APPEND_TIME
                else r.timestamp,
            )
            for r in records
        ]
    return magic, timestamp_type, records


def _read_bytes(buf: bytes, position: int, end: int, entry: int) -> tuple[bytes | None, int]:
    if position + 4 > end:
        raise CorruptRecordError("legacy message is truncated", entry)
    (length,) = _I32.unpack_from(buf, position)
    position += 4
    if length < 0:
        return None, position
    if position + length > end:
        raise CorruptRecordError(f"legacy field of {length} bytes overruns its message", entry)
    return buf[position : position + length], position + length


def _decompress_legacy(codec: Compression, data: bytes, magic: int, entry: int) -> bytes:
    if codec == Compression.LZ4 and magic == 0:
        return _lz4_old_kafka(data, entry)
    try:
        return decompress(codec, data)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, entry) from exc


def _lz4_old_kafka(data: bytes, entry: int) -> bytes:
    """LZ4 frames as Kafka wrote them for magic 0: the header checksum was
    computed over the wrong bytes, so the frame is walked block by block."""
    try:
        if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
            raise ValueError("not an LZ4 frame")
        flags = data[4]
        block_max = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}[(data[5] >> 4) & 0x07]
        # magic, FLG, BD, [content size], [dictionary id], HC
        position = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
        out = []
        while True:
            (word,) = struct.unpack_from("<I", data, position)
            position += 4
            if word == 0:
                break
            size = word & 0x7FFFFFFF
            block = data[position : position + size]
            position += size + (4 if flags & 0x10 else 0)  # block checksum
            if word & 0x80000000:
                out.append(block)
            else:
                out.append(lz4.block.decompress(block, uncompressed_size=block_max))
        return b"".join(out)
    except (ValueError, KeyError, struct.error, lz4.block.LZ4BlockError) as exc:
        raise CorruptRecordError(f"cannot decompress legacy lz4 data: {exc}", entry) from None


def upconvert(buf: bytes | bytearray | memoryview, renumber: bool = False) -> bytes:
    """Equivalent v2 batches for a legacy message set.

    Each compressed wrapper becomes one batch with the same codec (snappy,
    gzip, lz4) and timestamp type; each run of uncompressed messages with
    one timestamp type becomes one uncompressed batch.  Offsets and
    timestamps are kept (magic 0 has none: -1), unless ``renumber``, which
    numbers the records 0..n-1 as a producer's would be before the leader
    assigns real offsets.  Offsets that do not increase raise
    CorruptRecordError naming the entry.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[bytes] = []
    run: list[Record] = []
    run_type = TimestampType.CREATE_TIME
    counter = 0
    last_offset = -1

    def flush_run() -> None:
        if run:
            out.append(encode_batch(run, base_offset=run[0].offset, timestamp_type=run_type))
            run.clear()

    for position, _magic, timestamp_type, found in _iter_entries(data, 0, len(data)):
        records = found
        if renumber:
            records = [r._replace(offset=counter + i) for i, r in enumerate(found)]
            counter += len(found)
        else:
            for record in found:
                if record.offset <= last_offset:
                    raise CorruptRecordError(
                        f"legacy offset {record.offset} does not follow {last_offset}", position
                    )
                last_offset = record.offset
        codec = data[position + _ENTRY.size + 5] & 0x07
        if codec == 0:
            if run and (
                timestamp_type != run_type or records[-1].offset - run[0].offset > _INT32_MAX
            ):
                flush_run()
            run_type = timestamp_type
            run.extend(records)
            continue
        flush_run()
        if records:
            out.append(
                encode_batch(
                    records,
                    base_offset=records[0].offset,
                    compression=Compression(codec),
                    timestamp_type=timestamp_type,
                )
            )
    flush_run()
    return b"".join(out)


def encode_legacy(
    records: Sequence[Record],
    magic: int,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
) -> bytes:
    """A legacy message set holding ``records`` at their own offsets."""
    return b"".join(legacy_entries(records, magic, compression, timestamp_type, log_append_time))


def legacy_entries(
    records: Sequence[Record],
    magic: int,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
) -> list[bytes]:
    """The entries of a legacy message set holding ``records``, as Kafka's
    brokers write them when they convert down (``downconvert.py``).

    Uncompressed, each record is one message; compressed, all of them are
    one wrapper whose value is their compressed messages, with inner offsets
    relative to the first record in magic 1 and absolute in magic 0, and the
    wrapper at the last record's offset.  Magic 1 keeps each record's
    timestamp, or with LogAppendTime gives every message ``log_append_time``
    and the timestamp-type flag; the wrapper carries the largest timestamp
    (or the append time).  Magic 0 has no timestamps.  Headers are dropped:
    these formats have none.  Offsets must increase (gaps are allowed).
    Raises ValueError for a magic other than 0 and 1, and for zstd, which
    these formats do not have.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy messages have magic 0 or 1, not {magic}")
    if not Compression.NONE <= compression <= Compression.LZ4:
        raise ValueError(f"{compression.name.lower()} is not a codec of legacy messages")
    if not records:
        return []
    log_append = magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME
    flag = _TIMESTAMP_TYPE_FLAG if log_append else 0
    if compression == Compression.NONE:
        return _messages(records, magic, flag, log_append_time if log_append else None, 0)
    first, last = records[0].offset, records[-1].offset
    inner = _messages(
        records, magic, flag, log_append_time if log_append else None, first if magic else 0
    )
    value = _compress_legacy(compression, b"".join(inner), magic)
    if magic == 0:
        wrapper_timestamp = NO_TIMESTAMP
    elif log_append:
        wrapper_timestamp = log_append_time
    else:
        wrapper_timestamp = max(NO_TIMESTAMP, max(r.timestamp for r in records))
    return _messages(
        [Record(last, wrapper_timestamp, None, value)], magic, flag | compression, None, 0
    )


def _messages(
    records: Sequence[Record], magic: int, attributes: int, timestamp: int | None, base: int
) -> list[bytes]:
    """One uncompressed-layout message per record, at offset - ``base``, each
    with ``timestamp`` if given, else its own (magic 1 only)."""
    out: list[bytes] = []
    append = out.append
    crc32 = zlib.crc32
    pack_entry = _ENTRY_CRC.pack
    pack_length = _I32.pack
    join = b"".join
    null = _NULL
    if magic == 0:
        fixed: bytes | None = bytes((0, attributes))
    elif timestamp is not None:
        fixed = _V1_HEAD.pack(1, attributes, timestamp)
    else:
        fixed = None
    pack_head = _V1_HEAD.pack
    for offset, record_timestamp, key, value, _headers in records:
        body = join(
            (
                pack_head(1, attributes, record_timestamp) if fixed is None else fixed,
                null if key is None else pack_length(len(key)),
                key or b"",
                null if value is None else pack_length(len(value)),
                value or b"",
            )
        )
        append(pack_entry(offset - base, len(body) + 4, crc32(body)) + body)
    return out


def _compress_legacy(codec: Compression, data: bytes, magic: int) -> bytes:
    """``data`` compressed as a wrapper of ``magic`` carries it."""
    if codec != Compression.LZ4:
        return compress(codec, data)
    frame = bytearray(
        lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    )
    if frame[:_LZ4_CHECKSUM_POSITION] != _LZ4_HEADER:  # the lz4 library changed its framing
        raise ValueError(f"unexpected LZ4 frame header {bytes(frame[:7]).hex()}")
    if magic == 0:
        frame[_LZ4_CHECKSUM_POSITION] = LZ4_MAGIC0_HEADER_CHECKSUM
    return bytes(frame)
