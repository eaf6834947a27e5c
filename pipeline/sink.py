"""The streaming sink: every micro-batch written exactly once, restarts included.

This is the one place where annal's Spark connector differs from Spark's own
Kafka sink, which is at-least-once (a query restarted after a crash writes
the rows of its last micro-batch again).  Here, executors only stage rows;
the driver publishes them in ``commit``, with a protocol that a SIGKILL at
any moment cannot make write a row twice or lose one.

Staging.  Each task turns its rows into an Arrow table (``topic``,
``partition``, ``key``, ``value`` and, if given, ``headers``) and returns
it, serialized, as its commit message.  Nothing reaches the cluster.

Publishing, in ``commit(messages, batch_id)``, with the sink's state in
``<checkpointLocation>/annal-sink/`` (files written tmp → fsync → rename →
fsync dir; ``<N>`` is the batch id):

1. ``<N>.done`` exists: batch N was published before a crash that came
   before Spark recorded the batch in its commit log.  Return.
2. ``<N>.intent`` does not exist: build it from the messages.  Each row gets
   its partition (the ``partition`` column, else murmur2 of the key as the
   producer's partitioner, else row number modulo the partition count, so
   that it never depends on timing), the publishing identity is chosen
   (the previous batch's producer id and next epoch, or a new producer id
   from InitProducerId when there is none or the epochs would run out), and
   all of it, with one timestamp for the batch, is written as an Arrow file.
   A crash before the rename leaves no intent: nothing was published, and
   Spark's replay of batch N stages its rows again.
3. Publish the intent's rounds (``publish.py``): round ``r`` under epoch
   ``E0 + r``, one batch per partition, acks=all; after each, append ``r``
   to ``<N>.progress`` (fsynced).  A crash here leaves the intent: the
   replay of batch N ignores its own staged rows (they may even differ, if
   the query is not deterministic) and sends the intent's rows again from
   the first round not in ``<N>.progress``.  That round's batches that
   were stored are answered as duplicates; the rest are stored.  Earlier
   rounds are never sent again.
4. Write ``<N>.done`` (the producer id and the next epoch, for batch N+1),
   then remove ``<N>.intent`` and ``<N>.progress`` and done markers a
   hundred batches old.  A crash after the marker: step 1 on the replay.

So the cluster holds each row of batch N once, whichever step the driver
died in, given: one driver at a time per checkpoint (as Spark requires);
restarted within the brokers' ``producer.id.expiration.ms`` (a day by
default: after that a broker has forgotten the producer, and a round in
doubt could be stored twice); and a checkpoint location the driver can
reach as a file system path.  A micro-batch waits in the driver's memory
while it is published; ``maxOffsetsPerTrigger`` bounds it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from annal.client.cluster import ClientError, ClusterConnection
from annal.pipeline.options import OptionError, WriteOptions
from annal.pipeline.publish import (
    MAX_PRODUCER_EPOCH,
    Publisher,
    PublishError,
    RoundData,
    init_producer_id,
    plan_rounds,
    record_sizes,
)
from annal.producer.partitioner import murmur2, to_positive
from annal.storage.batch import Compression
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from annal import errors
from annal.topic_partition import TopicPartition

STATE_DIRECTORY = "annal-sink"
KEEP_DONE_MARKERS = 100
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass
class Staged(WriterCommitMessage):
    """One task's rows, as an Arrow IPC stream."""

    data: bytes
    rows: int


def no_rows() -> pa.Table:
    """The sink's columns, without a row."""
    return pa.table({
        "topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
        "key": pa.array([], pa.binary()), "value": pa.array([], pa.binary()),
    })  # fmt: skip


def staged_table(batches: Iterator[pa.RecordBatch], topic: str | None) -> pa.Table:
    """The sink's columns from Spark's rows: key and value as binary (strings
    encoded as UTF-8), topic (from the option if given), partition (null when
    absent) and headers when the rows have them."""
    received = list(batches)
    if not received:  # a task with no rows (an empty partition of the micro-batch)
        return no_rows()
    table = pa.Table.from_batches(received)
    n = table.num_rows
    names = table.column_names

    def binary(name: str) -> pa.ChunkedArray:
        if name not in names:
            return pa.chunked_array([pa.nulls(n, pa.binary())])
        return table[name].cast(pa.binary())

    columns = {
        "topic": (
            pa.chunked_array([pa.array([topic] * n, pa.string())])
            if topic
            else table["topic"].cast(pa.string())
        ),
        "partition": (
            table["partition"].cast(pa.int32())
            if "partition" in names
            else pa.chunked_array([pa.nulls(n, pa.int32())])
        ),
        "key": binary("key"),
        "value": binary("value"),
    }
    if "headers" in names:
        columns["headers"] = table["headers"].cast(HEADERS_TYPE)
    return pa.table(columns)


