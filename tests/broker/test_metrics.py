"""Each broker's Prometheus metrics (``metrics.port``), scraped from real brokers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from environment import require_module
from metrics_scrape import scrape, value

FAST_ISR = {"replica.lag.time.max.ms": "1500", "zookeeper.session.timeout.ms": "6000"}


def total(brokers: list[BrokerProcess], name: str) -> float:
    """``name`` summed over the brokers; -1 while one of them cannot be scraped."""
    try:
        return sum(value(scrape(b), name) for b in brokers)
    except OSError:
        return -1


@pytest.mark.timeout(240)
def test_metrics_follow_a_follower_down_and_back(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = [
        broker_factory(i, settings={**FAST_ISR, "metrics.port": "0"})
        for i in (1, 2, 3)
    ]
    with AdminClient(brokers[0].endpoint) as admin:
        admin.create_topic("watched", 3, 3)
        wait_until(
            lambda: all(
                p.leader >= 0 and len(p.isr) == 3
                for p in admin.describe_topics(["watched"])[0].partitions
            ),
            30,
            "every partition led, ISR complete",
        )
    with Producer(brokers[0].endpoint, acks=-1) as producer:
        for i in range(30):
            producer.send("watched", value=b"x" * 100, partition=i % 3)
        producer.flush()

    samples = [scrape(b) for b in brokers]
    assert (
        sum(value(s, "annal_controller_kafkacontroller_activecontrollercount") for s in samples)
        == 1
    )
    assert sum(value(s, "annal_server_replicamanager_leadercount") for s in samples) == 3
    assert all(value(s, "annal_server_replicamanager_partitioncount") == 3 for s in samples)
    assert (
        sum(value(s, "annal_server_replicamanager_underreplicatedpartitions") for s in samples) == 0
    )
    assert (
        sum(
            value(s, "annal_server_brokertopicmetrics_messagesin_total", topic="watched")
            for s in samples
        )
        == 30
    )
    assert (
        sum(
            value(s, "annal_server_brokertopicmetrics_bytesin_total", topic="watched")
            for s in samples
        )
        > 3000
    )
    assert (
        sum(
            value(s, "annal_network_requestmetrics_requests_total", request="Produce")
            for s in samples
        )
        >= 1
    )
    assert all(
        value(s, "annal_server_sessionexpirelistener_sessionstate", state="CONNECTED") == 1
        for s in samples
    )
    for s in samples:
        ends = [
            value(s, "annal_log_log_logendoffset", topic="watched", partition=str(p))
            for p in range(3)
        ]
        assert ends == [10, 10, 10]
        assert ("annal_server_delayedoperationpurgatory_purgatorysize",
                (("delayedoperation", "fetch"),)) in s  # fmt: skip
    # every broker follows 2 of the 3 partitions, caught up: a lag of 0 for each
    lags = [
        behind for s in samples for (name, _), behind in s.items()
        if name == "annal_server_fetcherlagmetrics_consumerlag"
    ]  # fmt: skip
    assert lags == [0] * 6

    # a follower dies: its partitions' leaders shrink their ISRs
    victim = brokers[2]
    victim.kill()
    live = brokers[:2]
    wait_until(
        lambda: total(live, "annal_server_replicamanager_underreplicatedpartitions") == 3,
        60,
        "every partition under-replicated",
    )
    assert total(live, "annal_server_replicamanager_isrshrinks_total") >= 1

    # it comes back and catches up: the ISRs grow again
    victim.start()
    wait_until(
        lambda: (
            total(brokers, "annal_server_replicamanager_underreplicatedpartitions") == 0
            and total(brokers, "annal_server_replicamanager_partitioncount") == 9
        ),
        90,
        "no partition under-replicated",
        poll_s=0.5,
    )
    assert total(brokers, "annal_server_replicamanager_isrexpands_total") >= 1


def test_metrics_are_off_unless_asked_for(broker: BrokerProcess) -> None:
    assert "metrics.port" not in broker.settings
    assert "metrics on http" not in broker.log_path.read_text()


@pytest.mark.timeout(120)
def test_kafka_listener_requests_are_counted_by_api(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    kafka = require_module("kafka")
    broker = broker_factory(1, settings={"metrics.port": "0"})
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("spoken", 1)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.kafka_endpoint, acks=1)
    try:
        producer.send("spoken", b"v").get(timeout=30)
    finally:
        producer.close()
    samples = scrape(broker)
    for api in ("ApiVersions", "Metadata", "Produce"):
        assert value(samples, "annal_network_requestmetrics_requests_total", request=api) >= 1
    # Kafka's RequestQueueTimeMs: each Kafka request's wait before its handler
    queued = "annal_network_requestmetrics_requestqueuetimems_count"
    assert value(samples, queued, request="Produce") >= 1
    assert value(samples, queued, request="Metadata") >= 1
    assert value(samples, "annal_server_brokertopicmetrics_messagesin_total", topic="spoken") == 1
    # the process and the Python runtime, as every Prometheus target has them
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "python_gc_collections_total", generation="0") >= 0
    assert any(name == "python_info" for name, _ in samples)
