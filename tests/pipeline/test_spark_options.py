"""Options of Spark's Kafka source and sink on a real broker and a local Spark:
offsets by time, trigger sizes, minPartitions, includeHeaders, LogAppendTime,
headers and producer settings written, offsets that moved under a streaming
query (failOnDataLoss), unknown options refused, an unreachable cluster."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.deploy.zookeeper import free_port
from annal.pipeline.options import OptionError, read_options, write_options
from annal.producer.producer import Producer


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> str:
    return module_broker_factory().endpoint


def read(spark: Any, endpoint: str, **options: str) -> Any:
    reader = spark.read.format("annal").option("bootstrap.servers", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def produce_at(endpoint: str, topic: str, stamps: list[int]) -> None:
    with Producer(endpoint) as producer:
        for i, stamp in enumerate(stamps):
            producer.send(topic, value=b"v%d" % i, partition=0, timestamp_ms=stamp)


@pytest.mark.timeout(180)
def test_offsets_by_timestamp_and_partitions(spark: Any, cluster: str) -> None:
    with AdminClient(cluster) as admin:
        admin.create_topic("times", partitions=1)
    base = 1_700_000_000_000
    produce_at(cluster, "times", [base + 1000 * i for i in range(10)])

    def offsets(**options: str) -> list[int]:
        return sorted(
            r.offset for r in read(spark, cluster, subscribe="times", **options).collect()
        )

    assert offsets(startingTimestamp=str(base + 3500)) == list(range(4, 10))
    assert offsets(
        startingOffsetsByTimestamp=f'{{"times": {{"0": {base + 2000}}}}}',
        endingOffsetsByTimestamp=f'{{"times": {{"0": {base + 5000}}}}}',
    ) == [2, 3, 4]
    assert offsets(startingTimestamp=str(base + 3000), endingTimestamp=str(base + 4000)) == [3]
    assert offsets(  # startingTimestamp wins over startingOffsets, as in Spark
        startingTimestamp=str(base + 8000), startingOffsets="earliest"
    ) == [8, 9]
    with pytest.raises(Exception, match="no record of times-0 has a timestamp at or after"):
        offsets(startingTimestamp=str(base + 99_000))
    assert (
        offsets(startingTimestamp=str(base + 99_000), startingOffsetsByTimestampStrategy="latest")
        == []
    )
    frame = read(spark, cluster, subscribe="times", minPartitions="4")
    assert frame.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in frame.collect()) == list(range(10))
    with pytest.raises(Exception, match="startingOffsets cannot be latest"):
        offsets(startingOffsets="latest")
    with pytest.raises(
        Exception, match="starting offset 7 of times-0 is after its ending offset 3"
    ):
        offsets(startingOffsets='{"times": {"0": 7}}', endingOffsets='{"times": {"0": 3}}')
    with pytest.raises(Exception, match="option kafka.auto.offset.reset is not supported"):
        offsets(**{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(Exception, match="option startingoffset is not one annal's source knows"):
        offsets(startingOffset="earliest")


@pytest.mark.timeout(180)
def test_log_append_time_headers_and_producer_settings(spark: Any, cluster: str) -> None:
    with AdminClient(cluster) as admin:
        admin.create_topic(
            "appended", partitions=1, config={"message.timestamp.type": "LogAppendTime"}
        )
        admin.create_topic("written", partitions=2)
    before = int(time.time() * 1000)
    produce_at(cluster, "appended", [1000, 2000])  # the broker's clock replaces them
    rows = read(spark, cluster, subscribe="appended").collect()
    assert [r.timestampType for r in rows] == [1, 1]
    assert all(r.timestamp.timestamp() * 1000 >= before - 1000 for r in rows)
    frame = spark.createDataFrame(
        [("a", b"1", [("h", b"x"), ("h", None)], 1), (None, b"2", [], 0)],
        "key string, value binary, headers array<struct<key:string,value:binary>>, partition int",
    )
    (
        frame.write.format("annal")
        .mode("append")
        .option("bootstrap.servers", cluster)
        .option("topic", "written")
        .option("kafka.compression.type", "lz4")
        .option("kafka.linger.ms", "20")
        .option("kafka.batch.size", "65536")
        .option("kafka.acks", "1")
        .save()
    )
    back = read(spark, cluster, subscribe="written", includeHeaders="true").collect()
    got = {r.value: (r.key, r.partition, [(h.key, h.value) for h in r.headers]) for r in back}
    assert got == {b"1": (b"a", 1, [("h", b"x"), ("h", None)]), b"2": (None, 0, [])}
    with pytest.raises(Exception, match="option kafka.no.such is not one the annal sink knows"):
        frame.write.format("annal").mode("append").option("bootstrap.servers", cluster).option(
            "topic", "written"
        ).option("kafka.no.such", "1").save()


@pytest.mark.timeout(120)
def test_a_write_to_an_unreachable_cluster_says_so_within_the_request_timeout(
    spark: Any,
) -> None:
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    began = time.monotonic()
    with pytest.raises(Exception, match="BROKER_NOT_AVAILABLE.*no broker reachable within 3000 ms"):
        frame.write.format("annal").mode("append").option(
            "bootstrap.servers", f"127.0.0.1:{free_port()}"
        ).option("topic", "t").option("kafka.request.timeout.ms", "3000").option(
            "kafka.retries", "0"
        ).save()
    assert time.monotonic() - began < 40  # Spark retries the task: each try gives up in 3 s


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_offsets_that_went_back_under_a_streaming_query(
    spark: Any, cluster: str, tmp_path: Path, fail_on_data_loss: str
) -> None:
    topic = f"moving-{fail_on_data_loss}"
    with AdminClient(cluster) as admin:
        admin.create_topic(topic, partitions=1)
    produce_at(cluster, topic, [int(time.time() * 1000)] * 10)
    seen: list[bytes] = []
    query = (
        spark.readStream.format("annal")
        .option("bootstrap.servers", cluster)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", fail_on_data_loss)
        .load()
        .writeStream.foreachBatch(lambda frame, _: seen.extend(r.value for r in frame.collect()))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(seen) == 10, 120, "the first ten records")
        with AdminClient(cluster) as admin:  # the topic deleted and created again
            admin.delete_topic(topic)
            wait_until(lambda: topic not in admin.list_topics(), 60, f"{topic} deleted")
            admin.create_topic(topic, partitions=1)
        with SimpleConsumer(cluster) as consumer:
            wait_until(lambda: consumer.partitions_for(topic) == [0], 60, "the new topic")
        produce_at(cluster, topic, [int(time.time() * 1000)] * 3)
        if fail_on_data_loss == "true":
            wait_until(lambda: query.exception() is not None, 120, "the query failing")
            message = str(query.exception())
            assert re.search(f"partition {topic}-0 (went back from 10 to [0-3] |is gone)", message)
            assert "failOnDataLoss" in message
        else:  # the query goes on from the new offsets: later records arrive

            def moved_on() -> bool:
                ends = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress]
                return any(e.get(topic, {}).get("0", 10) < 10 for e in ends)

            wait_until(moved_on, 120, "a micro-batch past the loss")
            with Producer(cluster) as producer:
                producer.send(topic, value=b"after", partition=0)
            wait_until(lambda: b"after" in seen or query.exception(), 120, "a record after it")
            assert query.exception() is None
    finally:
        query.stop()


def test_option_parsing() -> None:
    base = {"bootstrap.servers": "h:1", "subscribe": "t"}
    parsed = read_options(
        {**base, "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s", "includeHeaders": "true",
         "kafka.request.timeout.ms": "5000", "minPartitions": "3"},
        streaming=True,
    )  # fmt: skip
    assert parsed.min_offsets_per_trigger == 5 and parsed.max_trigger_delay_ms == 30_000
    assert parsed.include_headers and parsed.request_timeout_ms == 5000
    assert parsed.min_partitions == 3
    for bad, match in (
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"}, "larger than"),
        ({"includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({"startingOffsetsByTimestamp": "x"}, "startingOffsetsByTimestamp must be JSON"),
        ({"endingTimestamp": "5"}, "endingTimestamp is for batch queries only"),
        ({"kafka.group.id": "g"}, "no consumer group"),
    ):
        with pytest.raises(OptionError, match=match):
            read_options({**base, **bad}, streaming=True)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger is for streaming queries only"):
        read_options({**base, "maxOffsetsPerTrigger": "5"}, streaming=False)
    with pytest.raises(OptionError, match="endingOffsets cannot be earliest"):
        read_options({**base, "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="kafka.acks=1 cannot go with the exactly-once"):
        write_options(
            {"bootstrap.servers": "h:1", "kafka.acks": "1", "checkpointLocation": "/x"}, True
        )
    with pytest.raises(OptionError, match="set the option checkpointLocation"):
        write_options({"bootstrap.servers": "h:1"}, streaming=True)
    with pytest.raises(OptionError, match="kafka.compression.type must be one of"):
        write_options({"bootstrap.servers": "h:1", "kafka.compression.type": "brotli"}, False)


@pytest.mark.timeout(60)
def test_min_offsets_per_trigger_waits_for_records_or_the_delay(cluster: str) -> None:
    from annal.pipeline.source import AnnalStreamReader
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    with AdminClient(cluster) as admin:
        admin.create_topic("trickle", partitions=1)
    produce_at(cluster, "trickle", [1] * 3)
    reader = AnnalStreamReader(
        read_options(
            {"bootstrap.servers": cluster, "subscribe": "trickle",
             "minOffsetsPerTrigger": "5", "maxTriggerDelay": "3s"},
            streaming=True,
        )
    )  # fmt: skip
    start = {"trickle": {"0": 0}}
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # 3 < 5: no batch yet
    produce_at(cluster, "trickle", [1] * 2)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"trickle": {"0": 5}}
    produce_at(cluster, "trickle", [1])
    later = {"trickle": {"0": 5}}
    assert reader.latestOffset(later, ReadAllAvailable()) == later  # 1 < 5, delay not over
    wait_until(
        lambda: reader.latestOffset(later, ReadAllAvailable()) == {"trickle": {"0": 6}},
        30,
        "maxTriggerDelay passing",
        poll_s=0.5,
    )
