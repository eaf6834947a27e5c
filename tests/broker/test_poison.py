"""Poison batches sent over gRPC to a real three-broker cluster: refused, and the
partition stays readable and its replicas identical."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from poison import poison_batches
from test_replication import segment_bytes

TOPIC = "poisoned"


def produce_raw(endpoint: str, data: bytes) -> pb.PartitionProduceResponse:
    with grpc.insecure_channel(endpoint) as channel:
        response = annal_pb2_grpc.AnnalStub(channel).Produce(
            pb.ProduceRequest(
                acks=-1,
                timeout_ms=30_000,
                topics=[
                    pb.TopicProduceData(
                        name=TOPIC, partitions=[pb.PartitionProduceData(partition=0, records=data)]
                    )
                ],
            ),
            timeout=60,
        )
    return response.topics[0].partitions[0]


@pytest.mark.timeout(240)
def test_poison_batches_are_refused_and_the_partition_stays_readable(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = {b.broker_id: b for b in (broker_factory(i) for i in (1, 2, 3))}
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        leader = brokers[admin.describe_topics([TOPIC])[0].partitions[0].leader]
        wait_until(
            lambda: len(admin.describe_topics([TOPIC])[0].partitions[0].isr) == 3, 60, "full ISR"
        )

    def send(tag: str, count: int) -> None:
        with Producer(leader.endpoint, acks="all") as producer:
            for i in range(count):
                producer.send(TOPIC, value=b"%s-%d" % (tag.encode(), i), partition=0)
            producer.flush(60)

    send("before", 10)
    for name, (data, code) in poison_batches(int(time.time() * 1000)).items():
        answer = produce_raw(leader.endpoint, data)
        assert pb.ErrorCode.Name(answer.error) == code, (name, answer.error_message)
        assert answer.error_message, name
    send("after", 10)

    with SimpleConsumer(leader.endpoint) as consumer:
        result = consumer.fetch(TOPIC, 0, 0, max_bytes=1 << 20)
        assert [r.offset for r in result.records] == list(range(20))
        assert [r.value for r in result.records] == [b"before-%d" % i for i in range(10)] + [
            b"after-%d" % i for i in range(10)
        ]
        assert result.high_watermark == 20

    def identical() -> bool:
        copies = {segment_bytes(b, TOPIC, 0) for b in brokers.values()}
        return len(copies) == 1

    wait_until(identical, 60, "three identical replicas")
    for broker in brokers.values():
        assert "Traceback" not in broker.tail_log(400), broker.broker_id
