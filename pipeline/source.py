"""``annal`` as a PySpark data source (``pyspark.sql.datasource``; no JVM jars).

    from annal.pipeline.source import AnnalDataSource
    spark.dataSource.register(AnnalDataSource)
    df = (spark.read.format("annal").option("bootstrap.servers", B)
          .option("subscribe", "events").load())

The schema and options are those of Spark's built-in Kafka source (see
``options.py``).  Reads are planned on the driver: each topic partition's
range of offsets becomes one input partition, read on an executor with the
simple consumer.  A streaming query's offsets (``{"topic": {"partition":
offset}}``) live in Spark's checkpoint; each micro-batch reads exactly the
range between the last batch's end and this one's, so a restarted query
resumes with no gap and no duplicate.  Partitions that appear while a query
runs start at their earliest offset.  Records deleted before they were read
(retention, DeleteRecords) fail the query unless ``failOnDataLoss`` is false,
when the read moves on to the earliest offset left.

Batch writes produce each row (``key`` and ``value``, binary or string;
``topic`` unless the ``topic`` option is set; optional ``partition`` and
``headers``) with the ``kafka.*`` producer settings given, one producer per
task; a record the cluster refuses fails the task.  Streaming writes are
exactly-once (``sink.py``).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from annal.admin.client import AdminClient
from annal.consumer.simple import OffsetOutOfRangeError, SimpleConsumer
from annal.pipeline.options import (
    EARLIEST,
    LATEST,
    SCHEMA,
    OptionError,
    ReadOptions,
    WriteOptions,
    read_options,
    write_options,
)
from annal.pipeline.sink import AnnalStreamWriter, check_columns
from annal.producer.producer import ProduceError, Producer, RecordFuture
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from annal.topic_partition import TopicPartition

Offsets = dict[str, dict[str, int]]  # {"topic": {"partition": offset}}
UTC = datetime.UTC


class AnnalDataSource(DataSource):
    """Registered as format ``annal``."""

    @classmethod
    def name(cls) -> str:
        return "annal"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return AnnalBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return AnnalStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return AnnalBatchWriter(write_options(self.options, streaming=False), schema.fieldNames())

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return AnnalStreamWriter(write_options(self.options, streaming=True), schema.fieldNames())


@dataclass
class OffsetRange(InputPartition):
    """One topic partition's offsets ``[start, end)``: one Spark task."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    fail_on_data_loss: bool


# -- planning (driver) ----------------------------------------------------------


def _partitions(options: ReadOptions) -> list[TopicPartition]:
    subscription = options.subscription
    if subscription.assign is not None:
        return sorted(TopicPartition(t, p) for t, ps in subscription.assign.items() for p in ps)
    with AdminClient(options.bootstrap) as admin:
        if subscription.pattern is not None:
            regex = re.compile(subscription.pattern)
            names = [
                t for t in admin.list_topics() if regex.fullmatch(t) and not t.startswith("__")
            ]
        else:
            known = set(admin.list_topics())
            missing = [t for t in subscription.topics if t not in known]
            if missing:
                raise OptionError(f"subscribed topics do not exist: {missing}")
            names = list(subscription.topics)
        if not names:
            return []
        return sorted(
            TopicPartition(t.name, p.partition)
            for t in admin.describe_topics(names)
            for p in t.partitions
        )


def _resolve(
    spec: str | Offsets,
    partitions: Sequence[TopicPartition],
    consumer: SimpleConsumer,
    default: int,
) -> Offsets:
    """Concrete offsets for ``partitions``: "earliest", "latest", or per-partition
    values (-2 earliest, -1 latest; a partition not named gets ``default``)."""
    out: Offsets = {}
    for topic, partition in partitions:
        if isinstance(spec, str):
            wanted = EARLIEST if spec == "earliest" else LATEST
        else:
            wanted = spec.get(topic, {}).get(str(partition), default)
        offset = (
            consumer.offsets_before(topic, partition, wanted)
            if wanted in (EARLIEST, LATEST)
            else wanted
        )
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _ranges(options: ReadOptions, start: Offsets, end: Offsets) -> list[OffsetRange]:
    ranges = []
    for topic, partitions in sorted(end.items()):
        for partition, until in sorted(partitions.items(), key=lambda kv: int(kv[0])):
            since = start.get(topic, {}).get(partition, 0)  # a new partition: from its start
            if until > since:
                ranges.append(
                    OffsetRange(
                        options.bootstrap, topic, int(partition), since, until,
                        options.fail_on_data_loss,
                    )
                )  # fmt: skip
    return ranges


# -- reading (executors) ----------------------------------------------------------


def read_range(part: OffsetRange) -> Iterator[tuple[Any, ...]]:
    """The rows of ``part``: records with offsets in ``[start, end)``."""
    with SimpleConsumer(part.bootstrap) as consumer:
        offset = part.start
        while offset < part.end:
            try:
                result = consumer.fetch(part.topic, part.partition, offset)
            except OffsetOutOfRangeError:
                if part.fail_on_data_loss:
                    raise
                earliest = consumer.offsets_before(part.topic, part.partition, EARLIEST)
                if earliest <= offset:
                    raise
                offset = earliest  # records deleted before they were read: skip them
                continue
            for r in result.records:
                if r.offset >= part.end:
                    return
                yield (
                    r.key,
                    r.value,
                    r.topic,
                    r.partition,
                    r.offset,
                    datetime.datetime.fromtimestamp(r.timestamp / 1000, tz=UTC),
                    0,
                    [(h[0], h[1]) for h in r.headers],
                )
            if result.next_offset <= offset:
                return  # nothing more below the high watermark
            offset = result.next_offset


class AnnalBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        found = _partitions(self.options)
        with SimpleConsumer(self.options.bootstrap) as consumer:
            start = _resolve(self.options.starting, found, consumer, EARLIEST)
            end = _resolve(self.options.ending, found, consumer, LATEST)
        return _ranges(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # nothing to read: PySpark passes InputPartition(None)
        return read_range(partition)


class AnnalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.target: Offsets | None = None  # Trigger.AvailableNow: read up to here

    def prepareForTriggerAvailableNow(self) -> None:
        found = _partitions(self.options)
        with SimpleConsumer(self.options.bootstrap) as consumer:
            self.target = _resolve("latest", found, consumer, LATEST)

    def initialOffset(self) -> Offsets:
        found = _partitions(self.options)
        with SimpleConsumer(self.options.bootstrap) as consumer:
            return _resolve(self.options.starting, found, consumer, LATEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: Offsets | None = None, limit: ReadLimit | None = None) -> Offsets:
        if self.target is not None:
            latest = self.target
        else:
            found = _partitions(self.options)
            with SimpleConsumer(self.options.bootstrap) as consumer:
                latest = _resolve("latest", found, consumer, LATEST)
        if start is None or not isinstance(limit, ReadMaxRows):
            return latest
        return _limit(start, latest, limit.max_rows)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return _ranges(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(partition)

    def commit(self, end: Offsets) -> None:
        pass  # the offsets live in Spark's checkpoint; nothing to tell the cluster


def _limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """``latest`` cut down to at most ``max_rows`` new records, shared among the
    partitions in proportion to what each has waiting (as Spark's Kafka source)."""
    waiting = {
        (t, p): until - start.get(t, {}).get(p, 0)
        for t, ps in latest.items()
        for p, until in ps.items()
    }
    total = sum(n for n in waiting.values() if n > 0)
    if total <= max_rows:
        return latest
    out: Offsets = {t: dict(ps) for t, ps in start.items()}
    budget = max_rows
    for (topic, partition), n in sorted(waiting.items()):
        since = start.get(topic, {}).get(partition, 0)
        take = min(n, max_rows * n // total) if n > 0 else 0
        out.setdefault(topic, {})[partition] = since + take
        budget -= take
    for (topic, partition), n in sorted(waiting.items()):  # rounding left some budget
        have = out[topic][partition] - start.get(topic, {}).get(partition, 0)
        extra = min(budget, n - have) if n > have else 0
        out[topic][partition] += extra
        budget -= extra
    return out


# -- writing ------------------------------------------------------------------------


@dataclass
class Written(WriterCommitMessage):
    records: int


def _to_bytes(value: Any, column: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise OptionError(f"column {column} must be binary or string, not {type(value).__name__}")


def write_rows(options: WriteOptions, rows: Iterator[Any]) -> Written:
    """Produce ``rows`` with the producer settings of ``options``; every record
    acknowledged, or the task fails naming the first refusal."""
    failures: list[BaseException] = []

    def check(future: RecordFuture) -> None:
        error = future.exception()
        if error is not None:
            failures.append(error)

    count = 0
    producer = Producer(
        options.bootstrap,
        acks=options.acks,
        linger_ms=options.linger_ms,
        batch_size=options.batch_size,
        compression=options.compression,
        retries=options.retries,
        max_in_flight=options.max_in_flight,
        request_timeout_ms=options.request_timeout_ms,
        max_block_ms=options.request_timeout_ms,
        enable_idempotence=options.idempotence,
    )
    with producer:
        for row in rows:
            fields = row.asDict()
            target = options.topic or fields.get("topic")
            if not target:
                raise OptionError("rows need a topic column, or the topic option must be set")
            partition = fields.get("partition")
            headers = fields.get("headers") or ()
            future = producer.send(
                target,
                key=_to_bytes(fields.get("key"), "key"),
                value=_to_bytes(fields.get("value"), "value"),
                partition=int(partition) if partition is not None else None,
                headers=[(h["key"], _to_bytes(h["value"], "headers.value")) for h in headers],
            )
            future.add_done_callback(check)
            count += 1
        producer.flush(options.delivery_timeout_ms / 1000)
    if failures:
        raise ProduceError("WRITE_FAILED", f"{len(failures)} records refused: {failures[0]}")
    return Written(count)


class AnnalBatchWriter(DataSourceWriter):
    """Batch writes: each task produces its rows (at-least-once, as Spark's own
    Kafka sink: a task that fails after some acknowledgements is run again)."""

    def __init__(self, options: WriteOptions, columns: Sequence[str]) -> None:
        check_columns(columns, options.topic)
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)
