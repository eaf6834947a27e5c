"""Kafka's own clients against a real three-broker cluster with real ZooKeeper:
kafka-python, confluent-kafka (librdkafka), aiokafka and kcat produce and consume
(assign mode) through the Kafka-protocol listener, with every codec, keys, null
values and headers, and what they store is what annal's own consumer reads."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiokafka
import confluent_kafka as ck
import kafka
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from environment import require_command

pytestmark = pytest.mark.timeout(240)

CODECS = ["gzip", "snappy", "lz4", "zstd"]
_topics = itertools.count()

# (key, value, headers) as both sides compare them
Seen = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i) for i in (1, 2, 3)]


@pytest.fixture
def topic(cluster: list[BrokerProcess]) -> Iterator[str]:
    name = f"kt{next(_topics)}"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(name, 3, 3)
    yield name


def bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.kafka_endpoint for b in cluster)


def records_of(n: int, tag: str) -> list[Seen]:
    """Keys, a null value every 7th record, headers on every other one."""
    return [
        (
            f"{tag}-k{i}".encode(),
            None if i % 7 == 3 else f"{tag}-value-{i}-".encode() * (1 + i % 5),
            (("h", f"{i}".encode()), ("empty", b"")) if i % 2 else (),
        )
        for i in range(n)
    ]


def annal_reads(cluster: list[BrokerProcess], topic: str, partition: int) -> list[Seen]:
    """What annal's own consumer reads from ``topic``-``partition``, from offset 0."""
    with SimpleConsumer(cluster[0].endpoint) as consumer:
        return [
            (r.key, r.value, tuple((h.key, h.value) for h in r.headers))
            for r in consumer.iterate(topic, partition, 0)
        ]


def confluent_reads(cluster: list[BrokerProcess], topic: str, partition: int, n: int) -> list[Seen]:
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "unused-assign-mode",
         "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    seen: list[Seen] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < n and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            headers = tuple((k, v) for k, v in (message.headers() or []))
            seen.append((message.key(), message.value(), headers))
    finally:
        consumer.close()
    return seen


def kafka_python_reads(cluster: list[BrokerProcess], topic: str, partition: int) -> list[Seen]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap(cluster), consumer_timeout_ms=5000)
    try:
        tp = kafka.TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [(m.key, m.value, tuple((k, v) for k, v in m.headers)) for m in consumer]
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_idempotent_producer_and_consumer(
    cluster: list[BrokerProcess], topic: str, codec: str
) -> None:
    sent = records_of(60, codec)
    producer = ck.Producer(
        {"bootstrap.servers": bootstrap(cluster), "enable.idempotence": True,
         "compression.type": codec, "linger.ms": 5, "acks": "all"}
    )  # fmt: skip
    failures: list[Any] = []
    for key, value, headers in sent:
        producer.produce(
            topic, key=key, value=value, partition=1, headers=list(headers),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )  # fmt: skip
    assert producer.flush(60) == 0
    assert failures == []
    assert annal_reads(cluster, topic, 1) == sent
    assert confluent_reads(cluster, topic, 1, len(sent)) == sent


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_every_codec_and_acks(
    cluster: list[BrokerProcess], topic: str, acks: int | str
) -> None:
    sent: list[Seen] = []
    for codec in CODECS:
        producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap(cluster), acks=acks, compression_type=codec, linger_ms=5
        )
        batch = records_of(25, f"{codec}-{acks}")
        futures = [
            producer.send(topic, key=k, value=v, partition=2, headers=list(h)) for k, v, h in batch
        ]
        producer.flush(30)
        for future in futures:
            future.get(30)
        producer.close(10)
        sent.extend(batch)
    # acks=0 is answered by nobody: the last appends may land a moment after the send
    wait_until(lambda: annal_reads(cluster, topic, 2) == sent, 30, "every record stored")
    assert kafka_python_reads(cluster, topic, 2) == sent


