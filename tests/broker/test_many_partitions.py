"""A cluster with 1,200 partitions (3 brokers, RF 2): a controlled shutdown, a
restart and a SIGKILL of the controller each leave every partition led by a
live broker, and no acknowledged record is lost.  Kafka's own clients
(confluent-kafka) create, write and read."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from annal.deploy.runner import BrokerProcess, wait_until
from annal.zk.batched import BatchedZk
from annal.zk.client import ZkClient
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from annal.topic_partition import TopicPartition

TOPICS = [f"many-{i}" for i in range(12)]
PARTITIONS = 100  # per topic: 1,200 in all, 800 replicas per broker
SETTINGS = {
    "controlled.shutdown.max.retries": "3",
    "controlled.shutdown.retry.backoff.ms": "200",
    "zookeeper.session.timeout.ms": "6000",
}
ALL = [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)]


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    with ZkClient(zk_connect) as client:
        yield client


def states(zk: ZkClient) -> dict[TopicPartition, tuple[int, tuple[int, ...]]]:
    """Every partition's (leader, isr), read in one batched round."""
    found = BatchedZk(zk).partition_states(ALL)
    return {tp: (s.leader, s.isr) for tp, (s, _) in found.items()}


def all_led_by(zk: ZkClient, live: set[int], full_isr: bool = False) -> bool:
    now = states(zk)
    return len(now) == len(ALL) and all(
        leader in live and (not full_isr or len(isr) == 2) for leader, isr in now.values()
    )


def produce(endpoint: str, round_: int) -> dict[TopicPartition, tuple[int, bytes]]:
    """One acks=all record to every partition; what was acknowledged, at which offset."""
    acked: dict[TopicPartition, tuple[int, bytes]] = {}
    failed: list[str] = []

    def report(err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is not None:
            failed.append(f"{msg.topic()}-{msg.partition()}: {err}")
        else:
            key, record = _record(msg)
            acked[key] = record

    producer = ck.Producer({"bootstrap.servers": endpoint, "acks": "all",
                            "enable.idempotence": True, "linger.ms": 20,
                            "message.timeout.ms": 60000})  # fmt: skip
    for tp in ALL:
        producer.produce(tp.topic, f"{round_}:{tp}".encode(), partition=tp.partition,
                         on_delivery=report)  # fmt: skip
        producer.poll(0)
    assert producer.flush(90) == 0, "records still unacknowledged after 90 s"
    assert not failed, failed[:5]
    return acked


def _record(msg: Any) -> tuple[TopicPartition, tuple[int, bytes]]:
    return TopicPartition(msg.topic(), msg.partition()), (msg.offset(), msg.value())


def read_all(endpoint: str, wanted: int) -> dict[TopicPartition, list[tuple[int, bytes]]]:
    consumer = ck.Consumer({"bootstrap.servers": endpoint, "group.id": "many-check",
                            "enable.auto.commit": False, "fetch.wait.max.ms": 100})  # fmt: skip
    consumer.assign([ck.TopicPartition(tp.topic, tp.partition, 0) for tp in ALL])
    got: dict[TopicPartition, list[tuple[int, bytes]]] = {}
    deadline = time.monotonic() + 90
    count = 0
    try:
        while count < wanted and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                if msg.error() is None:
                    key, record = _record(msg)
                    got.setdefault(key, []).append(record)
                    count += 1
    finally:
        consumer.close()
    return got


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_controlled_shutdown_and_controller_kill_with_1200_partitions(
    zk: ZkClient, broker_factory: Callable[..., BrokerProcess]
) -> None:
    brokers = {i: broker_factory(i, SETTINGS) for i in (1, 2, 3)}
    admin = AdminClient({"bootstrap.servers": brokers[1].kafka_endpoint})
    futures = admin.create_topics(
        [NewTopic(t, PARTITIONS, 2) for t in TOPICS], request_timeout=60, operation_timeout=60
    )
    for future in futures.values():
        future.result(timeout=90)
    wait_until(lambda: all_led_by(zk, set(brokers), full_isr=True), 120, "every ISR full")
    rounds = [produce(brokers[1].kafka_endpoint, 1)]

    # a controlled shutdown of the broker that leads the most partitions
    leaders = [leader for leader, _ in states(zk).values()]
    stopping = max(brokers, key=leaders.count)
    started = time.monotonic()
    assert brokers[stopping].stop(timeout_s=120) == 0
    took = time.monotonic() - started
    log = brokers[stopping].log_path.read_text()
    assert f"controlled shutdown of broker {stopping} complete" in log, log[-3000:]
    live = set(brokers) - {stopping}
    assert all_led_by(zk, live), "a partition was left without a live leader"
    print(f"controlled shutdown of a broker leading {leaders.count(stopping)}: {took:.1f} s")

    brokers[stopping].start()
    wait_until(lambda: all_led_by(zk, set(brokers), full_isr=True), 120, "ISRs full again")
    rounds.append(produce(brokers[1].kafka_endpoint, 2))

    # SIGKILL the controller: every partition is led by a live broker again
    controller = zk.get_controller()
    assert controller in brokers
    started = time.monotonic()
    brokers[controller].kill()
    live = set(brokers) - {controller}
    wait_until(lambda: all_led_by(zk, live), 60, "every partition led after the kill")
    print(f"controller SIGKILL -> every partition led: {time.monotonic() - started:.1f} s")
    survivor = brokers[min(live)].kafka_endpoint
    rounds.append(produce(survivor, 3))

    got = read_all(survivor, wanted=3 * len(ALL))
    for tp in ALL:
        values = dict(got.get(tp, []))
        for round_, acked in enumerate(rounds, 1):
            offset, value = acked[tp]
            assert values.get(offset) == value, f"{tp}: round {round_} record lost at {offset}"
        assert len(values) == 3, f"{tp}: {sorted(values.items())}"
