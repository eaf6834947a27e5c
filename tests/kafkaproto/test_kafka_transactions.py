"""Transactions with Kafka's own clients against a real three-broker cluster with
real ZooKeeper: confluent-kafka's transactional producer commits and aborts
across topics, read_committed consumers (confluent-kafka, kafka-python,
aiokafka) see exactly the committed records, a second producer with the same
transactional id fences the first, and a producer that dies mid-transaction
is aborted by the coordinator after its timeout."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator

import aiokafka
import confluent_kafka as ck
import kafka
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from metrics_scrape import scrape, value

from annal import errors

pytestmark = pytest.mark.timeout(240)

_names = itertools.count()
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    settings = {
        "transaction.state.log.num.partitions": "4",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    }
    return [
        module_broker_factory(i, {**settings, "metrics.port": "0"})
        for i in (1, 2, 3)
    ]


def timed_out(cluster: list[BrokerProcess]) -> float:
    """Transactions the coordinators aborted for their timeout, all brokers together."""
    return sum(
        value(scrape(b), "annal_coordinator_transaction_timed_out_total") for b in cluster
    )


@pytest.fixture
def topics(cluster: list[BrokerProcess]) -> Iterator[list[str]]:
    names = [f"tx{next(_names)}" for _ in range(3)]
    with AdminClient(cluster[0].endpoint) as admin:
        for name in names:
            admin.create_topic(name, PARTITIONS, 3)
    yield names


def bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.kafka_endpoint for b in cluster)


def transactional(cluster: list[BrokerProcess], tid: str, **more: object) -> ck.Producer:
    config = {
        "bootstrap.servers": bootstrap(cluster),
        "transactional.id": tid,
        "transaction.timeout.ms": 60_000,
        **more,
    }
    return ck.Producer(config)


def produce_all(producer: ck.Producer, topics: list[str], tag: str, n: int) -> list[bytes]:
    values = []
    for i in range(n):
        value = f"{tag}-{i}".encode()
        producer.produce(topics[i % len(topics)], value=value, partition=i % PARTITIONS)
        values.append(value)
    producer.flush(30)
    return values


def by_partition(values: list[bytes], topics: list[str]) -> dict[tuple[str, int], list[bytes]]:
    """What ``produce_all`` wrote where, in order (its i-th record: topic i % len(topics),
    partition i % PARTITIONS)."""
    where: dict[tuple[str, int], list[bytes]] = {}
    for v in values:
        i = int(v.rsplit(b"-", 1)[1])
        where.setdefault((topics[i % len(topics)], i % PARTITIONS), []).append(v)
    return where


def confluent_committed(
    cluster: list[BrokerProcess], topics: list[str], expected: int, isolation: str
) -> list[bytes]:
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": f"g{next(_names)}",
         "enable.auto.commit": False, "isolation.level": isolation,
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.assign(
        [ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in topics for p in range(PARTITIONS)]
    )
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(seen) < expected:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        # nothing more arrives: what was read is all there is
        end = time.monotonic() + 2
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    return seen


def test_commit_and_abort_across_topics(cluster: list[BrokerProcess], topics: list[str]) -> None:
    producer = transactional(cluster, f"tid-{next(_names)}")
    producer.init_transactions(30)
    producer.begin_transaction()
    committed = produce_all(producer, topics, "c1", 60)
    producer.commit_transaction(30)
    producer.begin_transaction()
    aborted = produce_all(producer, topics, "a1", 30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    committed += produce_all(producer, topics, "c2", 30)
    producer.commit_transaction(30)

    read = confluent_committed(cluster, topics, len(committed), "read_committed")
    assert sorted(read) == sorted(committed)
    assert by_partition(read, topics) == by_partition(committed, topics)  # in order
    everything = confluent_committed(
        cluster, topics, len(committed) + len(aborted), "read_uncommitted"
    )
    assert sorted(everything) == sorted(committed + aborted)
    assert aiokafka_committed(cluster, topics, len(committed)) == by_partition(committed, topics)


def aiokafka_committed(
    cluster: list[BrokerProcess], topics: list[str], expected: int
) -> dict[tuple[str, int], list[bytes]]:
    """aiokafka's read_committed consumer: what it reads, per partition in order."""

    async def run() -> dict[tuple[str, int], list[bytes]]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap(cluster), isolation_level="read_committed"
        )
        await consumer.start()
        seen: dict[tuple[str, int], list[bytes]] = {}
        try:
            tps = [aiokafka.TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + 30
            while sum(map(len, seen.values())) < expected and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for tp, messages in batches.items():
                    seen.setdefault((tp.topic, tp.partition), []).extend(
                        m.value for m in messages
                    )
            # nothing more arrives: what was read is all there is
            batches = await consumer.getmany(timeout_ms=1000)
            for tp, messages in batches.items():
                seen.setdefault((tp.topic, tp.partition), []).extend(m.value for m in messages)
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(run())


def test_aiokafka_transactional_producer(
    cluster: list[BrokerProcess], topics: list[str]
) -> None:
    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap(cluster), transactional_id=f"aio-{next(_names)}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(12):
                    await producer.send(topics[0], f"aio-c-{i}".encode(), partition=i % PARTITIONS)
            await producer.begin_transaction()
            for i in range(12):
                await producer.send(topics[0], f"aio-a-{i}".encode(), partition=i % PARTITIONS)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    read = confluent_committed(cluster, topics[:1], 12, "read_committed")
    assert sorted(read) == sorted(f"aio-c-{i}".encode() for i in range(12))


def test_kafka_python_reads_committed_only(
    cluster: list[BrokerProcess], topics: list[str]
) -> None:
    producer = transactional(cluster, f"tid-{next(_names)}")
    producer.init_transactions(30)
    producer.begin_transaction()
    aborted = produce_all(producer, topics[:1], "ka", 20)
    producer.abort_transaction(30)
    producer.begin_transaction()
    committed = produce_all(producer, topics[:1], "kc", 20)
    producer.commit_transaction(30)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap(cluster).split(","),
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([kafka.TopicPartition(topics[0], p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        seen = [m.value for m in consumer]
    finally:
        consumer.close()
    assert sorted(seen) == sorted(committed)
    assert not set(seen) & set(aborted)


def test_a_second_producer_fences_the_first(
    cluster: list[BrokerProcess], topics: list[str]
) -> None:
    tid = f"tid-{next(_names)}"
    old = transactional(cluster, tid)
    old.init_transactions(30)
    old.begin_transaction()
    produce_all(old, topics, "zombie", 10)
    new = transactional(cluster, tid)
    new.init_transactions(30)  # aborts the old producer's transaction
    new.begin_transaction()
    committed = produce_all(new, topics, "new", 10)
    new.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as fenced:
        old.produce(topics[0], value=b"late", partition=0)
        old.flush(10)
        old.commit_transaction(10)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    read = confluent_committed(cluster, topics, len(committed), "read_committed")
    assert sorted(read) == sorted(committed)


def test_an_abandoned_transaction_is_aborted_after_its_timeout(
    cluster: list[BrokerProcess], topics: list[str]
) -> None:
    tid = f"tid-{next(_names)}"
    producer = transactional(cluster, tid, **{"transaction.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_all(producer, topics[:1], "abandoned", 6)
    before = timed_out(cluster)
    del producer  # never ends its transaction
    # a read_committed consumer moves past the aborted transaction
    later = transactional(cluster, f"tid-{next(_names)}")
    later.init_transactions(30)
    later.begin_transaction()
    committed = produce_all(later, topics[:1], "after", 6)
    later.commit_transaction(30)

    def all_read() -> bool:
        return sorted(
            confluent_committed(cluster, topics[:1], len(committed), "read_committed")
        ) == sorted(committed)

    wait_until(all_read, 30)
    assert timed_out(cluster) == before + 1


def test_list_and_describe_transactions_over_kafkas_protocol(
    cluster: list[BrokerProcess], topics: list[str]
) -> None:
    tid = f"tid-{next(_names)}"
    producer = transactional(cluster, tid)
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_all(producer, topics[:1], "open", 2)  # partitions 0 and 1, left open
    listed = []
    for broker in cluster:
        connection = KafkaConnection(broker.kafka_endpoint, 30, "list-transactions")
        try:
            answer = connection.exchange(66, 0, {"state_filters": ["Ongoing"]})
        finally:
            connection.close()
        assert answer.error_code == errors.NONE.number
        listed += [
            (t.transactional_id, t.transaction_state, broker) for t in answer.transaction_states
        ]
    ((_, state, coordinator),) = [t for t in listed if t[0] == tid]
    assert state == "Ongoing"
    connection = KafkaConnection(coordinator.kafka_endpoint, 30, "describe-transactions")
    try:
        (described,) = connection.exchange(65, 0, {"transactional_ids": [tid]}).transaction_states
        unknown = connection.exchange(65, 0, {"transactional_ids": ["nobody"]})
    finally:
        connection.close()
    assert described.error_code == errors.NONE.number
    assert described.transaction_state == "Ongoing"
    assert [(t.topic, sorted(t.partitions)) for t in described.topics] == [(topics[0], [0, 1])]
    # an id this broker does not coordinate, or does not know
    assert unknown.transaction_states[0].error_code in (
        errors.TRANSACTIONAL_ID_NOT_FOUND.number, errors.NOT_COORDINATOR.number
    )
    producer.abort_transaction(30)
