"""Kafka v2 RecordBatch headers: parsing, validation and in-place patching.

This module works on whole batches and never decodes records, so the log's
append, read and recovery paths cost a few struct calls and one CRC-32C per
batch.  Layout (big-endian; Kafka's record batch, message format v2)::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes that follow this field
        12     4  partitionLeaderEpoch   not covered by the CRC
        16     1  magic                  2
        17     4  crc                    CRC-32C of attributes .. end of batch
        21     2  attributes             bits 0-2 codec, 3 timestamp type,
                                         4 transactional, 5 control
        23     4  lastOffsetDelta
        27     8  firstTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  records count
        61        records ...

A legacy (v0/v1) entry shares the first 12 bytes (offset, size) and keeps its
magic byte at position 16 too, which is how readers tell the formats apart.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from .errors import CorruptRecordError, RecordTooLargeError

HEADER = struct.Struct(">qiibIhiqqqhii")
RECORD_BATCH_OVERHEAD = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what precedes the length-counted part
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
CURRENT_MAGIC = 2
MIN_RECORD_SIZE = 7  # length, attributes, ts delta, offset delta, key len, value len, headers
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">qi")
_LENGTH = struct.Struct(">i")  # batchLength, 8 bytes into a batch

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class Compression(enum.IntEnum):
    """Codec ids of attributes bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The fixed header of one v2 batch, plus where it sits in its buffer or file."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0

    @property
    def size(self) -> int:
        """Bytes the batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_MASK else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


_new_header = tuple.__new__


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position``; the caller has checked the length."""
    header: BatchHeader = _new_header(BatchHeader, (*HEADER.unpack_from(buf, position), position))
    return header


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C of a batch's attributes .. end, as stored in its crc field."""
    with memoryview(buf) as view:
        return int(crc32c.crc32c(view[position + ATTRIBUTES_OFFSET : position + size]))


def check_batch(
    buf: bytes | bytearray | memoryview,
    position: int,
    end: int,
    max_batch_size: int | None = None,
) -> BatchHeader:
    """Validate the batch starting at ``position`` and return its header.

    Checks, in order: the 12-byte prefix and the header fit, the length is
    sane and fits before ``end``, the magic is 2, the size limit, the record
    count against ``lastOffsetDelta`` and the payload size, and the CRC.
    Raises CorruptRecordError (or RecordTooLargeError) naming the position.
    """
    remaining = end - position
    if remaining < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"truncated batch: {remaining} bytes left, fewer than the "
            f"{RECORD_BATCH_OVERHEAD}-byte batch header",
            position,
        )
    # The checks read plain locals (this runs once per append); the named
    # header is built once, at the end.
    fields = HEADER.unpack_from(buf, position)
    _, batch_length, _, magic, crc, attributes, last_delta, *_, count = fields
    size = batch_length + LOG_OVERHEAD
    if size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"batch length {batch_length} is smaller than the minimum "
            f"{RECORD_BATCH_OVERHEAD - LOG_OVERHEAD}",
            position,
        )
    if size > remaining:
        raise CorruptRecordError(
            f"truncated batch: it declares {size} bytes but only {remaining} remain", position
        )
    if magic != CURRENT_MAGIC:
        raise CorruptRecordError(f"unsupported magic {magic}, expected {CURRENT_MAGIC}", position)
    if max_batch_size is not None and size > max_batch_size:
        raise RecordTooLargeError(
            f"batch of {size} bytes exceeds max.message.bytes {max_batch_size}", position
        )
    if last_delta < 0 or count < 0:
        raise CorruptRecordError(
            f"negative lastOffsetDelta {last_delta} or record count {count}", position
        )
    if count > last_delta + 1:
        raise CorruptRecordError(
            f"record count {count} exceeds lastOffsetDelta+1 ({last_delta + 1})", position
        )
    if (
        attributes & COMPRESSION_MASK == 0
        and count * MIN_RECORD_SIZE > size - RECORD_BATCH_OVERHEAD
    ):
        raise CorruptRecordError(
            f"record count {count} cannot fit in {size - RECORD_BATCH_OVERHEAD} bytes of records",
            position,
        )
    actual = crc32c.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    if actual != crc:
        raise CorruptRecordError(
            f"CRC mismatch: stored {crc:#010x}, computed {actual:#010x}", position
        )
    header: BatchHeader = _new_header(BatchHeader, (*fields, position))
    return header


def iter_batches(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    max_batch_size: int | None = None,
) -> Iterator[BatchHeader]:
    """Validate and yield every batch in ``buf[start:end]``; raises on the first bad one."""
    end = len(buf) if end is None else end
    position = start
    while position < end:
        header = check_batch(buf, position, end, max_batch_size)
        yield header
        position += header.size


def last_header(buf: bytes | bytearray | memoryview) -> BatchHeader | None:
    """The header of the last whole batch in ``buf``, walking lengths only (no CRC).

    For readers of data the log already validated: the offset to fetch next
    is ``last_header(data).next_offset``.
    """
    position = 0
    last = -1
    end = len(buf)
    limit = end - RECORD_BATCH_OVERHEAD
    unpack = _LENGTH.unpack_from
    while position <= limit:
        length = unpack(buf, position + 8)[0]
        following = position + LOG_OVERHEAD + length
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or following > end:
            break  # a torn tail, or a length that is no batch's: never walk back
        last = position
        position = following
    return None if last < 0 else read_header(buf, last)


RECORDS_COUNT_OFFSET = 57


def count_records(buf: bytes | bytearray | memoryview) -> int:
    """How many records the whole batches in ``buf`` hold, from their headers
    (no CRC, nothing decompressed): for data the log already validated.  A
    legacy (magic 0 or 1) entry counts as one, even a compressed wrapper."""
    count = 0
    position = 0
    end = len(buf)
    unpack = _LENGTH.unpack_from
    while position + LOG_OVERHEAD <= end:
        length = unpack(buf, position + BATCH_LENGTH_OFFSET)[0]
        following = position + LOG_OVERHEAD + length
        if length <= 0 or following > end:
            break  # a torn tail: the reader's limit cut the last batch short
        if buf[position + MAGIC_OFFSET] >= CURRENT_MAGIC and following >= (
            position + RECORD_BATCH_OVERHEAD
        ):
            count += unpack(buf, position + RECORDS_COUNT_OFFSET)[0]
        else:
            count += 1
        position = following
    return count


def scan_valid_prefix(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> tuple[list[BatchHeader], int, CorruptRecordError | None]:
    """Headers of the valid batches at the front of ``buf``, the end position of
    the last valid one, and the error that stopped the scan (None at a clean end)."""
    headers: list[BatchHeader] = []
    position = start
    try:
        for header in iter_batches(buf, start, end):
            headers.append(header)
            position = header.position + header.size
    except CorruptRecordError as exc:
        return headers, position, exc
    return headers, position, None


def patch_offsets(
    buf: bytearray, position: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Stamp a batch with its assigned base offset and leader epoch.

    Neither field is covered by the CRC, so the batch stays valid.
    """
    _I64.pack_into(buf, position, base_offset)
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def patch_log_append_time(buf: bytearray, position: int, size: int, timestamp_ms: int) -> None:
    """Set LogAppendTime on a batch: timestamp-type bit, maxTimestamp, and a new CRC."""
    (attributes,) = struct.unpack_from(">h", buf, position + ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _U32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))
