"""Kafka's DescribeProducers v0 (API 61, KIP-664) on a real broker's Kafka listener:
the leader's producers with their epochs, last sequences and timestamps,
coordinator epochs and open transactions' first offsets, grouped by topic in the
order asked; partitions that do not exist and illegal names are refused per
partition (Read on the topic: tests/broker/test_producers_api.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors

pytestmark = pytest.mark.timeout(120)

PRODUCE, DESCRIBE_PRODUCERS = 0, 61
TOPIC = "described"
NOW = int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    broker = module_broker_factory(1)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(TOPIC, 2, 1)

    def led() -> bool:
        with grpc.insecure_channel(broker.endpoint) as channel:
            answer = annal_pb2_grpc.AnnalStub(channel).Metadata(
                pb.MetadataRequest(topics=[TOPIC]), timeout=10
            )
        return [p.leader for t in answer.topics for p in t.partitions] == [1, 1]

    wait_until(led, 60, f"the leaders of {TOPIC}")
    return broker


@pytest.fixture
def kafka(broker: BrokerProcess) -> Iterator[KafkaConnection]:
    connection = KafkaConnection(broker.kafka_endpoint, 30)
    yield connection
    connection.close()


def producer_id(broker: BrokerProcess) -> int:
    with grpc.insecure_channel(broker.endpoint) as channel:
        answer = annal_pb2_grpc.AnnalStub(channel).InitProducerId(
            pb.InitProducerIdRequest(), timeout=15
        )
    return int(answer.producer_id)


def produce(kafka: KafkaConnection, records: bytes, transactional_id: str | None = None) -> None:
    answer = kafka.exchange(PRODUCE, 8, {
        "transactional_id": transactional_id, "acks": -1, "timeout": 10_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    })  # fmt: skip
    assert answer.responses[0].partition_responses[0].error_code == 0


def describe(kafka: KafkaConnection, topics: list[tuple[str, list[int]]]) -> Any:
    return kafka.exchange(DESCRIBE_PRODUCERS, 0, {
        "topics": [{"name": name, "partition_indexes": ps} for name, ps in topics],
    })  # fmt: skip


def test_describe_producers_v0(broker: BrokerProcess, kafka: KafkaConnection) -> None:
    idempotent, transactional = producer_id(broker), producer_id(broker)
    produce(kafka, encode_batch(
        [Record(i, NOW + i, None, b"i") for i in range(3)],
        producer_id=idempotent, producer_epoch=0, base_sequence=0,
    ))  # fmt: skip  # offsets 0-2
    produce(kafka, encode_batch(
        [Record(0, NOW + 10, None, b"t")],
        producer_id=transactional, producer_epoch=2, base_sequence=0, is_transactional=True,
    ), "described-tx")  # fmt: skip  # offset 3, open

    answer = describe(kafka, [(TOPIC, [0, 1, 7]), ("nowhere", [0]), ("bad name!", [0])])
    assert [t.name for t in answer.topics] == [TOPIC, "nowhere", "bad name!"]
    zero, one, seven = answer.topics[0].partitions
    assert (zero.partition_index, zero.error_code, zero.error_message) == (0, 0, None)
    states = sorted(zero.active_producers, key=lambda p: p.producer_id)
    assert [
        (p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp,
         p.coordinator_epoch, p.current_txn_start_offset)
        for p in states
    ] == [
        (idempotent, 0, 2, NOW + 2, -1, -1),
        (transactional, 2, 0, NOW + 10, -1, 3),
    ]  # fmt: skip
    assert (one.partition_index, one.error_code, one.active_producers) == (1, 0, ())
    assert (seven.partition_index, seven.error_code) == (
        7,
        errors.UNKNOWN_TOPIC_OR_PARTITION.number,
    )
    (nowhere,) = answer.topics[1].partitions
    assert nowhere.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION.number
    (bad,) = answer.topics[2].partitions
    assert bad.error_code == errors.INVALID_TOPIC_EXCEPTION.number
    assert "illegal topic name" in (bad.error_message or "")
