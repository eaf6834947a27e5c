"""Reading one offset range on an executor, as Arrow record batches.

Each fetch answer (whole v2 batches, about ``max_bytes``) becomes one
``pyarrow.RecordBatch`` with exactly the types of Spark's Kafka schema:
key and value ``binary``, topic ``string``, partition ``int32``, offset
``int64``, timestamp ``timestamp[us, UTC]``, timestampType ``int32`` (1 for
a LogAppendTime batch, whose records all carry its time) and, with
``includeHeaders``, headers ``list<struct<key: string, value: binary>>``.
Columns are built column-wise: ``annal.storage.columns`` walks the fetched
records into buffers laid out as Arrow's arrays are (offsets, microsecond
timestamps, key and value bytes with their end offsets and validity bits,
the headers' lists), Arrow takes those buffers without a copy, the topic and
partition columns are repeated scalars, and Spark takes the batch as it is,
with no Python object per record and no row conversion.  Fetches go to the
leader's Kafka listener where it has a PLAINTEXT one (half the CPU per
megabyte of gRPC at both ends; ``consumer/kafka_fetch.py``), else over gRPC.

Records before the range's start (the front of the first batch) and from
its end on are dropped.  So are control batches (the transaction markers of
KIP-98: never rows, whatever the isolation level; their offsets are gaps in
the ``offset`` column) and, with ``read_committed``, the batches of aborted
transactions, from the aborted transactions the broker names with each
fetch (``consumer/transactions.py``); a read_committed fetch stops at the
last stable offset, where the planned range ends.  Records removed before
they were read (retention, DeleteRecords) fail the read unless
``failOnDataLoss`` is false: then the read moves on to the earliest offset
left, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
from annal.client.security import Security
from annal.consumer.simple import OffsetOutOfRangeError, RawFetchAhead, SimpleConsumer
from annal.consumer.transactions import READ_UNCOMMITTED, committed_batches
from annal.pipeline.options import client_args
from annal.storage.batch import last_header
from annal.storage.columns import BinaryColumn, Columns, HeaderColumns, decode_fetched
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
    security: Security | None = None  # the source's kafka.* security options
    isolation_level: str = READ_UNCOMMITTED  # kafka.isolation.level


def data_loss_message(part: OffsetRange, offset: int, earliest: int) -> str:
    return (
        f"records {offset}..{earliest - 1} of {part.topic}-{part.partition} were removed "
        f"(retention or DeleteRecords) before the query read them: the earliest offset is "
        f"now {earliest}. If the query should go on from there, set the source option "
        f"failOnDataLoss to false."
    )


def read_arrow(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``part``, one record batch per fetch; the next fetch is
    on its way while this one is decoded."""
    schema = arrow_schema(part.include_headers)
    repeated = Repeated(part.topic, part.partition)
    with SimpleConsumer(
        part.bootstrap,
        timeout_s=part.timeout_s,
        kafka_listener_fetch=True,
        isolation_level=part.isolation_level,
        **client_args(part.security),
    ) as consumer:
        offset = part.start
        ahead: RawFetchAhead | None = None
        try:
            while offset < part.end:
                try:
                    if ahead is not None and ahead.offset == offset:
                        fetched = ahead.result()
                    else:
                        fetched = consumer.fetch_raw(
                            part.topic, part.partition, offset, part.max_bytes
                        )
                except OffsetOutOfRangeError as exc:
                    offset = _after_data_loss(part, offset, exc)
                    continue
                last = last_header(fetched.records)
                if last is not None and offset < last.next_offset < part.end:
                    ahead = consumer.fetch_raw_ahead(
                        part.topic, part.partition, last.next_offset, part.max_bytes
                    )
                # markers never, aborted transactions not with read_committed
                kept = committed_batches(fetched.records, fetched.aborted_transactions)
                columns, next_offset = decode_fetched(
                    cast(bytes, kept),  # a bytearray when batches were dropped: read alike
                    offset,
                    part.end,
                    part.include_headers,
                )
                if kept is not fetched.records and last is not None:
                    next_offset = max(next_offset, last.next_offset)  # dropped ones count too
                if columns.length:
                    yield arrow_batch(schema, repeated, columns)
                if next_offset <= offset:
                    return  # nothing more below the high watermark (or the LSO)
                offset = next_offset
        finally:
            if ahead is not None:
                ahead.cancel()


def _after_data_loss(part: OffsetRange, offset: int, exc: OffsetOutOfRangeError) -> int:
    """Where to go on after records were removed before they were read: the
    earliest offset left, unless ``failOnDataLoss`` (then this raises)."""
    earliest = exc.log_start_offset
    if earliest <= offset:
        raise exc
    if part.fail_on_data_loss:
        raise OffsetOutOfRangeError(exc.code, data_loss_message(part, offset, earliest)) from exc
    logger.warning("%s; going on from %d", data_loss_message(part, offset, earliest), earliest)
    return earliest


def _binary(kind: pa.DataType, n: int, column: BinaryColumn) -> pa.Array:
    validity = None if column.validity is None else pa.py_buffer(column.validity)
    buffers = [validity, pa.py_buffer(column.offsets), pa.py_buffer(column.data)]
    return pa.Array.from_buffers(kind, n, buffers, null_count=column.null_count)


def _fixed(kind: pa.DataType, n: int, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)], null_count=0)


def _headers(n: int, headers: HeaderColumns) -> pa.Array:
    m = headers.length
    keys = pa.Array.from_buffers(
        pa.string(), m, [None, pa.py_buffer(headers.key_offsets), pa.py_buffer(headers.key_data)]
    )
    pairs = pa.StructArray.from_arrays(
        [keys, _binary(pa.binary(), m, headers.values)], fields=list(HEADERS_TYPE.value_type)
    )
    return pa.Array.from_buffers(
        HEADERS_TYPE, n, [None, pa.py_buffer(headers.lists)], null_count=0, children=[pairs]
    )


class Repeated:
    """The topic and partition columns of one partition's batches: made once
    at the largest length asked for so far, and sliced (no copy) to each."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._columns: tuple[pa.Array, pa.Array] | None = None

    def columns(self, n: int) -> tuple[pa.Array, pa.Array]:
        if self._columns is None or len(self._columns[0]) < n:
            self._columns = (
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            )
        topic, partition = self._columns
        return topic.slice(0, n), partition.slice(0, n)


def arrow_batch(schema: pa.Schema, repeated: Repeated, columns: Columns) -> pa.RecordBatch:
    """One record batch of Spark's Kafka schema from decoded columns: Arrow
    takes the buffers as they are."""
    n = columns.length
    topic, partition = repeated.columns(n)
    arrays = [
        _binary(pa.binary(), n, columns.keys),
        _binary(pa.binary(), n, columns.values),
        topic,
        partition,
        _fixed(pa.int64(), n, columns.offsets),
        _fixed(TIMESTAMP_TYPE, n, columns.timestamps_us),
        _fixed(pa.int32(), n, columns.timestamp_types),
    ]
    if columns.headers is not None:
        arrays.append(_headers(n, columns.headers))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
