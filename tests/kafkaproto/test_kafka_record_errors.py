"""Per-record produce errors (KIP-467) on a real broker: a batch refused for what
some of its records hold is still refused whole, and Produce v8+ names those
records (``record_errors``: index in the batch and why) beside the partition's
``error_message``.

* librdkafka (confluent-kafka) as its test 0011 checks it: 100 records, every
  tenth without a key, to a compacted topic; the 10 keyless ones are reported
  INVALID_RECORD and the 90 others ``_INVALID_DIFFERENT_RECORD``, which
  librdkafka derives from ``record_errors``;
* the answers themselves, decoded by kafka-python's protocol classes: v8
  carries ``record_errors``, v7 the plain code, and timestamps out of range are
  INVALID_TIMESTAMP with their records named; kafka-python's producer fails
  each record of such a batch with its own error;
* annal's gRPC Produce answer carries the same records and message.

Nothing of a refused batch is stored.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import grpc
import kafka
import kafka.errors
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest

from annal import errors

pytestmark = pytest.mark.timeout(180)

INVALID_RECORD = errors.INVALID_RECORD.number
INVALID_TIMESTAMP = errors.INVALID_TIMESTAMP.number
# librdkafka's local code for the good records of a batch refused for others
INVALID_DIFFERENT_RECORD = getattr(ck.KafkaError, "_INVALID_DIFFERENT_RECORD", -138)
HOUR = 3_600_000
KEYLESS = list(range(0, 100, 10))
_topics = itertools.count()


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory(1)


def new_topic(broker: BrokerProcess, **config: str) -> str:
    name = f"rec{next(_topics)}"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(name, 1, 1, config=config)
    return name


def every_tenth_keyless(timestamp: int) -> bytes:
    return encode_batch(
        [
            Record(i, timestamp, None if i in KEYLESS else b"k%d" % i, b"v%d" % i)
            for i in range(100)
        ]
    )


def kafka_python_produce(broker: BrokerProcess, version: int, topic: str, records: bytes) -> Any:
    """One Produce of ``version``, encoded and its answer decoded by kafka-python's
    protocol classes; the answer's only partition."""
    request = ProduceRequest(
        version=version,
        transactional_id=None,
        acks=1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
                ],
            )
        ],
    )
    protocol = KafkaProtocol(client_id="record-errors")
    protocol.send_request(request)
    host, _, port = broker.kafka_endpoint.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(protocol.send_bytes())
        answers: list[Any] = []
        while not answers:
            data = sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            answers = protocol.receive_bytes(data)
    ((_, answer),) = answers
    ((partition,),) = [t.partition_responses for t in answer.responses]
    return partition


def now_ms() -> int:
    return int(time.time() * 1000)


