"""The leader's check of every client batch before it is stored (Kafka's LogValidator).

``check_batch`` (batch.py) has already vouched for a batch's frame: its
length, magic, size limit, counts against the payload, and CRC.  A valid CRC
only says the bytes arrived as the client sent them, so before a leader
stores a producer's batch ``RecordValidator.validate`` also checks, per batch:

1. what clients may send: the record count equals ``lastOffsetDelta + 1``
   and is at least 1; no control batch (only the transaction coordinator's
   markers are control batches); a producer id comes with a sequence number;
   the timestamp type is CreateTime (the broker alone sets LogAppendTime).
   A transactional batch (KIP-98) is a client's to send: the producer state
   (``producer_state.py``) decides whether it fits its producer's
   transaction.  An append from the broker's own coordinators
   (``AppendOrigin.COORDINATOR``: transaction markers, offset commits) may
   hold control batches, and a producer id without a sequence, as in Kafka;
2. the records: the batch is inflated when compressed, never past
   ``max.message.bytes`` (a decompression bomb is refused after that many
   bytes, not expanded); unknown codecs are refused; then every record is
   walked (``walker.py``: lengths, varints, offset deltas 0..n-1, key, value
   and header framing, UTF-8 header keys, keys on compacted topics, and
   timestamps within ``message.timestamp.difference.max.ms`` of the broker's
   clock on CreateTime topics).

A failure raises the InvalidRecordError subclass of its kind, naming the
record's index and the byte where it starts, and the log stays unchanged.
Refusals about particular records, which Kafka's LogValidator reports record
by record (KIP-467), name every such record of the batch in the error's
``record_errors`` (index in the batch, and why): null keys on a compacted
topic and timestamps out of range (KeylessRecordError, or
InvalidTimestampError when any timestamp is among them), and a client batch
that claims LogAppendTime (all its records).  A batch refused for its records
must be sound otherwise: a fault in its framing anywhere wins, as in Kafka.
The walk stops at its first fault, so the batch is walked once more, and its
records listed, only when it is refused.
On success the batch is stored as it came, except that a CreateTime batch
whose maxTimestamp is not the largest record timestamp gets that field (and
so its CRC) corrected, as Kafka does, and that a topic whose
``compression.type`` names a codec stores every batch in that codec: a batch
in another one is inflated and compressed again (its header keeps its
producer fields; its length, attributes and CRC are rewritten), as Kafka's
LogValidator does.  Followers never come here: they trust their leader's
bytes.

Thread-safe: a validator holds only immutable settings.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

from .batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    TimestampType,
    compute_crc,
    read_header,
)
from .compression import compress, decompress_bounded
from .config import LogConfig
from .control import AppendOrigin
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KeylessRecordError,
    RecordError,
    RecordTooLargeError,
)
from .varint import decode_varint
from .walker import NULL_KEY, OK, REASONS, TIMESTAMP_RANGE, Walk, walk_records

__all__ = ["RecordValidator"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
LOG_OVERHEAD = 12  # base offset and batch length precede what the length counts
_TARGETS = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
SHOWN_RECORD_ERRORS = 3  # records an error's own message names; record_errors has all
NULL_KEY_MESSAGE = "null key: a compacted topic needs a key on every record"
LOG_APPEND_TIME_MESSAGE = "the batch claims LogAppendTime; producers must send CreateTime"


def leader_walk() -> Walk | None:
    """The record walk leaders run: ``walker.walk_records``.  None (batch-level
    checks only) solely where a benchmark measures its baseline by starting
    brokers with ``ANNAL_BENCH_NO_RECORD_WALK=1``; never set it otherwise."""
    if os.environ.get("ANNAL_BENCH_NO_RECORD_WALK") == "1":
        return None
    return walk_records


class RecordValidator:
    """Checks client batches for one log's settings; see the module docstring."""

    __slots__ = (
        "_compact",
        "_create_time",
        "_difference_max_ms",
        "_max_message_bytes",
        "_target",
        "_walk_records",
    )

    def __init__(self, config: LogConfig, walk: Walk | None = None) -> None:
        """``walk``: the record walk to use; by default ``leader_walk()``."""
        self._walk_records = walk or leader_walk()
        self._compact = config.compact
        self._create_time = config.message_timestamp_type == TimestampType.CREATE_TIME
        self._difference_max_ms = config.message_timestamp_difference_max_ms
        self._max_message_bytes = config.max_message_bytes
        self._target = _TARGETS.get(config.compression_type)  # None: the producer's codec

    @property
    def needs_clock(self) -> bool:
        """True when timestamps are checked against the broker's clock."""
        return self._create_time and self._difference_max_ms < _INT64_MAX

    def validate(
        self,
        buf: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        now_ms: int = 0,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> tuple[bytes | bytearray | memoryview, Sequence[BatchHeader]]:
        """Check every batch of ``buf`` (``headers`` from ``check_batch``).

        Returns the bytes to store and their headers: ``buf`` and ``headers``
        themselves, or a corrected copy when a maxTimestamp was wrong.
        ``now_ms`` matters only when ``needs_clock``; ``origin`` says who
        appends (only clients are held to the client rules).
        """
        low, high = _INT64_MIN, _INT64_MAX
        if self.needs_clock:
            low = max(now_ms - self._difference_max_ms, _INT64_MIN)
            high = min(now_ms + self._difference_max_ms, _INT64_MAX)
        fixes: list[tuple[BatchHeader, int]] = []
        walk = self._walk_records
        client = origin is AppendOrigin.CLIENT
        for header in headers:
            if client:
                self._check_client_fields(header)
            elif header.attributes & TIMESTAMP_TYPE_MASK:
                raise InvalidTimestampError(
                    "the batch claims LogAppendTime; only the log sets it", header.position
                )
            max_timestamp = (
                header.max_timestamp if walk is None else self._walk(walk, buf, header, low, high)
            )
            if self._create_time and max_timestamp != header.max_timestamp:
                fixes.append((header, max_timestamp))
        target = self._target
        # control batches keep their codec (none), as Kafka keeps them
        recompress = target is not None and any(
            h.attributes & COMPRESSION_MASK != target and not h.attributes & CONTROL_FLAG
            for h in headers
        )
        if not fixes and not recompress:
            return buf, headers
        copy = bytearray(buf)
        for header, max_timestamp in fixes:
            position = header.position
            _I64.pack_into(copy, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
            _U32.pack_into(copy, position + CRC_OFFSET, compute_crc(copy, position, header.size))
        if recompress:
            assert target is not None
            copy = bytearray().join(self._in_codec(copy, h, target) for h in headers)
            return copy, _headers_of(copy, len(headers))
        return copy, [read_header(copy, h.position) for h in headers]

    def _in_codec(self, buf: bytearray, header: BatchHeader, target: Compression) -> bytes:
        """The batch at ``header`` with its records in ``target`` (itself when they are)."""
        start, end = header.position, header.position + header.size
        codec = header.attributes & COMPRESSION_MASK
        if codec == target or header.attributes & CONTROL_FLAG:
            return bytes(buf[start:end])
        body = buf[start + RECORD_BATCH_OVERHEAD : end]
        raw = (
            body
            if codec == 0
            else decompress_bounded(Compression(codec), body, self._max_message_bytes)
        )
        records = raw if target == Compression.NONE else compress(target, raw)
        out = bytearray(buf[start : start + RECORD_BATCH_OVERHEAD]) + records
        _I32.pack_into(out, BATCH_LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
        attributes = (header.attributes & ~COMPRESSION_MASK) | target
        _I16.pack_into(out, ATTRIBUTES_OFFSET, attributes)
        _U32.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out)))
        return bytes(out)

    def _check_client_fields(self, header: BatchHeader) -> None:
        position = header.position
        count, delta = header.record_count, header.last_offset_delta
        if count != delta + 1:
            raise CorruptRecordError(
                f"record count {count} does not match lastOffsetDelta {delta} + 1", position
            )
        if count < 1:
            raise InvalidRecordError("a batch must hold at least one record", position)
        attributes = header.attributes
        if attributes & CONTROL_FLAG:
            raise InvalidRecordError(
                "Clients are not allowed to write control records (control batches come from "
                "the transaction coordinator)",
                position,
            )
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(
                f"producer id {header.producer_id} without a sequence number "
                f"(base sequence {header.base_sequence})",
                position,
            )
        if attributes & TIMESTAMP_TYPE_MASK:
            # Kafka names every record of such a batch (KIP-467)
            raise InvalidTimestampError(
                LOG_APPEND_TIME_MESSAGE,
                position,
                (RecordError(i, LOG_APPEND_TIME_MESSAGE) for i in range(count)),
            )

    def _walk(
        self,
        walk: Walk,
        buf: bytes | bytearray | memoryview,
        header: BatchHeader,
        low: int,
        high: int,
    ) -> int:
        """Walk the records of one batch; the largest record timestamp."""
        start = header.position + RECORD_BATCH_OVERHEAD
        end = header.position + header.size
        codec = header.attributes & COMPRESSION_MASK
        with memoryview(buf) as view:
            if codec == 0:
                section: bytes | memoryview = view[start:end]
                where = "byte {position} of the batch"
            else:
                if codec > Compression.ZSTD:
                    raise CorruptRecordError(f"unknown compression codec {codec}", header.position)
                name = Compression(codec).name.lower()
                try:
                    section = decompress_bounded(
                        Compression(codec), view[start:end], self._max_message_bytes
                    )
                except RecordTooLargeError as exc:
                    raise RecordTooLargeError(
                        f"{exc.reason} (max.message.bytes)", header.position
                    ) from None
                except CorruptRecordError as exc:
                    raise CorruptRecordError(exc.reason, header.position) from None
                where = f"byte {{position}} of its inflated {name} records"
            reason, a, b, value, extra = walk(
                section,
                header.record_count,
                header.first_timestamp,
                low,
                high,
                self._compact,
            )
            refused: list[RecordError] = []
            if reason in (NULL_KEY, TIMESTAMP_RANGE):
                # refused for its records: sound otherwise?  Then name them all.
                reason, a, b, value, extra = walk(
                    section,
                    header.record_count,
                    header.first_timestamp,
                    _INT64_MIN,
                    _INT64_MAX,
                    False,
                )
                if reason == OK:
                    refused = self._refused_records(section, header, low, high)
            del section
        if refused:
            raise self._records_error(refused, header, "" if codec == 0 else f"inflated {name} ")
        if reason == OK:
            return a
        message = REASONS[reason].format(index=a, value=value, extra=extra)
        if codec == 0:
            b += RECORD_BATCH_OVERHEAD
        raise CorruptRecordError(f"{message} ({where.format(position=b)})", header.position)

    def _refused_records(
        self,
        section: bytes | memoryview,
        header: BatchHeader,
        low: int,
        high: int,
    ) -> list[RecordError]:
        """Every record of a sound records section refused for itself, in
        order: a null key on a compacted topic, else a timestamp (other than
        -1) outside ``[low, high]``.  One record, one error, as in Kafka."""
        refused = []
        first_timestamp = header.first_timestamp
        position = 0
        for index in range(header.record_count):
            length, body = decode_varint(section, position)
            position = body + length
            timestamp_delta, field = decode_varint(section, body + 1)  # after the attributes
            _, field = decode_varint(section, field)  # the offset delta
            key_length, _ = decode_varint(section, field)
            timestamp = first_timestamp + timestamp_delta
            if key_length < 0 and self._compact:
                refused.append(RecordError(index, NULL_KEY_MESSAGE))
            elif timestamp != -1 and not low <= timestamp <= high:
                refused.append(
                    RecordError(
                        index,
                        f"timestamp {timestamp} is out of range [{low}, {high}] "
                        f"(message.timestamp.difference.max.ms {self._difference_max_ms} "
                        "of the broker's clock)",
                    )
                )
        return refused

    def _records_error(
        self, refused: list[RecordError], header: BatchHeader, inflated: str
    ) -> InvalidRecordError:
        """One error for a batch refused for ``refused`` (KIP-467): INVALID_TIMESTAMP
        when a timestamp is among them, as in Kafka, else INVALID_RECORD; its
        message names the first few, its ``record_errors`` all of them.
        ``inflated``: "inflated <codec> " for a compressed batch, else ""."""
        shown = "; ".join(
            f"record {e.batch_index}: {e.message}" for e in refused[:SHOWN_RECORD_ERRORS]
        )
        more = len(refused) - SHOWN_RECORD_ERRORS
        if more > 0:
            shown += f"; and {more} more"
        text = (
            f"{len(refused)} of the batch's {header.record_count} {inflated}records refused, "
            f"and the batch with them: {shown}"
        )
        keyless = all(e.message == NULL_KEY_MESSAGE for e in refused)
        kind = KeylessRecordError if keyless else InvalidTimestampError
        return kind(text, header.position, refused)


def _headers_of(buf: bytearray, count: int) -> list[BatchHeader]:
    headers, position = [], 0
    for _ in range(count):
        header = read_header(buf, position)
        headers.append(header)
        position += header.size
    return headers