def test_aiokafka_idempotent_producer_and_consumer(
    cluster: list[BrokerProcess], topic: str
) -> None:
    sent = records_of(40, "aio")

    async def run() -> list[Seen]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap(cluster), enable_idempotence=True, compression_type="lz4"
        )
        await producer.start()
        try:
            for key, value, headers in sent:
                await producer.send_and_wait(
                    topic, value, key=key, partition=0, headers=list(headers)
                )
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap(cluster))
        await consumer.start()
        seen: list[Seen] = []
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while len(seen) < len(sent):
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for messages in batches.values():
                    seen.extend((m.key, m.value, tuple(m.headers)) for m in messages)
        finally:
            await consumer.stop()
        return seen

    assert asyncio.run(run()) == sent
    assert annal_reads(cluster, topic, 0) == sent


def test_annal_producer_records_are_read_by_kafka_clients(
    cluster: list[BrokerProcess], topic: str
) -> None:
    sent = records_of(50, "annal")
    with Producer(cluster[0].endpoint, compression="zstd") as producer:
        futures = [
            producer.send(topic, value=v, key=k, partition=1, headers=list(h)) for k, v, h in sent
        ]
        producer.flush(30)
    assert all(f.result(30).offset >= 0 for f in futures)
    assert confluent_reads(cluster, topic, 1, len(sent)) == sent
    assert kafka_python_reads(cluster, topic, 1) == sent


def test_offsets_earliest_latest_and_by_timestamp(cluster: list[BrokerProcess], topic: str) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster)})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), 10) == (0, 10)
        found = consumer.offsets_for_times([ck.TopicPartition(topic, 0, base + 4500)], 10)
        assert found[0].offset == 5
    finally:
        consumer.close()
    client = kafka.KafkaConsumer(bootstrap_servers=bootstrap(cluster))
    try:
        tp = kafka.TopicPartition(topic, 0)
        assert client.beginning_offsets([tp]) == {tp: 0}
        assert client.end_offsets([tp]) == {tp: 10}
        assert client.offsets_for_times({tp: base + 4500})[tp].offset == 5
    finally:
        client.close()


def test_kcat_lists_produces_and_consumes(cluster: list[BrokerProcess], topic: str) -> None:
    require_command("kcat")
    servers = bootstrap(cluster)

    def kcat(*args: str, stdin: str = "") -> str:
        done = subprocess.run(
            ["kcat", "-b", servers, *args], input=stdin, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    # kcat asks any broker; one whose metadata the controller has not reached yet
    # lists the topic a moment later
    wait_until(lambda: f'topic "{topic}" with 3 partitions:' in kcat("-L"), 30, "the topic")
    listing = kcat("-L")
    assert " 3 brokers:" in listing
    for b in cluster:
        assert f"broker {b.broker_id} at {b.kafka_endpoint}" in listing
    kcat("-P", "-t", topic, "-p", "2", "-K", ":", stdin="a:one\nb:two\nc:three\n")
    out = kcat("-C", "-t", topic, "-p", "2", "-o", "beginning", "-e", "-f", "%k=%s@%o\n")
    assert out.splitlines() == ["a=one@0", "b=two@1", "c=three@2"]
    assert annal_reads(cluster, topic, 2) == [(b"a", b"one", ()), (b"b", b"two", ()),
                                              (b"c", b"three", ())]  # fmt: skip


def test_a_leader_killed_under_an_idempotent_acks_all_producer_loses_nothing(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = [broker_factory(i) for i in (1, 2, 3)]
    topic = "failover"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(topic, 1, 3)
        leader = admin.describe_topics([topic])[0].partitions[0].leader
    producer = ck.Producer(
        {"bootstrap.servers": bootstrap(cluster), "enable.idempotence": True, "acks": "all",
         "linger.ms": 2, "message.timeout.ms": 60000}
    )  # fmt: skip
    acknowledged: list[bytes] = []
    failed: list[Any] = []

    def delivered(err: Any, message: Any) -> None:
        (failed if err else acknowledged).append(err or message.value())

    for i in range(3000):
        producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == 1000:
            next(b for b in cluster if b.broker_id == leader).kill()
        if i % 200 == 0:
            time.sleep(0.05)
    assert producer.flush(90) == 0
    assert failed == []
    alive = [b for b in cluster if b.alive]
    stored = [value for _, value, _ in annal_reads(alive, topic, 0)]
    assert sorted(stored, key=int) == stored  # in order
    assert set(acknowledged) <= set(stored)
    assert len(stored) == len(set(stored)) == 3000  # idempotence: no duplicate
