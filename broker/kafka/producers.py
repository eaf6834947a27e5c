"""Kafka's DescribeProducers (API 61, v0; KIP-664) on the Kafka listener: the
producers a partition leader knows, for kafka-transactions.sh's
``describe-producers``, ``find-hanging`` and ``abort``.

The request becomes annal's ``DescribeProducersRequest`` and goes to the same
code as the gRPC rpc (``broker/producers_api.py``: Read on each topic, then
each partition's producer state on its leader); the answer groups the
partitions by topic in the order the request named them, as Kafka's
DescribeProducersResponse does.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.producers_api import ProducersApi
from annal.kafkaproto.wire import Request
from annal.v1 import annal_pb2 as pb

DESCRIBE_PRODUCERS = 61
VERSIONS = (0, 0)


class ProducersApis:
    """See the module docstring."""

    def __init__(self, producers: ProducersApi) -> None:
        self._producers = producers

    def register(self, apis: KafkaApis) -> None:
        apis.add(DESCRIBE_PRODUCERS, "DescribeProducers", VERSIONS, self.describe_producers)

    async def describe_producers(self, request: Request) -> Values:
        ask = pb.DescribeProducersRequest(
            topics=[
                pb.TopicPartitions(topic=t.name, partitions=list(t.partition_indexes))
                for t in request.body.topics
            ]
        )
        answer = self._producers.describe_producers(ask, request.session)
        return {"throttle_time": 0, "topics": topics_of(ask, answer)}


def topics_of(
    ask: pb.DescribeProducersRequest, answer: pb.DescribeProducersResponse
) -> list[Values]:
    """The answer's partitions grouped under the request's topics, in its order (the
    answer holds one partition per partition asked for, in request order)."""
    partitions = iter(answer.partitions)
    return [
        {
            "name": topic.topic,
            "partitions": [_partition(next(partitions)) for _ in topic.partitions],
        }
        for topic in ask.topics
    ]


def _partition(p: pb.PartitionProducers) -> Values:
    return {
        "partition_index": p.partition,
        "error_code": int(p.error),
        "error_message": p.error_message or None,
        "active_producers": [
            {
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "last_sequence": s.last_sequence,
                "last_timestamp": s.last_timestamp_ms,
                "coordinator_epoch": s.coordinator_epoch,
                "current_txn_start_offset": s.current_txn_start_offset,
            }
            for s in p.producers
        ],
    }
