"""Fetch from follower (KIP-392) on real brokers in racks r1, r2, r3: a leader with
``replica.selector.class`` sends a consumer to the in-sync replica of its
``client.rack`` (``preferred_read_replica``), which serves it up to its own high
watermark; confluent-kafka reads everything from that follower, and from the
leader when no selector is set.  Fetch v10 from a follower stays refused, and a
consumer's fetch session on a follower is answered as the follower's copy grows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
from annal.broker.replication.replica_selector import RACK_AWARE
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.kafkaproto.client import FETCH_KEY, FetchPartition, KafkaConnection, fetch_request
from annal.producer.producer import Producer
from metrics_scrape import scrape, value

from annal import errors

pytestmark = pytest.mark.timeout(240)

TOPIC = "racked"
COUNT = 200
FOLLOWER_BYTES = "annal_server_brokertopicmetrics_followerbytesout_total"
BYTES_OUT = "annal_server_brokertopicmetrics_bytesout_total"
SENT_ELSEWHERE = "annal_server_brokertopicmetrics_preferredreadreplica_total"


def start_cluster(
    broker_factory: Callable[..., BrokerProcess], selector: str
) -> list[BrokerProcess]:
    """Brokers 1, 2, 3 in racks r1, r2, r3; ``t-0`` of TOPIC on all three, led by 1,
    with COUNT records every replica holds below its high watermark."""
    cluster = [
        broker_factory(i, settings={
            "broker.rack": f"r{i}", "replica.selector.class": selector,
            "metrics.port": "0",
        })
        for i in (1, 2, 3)
    ]  # fmt: skip
    for broker in cluster:  # every broker knows every other one (and its rack)
        wait_until(lambda b=broker: metadata_lists(b.endpoint, [1, 2, 3]), 30, "metadata")
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(TOPIC, assignment={0: [1, 2, 3]})

        def led_by_1_with_all_in_sync() -> bool:
            (partition,) = admin.describe_topics([TOPIC])[0].partitions
            return partition.leader == 1 and sorted(partition.isr) == [1, 2, 3]

        wait_until(led_by_1_with_all_in_sync, 30, "broker 1 leading, every replica in sync")
    with Producer(cluster[0].endpoint, linger_ms=5, acks="all") as producer:
        for i in range(COUNT):
            producer.send(TOPIC, value=b"record-%d" % i, partition=0)
        producer.flush(60)
    for broker in cluster[1:]:  # the followers learned the high watermark
        wait_until(
            lambda b=broker: raw_fetch(b, "r1", COUNT)[:2] == (errors.NONE.number, COUNT),
            30,
            f"broker {broker.broker_id}'s copy readable up to {COUNT}",
        )
    return cluster


def raw_fetch(
    broker: BrokerProcess, rack: str, offset: int, version: int = 11
) -> tuple[int, int, bytes, int]:
    """One sessionless Fetch of ``t-0`` at ``offset``: (error, high watermark,
    records, preferred read replica)."""
    values = fetch_request(-1, 0, 1, 10 << 20, {TOPIC: [FetchPartition(0, offset, 1 << 20)]})
    values["rack_id"] = rack
    connection = KafkaConnection(broker.kafka_endpoint, 30, "raw-fetch")
    try:
        body = connection.exchange(FETCH_KEY, version, values)
    finally:
        connection.close()
    (partition,) = body.responses[0].partitions
    return (
        int(partition.error_code.value),
        int(partition.high_watermark),
        bytes(partition.records or b""),
        int(getattr(partition, "preferred_read_replica", -1)),
    )


def topic_metric(broker: BrokerProcess, name: str) -> float:
    return value(scrape(broker), name, topic=TOPIC)


def consume_all(cluster: list[BrokerProcess], rack: str) -> list[bytes]:
    consumer = ck.Consumer({
        "bootstrap.servers": ",".join(b.kafka_endpoint for b in cluster),
        "group.id": f"in-{rack}", "client.rack": rack, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
    })  # fmt: skip
    got: list[bytes] = []
    try:
        consumer.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while len(got) < COUNT:
            assert time.monotonic() < deadline, f"read {len(got)} of {COUNT} records"
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_a_consumer_reads_from_the_follower_in_its_rack(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = start_cluster(broker_factory, RACK_AWARE)
    leader, follower, other = cluster

    # raw: the leader names the follower of the client's rack and sends no records;
    # the follower serves the records, up to its own high watermark
    error, high_watermark, records, preferred = raw_fetch(leader, "r2", 0)
    assert (error, high_watermark, records, preferred) == (errors.NONE.number, COUNT, b"", 2)
    assert raw_fetch(leader, "r3", 5)[3] == 3
    for rack in ("r1", "", "elsewhere"):  # the leader's own rack, none, no replica there
        error, _, records, preferred = raw_fetch(leader, rack, 0)
        assert error == errors.NONE.number and records and preferred == -1
    error, high_watermark, records, preferred = raw_fetch(follower, "r2", 0)
    assert (error, high_watermark, preferred) == (errors.NONE.number, COUNT, -1) and records
    # past the follower's log end; and Fetch v10 (no client metadata) from a follower
    assert raw_fetch(follower, "r2", COUNT + 1)[0] == errors.OFFSET_OUT_OF_RANGE.number
    assert raw_fetch(follower, "r2", COUNT)[:3] == (errors.NONE.number, COUNT, b"")
    assert raw_fetch(follower, "r2", 0, 10)[0] == errors.NOT_LEADER_OR_FOLLOWER.number
    assert raw_fetch(leader, "r2", 0, 10)[3] == -1  # v10 has no such field: served

    # confluent-kafka in rack r2 reads everything from broker 2
    before = {b.broker_id: topic_metric(b, BYTES_OUT) for b in cluster}
    sent_before = topic_metric(leader, SENT_ELSEWHERE)
    assert consume_all(cluster, "r2") == [b"record-%d" % i for i in range(COUNT)]
    assert topic_metric(leader, SENT_ELSEWHERE) > sent_before  # it was sent to broker 2
    assert topic_metric(leader, BYTES_OUT) == before[1]  # ... and read nothing here
    assert topic_metric(other, BYTES_OUT) == before[3]
    served = topic_metric(follower, FOLLOWER_BYTES)
    assert served > COUNT * len(b"record-000") and topic_metric(follower, BYTES_OUT) > before[2]


def test_without_a_selector_consumers_read_from_the_leader(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cluster = start_cluster(broker_factory, "")
    leader, follower, other = cluster
    error, _, records, preferred = raw_fetch(leader, "r2", 0)
    assert error == errors.NONE.number and records and preferred == -1
    assert consume_all(cluster, "r2") == [b"record-%d" % i for i in range(COUNT)]
    assert topic_metric(leader, BYTES_OUT) > COUNT * len(b"record-000")
    assert topic_metric(leader, SENT_ELSEWHERE) == 0
    for broker in (follower, other):
        assert topic_metric(broker, FOLLOWER_BYTES) == 0


def test_a_consumers_fetch_session_on_a_follower_follows_its_copy(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A fetch session (KIP-227) held by a consumer on a follower: the full fetch
    opens it, an incremental long poll is answered once the follower copied new
    records and learned they are committed (the fetcher wakes it).  On the leader,
    the session's partition is answered with the preferred read replica each time."""
    cluster = start_cluster(broker_factory, RACK_AWARE)
    follower = cluster[1]
    connection = KafkaConnection(follower.kafka_endpoint, 30, "session-on-follower")

    def fetch(session_id: int, epoch: int, offset: int | None, wait_ms: int = 0) -> Any:
        named = {} if offset is None else {TOPIC: [FetchPartition(0, offset, 1 << 20)]}
        values = fetch_request(-1, wait_ms, 1, 10 << 20, named, session_id, epoch)
        values["rack_id"] = "r2"
        return connection.exchange(FETCH_KEY, 11, values)

    try:
        full = fetch(0, 0, 0)
        session_id = int(full.session_id)
        assert full.error_code.value == 0 and session_id != 0
        (answer,) = full.responses[0].partitions
        assert answer.error_code.value == 0 and answer.high_watermark == COUNT and answer.records
        idle = fetch(session_id, 1, COUNT)  # moved past everything: nothing new
        assert idle.error_code.value == 0 and not idle.responses

        polled: list[Any] = []
        poll = threading.Thread(target=lambda: polled.append(fetch(session_id, 2, None, 20_000)))
        started = time.monotonic()
        poll.start()
        time.sleep(0.5)
        with Producer(cluster[0].endpoint, linger_ms=5, acks="all") as producer:
            producer.send(TOPIC, value=b"later", partition=0)
            producer.flush(30)
        poll.join(25)
        assert polled, "the long poll was answered"
        assert time.monotonic() - started < 15
        (news,) = polled[0].responses[0].partitions
        assert news.error_code.value == 0 and news.high_watermark == COUNT + 1
        assert b"later" in bytes(news.records)
    finally:
        connection.close()

    # in a session on the leader the partition is answered the preferred replica on
    # every fetch, at once, as Kafka answers it
    connection = KafkaConnection(cluster[0].kafka_endpoint, 30, "session-on-leader")
    try:
        full = fetch(0, 0, 0)
        session_id = int(full.session_id)
        (answer,) = full.responses[0].partitions
        assert (answer.preferred_read_replica, answer.records or b"") == (2, b"")
        started = time.monotonic()
        again = fetch(session_id, 1, None, 10_000)
        assert time.monotonic() - started < 5
        (answer,) = again.responses[0].partitions
        assert (answer.preferred_read_replica, answer.records or b"") == (2, b"")
    finally:
        connection.close()
