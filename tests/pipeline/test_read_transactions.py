"""The Spark source over topics written in transactions (KIP-98), on a real
broker: transaction markers are never rows; with ``kafka.isolation.level``
``read_committed`` neither are aborted records, and "latest" stops at the last
stable offset.  Most of it reads through ``read_arrow`` (what each Spark task
runs) without a Spark session; one test goes through Spark."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess
from annal.pipeline.options import OptionError, read_options
from annal.pipeline.read import OffsetRange, read_arrow
from annal.producer.producer import Producer

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> str:
    broker = module_broker_factory(
        1, {"transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4"}
    )
    return broker.endpoint


def write_transactions(endpoint: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Plain records, a committed, an aborted and another committed transaction
    on partition 0 of ``topic``: (committed and plain values, aborted values)."""
    with Producer(endpoint) as plain:
        plain.send(topic, b"plain-0", partition=0).result(30)
    with Producer(endpoint, transactional_id=f"spark-{topic}") as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, b"c1-%d" % i, partition=0)
        producer.commit_transaction(30)
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, b"a-%d" % i, partition=0)
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"c2-%d" % i, partition=0)
        producer.commit_transaction(30)
    committed = [b"plain-0", *(b"c1-%d" % i for i in range(5)), *(b"c2-%d" % i for i in range(3))]
    return committed, [b"a-%d" % i for i in range(4)]


def new_topic(endpoint: str) -> str:
    topic = f"sparktx{next(_names)}"
    with AdminClient(endpoint) as admin:
        admin.create_topic(topic, 1)
    return topic


def latest(endpoint: str, topic: str, isolation: str) -> int:
    with SimpleConsumer(endpoint, isolation_level=isolation) as consumer:
        return consumer.offsets_before(topic, 0, -1)


def rows(endpoint: str, topic: str, start: int, end: int, isolation: str) -> list[dict[str, Any]]:
    part = OffsetRange(endpoint, topic, 0, start, end, True, isolation_level=isolation)
    table = pa.Table.from_batches(list(read_arrow(part)))
    return table.select(["offset", "key", "value"]).to_pylist()


@pytest.mark.timeout(120)
def test_markers_are_never_rows_and_read_committed_drops_aborted_records(cluster: str) -> None:
    topic = new_topic(cluster)
    committed, aborted = write_transactions(cluster, topic)
    end = latest(cluster, topic, "read_uncommitted")
    assert end == len(committed) + len(aborted) + 3  # three markers

    everything = rows(cluster, topic, 0, end, "read_uncommitted")
    assert [r["value"] for r in everything] == [
        b"plain-0",
        *committed[1:6],
        *aborted,
        *committed[6:],
    ]
    offsets = [r["offset"] for r in everything]
    assert offsets == sorted(offsets) and len(offsets) == end - 3  # markers are gaps
    assert all(r["key"] is None for r in everything)  # a marker's key is never a row's

    assert latest(cluster, topic, "read_committed") == end  # all decided
    read = rows(cluster, topic, 0, end, "read_committed")
    assert [r["value"] for r in read] == committed
    # a range that starts inside the aborted transaction (minPartitions splits so)
    first_aborted = next(r["offset"] for r in everything if r["value"] == aborted[0])
    inside = rows(cluster, topic, first_aborted + 2, end, "read_committed")
    assert [r["value"] for r in inside] == committed[6:]


@pytest.mark.timeout(120)
def test_read_committed_stops_at_an_open_transaction(cluster: str) -> None:
    topic = new_topic(cluster)
    committed, _ = write_transactions(cluster, topic)
    with Producer(cluster, transactional_id=f"open-{topic}") as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send(topic, b"undecided", partition=0).result(30)
        with Producer(cluster) as plain:
            plain.send(topic, b"after", partition=0).result(30)
        stable = latest(cluster, topic, "read_committed")
        assert stable < latest(cluster, topic, "read_uncommitted")
        assert [r["value"] for r in rows(cluster, topic, 0, stable, "read_committed")] == committed
        producer.abort_transaction(30)
    end = latest(cluster, topic, "read_committed")
    read = [r["value"] for r in rows(cluster, topic, 0, end, "read_committed")]
    assert read == [*committed, b"after"]


def test_the_isolation_level_options() -> None:
    base = {"bootstrap.servers": "h:1", "subscribe": "t"}
    assert read_options(base, streaming=False).isolation_level == "read_uncommitted"
    for name in ("kafka.isolation.level", "isolation.level", "kafka.ISOLATION.level"):
        options = read_options({**base, name: "read_committed"}, streaming=True)
        assert options.isolation_level == "read_committed"
    with pytest.raises(OptionError, match="kafka.isolation.level must be read_uncommitted or"):
        read_options({**base, "kafka.isolation.level": "serializable"}, streaming=False)
    with pytest.raises(OptionError, match="disagree"):
        read_options(
            {**base, "kafka.isolation.level": "read_committed",
             "isolation.level": "read_uncommitted"},
            streaming=False,
        )  # fmt: skip


@pytest.mark.timeout(300)
def test_spark_reads_transactions(spark: Any, cluster: str) -> None:
    topic = new_topic(cluster)
    committed, aborted = write_transactions(cluster, topic)

    def values(**options: str) -> list[bytes]:
        reader = spark.read.format("annal").option("bootstrap.servers", cluster)
        for key, value in {"subscribe": topic, **options}.items():
            reader = reader.option(key, value)
        return [bytes(r.value) for r in reader.load().orderBy("offset").collect()]

    assert values() == [*committed[:6], *aborted, *committed[6:]]  # no marker
    assert values(**{"kafka.isolation.level": "read_committed", "minPartitions": "3"}) == committed
