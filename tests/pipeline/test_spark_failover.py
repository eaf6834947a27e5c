"""Spark queries on three real brokers through a leader crash, a controlled
shutdown and a ZooKeeper session expiry: the driver's offset lookups and the
executors' fetches wait for the new leader (up to the request timeout)
instead of failing the query."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer

FAST_FAILOVER = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "4000"}


def produce(endpoints: str, topic: str, start: int, count: int) -> None:
    with Producer(endpoints, retries=1000, request_timeout_ms=60_000) as producer:
        for i in range(start, start + count):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        producer.flush(120)


def leader_of(endpoints: str, topic: str, partition: int) -> int:
    with AdminClient(endpoints) as admin:
        (info,) = admin.describe_topics([topic])
    return next(p.leader for p in info.partitions if p.partition == partition)


def disrupt(broker: BrokerProcess, how: str) -> Callable[[], None]:
    """Take the leader away as ``how`` says; returns what brings it back, if anything."""
    if how == "SIGKILL":
        broker.kill()
    elif how == "controlled shutdown":
        assert broker.stop() == 0  # leaderships move first
    else:  # session expiry: frozen past zookeeper.session.timeout.ms, then thawed
        broker.freeze()
        return broker.thaw
    return lambda: None


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["SIGKILL", "controlled shutdown", "session expiry"])
def test_a_streaming_query_rides_through_a_leader_going_away(
    spark: Any, broker_factory: Callable[..., BrokerProcess], tmp_path: Path, how: str
) -> None:
    brokers = {i: broker_factory(i, FAST_FAILOVER) for i in (1, 2, 3)}
    endpoints = ",".join(b.endpoint for b in brokers.values())
    with AdminClient(endpoints) as admin:
        admin.create_topic("fo", partitions=2, replication_factor=3)
    produce(endpoints, "fo", 0, 300)
    seen: list[tuple[int, int, bytes]] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.extend((r.partition, r.offset, r.value) for r in frame.collect())

    query = (
        spark.readStream.format("annal")
        .option("bootstrap.servers", endpoints)
        .option("subscribe", "fo")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(seen) >= 40, 120, "the first micro-batch")
        victim = leader_of(endpoints, "fo", 0)
        back = disrupt(brokers[victim], how)
        produce(endpoints, "fo", 300, 300)  # waits for the new leader
        wait_until(lambda: leader_of(endpoints, "fo", 0) != victim, 60, "a new leader")
        back()
        wait_until(
            lambda: len(seen) >= 600 or query.exception() is not None, 180, "600 records streamed"
        )
        assert query.exception() is None, query.exception()
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(v for _, _, v in seen) == sorted(b"v%d" % i for i in range(600))
    assert len(set(seen)) == len(seen) == 600  # every record exactly once