def check_columns(names: Sequence[str], topic: str | None) -> None:
    """Refuse rows the sink cannot write, as Spark's Kafka sink does, naming why."""
    if "value" not in names:
        raise OptionError("the rows to write need a value column (binary or string)")
    if topic is None and "topic" not in names:
        raise OptionError("the rows to write need a topic column, or set the option topic")
    unknown = sorted(set(names) - {"key", "value", "topic", "partition", "headers"})
    if unknown:
        raise OptionError(
            f"columns {unknown} cannot be written: the sink writes key, value, topic, "
            "partition and headers"
        )


# -- the sink's state on disk -------------------------------------------------------


@dataclass(frozen=True)
class Intent:
    """A staged batch ready to publish, and the identity it is published under."""

    table: pa.Table  # topic, partition (assigned), key, value[, headers]
    producer_id: int
    first_epoch: int
    timestamp_ms: int
    batch_bytes: int
    compression: str

    def rounds(self) -> list[dict[TopicPartition, list[int]]]:
        return plan_rounds(
            self.table["topic"].to_pylist(),
            self.table["partition"].to_pylist(),
            record_sizes(self.table),
            self.batch_bytes,
        )


class SinkState:
    """``<checkpoint>/annal-sink/``: the steps of the module docstring.  Used by
    the one driver of a query; not thread-safe."""

    def __init__(self, checkpoint: str) -> None:
        self.directory = Path(checkpoint.removeprefix("file:")) / STATE_DIRECTORY
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, batch_id: int, suffix: str) -> Path:
        return self.directory / f"{batch_id}.{suffix}"

    def done(self, batch_id: int) -> dict[str, int] | None:
        try:
            return dict(json.loads(self._path(batch_id, "done").read_text()))
        except FileNotFoundError:
            return None

    def previous_done(self, batch_id: int) -> dict[str, int] | None:
        """The newest done marker of a batch before ``batch_id``."""
        ids = [int(p.stem) for p in self.directory.glob("*.done") if int(p.stem) < batch_id]
        return self.done(max(ids)) if ids else None

    def intent(self, batch_id: int) -> Intent | None:
        try:
            with pa.memory_map(str(self._path(batch_id, "intent"))) as source:
                table = pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            return None
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        return Intent(
            table.replace_schema_metadata(None),
            int(meta["producer_id"]),
            int(meta["first_epoch"]),
            int(meta["timestamp_ms"]),
            int(meta["batch_bytes"]),
            meta["compression"],
        )

    def write_intent(self, batch_id: int, intent: Intent) -> None:
        meta = {
            "producer_id": str(intent.producer_id),
            "first_epoch": str(intent.first_epoch),
            "timestamp_ms": str(intent.timestamp_ms),
            "batch_bytes": str(intent.batch_bytes),
            "compression": intent.compression,
        }
        table = intent.table.replace_schema_metadata(meta)
        tmp = self._path(batch_id, "intent.tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        self._publish_file(tmp, self._path(batch_id, "intent"))

    def rounds_done(self, batch_id: int) -> int:
        try:
            return len(self._path(batch_id, "progress").read_text().split())
        except FileNotFoundError:
            return 0

    def round_done(self, batch_id: int, round_number: int) -> None:
        with open(self._path(batch_id, "progress"), "a") as progress:
            progress.write(f"{round_number}\n")
            progress.flush()
            os.fsync(progress.fileno())

    def mark_done(self, batch_id: int, producer_id: int, next_epoch: int, records: int) -> None:
        tmp = self._path(batch_id, "done.tmp")
        marker = {"producer_id": producer_id, "next_epoch": next_epoch, "records": records}
        tmp.write_text(json.dumps(marker))
        self._publish_file(tmp, self._path(batch_id, "done"))
        for suffix in ("intent", "progress"):
            self._path(batch_id, suffix).unlink(missing_ok=True)
        for old in self.directory.glob("*.done"):
            if int(old.stem) <= batch_id - KEEP_DONE_MARKERS:
                old.unlink(missing_ok=True)

    def _publish_file(self, tmp: Path, final: Path) -> None:
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- the writer -----------------------------------------------------------------------


class AnnalStreamWriter(DataSourceStreamArrowWriter):
    """Spark's streaming writer: ``write`` stages on executors, ``commit``
    publishes on the driver (module docstring)."""

    def __init__(self, options: WriteOptions, columns: Sequence[str]) -> None:
        check_columns(columns, options.topic)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        table = staged_table(iterator, self.options.topic)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return Staged(sink.getvalue().to_pybytes(), table.num_rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        assert self.options.checkpoint is not None  # write_options requires it
        state = SinkState(self.options.checkpoint)
        if state.done(batchId) is not None:
            return  # published before a crash (step 1)
        timeout_s = self.options.delivery_timeout_ms / 1000
        cluster = ClusterConnection(
            self.options.bootstrap, self.options.request_timeout_ms / 1000, self.options.security
        )
        try:
            intent = state.intent(batchId)
            if intent is None:
                intent = self._new_intent(state, batchId, messages, cluster, timeout_s)
                if intent.table.num_rows == 0:
                    state.mark_done(batchId, intent.producer_id, intent.first_epoch, 0)
                    return
                state.write_intent(batchId, intent)
            rounds = intent.rounds()
            publisher = Publisher(cluster, Compression[intent.compression.upper()], timeout_s)
            try:
                data = RoundData.of(intent.table, intent.timestamp_ms)
                for r in range(state.rounds_done(batchId), len(rounds)):
                    publisher.send_round(
                        data, rounds[r], intent.producer_id, intent.first_epoch + r
                    )
                    state.round_done(batchId, r)
            finally:
                publisher.close()
            state.mark_done(
                batchId, intent.producer_id, intent.first_epoch + len(rounds), intent.table.num_rows
            )
        finally:
            cluster.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # staged rows live only in the messages: nothing reached the cluster

    def _new_intent(
        self,
        state: SinkState,
        batch_id: int,
        messages: list[WriterCommitMessage | None],
        cluster: ClusterConnection,
        timeout_s: float,
    ) -> Intent:
        tables = [
            pa.ipc.open_stream(m.data).read_all()
            for m in messages
            if isinstance(m, Staged) and m.rows
        ]
        table = pa.concat_tables(tables) if tables else None
        previous = state.previous_done(batch_id)
        producer_id = previous["producer_id"] if previous else -1
        epoch = previous["next_epoch"] if previous else 0
        if table is None or table.num_rows == 0:
            return Intent(no_rows(), producer_id, epoch, 0, self.options.batch_size, "none")
        partitions = assign_partitions(table, cluster, timeout_s)
        table = table.set_column(table.column_names.index("partition"), "partition", partitions)
        intent = Intent(
            table,
            producer_id,
            epoch,
            time.time_ns() // 1_000_000,
            self.options.batch_size,
            self.options.compression,
        )
        rounds = len(intent.rounds())
        if rounds > MAX_PRODUCER_EPOCH + 1:
            raise OptionError(
                f"micro-batch {batch_id} needs {rounds} rounds of kafka.batch.size "
                f"{self.options.batch_size} bytes (at most {MAX_PRODUCER_EPOCH + 1}): "
                "lower maxOffsetsPerTrigger or raise kafka.batch.size"
            )
        if producer_id < 0 or epoch + rounds - 1 > MAX_PRODUCER_EPOCH:
            producer_id, epoch = init_producer_id(cluster, timeout_s), 0
        return Intent(
            table, producer_id, epoch, intent.timestamp_ms, intent.batch_bytes, intent.compression
        )


def partition_counts(
    cluster: ClusterConnection, topics: Sequence[str], timeout_s: float
) -> dict[str, int]:
    """Partition counts of ``topics``, asking again while the metadata does not
    show one yet (just created), until ``timeout_s``; then an error naming it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cluster.refresh(topics)
        except ClientError as exc:
            if time.monotonic() > deadline:
                raise PublishError(exc.code, f"cannot write to {list(topics)}: {exc}") from exc
        missing = [t for t in topics if t not in cluster.partition_counts]
        if not missing:
            return {t: cluster.partition_counts[t] for t in topics}
        if time.monotonic() > deadline:
            raise PublishError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"topics {missing} do not exist")
        time.sleep(0.2)


def assign_partitions(table: pa.Table, cluster: ClusterConnection, timeout_s: float) -> pa.Array:
    """Each row's partition: the given one, else murmur2 of the key, else the
    row number modulo the partition count (module docstring, step 2)."""
    topics = table["topic"].to_pylist()
    counts = partition_counts(cluster, sorted(set(topics)), timeout_s)
    given = table["partition"].to_pylist()
    keys = table["key"].to_pylist()
    out = []
    for row, (topic, partition, key) in enumerate(zip(topics, given, keys, strict=True)):
        count = counts[topic]
        if partition is not None:
            if not 0 <= partition < count:
                raise PublishError(
                    errors.UNKNOWN_TOPIC_OR_PARTITION,
                    f"row {row} names partition {partition} of {topic}, which has {count}",
                )
        elif key is not None:
            partition = to_positive(murmur2(key)) % count
        else:
            partition = row % count
        out.append(partition)
    return pa.array(out, pa.int32())