def stored(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """The partition's (low, high) watermarks, as librdkafka asks them."""
    consumer = ck.Consumer({"bootstrap.servers": broker.kafka_endpoint, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=30)
        return int(low), int(high)
    finally:
        consumer.close()


def test_librdkafka_0011_one_batch_with_keyless_records(broker: BrokerProcess) -> None:
    """librdkafka's test 0011 (test_message_single_partition_record_fail, one batch)."""
    topic = new_topic(broker, **{"cleanup.policy": "compact"})
    producer = ck.Producer(
        {"bootstrap.servers": broker.kafka_endpoint, "linger.ms": 500,
         "batch.num.messages": 1000, "acks": 1}
    )  # fmt: skip
    reports: dict[int, int] = {}
    lock = threading.Lock()

    def delivered(i: int) -> Callable[[ck.KafkaError | None, ck.Message], None]:
        def report(err: ck.KafkaError | None, _message: ck.Message) -> None:
            with lock:
                reports[i] = 0 if err is None else err.code()

        return report

    for i in range(100):
        key = None if i in KEYLESS else f"k{i}".encode()
        producer.produce(topic, value=f"test message #{i}".encode(), key=key, partition=0,
                         on_delivery=delivered(i))  # fmt: skip
    assert producer.flush(60) == 0
    assert len(reports) == 100
    refused = {i for i, code in reports.items() if code == INVALID_RECORD}
    others = {i for i, code in reports.items() if code == INVALID_DIFFERENT_RECORD}
    assert sorted(refused) == KEYLESS, reports
    assert len(others) == 90
    assert stored(broker, topic) == (0, 0)
    # the same producer's keyed records then go in from offset 0
    for i in range(5):
        producer.produce(topic, value=b"v", key=b"k%d" % i, partition=0)
    assert producer.flush(60) == 0
    assert stored(broker, topic) == (0, 5)


def test_produce_v8_names_the_records_and_v7_answers_the_code(broker: BrokerProcess) -> None:
    topic = new_topic(broker, **{"cleanup.policy": "compact"})
    batch = every_tenth_keyless(now_ms())
    wait_until(
        lambda: kafka_python_produce(broker, 8, topic, batch).error_code == INVALID_RECORD,
        30, f"{topic} refusing keyless records",
    )  # fmt: skip
    answer = kafka_python_produce(broker, 8, topic, batch)
    assert answer.base_offset == -1
    assert [e.batch_index for e in answer.record_errors] == KEYLESS
    assert all("null key" in e.batch_index_error_message for e in answer.record_errors)
    assert answer.error_message.startswith("10 of the batch's 100 records refused")
    assert "record 0: null key" in answer.error_message
    for version in (9,):  # flexible versions carry them too
        again = kafka_python_produce(broker, version, topic, batch)
        assert [e.batch_index for e in again.record_errors] == KEYLESS
    old = kafka_python_produce(broker, 7, topic, batch)
    assert old.error_code == INVALID_RECORD
    assert not hasattr(old, "record_errors") or not old.record_errors
    assert stored(broker, topic) == (0, 0)


def test_kafka_python_producer_fails_each_record_with_its_own_error(
    broker: BrokerProcess,
) -> None:
    """kafka-python's producer reads ``record_errors`` too: a keyless record fails
    with INVALID_RECORD and its own message, the others of its batch with the
    generic error; a keyed record then goes in at offset 0.  (Its idempotent
    mode takes INVALID_RECORD as fatal for the producer: not used here.)"""
    topic = new_topic(broker, **{"cleanup.policy": "compact"})
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.kafka_endpoint, linger_ms=500, enable_idempotence=False
    )
    try:
        futures = [
            producer.send(topic, key=None if i % 3 == 0 else b"k%d" % i, value=b"v", partition=0)
            for i in range(10)
        ]
        producer.flush(30)
        outcomes: dict[int, BaseException] = {}
        for i, future in enumerate(futures):
            with pytest.raises(kafka.errors.KafkaError) as info:
                future.get(30)
            outcomes[i] = info.value
        keyless = [i for i, e in outcomes.items() if isinstance(e, kafka.errors.InvalidRecordError)]
        assert keyless == [0, 3, 6, 9]
        assert "null key" in str(outcomes[3])
        assert "null key" not in str(outcomes[4])
        assert producer.send(topic, key=b"k", value=b"v", partition=0).get(30).offset == 0
    finally:
        producer.close(10)


def test_timestamps_out_of_range_are_named_with_invalid_timestamp(broker: BrokerProcess) -> None:
    topic = new_topic(broker, **{"message.timestamp.difference.max.ms": str(HOUR)})
    now = now_ms()
    stamps = [now, now - 3 * HOUR, now, now + 3 * HOUR]
    batch = encode_batch([Record(i, t, b"k", b"v") for i, t in enumerate(stamps)])
    wait_until(
        lambda: kafka_python_produce(broker, 8, topic, batch).error_code == INVALID_TIMESTAMP,
        30, f"{topic} refusing old timestamps",
    )  # fmt: skip
    answer = kafka_python_produce(broker, 8, topic, batch)
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    assert "out of range" in answer.record_errors[0].batch_index_error_message
    assert stored(broker, topic) == (0, 0)


def test_the_grpc_answer_carries_the_records(broker: BrokerProcess) -> None:
    topic = new_topic(broker, **{"cleanup.policy": "compact"})
    request = pb.ProduceRequest(acks=1, timeout_ms=10_000)
    request.topics.add(name=topic).partitions.add(
        partition=0, records=every_tenth_keyless(now_ms())
    )
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)

        def answer() -> pb.PartitionProduceResponse:
            return stub.Produce(request, timeout=30).topics[0].partitions[0]

        wait_until(lambda: answer().error == pb.INVALID_RECORD, 30, f"{topic} refusing")
        refused = answer()
    assert [e.batch_index for e in refused.record_errors] == KEYLESS
    assert all("null key" in e.message for e in refused.record_errors)
    assert "record 0: null key" in refused.error_message
    assert "and 7 more" in refused.error_message
