"""Down-conversion: stored batches as the legacy message sets of Fetch v0-v3.

A client that fetches with Fetch v0 or v1 reads magic 0 messages, one with
Fetch v2 or v3 magic 1 (``legacy.py``); annal stores v2 batches, so a
broker converts what it read before it answers, as Kafka's brokers do
(``RecordsUtil.downConvert``, ``LazyDownConversionRecords``), batch by batch:

* an uncompressed batch becomes one message per record, without the records
  before the fetch offset (some versions of librdkafka rely on it);
* a compressed batch becomes one wrapper compressed with the same codec,
  with every record of the batch (clients skip the ones before their
  offset);
* offsets are kept; timestamps are kept in magic 1 and dropped in magic 0;
  LogAppendTime is kept in magic 1; headers, producer ids and sequence
  numbers are dropped: the old formats have no place for them;
* control batches are left out; a legacy entry of the wanted magic or an
  older one is passed on as it is, a newer one is converted;
* zstd has no legacy form: a zstd batch first in line raises
  ``UnsupportedCompressionError`` (the partition is answered
  UNSUPPORTED_COMPRESSION_TYPE); later in line, the answer stops before it,
  and the client's next fetch starts there and gets that error.

The answer keeps to a size: converted messages follow one another while
they fit in ``max_bytes`` (by default the size of the bytes read, as Kafka
keeps it; old messages are larger than v2 records), except that the first
converted batch is always answered whole, so that a client always makes
progress.  A batch cut short at the end
of what was read (the read's size limit) is left out.

Each batch is decoded once by the storage's own decoder
(``records.decode_batch``, which checks it) and written with a few C-level
calls per record.  Pure functions; thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from annal.errors import ErrorCode

from .batch import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    Compression,
    TimestampType,
    check_batch,
)
from .errors import StorageError
from .legacy import decode_legacy_entry, legacy_entries
from .records import decode_batch

__all__ = ["DownConverted", "UnsupportedCompressionError", "down_convert"]

_PREFIX = struct.Struct(">qi")  # offset, size: what every entry starts with
_LEGACY_ATTRIBUTES = LOG_OVERHEAD + 5  # crc, magic, then the attributes byte


class UnsupportedCompressionError(StorageError):
    """A batch whose codec the wanted format does not have (zstd)."""

    # Kafka's code 76; only old fetches are answered it, so it is kept here.
    code = ErrorCode("UNSUPPORTED_COMPRESSION_TYPE", 76)


class DownConverted(NamedTuple):
    """What ``down_convert`` answers."""

    records: bytes  # the legacy message set
    converted: int  # records re-encoded (entries passed on as they were not counted)


def down_convert(
    buf: bytes | bytearray | memoryview,
    magic: int,
    first_offset: int,
    max_bytes: int | None = None,
) -> DownConverted:
    """The entries of ``buf`` (batches as the log stores them) as a legacy
    message set of ``magic`` (0 or 1); see the module docstring.

    Raises CorruptRecordError naming the batch's position for bytes that are
    not batches, UnsupportedCompressionError for a zstd batch first in line,
    ValueError for a magic other than 0 and 1.
    """
    if magic not in (0, 1):
        raise ValueError(f"down-conversion is to magic 0 or 1, not {magic}")
    budget = len(buf) if max_bytes is None else max_bytes
    out: list[bytes] = []
    size = 0
    converted = 0
    for position, entries, count in _converted_batches(buf, magic, first_offset):
        if entries is None:  # zstd
            if out:
                break
            raise UnsupportedCompressionError(
                f"the zstd batch at byte {position} has no form in message format {magic} "
                "(clients that fetch with Fetch v0-v3 cannot read zstd)"
            )
        if not out:  # the first batch is answered whole
            out = entries
            size = sum(map(len, entries))
            converted += count
            continue
        taken = 0
        for entry in entries:
            if size + len(entry) > budget:
                break
            size += len(entry)
            taken += 1
        if taken == len(entries):
            out += entries
            converted += count
            continue
        # Only an uncompressed batch has several entries, one record each.
        out += entries[:taken]
        converted += taken if len(entries) > 1 else 0
        break
    return DownConverted(b"".join(out), converted)


def _converted_batches(
    buf: bytes | bytearray | memoryview, magic: int, first_offset: int
) -> Iterator[tuple[int, list[bytes] | None, int]]:
    """(position, entries, records converted) for each whole entry of ``buf``
    that has something to answer; entries None for a zstd batch."""
    end = len(buf)
    position = 0
    legacy: bytes | None = None  # buf as bytes, made once the first legacy entry shows up
    entries: list[bytes] | None
    with memoryview(buf) as view:
        while position + LOG_OVERHEAD <= end:
            _, length = _PREFIX.unpack_from(view, position)
            following = position + LOG_OVERHEAD + length
            if length < 0 or following > end or position + MAGIC_OFFSET >= end:
                break  # cut short by the read's limit
            if view[position + MAGIC_OFFSET] < CURRENT_MAGIC:
                if legacy is None:
                    legacy = bytes(view)
                entries, count = _legacy(legacy, position, following, magic, first_offset)
            else:
                entries, count = _batch(view, position, magic, first_offset)
            if entries is None or entries:
                yield position, entries, count
            position = following


def _batch(
    view: memoryview, position: int, magic: int, first_offset: int
) -> tuple[list[bytes] | None, int]:
    """A v2 batch converted: its entries (None for zstd) and the records in them."""
    header = check_batch(view, position, len(view))
    if header.attributes & CONTROL_FLAG:
        return [], 0
    codec = header.attributes & COMPRESSION_MASK
    if codec == Compression.ZSTD:
        return None, 0
    _, records = decode_batch(view, position)  # refuses codecs past zstd
    timestamp_type = header.timestamp_type
    append_time = (
        header.max_timestamp if timestamp_type == TimestampType.LOG_APPEND_TIME else NO_TIMESTAMP
    )
    if codec == Compression.NONE and header.base_offset < first_offset:
        records = [r for r in records if r.offset >= first_offset]
    entries = legacy_entries(records, magic, Compression(codec), timestamp_type, append_time)
    return entries, len(records)


def _legacy(
    buf: bytes, position: int, following: int, magic: int, first_offset: int
) -> tuple[list[bytes], int]:
    """A legacy entry: passed on at the wanted magic or an older one, else
    (magic 1 for a magic 0 fetch) converted as Kafka converts it."""
    if buf[position + MAGIC_OFFSET] <= magic:
        return [buf[position:following]], 0
    records, _ = decode_legacy_entry(buf, position)
    attributes = buf[position + _LEGACY_ATTRIBUTES]
    codec = Compression(attributes & COMPRESSION_MASK)  # decode_legacy_entry refused others
    if codec == Compression.NONE:
        records = [r for r in records if r.offset >= first_offset]
    return legacy_entries(records, magic, codec), len(records)
