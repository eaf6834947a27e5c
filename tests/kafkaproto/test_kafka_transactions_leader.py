"""Transactions on real partition leaders (KIP-98), written by hand as a transactional
producer and its coordinator would write them (``txnhelp.py``): read_committed
fetches stop at the last stable offset while a transaction is open and move on
after its COMMIT; an aborted transaction is named in the answer and Kafka's own
clients (confluent-kafka, kafka-python) and annal's consumer skip it; ListOffsets
read_committed answers the LSO; a long poll and a fetch session wake on the
marker, not on records past the LSO; and the markers replicate with the
``.txnindex`` and LSO the followers keep, through a leader change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import kafka
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.consumer.transactions import AbortedTransaction, committed_batches
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import FETCH_KEY, FetchPartition, KafkaConnection, fetch_request
from annal.storage.batch import iter_batches
from annal.storage.records import iter_records
from annal.v1 import annal_pb2 as pb
from metrics_scrape import scrape, value
from txnhelp import (
    WRITE_TXN_MARKERS,
    TxnProducer,
    fetch,
    kafka_produce,
    latest,
    leader_of,
    plain_batch,
)

pytestmark = pytest.mark.timeout(240)

PURGATORY = "annal_server_delayedoperationpurgatory_purgatorysize"


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i) for i in (1, 2, 3)]


def new_topic(brokers: list[BrokerProcess], name: str) -> BrokerProcess:
    """A topic of one partition on every broker; its leader."""
    with AdminClient(brokers[0].endpoint) as admin:
        admin.create_topic(name, assignment={0: [b.broker_id for b in brokers]})
    return leader_of(brokers, name)


def values_of(records: bytes) -> list[bytes | None]:
    """The data records (control records left out) of fetched batches."""
    return [r.value for r in iter_records(committed_batches(records, None))]


def committed_values(answer: pb.PartitionFetchResponse) -> list[bytes | None]:
    """The records a read_committed consumer hands out of a fetch answer."""
    aborted = [
        AbortedTransaction(t.producer_id, t.first_offset) for t in answer.aborted_transactions
    ]
    return [r.value for r in iter_records(committed_batches(answer.records, aborted))]


def confluent_values(brokers: list[BrokerProcess], topic: str, isolation: str) -> list[bytes]:
    consumer = ck.Consumer({
        "bootstrap.servers": ",".join(b.kafka_endpoint for b in brokers),
        "group.id": f"{topic}-{isolation}", "isolation.level": isolation,
        "enable.auto.commit": False, "enable.partition.eof": True,
    })  # fmt: skip
    got: list[bytes] = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == ck.KafkaError._PARTITION_EOF:
                return got
            assert error is None, error
            got.append(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"confluent-kafka never reached the end of {topic}: {got}")


def kafka_python_values(
    brokers: list[BrokerProcess], topic: str, isolation: str, count: int
) -> tuple[list[bytes], int]:
    """``count`` values as kafka-python reads them, and its end offset."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=",".join(b.kafka_endpoint for b in brokers),
        isolation_level=isolation,
        enable_auto_commit=False,
    )
    tp = kafka.TopicPartition(topic, 0)
    got: list[bytes] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                got.extend(m.value for m in messages)
        return got, consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def test_read_committed_stops_at_the_lso_and_skips_aborted_transactions(
    cluster: list[BrokerProcess],
) -> None:
    topic = "txn-read"
    leader = new_topic(cluster, topic)
    assert kafka_produce(leader, topic, plain_batch(b"p0")).error_code == 0  # 0
    a = TxnProducer(cluster, topic, "tx-a")
    b = TxnProducer(cluster, topic, "tx-b")
    assert a.send(b"a0", b"a1") == 1  # 1-2
    assert b.send(b"b0") == 3  # 3

    # open transactions: read_committed stops at the first of them
    open_now = fetch(leader, topic)
    assert (values_of(open_now.records), open_now.last_stable_offset) == ([b"p0"], 1)
    assert open_now.high_watermark == 4 and list(open_now.aborted_transactions) == []
    uncommitted = fetch(leader, topic, isolation=0)
    assert values_of(uncommitted.records) == [b"p0", b"a0", b"a1", b"b0"]
    assert uncommitted.last_stable_offset == 1
    assert (latest(leader, topic), latest(leader, topic, isolation=0)) == (1, 4)
    with SimpleConsumer(leader.endpoint, isolation_level="read_committed") as consumer:
        assert [r.value for r in consumer.fetch(topic, 0, 0).records] == [b"p0"]
        assert consumer.offsets_before(topic, 0, -1) == 1

    b.end(commit=False)  # 4: ABORT of b
    # a's COMMIT through Kafka's WriteTxnMarkers (API 27) on the Kafka listener
    connection = KafkaConnection(leader.kafka_endpoint, 40)
    try:
        answer = connection.exchange(WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": a.pid, "producer_epoch": 0, "transaction_result": True,
            "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": 0,
        }]})  # fmt: skip
    finally:
        connection.close()
    (result,) = answer.markers
    assert result.producer_id == a.pid
    assert [(t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions])
            for t in result.topics] == [(topic, [(0, 0)])]  # fmt: skip
    assert kafka_produce(leader, topic, plain_batch(b"p6")).error_code == 0  # 6 (5: COMMIT)

    done = fetch(leader, topic)
    assert done.last_stable_offset == done.high_watermark == 7
    assert [(t.producer_id, t.first_offset) for t in done.aborted_transactions] == [(b.pid, 3)]
    assert [h.base_offset for h in iter_batches(done.records)] == [0, 1, 3, 4, 5, 6]
    assert latest(leader, topic) == 7
    assert list(fetch(leader, topic, isolation=0).aborted_transactions) == []

    committed = [b"p0", b"a0", b"a1", b"p6"]
    assert confluent_values(cluster, topic, "read_committed") == committed
    assert confluent_values(cluster, topic, "read_uncommitted") == [
        b"p0", b"a0", b"a1", b"b0", b"p6",
    ]  # fmt: skip
    assert kafka_python_values(cluster, topic, "read_committed", 4) == (committed, 7)
    with SimpleConsumer(leader.endpoint, isolation_level="read_committed") as consumer:
        assert [r.value for r in consumer.iterate(topic, 0, 0)] == committed
    with SimpleConsumer(leader.endpoint) as consumer:  # no control record either way
        assert [r.value for r in consumer.iterate(topic, 0, 0)] == [
            b"p0", b"a0", b"a1", b"b0", b"p6",
        ]  # fmt: skip

    # Kafka's Fetch: the LSO and, for read_committed only, the aborted transactions
    raw = KafkaConnection(leader.kafka_endpoint, 30)
    try:
        for isolation, expected in ((1, [(b.pid, 3)]), (0, None)):
            values = fetch_request(-1, 0, 1, 1 << 20, {topic: [FetchPartition(0, 0, 1 << 20)]})
            values["isolation_level"] = isolation
            (part,) = raw.exchange(FETCH_KEY, 11, values).responses[0].partitions
            aborted = part.aborted_transactions
            found = None if aborted is None else [(a.producer_id, a.first_offset) for a in aborted]
            assert (part.last_stable_offset, found) == (7, expected)
    finally:
        raw.close()


