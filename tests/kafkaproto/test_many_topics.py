"""Creating many topics at once answers within the client's timeout: one
CreateTopics naming 300 topics, and 200 CreateTopics requests in flight
together (confluent-kafka's admin client, three real brokers); every topic
ends up with a leader for every partition."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from annal.deploy.runner import BrokerProcess
from confluent_kafka import admin as ck_admin

TIMEOUT_S = 30.0  # the client's request and operation timeout


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i) for i in (1, 2, 3)]


def led(admin: ck_admin.AdminClient, topics: list[str], partitions: int) -> bool:
    found = admin.list_topics(timeout=TIMEOUT_S).topics
    return all(
        t in found and len(found[t].partitions) == partitions
        and all(p.leader >= 0 for p in found[t].partitions.values())
        for t in topics
    )  # fmt: skip


@pytest.mark.timeout(240)
def test_one_create_topics_request_with_300_topics(cluster: list[BrokerProcess]) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": cluster[0].kafka_endpoint})
    topics = [f"bulk-{i}" for i in range(300)]
    started = time.monotonic()
    futures = admin.create_topics(
        [ck_admin.NewTopic(t, 2, 2) for t in topics],
        request_timeout=TIMEOUT_S,
        operation_timeout=TIMEOUT_S,
    )
    for topic, future in futures.items():
        assert future.result(timeout=TIMEOUT_S) is None, topic
    took = time.monotonic() - started
    assert took < TIMEOUT_S
    assert led(admin, topics, 2)
    print(f"300 topics (600 partitions) in one CreateTopics: {took:.1f} s")


@pytest.mark.timeout(240)
def test_200_create_topics_requests_in_flight_together(cluster: list[BrokerProcess]) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": ",".join(b.kafka_endpoint for b in cluster)})
    topics = [f"concurrent-{i}" for i in range(200)]
    started = time.monotonic()
    futures = [
        admin.create_topics([ck_admin.NewTopic(t, 3, 2)], request_timeout=TIMEOUT_S,
                            operation_timeout=TIMEOUT_S)[t]
        for t in topics
    ]  # fmt: skip
    for topic, future in zip(topics, futures, strict=True):
        assert future.result(timeout=TIMEOUT_S) is None, topic
    took = time.monotonic() - started
    assert took < TIMEOUT_S
    assert led(admin, topics, 3)
    print(f"200 concurrent CreateTopics (600 partitions): {took:.1f} s")
