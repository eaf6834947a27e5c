"""Reading one offset range on an executor, as Arrow record batches.

Each fetch answer (whole v2 batches, about ``max_bytes``) becomes one
``pyarrow.RecordBatch`` with exactly the types of Spark's Kafka schema:
key and value ``binary``, topic ``string``, partition ``int32``, offset
``int64``, timestamp ``timestamp[us, UTC]``, timestampType ``int32`` (1 for
a LogAppendTime batch, whose records all carry its time) and, with
``includeHeaders``, headers ``list<struct<key: string, value: binary>>``.
Columns are built column-wise: offsets and timestamps go into Arrow as
integers (the timestamp scaled by Arrow, no ``datetime`` per record), the
topic, partition and timestamp type columns are repeated scalars, and
Spark takes the batch as it is, with no row conversion.

Records before the range's start (the front of the first batch) and from
its end on are dropped.  Records removed before they were read (retention,
DeleteRecords) fail the read unless ``failOnDataLoss`` is false: then the
read moves on to the earliest offset left, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from annal.consumer.simple import OffsetOutOfRangeError, SimpleConsumer
from annal.storage.batch import CURRENT_MAGIC, MAGIC_OFFSET, TimestampType, check_batch
from annal.storage.records import decode_batch, iter_records
from pyspark.sql.datasource import InputPartition

logger = logging.getLogger(__name__)

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("timestampType", pa.int32()),
]


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(FIELDS + ([("headers", HEADERS_TYPE)] if include_headers else []))


@dataclass
class OffsetRange(InputPartition):
    """One topic partition's offsets ``[start, end)``: one Spark task."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    fail_on_data_loss: bool
    include_headers: bool = False
    timeout_s: float = 30.0
    max_bytes: int = 1 << 20


def data_loss_message(part: OffsetRange, offset: int, earliest: int) -> str:
    return (
        f"records {offset}..{earliest - 1} of {part.topic}-{part.partition} were removed "
        f"(retention or DeleteRecords) before the query read them: the earliest offset is "
        f"now {earliest}. If the query should go on from there, set the source option "
        f"failOnDataLoss to false."
    )


def read_arrow(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``part``, one record batch per fetch."""
    schema = arrow_schema(part.include_headers)
    with SimpleConsumer(part.bootstrap, timeout_s=part.timeout_s) as consumer:
        offset = part.start
        while offset < part.end:
            try:
                fetched = consumer.fetch_raw(part.topic, part.partition, offset, part.max_bytes)
            except OffsetOutOfRangeError as exc:
                earliest = exc.log_start_offset
                if earliest <= offset:
                    raise
                if part.fail_on_data_loss:
                    message = data_loss_message(part, offset, earliest)
                    raise OffsetOutOfRangeError(exc.code, message) from exc
                logger.warning(
                    "%s; going on from %d", data_loss_message(part, offset, earliest), earliest
                )
                offset = earliest
                continue
            columns, next_offset = _decode(fetched.records, offset, part.end, part.include_headers)
            if columns.count:
                yield columns.batch(schema, part.topic, part.partition)
            if next_offset <= offset:
                return  # nothing more below the high watermark
            offset = next_offset


class _Columns:
    """The columns of one fetch, filled batch by batch."""

    def __init__(self, include_headers: bool) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[pa.Array] = []  # one repeated scalar array per batch
        self.headers: list[object] | None = [] if include_headers else None

    @property
    def count(self) -> int:
        return len(self.offsets)

    def add(self, records: Sequence[tuple[Any, ...]], ts_type: int) -> None:
        if not records:
            return
        offsets, timestamps, keys, values, headers = zip(*records, strict=True)
        self.offsets += offsets
        self.timestamps += timestamps
        self.keys += keys
        self.values += values
        if self.headers is not None:
            self.headers += headers
        self.types.append(pa.repeat(pa.scalar(ts_type, pa.int32()), len(records)))

    def batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        n = self.count
        millis = pa.array(self.timestamps, pa.int64())
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE),
            pa.concat_arrays(self.types),
        ]
        if self.headers is not None:
            arrays.append(pa.array(self.headers, HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _decode(buf: bytes, start: int, end: int, include_headers: bool) -> tuple[_Columns, int]:
    """The records of ``buf`` in ``[start, end)`` as columns, and the offset
    after the last whole batch (``start`` when there is none)."""
    columns = _Columns(include_headers)
    position = 0
    size = len(buf)
    next_offset = start
    while position < size:
        if position + MAGIC_OFFSET < size and buf[position + MAGIC_OFFSET] < CURRENT_MAGIC:
            legacy = list(iter_records(buf[position:]))  # v0/v1: rare, decoded whole
            kept = [tuple(r) for r in legacy if start <= r.offset < end]
            columns.add(kept, int(TimestampType.CREATE_TIME))
            if legacy:
                next_offset = max(next_offset, legacy[-1].offset + 1)
            break
        header = check_batch(buf, position, size)
        if header.last_offset >= start and header.base_offset < end:
            _, records = decode_batch(buf, position)
            if header.base_offset < start or header.last_offset >= end:
                records = [r for r in records if start <= r.offset < end]
            columns.add(records, int(header.timestamp_type))
        next_offset = header.next_offset
        position += header.size
    return columns, next_offset
