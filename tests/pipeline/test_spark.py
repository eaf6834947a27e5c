"""annal as a PySpark data source, on a real broker and a local Spark: batch reads
(subscribe, pattern, assign, offset ranges), writes, and a streaming read that
resumes from its checkpoint with no gap and no duplicate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.pipeline.options import OptionError, read_options
from annal.pipeline.source import _limit
from annal.producer.producer import Producer


def produce(endpoint: str, topic: str, start: int, count: int, partitions: int) -> None:
    with Producer(endpoint) as producer:
        for i in range(start, start + count):
            producer.send(
                topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions,
                headers=[("n", b"%d" % i)],
            )  # fmt: skip
        producer.flush(30)


@pytest.mark.timeout(300)
def test_batch_reads_and_writes(spark: Any, broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("events", partitions=3)
        admin.create_topic("other", partitions=1)
        admin.create_topic("events-out", partitions=1)
    produce(broker.endpoint, "events", 0, 30, 3)
    produce(broker.endpoint, "other", 100, 2, 1)

    def read(**options: str) -> list[Any]:
        reader = spark.read.format("annal").option("bootstrap.servers", broker.endpoint)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load().collect()

    assert "headers" not in read(subscribe="events")[0].asDict()  # without includeHeaders
    rows = read(subscribe="events", includeHeaders="true")
    assert len(rows) == 30
    assert sorted(r.value for r in rows) == sorted(b"v%d" % i for i in range(30))
    first = next(r for r in rows if r.value == b"v4")
    assert (first.key, first.topic, first.partition, first.offset) == (b"k4", "events", 1, 1)
    assert first.timestampType == 0 and first.timestamp.year >= 2024
    assert [(h.key, h.value) for h in first.headers] == [("n", b"4")]

    assert len(read(subscribePattern="ev.*|oth.*")) == 32  # events-out is empty
    ranged = read(
        assign='{"events": [0]}',
        startingOffsets='{"events": {"0": 2}}',
        endingOffsets='{"events": {"0": 5}}',
    )
    assert [r.offset for r in ranged] == [2, 3, 4]

    written = spark.createDataFrame(
        [("a", "one"), ("b", "two"), (None, "three")], "key string, value string"
    )
    written.write.format("annal").mode("append").option(
        "bootstrap.servers", broker.endpoint
    ).option("topic", "events-out").save()
    with SimpleConsumer(broker.endpoint) as consumer:
        got = {r.value: r.key for r in consumer.iterate("events-out", 0, 0)}
    assert got == {b"one": b"a", b"two": b"b", b"three": None}

    assert read(subscribe="events-out", startingOffsets='{"events-out": {"0": 3}}') == []

    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        read()
    with pytest.raises(Exception, match="subscribed topics do not exist"):
        read(subscribe="nope")


@pytest.mark.timeout(120)
def test_empty_reads_are_empty_frames(spark: Any, broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("empty", partitions=2)
    produce(broker.endpoint, "empty", 0, 4, 2)

    def read(**options: str) -> Any:
        reader = spark.read.format("annal").option("bootstrap.servers", broker.endpoint)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    at_end = '{"empty": {"0": 2, "1": 2}}'
    for frame in (
        read(subscribePattern="nothing-matches-.*"),
        read(subscribe="empty", startingOffsets=at_end),
        read(assign='{"empty": [1]}', startingOffsets=at_end, endingOffsets="latest"),
    ):
        assert frame.collect() == [] and frame.count() == 0
        assert frame.columns[:2] == ["key", "value"]


@pytest.mark.timeout(300)
def test_streaming_resumes_from_its_checkpoint(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("stream", partitions=2)
    produce(broker.endpoint, "stream", 0, 20, 2)
    seen: list[tuple[int, int, bytes]] = []
    batches: list[int] = []

    def collect(frame: Any, batch_id: int) -> None:
        rows = frame.collect()
        batches.append(len(rows))
        seen.extend((r.partition, r.offset, r.value) for r in rows)

    def run(until: int) -> None:
        """Stream into ``seen`` until it holds ``until`` records, then stop."""
        query = (
            spark.readStream.format("annal")
            .option("bootstrap.servers", broker.endpoint)
            .option("subscribe", "stream")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "7")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            wait_until(lambda: len(seen) >= until, 120, f"{until} records streamed")
            query.processAllAvailable()
        finally:
            query.stop()

    run(20)
    assert sorted(v for _, _, v in seen) == sorted(b"v%d" % i for i in range(20))
    assert max(batches) <= 7 and len([b for b in batches if b]) >= 3  # the limit held
    produce(broker.endpoint, "stream", 20, 10, 2)
    run(30)  # the same checkpoint: only what came since
    assert sorted(v for _, _, v in seen) == sorted(b"v%d" % i for i in range(30))
    assert len(seen) == len(set(seen)) == 30  # no gap, no duplicate


def test_options_are_checked() -> None:
    base = {"bootstrap.servers": "h:1"}
    with pytest.raises(OptionError, match="bootstrap.servers"):
        read_options({"subscribe": "t"}, streaming=False)
    with pytest.raises(OptionError, match="exactly one of"):
        read_options({**base, "subscribe": "t", "assign": '{"t": [0]}'}, streaming=False)
    with pytest.raises(OptionError, match="assign must be JSON"):
        read_options({**base, "assign": "t0"}, streaming=False)
    with pytest.raises(OptionError, match="startingOffsets must be earliest, latest or JSON"):
        read_options({**base, "subscribe": "t", "startingOffsets": "soon"}, streaming=False)
    with pytest.raises(OptionError, match="endingOffsets is for batch queries only"):
        read_options({**base, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger must be at least 1"):
        read_options({**base, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, streaming=True)
    parsed = read_options({**base, "SUBSCRIBE": "a, b", "kafka.bootstrap.servers": "x"}, True)
    assert parsed.subscription.topics == ("a", "b") and parsed.starting == "latest"
    assert read_options({**base, "subscribe": "t"}, streaming=False).starting == "earliest"


def test_read_limit_is_shared_in_proportion() -> None:
    start = {"t": {"0": 0, "1": 10}}
    latest = {"t": {"0": 100, "1": 20}}
    limited = _limit(start, latest, 11)
    taken = {p: limited["t"][p] - start["t"][p] for p in ("0", "1")}
    assert sum(taken.values()) == 11 and taken["0"] > taken["1"] >= 0
    assert _limit(start, latest, 500) == latest
    assert _limit(start, {"t": {"0": 100, "1": 20, "2": 3}}, 2)["t"]["2"] <= 3
