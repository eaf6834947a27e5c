"""``annal`` as a PySpark data source (``pyspark.sql.datasource``; no JVM jars).

    from annal.pipeline.source import AnnalDataSource
    spark.dataSource.register(AnnalDataSource)
    df = (spark.read.format("annal").option("bootstrap.servers", B)
          .option("subscribe", "events").load())

The schema and options are those of Spark's built-in Kafka source (see
``options.py``; the ``headers`` column only with ``includeHeaders``). Reads
are planned on the driver: each topic partition's range of offsets becomes one
input partition (split further to reach ``minPartitions``), read on an
executor into Arrow record batches (``read.py``). A streaming query's offsets
(``{"topic": {"partition": offset}}``) live in Spark's checkpoint; each micro-
batch reads exactly the range between the last batch's end and this one's, so
a restarted query resumes with no gap and no duplicate. Partitions that appear
while a query runs start at their earliest offset. Records deleted before they
were read (retention, DeleteRecords) fail the query unless ``failOnDataLoss``
is false, when the read moves on to the earliest offset left. So do offsets
that moved back under a streaming query (the topic deleted and created again,
the log truncated by an unclean election) and partitions that vanished: with
``failOnDataLoss`` false they are logged and the query goes on from the
partition's new end. ``minOffsetsPerTrigger`` holds a micro-batch back until
that many records wait or ``maxTriggerDelay`` has passed since the last one.
With ``kafka.isolation.level=read_committed`` (KIP-98) "latest" is each
partition's last stable offset, so a range never reaches into an undecided
transaction, and aborted transactions are dropped as they are read.

Batch writes produce each row (``key`` and ``value``, binary or string;
``topic`` unless the ``topic`` option is set; optional ``partition`` and
``headers``) with the ``kafka.*`` producer settings given, one producer per
task; a record the cluster refuses fails the task.  Streaming writes are
exactly-once (``sink.py``).

The security options (``kafka.security.protocol``, ``kafka.sasl.*``,
``kafka.ssl.*``; ``options.py``) are parsed once, on the driver, into a
``Security`` that every client is built with: the driver's (topic lookups,
offsets, the streaming sink's publishing) and the executors', which get it
inside what Spark pickles for them (each ``OffsetRange``, the writers'
options).
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.pipeline.options import (
    EARLIEST,
    LATEST,
    SCHEMA,
    ByTimestamp,
    OffsetSpec,
    OptionError,
    ReadOptions,
    WriteOptions,
    client_args,
    read_options,
    write_options,
)
from annal.pipeline.read import OffsetRange, read_arrow
from annal.pipeline.sink import AnnalStreamWriter, check_columns, staged_table
from annal.producer.producer import ProduceError, Producer, RecordFuture
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
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

logger = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]  # {"topic": {"partition": offset}}
SCHEMA_WITHOUT_HEADERS = SCHEMA.rsplit(", headers", 1)[0]


class AnnalDataSource(DataSource):
    """Registered as format ``annal``."""

    @classmethod
    def name(cls) -> str:
        return "annal"

    def schema(self) -> str:
        options = {str(k).lower(): str(v) for k, v in self.options.items()}
        include = options.get("includeheaders", "false").strip().lower() == "true"
        return SCHEMA if include else SCHEMA_WITHOUT_HEADERS

    def reader(self, schema: Any) -> DataSourceReader:
        return AnnalBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return AnnalStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return AnnalBatchWriter(write_options(self.options, streaming=False), schema.fieldNames())

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return AnnalStreamWriter(write_options(self.options, streaming=True), schema.fieldNames())


# -- planning (driver) ----------------------------------------------------------


def _consumer(options: ReadOptions) -> SimpleConsumer:
    return SimpleConsumer(
        options.bootstrap,
        timeout_s=options.request_timeout_ms / 1000,
        isolation_level=options.isolation_level,  # read_committed: "latest" is the LSO
        **client_args(options.security),
    )


def _partitions(options: ReadOptions, strict: bool = True) -> list[TopicPartition]:
    """The partitions a read covers.  Subscribed topics that do not exist are
    an error for a batch read (``strict``); a streaming query sees none of
    their partitions, so one deleted under it is data loss (failOnDataLoss)."""
    subscription = options.subscription
    if subscription.assign is not None:
        return sorted(TopicPartition(t, p) for t, ps in subscription.assign.items() for p in ps)
    with AdminClient(options.bootstrap, **client_args(options.security)) as admin:
        if subscription.pattern is not None:
            regex = re.compile(subscription.pattern)
            names = [
                t for t in admin.list_topics() if regex.fullmatch(t) and not t.startswith("__")
            ]
        else:
            known = set(admin.list_topics())
            missing = [t for t in subscription.topics if t not in known]
            if missing and strict:
                raise OptionError(
                    f"subscribed topics do not exist: {missing} (or, on a cluster with ACLs, "
                    "this client may not Describe them)"
                )
            names = [t for t in subscription.topics if t in known]
        if not names:
            return []
        return sorted(
            TopicPartition(t.name, p.partition)
            for t in admin.describe_topics(names)
            for p in t.partitions
        )


def _resolve(
    spec: OffsetSpec,
    partitions: Sequence[TopicPartition],
    consumer: SimpleConsumer,
    default: int,
    side: str = "starting",
) -> Offsets:
    """Concrete offsets for ``partitions``: "earliest", "latest", per-partition
    values (-2 earliest, -1 latest; a partition not named gets ``default``),
    or by timestamp (the first offset at or after it; where there is none,
    latest, or an error for starting offsets with the ``error`` strategy)."""
    out: Offsets = {}
    for topic, partition in partitions:
        if isinstance(spec, ByTimestamp):
            timestamp = spec.timestamp_for(topic, partition)
            if timestamp is None:
                wanted = default
            else:
                offset, _ = consumer.offset_for_time(topic, partition, timestamp)
                if offset < 0 and side == "starting" and spec.strategy == "error":
                    raise OptionError(
                        f"no record of {topic}-{partition} has a timestamp at or after "
                        f"{timestamp} (startingOffsetsByTimestampStrategy is error; set it "
                        "to latest to start such partitions at their end)"
                    )
                wanted = LATEST if offset < 0 else offset
        elif isinstance(spec, str):
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


def _ranges(
    options: ReadOptions, start: Offsets, end: Offsets, batch: bool = False
) -> list[OffsetRange]:
    ranges = []
    for topic, partitions in sorted(end.items()):
        for partition, until in sorted(partitions.items(), key=lambda kv: int(kv[0])):
            since = start.get(topic, {}).get(partition, 0)  # a new partition: from its start
            if batch and since > until:
                raise OptionError(
                    f"starting offset {since} of {topic}-{partition} is after its ending "
                    f"offset {until}"
                )
            if until > since:
                ranges.append(
                    OffsetRange(
                        options.bootstrap, topic, int(partition), since, until,
                        options.fail_on_data_loss, options.include_headers,
                        options.request_timeout_ms / 1000, options.max_partition_fetch_bytes,
                        options.security, options.isolation_level,
                    )
                )  # fmt: skip
    return _split(ranges, options.min_partitions)


def _split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Ranges cut into more pieces, in proportion to their sizes, until there
    are at least ``min_partitions`` (as Spark's Kafka source does)."""
    if min_partitions is None or len(ranges) >= min_partitions or not ranges:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        pieces = max(1, min(size, round(size * min_partitions / total)))
        bounds = [r.start + size * i // pieces for i in range(pieces + 1)]
        out += [
            OffsetRange(
                r.bootstrap, r.topic, r.partition, lo, hi, r.fail_on_data_loss,
                r.include_headers, r.timeout_s, r.max_bytes, r.security, r.isolation_level,
            )
            for lo, hi in itertools.pairwise(bounds)
            if hi > lo
        ]  # fmt: skip
    return out


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, OffsetRange):
        return iter(())  # nothing to read: PySpark passes InputPartition(None)
    return read_arrow(partition)


class AnnalBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        found = _partitions(self.options)
        with _consumer(self.options) as consumer:
            start = _resolve(self.options.starting, found, consumer, EARLIEST)
            end = _resolve(self.options.ending, found, consumer, LATEST, "ending")
        return _ranges(self.options, start, end, batch=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class AnnalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.target: Offsets | None = None  # Trigger.AvailableNow: read up to here
        self.last_trigger = time.monotonic()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def initialOffset(self) -> Offsets:
        found = _partitions(self.options)
        with _consumer(self.options) as consumer:
            return _resolve(self.options.starting, found, consumer, LATEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def _latest(self) -> Offsets:
        found = _partitions(self.options, strict=False)
        with _consumer(self.options) as consumer:
            return _resolve("latest", found, consumer, LATEST)

    def latestOffset(self, start: Offsets | None = None, limit: ReadLimit | None = None) -> Offsets:
        latest = self.target if self.target is not None else self._latest()
        if start is None:
            return latest
        minimum = self.options.min_offsets_per_trigger
        if minimum is not None and self.target is None:
            waiting = sum(
                max(0, until - start.get(t, {}).get(p, 0))
                for t, ps in latest.items()
                for p, until in ps.items()
            )
            waited_ms = (time.monotonic() - self.last_trigger) * 1000
            if waiting < minimum and waited_ms < self.options.max_trigger_delay_ms:
                return start  # not enough yet: no micro-batch
        if isinstance(limit, ReadMaxRows):
            latest = _limit(start, latest, limit.max_rows)
        if latest != start:
            self.last_trigger = time.monotonic()
        return latest

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        self._check_data_loss(start, end)
        return _ranges(self.options, start, end)

    def _check_data_loss(self, start: Offsets, end: Offsets) -> None:
        """Offsets that went back, and partitions that vanished (module docstring)."""
        problems = []
        for topic, partitions in sorted(start.items()):
            for partition, since in sorted(partitions.items()):
                until = end.get(topic, {}).get(partition)
                if until is None:
                    problems.append(f"partition {topic}-{partition} is gone (at offset {since})")
                elif until < since:
                    problems.append(
                        f"the offset of partition {topic}-{partition} went back from {since} "
                        f"to {until} (the topic was deleted and created again, or its log "
                        "truncated by an unclean leader election)"
                    )
        if not problems:
            return
        message = "; ".join(problems) + ": some data may have been missed"
        if self.options.fail_on_data_loss:
            raise OptionError(
                f"{message}. If the query should go on from the new offsets, set the source "
                "option failOnDataLoss to false."
            )
        logger.warning("%s; going on (failOnDataLoss is false)", message)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: Offsets) -> None:
        pass  # the offsets live in Spark's checkpoint; nothing to tell the cluster


def _limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """``latest`` cut down to at most ``max_rows`` new records, shared among the
    partitions in proportion to what each has waiting (as Spark's Kafka source).
    A partition whose offset went back keeps its new offset, so that the data
    loss is seen."""
    waiting = {
        (t, p): until - start.get(t, {}).get(p, 0)
        for t, ps in latest.items()
        for p, until in ps.items()
    }
    total = sum(n for n in waiting.values() if n > 0)
    if total <= max_rows:
        return latest
    out: Offsets = {t: dict(ps) for t, ps in latest.items()}
    budget = max_rows
    for (topic, partition), n in sorted(waiting.items()):
        since = start.get(topic, {}).get(partition, 0)
        if n <= 0:
            continue
        take = min(n, max_rows * n // total)
        out[topic][partition] = since + take
        budget -= take
    for (topic, partition), n in sorted(waiting.items()):  # rounding left some budget
        if n <= 0:
            continue
        have = out[topic][partition] - start.get(topic, {}).get(partition, 0)
        extra = min(budget, n - have)
        out[topic][partition] += extra
        budget -= extra
    return out


# -- writing ------------------------------------------------------------------------


@dataclass
class Written(WriterCommitMessage):
    records: int


def write_arrow(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> Written:
    """Produce the rows of ``batches`` with the producer settings of
    ``options``, column by column (no Row object per record); every record
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
        **client_args(options.security),
    )
    with producer:
        for batch in batches:
            table = staged_table(iter([batch]), options.topic)
            topics = table["topic"].to_pylist()
            if None in topics:
                raise OptionError("rows need a topic column, or the topic option must be set")
            keys = table["key"].to_pylist()
            values = table["value"].to_pylist()
            partitions = table["partition"].to_pylist()
            headers = (
                [
                    [(h["key"], h["value"]) for h in row or ()]
                    for row in table["headers"].to_pylist()
                ]
                if "headers" in table.column_names
                else None
            )
            if headers is None and len(set(topics)) == 1 and len(set(partitions)) == 1:
                # one topic and partition (or none): queued batch by batch
                futures = producer.send_many(
                    topics[0], values, None if keys.count(None) == len(keys) else keys,
                    partitions[0],
                )  # fmt: skip
            else:
                send = producer.send
                futures = [
                    send(topics[i], values[i], keys[i], partitions[i], None,
                         headers[i] if headers is not None else ())
                    for i in range(table.num_rows)
                ]  # fmt: skip
            watched: set[int] = set()  # one callback per producer batch, not per record
            for future in futures:
                batch_id = id(future[0])  # RecordFuture is (batch, index, timestamp)
                if batch_id not in watched:
                    watched.add(batch_id)
                    future.add_done_callback(check)
            count += table.num_rows
        producer.flush(options.delivery_timeout_ms / 1000)
    if failures:
        raise ProduceError("WRITE_FAILED", f"records refused: {failures[0]}")
    return Written(count)


class AnnalBatchWriter(DataSourceArrowWriter):
    """Batch writes: each task produces its rows (at-least-once, as Spark's own
    Kafka sink: a task that fails after some acknowledgements is run again)."""

    def __init__(self, options: WriteOptions, columns: Sequence[str]) -> None:
        check_columns(columns, options.topic)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_arrow(self.options, iterator)