def purgatory_size(broker: BrokerProcess) -> float:
    return value(scrape(broker), PURGATORY, delayedoperation="fetch")


def test_a_long_poll_and_a_fetch_session_wake_on_the_commit(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """One broker: no follower waits in its fetch purgatory, only these polls."""
    leader = broker_factory(1, settings={"metrics.port": "0"})
    topic = "txn-poll"
    new_topic([leader], topic)
    producer = TxnProducer([leader], topic, "tx-poll")
    assert producer.send(b"t0") == 0
    before = purgatory_size(leader)

    polled: list[Any] = []
    poll = threading.Thread(
        target=lambda: polled.append(fetch(leader, topic, max_wait_ms=30_000, min_bytes=1))
    )
    poll.start()
    wait_until(lambda: purgatory_size(leader) > before, 30, "the read_committed poll waiting")
    # records past the LSO do not answer it: it still waits once they are replicated
    assert kafka_produce(leader, topic, plain_batch(b"p1" * 100)).error_code == 0
    assert purgatory_size(leader) > before and not polled
    producer.end(commit=True)
    poll.join(30)
    assert polled, "the poll was not answered"
    assert values_of(polled[0].records) == [b"t0", b"p1" * 100]
    assert polled[0].last_stable_offset == 3

    # a Kafka fetch session (read_committed): a new transaction holds the LSO at 3;
    # the incremental long poll is answered the partition when the COMMIT moves it
    assert producer.send(b"t3") == 3
    raw = KafkaConnection(leader.kafka_endpoint, 40)
    try:

        def session_fetch(session_id: int, epoch: int, offsets: dict[int, int], wait: int) -> Any:
            partitions = [FetchPartition(p, o, 1 << 20) for p, o in offsets.items()]
            values = fetch_request(
                -1, wait, 1, 1 << 20, {topic: partitions} if partitions else {}, session_id, epoch
            )
            values["isolation_level"] = 1
            return raw.exchange(FETCH_KEY, 11, values)

        full = session_fetch(0, 0, {0: 3}, 0)
        session_id = int(full.session_id)
        (part,) = full.responses[0].partitions
        assert session_id != 0 and (part.last_stable_offset, part.records or b"") == (3, b"")
        answers: list[Any] = []
        waiting = threading.Thread(
            target=lambda: answers.append(session_fetch(session_id, 1, {}, 30_000))
        )
        waiting.start()
        wait_until(lambda: purgatory_size(leader) > before, 30, "the incremental poll waiting")
        producer.end(commit=True)
        waiting.join(30)
        assert answers, "the incremental fetch was not answered"
        (moved,) = answers[0].responses[0].partitions
        assert moved.last_stable_offset == moved.high_watermark == 5
        assert values_of(moved.records or b"") == [b"t3"]
    finally:
        raw.close()


def txn_indexes(broker: BrokerProcess, topic: str) -> dict[str, bytes]:
    directory = Path(broker.log_dir) / f"{topic}-0"
    return {
        p.name: p.read_bytes() for p in sorted(directory.glob("*.txnindex")) if p.stat().st_size
    }


@pytest.mark.timeout(300)
def test_markers_replicate_with_the_txnindex_and_the_lso_through_a_leader_change(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = [broker_factory(i) for i in (1, 2, 3)]
    topic = "txn-replicated"
    leader = new_topic(brokers, topic)
    a, b, c = (TxnProducer(brokers, topic, f"tx-{n}") for n in "abc")
    assert kafka_produce(leader, topic, plain_batch(b"p0")).error_code == 0  # 0
    assert a.send(b"a1") == 1
    assert b.send(b"b2") == 2
    a.end(commit=False)  # 3
    b.end(commit=True)  # 4
    assert c.send(b"c5") == 5  # open
    assert latest(leader, topic) == 5
    expected = txn_indexes(leader, topic)
    assert expected, "the leader indexed no aborted transaction"
    followers = [x for x in brokers if x is not leader]
    wait_until(
        lambda: all(txn_indexes(f, topic) == expected for f in followers),
        60,
        "the followers' .txnindex equal to the leader's",
    )

    leader.kill()
    new_leader = leader_of(brokers, topic)
    assert new_leader is not leader
    wait_until(
        lambda: (latest(new_leader, topic), latest(new_leader, topic, isolation=0)) == (5, 6),
        60,
        "the new leader's LSO at 5, its high watermark at 6",
    )
    after = fetch(new_leader, topic)
    assert committed_values(after) == [b"p0", b"b2"]
    assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(a.pid, 1)]
    assert after.last_stable_offset == 5 and after.high_watermark == 6
    c.end(commit=True)  # 6, on the new leader
    wait_until(lambda: latest(new_leader, topic) == 7, 60, "the LSO past c's COMMIT")
    assert committed_values(fetch(new_leader, topic)) == [b"p0", b"b2", b"c5"]
    assert txn_indexes(new_leader, topic) == expected
    assert values_of(fetch(new_leader, topic, isolation=0).records) == [b"p0", b"a1", b"b2", b"c5"]
