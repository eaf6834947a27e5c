"""The producer against a real broker: batching, partitioning, acks, compression, errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess
from annal.producer.partitioner import murmur2, to_positive
from annal.producer.producer import ProduceError, Producer, RecordMetadata


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    process = broker_factory()
    with AdminClient(process.endpoint) as admin:
        admin.create_topic("orders", partitions=3)
        admin.create_topic("plain", partitions=1)
    return process


@pytest.mark.timeout(180)
def test_keyed_records_land_where_murmur2_says_and_read_back(broker: BrokerProcess) -> None:
    delivered: list[RecordMetadata] = []
    with Producer(broker.endpoint, linger_ms=5, batch_size=4096, compression="lz4") as producer:
        futures = []
        for i in range(2000):
            future = producer.send(
                "orders", value=f"v{i}", key=f"user-{i % 50}", timestamp_ms=1000 + i
            )
            future.add_done_callback(lambda f: delivered.append(f.result()))
            futures.append(future)
        producer.flush(60)
        results = [f.result() for f in futures]
    assert len(delivered) == 2000
    for i, meta in enumerate(results):
        assert meta.partition == to_positive(murmur2(b"user-%d" % (i % 50))) % 3
    by_partition: dict[int, list[int]] = {}
    for meta in results:
        by_partition.setdefault(meta.partition, []).append(meta.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))  # dense, no gaps, no repeats
    with SimpleConsumer(broker.endpoint) as consumer:
        read = [r for p in range(3) for r in consumer.iterate("orders", p, 0)]
    assert sorted(r.value for r in read if r.value) == sorted(b"v%d" % i for i in range(2000))
    assert {r.key for r in read} == {b"user-%d" % k for k in range(50)}


@pytest.mark.timeout(120)
def test_acks_zero_null_keys_and_errors(broker: BrokerProcess) -> None:
    with Producer(broker.endpoint, acks=0, max_block_ms=500) as producer:
        meta = producer.send("plain", value=b"fire and forget").result(30)
        assert meta.offset == -1 and meta.partition == 0
        with pytest.raises(ProduceError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            producer.send("missing", value=b"x")
        with pytest.raises(ProduceError, match=r"partitions 0\.\.0"):
            producer.send("plain", value=b"x", partition=5)
        with pytest.raises(TypeError, match="without a serializer"):
            producer.send("plain", value=12345)
    with pytest.raises(ValueError, match="acks must be"):
        Producer(broker.endpoint, acks=2)
    with pytest.raises(ValueError, match="acks must be all"):
        Producer(broker.endpoint, acks="most")
    with Producer(broker.endpoint, acks="all") as everyone:
        assert everyone.acks == -1
    with pytest.raises(ValueError, match="compression must be one of"):
        Producer(broker.endpoint, compression="brotli")
    big = Producer(broker.endpoint, batch_size=10)
    with pytest.raises(ProduceError, match="MESSAGE_TOO_LARGE"):
        big.send("plain", value=b"x" * 2_000_000).result(30)
    big.close()
    with SimpleConsumer(broker.endpoint) as consumer:
        assert [r.value for r in consumer.iterate("plain", 0, 0)] == [b"fire and forget"]


@pytest.mark.timeout(180)
def test_send_many_queues_batch_by_batch_as_send_would(broker: BrokerProcess) -> None:
    values = [None if i % 97 == 0 else b"%d" % i * 7 for i in range(6000)]
    with Producer(broker.endpoint, batch_size=4096, linger_ms=5) as producer:
        to_one = producer.send_many("orders", values, partition=1, timestamp_ms=5)
        spread = producer.send_many("orders", [b"n%d" % i for i in range(3000)])
        keyed = producer.send_many("orders", [b"k"] * 50, [b"user-%d" % i for i in range(50)])
        producer.flush(60)
    # one future per run into a batch: the runs end where send() would close it
    ones = [f.result() for f in to_one]
    assert len(ones) > 10 and ones[-1].offset == 5999 and ones[-1].partition == 1
    # null keys stick to a partition for a batch, then move on, as send() does
    assert len({f.result().partition for f in spread}) > 1
    for i, f in enumerate(keyed):
        assert f.result().partition == to_positive(murmur2(b"user-%d" % i)) % 3
    with SimpleConsumer(broker.endpoint) as consumer:
        one = [r for r in consumer.iterate("orders", 1, 0) if r.timestamp == 5]
        every = [r.value for p in range(3) for r in consumer.iterate("orders", p, 0)]
    assert [r.value for r in one] == values and [r.offset for r in one] == list(range(6000))
    assert sorted(v for v in every if v and v.startswith(b"n")) == sorted(
        b"n%d" % i for i in range(3000)
    )
    with Producer(broker.endpoint) as producer:
        with pytest.raises(ProduceError, match=r"partitions 0\.\.2"):
            producer.send_many("orders", [b"x"], partition=3)
        with pytest.raises(ValueError, match="2 keys for 1 values"):
            producer.send_many("orders", [b"x"], [b"a", b"b"])


@pytest.mark.timeout(180)
def test_many_requests_in_flight_keep_each_partition_in_order(broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("wide", partitions=8)
    with Producer(broker.endpoint, batch_size=2048, linger_ms=1, max_in_flight=5) as producer:
        futures = [producer.send("wide", value=b"%d" % i, partition=i % 8) for i in range(20_000)]
        producer.flush(120)
    for i, future in enumerate(futures):
        meta = future.result()
        assert (meta.partition, meta.offset) == (i % 8, i // 8)  # sent order is log order
    with SimpleConsumer(broker.endpoint) as consumer:
        values = [r.value for r in consumer.iterate("wide", 3, 0)]
    assert values == [b"%d" % i for i in range(3, 20_000, 8)]


@pytest.mark.timeout(180)
def test_a_stale_leader_answers_not_leader_and_the_producer_recovers(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    first = broker_factory(1)
    second = broker_factory(2)
    with AdminClient(first.endpoint) as admin:
        admin.create_topic("moved", partitions=1)
        leader = admin.describe_topics(["moved"])[0].partitions[0].leader
    wrong = second if leader == 1 else first
    with Producer(first.endpoint, retry_backoff_ms=10) as producer:
        producer.partitions_for("moved")
        producer.cluster.leaders[("moved", 0)] = wrong.endpoint  # as if leadership had moved
        meta = producer.send("moved", value=b"found it").result(60)
    assert meta.offset == 0
    with SimpleConsumer(first.endpoint) as consumer:
        assert [r.value for r in consumer.iterate("moved", 0, 0)] == [b"found it"]
