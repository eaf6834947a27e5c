"""Fetch sessions (KIP-227) on real brokers: a Kafka consumer that asks for sessions
(kafka-python) reads many partitions through them, a raw incremental Fetch is answered
only the partitions that changed, and followers replicate in sessions, through a leader
restart too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
import kafka
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import FETCH_KEY, FetchPartition, KafkaConnection, fetch_request
from annal.producer.producer import Producer
from annal.storage.files import TopicPartition
from metrics_scrape import scrape, value

from annal import errors

pytestmark = pytest.mark.timeout(240)

SESSIONS = "annal_server_fetchsessioncache_numincrementalfetchsessions"
CACHED = "annal_server_fetchsessioncache_numincrementalfetchpartitionscached"
LAG_MS = 3000


def metrics_settings(**more: str) -> dict[str, str]:
    return {"metrics.port": "0", **more}


def gauge(broker: BrokerProcess, name: str, **labels: str) -> float:
    return value(scrape(broker), name, **labels)


def produce(endpoint: str, topic: str, values: dict[int, list[bytes]]) -> None:
    with Producer(endpoint, linger_ms=5, acks="all") as producer:
        for partition, batch in values.items():
            for value in batch:
                producer.send(topic, value=value, partition=partition)
        producer.flush(60)


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i, settings=metrics_settings()) for i in (1, 2, 3)]


# -- (a) a Kafka consumer in sessions --------------------------------------------------


def test_kafka_python_reads_many_partitions_in_fetch_sessions(cluster: list[BrokerProcess]) -> None:
    """kafka-python asks every broker for a session (librdkafka does not: it sends
    session id 0 and epoch -1, a full fetch each time, which is read here too).  One
    replica per partition, so the only sessions are the consumer's: one per broker,
    holding all 60 partitions together."""
    topic, count = "wide", 60
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(topic, count, 1)
    sent = {p: [b"%d-%d" % (p, i) for i in range(10)] for p in range(count)}
    produce(cluster[0].endpoint, topic, sent)
    bootstrap = ",".join(b.kafka_endpoint for b in cluster)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=200)
    seen: dict[int, list[bytes]] = {p: [] for p in range(count)}

    def read(total: int) -> None:
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < total and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                seen[tp.partition].extend(m.value for m in messages)

    try:
        partitions = [kafka.TopicPartition(topic, p) for p in range(count)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        read(10 * count)
        assert seen == sent
        assert sum(gauge(b, SESSIONS) for b in cluster) == 3
        assert sum(gauge(b, CACHED) for b in cluster) == count
        more = {p: [b"%d-more" % p] for p in range(0, count, 7)}  # while it long-polls
        produce(cluster[0].endpoint, topic, more)
        read(10 * count + len(more))
        assert seen == {p: sent[p] + more.get(p, []) for p in range(count)}
    finally:
        consumer.close()
    for broker in cluster:  # no fetch of the consumer's was refused its session
        samples = scrape(broker)
        for code in ("FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH"):
            labels = (("error", code), ("request", "Fetch"))
            assert samples.get(("annal_network_requestmetrics_errors_total", labels), 0) == 0

    librdkafka = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                              "enable.auto.commit": False})  # fmt: skip
    got: dict[int, list[bytes]] = {p: [] for p in range(count)}
    try:
        librdkafka.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(count)])
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < sum(map(len, seen.values())):
            assert time.monotonic() < deadline, "confluent-kafka read everything"
            message = librdkafka.poll(0.5)
            if message is not None and message.error() is None:
                got[message.partition()].append(message.value())
    finally:
        librdkafka.close()
    assert got == seen


# -- (b) raw incremental fetches -------------------------------------------------------


class RawFetch:
    """Fetch requests (v11, or v12 with flexible fields) on one connection."""

    def __init__(self, broker: BrokerProcess, topic: str) -> None:
        self.topic = topic
        self.connection = KafkaConnection(broker.kafka_endpoint, 30, "raw-fetch")

    def __call__(
        self,
        session_id: int,
        epoch: int,
        offsets: dict[int, int] | None = None,
        forgotten: tuple[int, ...] = (),
        wait_ms: int = 0,
        version: int = 11,
    ) -> Any:
        partitions = [FetchPartition(p, o, 1 << 20) for p, o in (offsets or {}).items()]
        values = fetch_request(
            -1, wait_ms, 1, 10 << 20, {self.topic: partitions} if partitions else {},
            session_id, epoch, {self.topic: list(forgotten)} if forgotten else {},
        )  # fmt: skip
        return self.connection.exchange(FETCH_KEY, version, values)


def answered(body: Any) -> dict[int, tuple[int, int, int]]:
    """Partition → (high watermark, log start offset, bytes of records) of an answer."""
    return {
        p.partition_index: (p.high_watermark, p.log_start_offset, len(p.records or b""))
        for t in body.responses
        for p in t.partitions
    }


@pytest.fixture
def raw(broker_factory: Callable[..., BrokerProcess]) -> Iterator[tuple[BrokerProcess, RawFetch]]:
    broker = broker_factory(1)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("raw", 8, 1)
    produce(broker.endpoint, "raw", {p: [b"first"] for p in range(8)})
    fetch = RawFetch(broker, "raw")
    yield broker, fetch
    fetch.connection.close()


def test_a_raw_incremental_fetch_is_answered_only_what_changed(
    raw: tuple[BrokerProcess, RawFetch],
) -> None:
    broker, fetch = raw
    full = fetch(0, 0, dict.fromkeys(range(8), 0), version=12)  # flexible
    session_id = int(full.session_id)
    assert full.error_code.value == 0 and session_id != 0
    assert set(answered(full)) == set(range(8))
    assert all(hw == 1 and size > 0 for hw, _, size in answered(full).values())

    # every partition moved past its record: nothing new anywhere
    idle = fetch(session_id, 1, dict.fromkeys(range(8), 1), version=12)
    assert (idle.error_code.value, int(idle.session_id), answered(idle)) == (0, session_id, {})

    # a long poll naming nothing is answered when partition 3 gets a record
    polled: list[Any] = []
    poll = threading.Thread(target=lambda: polled.append(fetch(session_id, 2, wait_ms=20_000)))
    started = time.monotonic()
    poll.start()
    time.sleep(0.5)
    produce(broker.endpoint, "raw", {3: [b"second"]})
    poll.join(15)
    assert polled and time.monotonic() - started < 10
    (only,) = answered(polled[0]).items()
    assert only[0] == 3 and only[1][0] == 2 and only[1][2] > 0

    # partition 3 moves on, 5 is forgotten; 5 and 6 get records: only 6 is answered
    assert answered(fetch(session_id, 3, {3: 2}, forgotten=(5,))) == {}
    produce(broker.endpoint, "raw", {5: [b"third"], 6: [b"third"]})
    assert list(answered(fetch(session_id, 4))) == [6]
    assert list(answered(fetch(session_id, 5))) == [6]  # not moved past: sent again
    assert answered(fetch(session_id, 6, {6: 2})) == {}

    # a moved log start is news without records
    with AdminClient(broker.endpoint) as admin:
        admin.delete_records({TopicPartition("raw", 0): 1})
    assert answered(fetch(session_id, 7)) == {0: (1, 1, 0)}

    # refusals: the wrong epoch, an unknown session; neither changes the session
    wrong = fetch(session_id, 99)
    assert (wrong.error_code.value, int(wrong.session_id)) == (
        errors.INVALID_FETCH_SESSION_EPOCH.number, 0
    )  # fmt: skip
    assert answered(wrong) == {}
    unknown = fetch(session_id + 1, 8)
    assert unknown.error_code.value == errors.FETCH_SESSION_ID_NOT_FOUND.number
    assert answered(fetch(session_id, 8)) == {}

    # epoch -1 closes the session: a full answer without a session, then it is gone
    closing = fetch(session_id, -1, {1: 1, 2: 0})
    assert (int(closing.session_id), set(answered(closing))) == (0, {1, 2})
    gone = fetch(session_id, 9)
    assert gone.error_code.value == errors.FETCH_SESSION_ID_NOT_FOUND.number


# -- (c) replication in sessions -------------------------------------------------------


def log_ends(broker: BrokerProcess, topic: str) -> dict[int, float]:
    return {
        int(dict(labels)["partition"]): value
        for (name, labels), value in scrape(broker).items()
        if name == "annal_log_log_logendoffset" and dict(labels).get("topic") == topic
    }


def replicated(brokers: list[BrokerProcess], topic: str, count: int) -> bool:
    """Every ISR full and every replica's log as long as its leader's."""
    try:
        with AdminClient(brokers[0].endpoint) as admin:
            partitions = admin.describe_topics([topic])[0].partitions
        ends = [log_ends(b, topic) for b in brokers]
    except Exception:  # a broker still starting
        return False
    return (
        len(partitions) == count
        and all(len(p.isr) == len(brokers) for p in partitions)
        and all(len(e) == count for e in ends)
        and ends[0] == ends[1] == ends[2]
    )


def led_by(brokers: list[BrokerProcess], topic: str) -> dict[int, int]:
    with AdminClient(brokers[0].endpoint) as admin:
        partitions = admin.describe_topics([topic])[0].partitions
    return {b.broker_id: sum(1 for p in partitions if p.leader == b.broker_id) for b in brokers}


def test_followers_replicate_in_sessions_and_open_new_ones_after_a_leader_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    settings = {"replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "6000"}
    brokers = [broker_factory(i, settings=metrics_settings(**settings)) for i in (1, 2, 3)]
    topic, count = "copied", 30
    with AdminClient(brokers[0].endpoint) as admin:
        admin.create_topic(topic, count, 3)
    produce(brokers[0].endpoint, topic, {p: [b"v%d" % i for i in range(20)] for p in range(count)})
    wait_until(lambda: replicated(brokers, topic, count), 60, "every replica caught up")

    def sessions_of_followers(held_by: list[BrokerProcess]) -> bool:
        """Each broker holds one session per other broker, with the partitions it leads."""
        led = led_by(brokers, topic)
        return all(
            gauge(b, SESSIONS) == 2 and gauge(b, CACHED) == 2 * led[b.broker_id] for b in held_by
        )

    wait_until(lambda: sessions_of_followers(brokers), 30, "the followers' sessions")
    # idle for twice replica.lag.time.max.ms: the followers' sessions keep them in sync
    time.sleep(2 * LAG_MS / 1000 + 0.5)
    assert replicated(brokers, topic, count)
    assert all(gauge(b, "annal_server_replicamanager_isrshrinks_total") == 0 for b in brokers)

    # the leader of a third of the partitions dies and comes back; the followers'
    # sessions with it are gone with it, and new ones are opened by full fetches
    restarted, survivors = brokers[1], [brokers[0], brokers[2]]
    restarted.kill()
    wait_until(lambda: sum(led_by(survivors, topic).values()) == count, 60, "leaders elsewhere")
    produce(brokers[0].endpoint, topic, {p: [b"while-down"] for p in range(count)})
    restarted.start()
    wait_until(lambda: replicated(brokers, topic, count), 90, "the restarted broker caught up")
    with AdminClient(brokers[0].endpoint) as admin:
        admin.elect_preferred_leaders({topic: list(range(count))})
    wait_until(lambda: led_by(brokers, topic)[2] > 0, 30, "the restarted broker leading")
    produce(brokers[0].endpoint, topic, {p: [b"after"] for p in range(count)})
    wait_until(lambda: replicated(brokers, topic, count), 60, "copied from the restarted leader")
    # (the survivors still hold the dead process's sessions, until evicted, as Kafka's do)
    wait_until(lambda: sessions_of_followers([restarted]), 30, "sessions with the restarted leader")
    assert all(v == 22 for v in log_ends(restarted, topic).values())
