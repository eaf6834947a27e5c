"""Kafka's DescribeProducers (API 61, v0; KIP-664) on the Kafka listener: the
producers a partition leader knows, for kafka-transactions.sh's
``describe-producers``, ``find-hanging`` and ``abort``.

The request becomes the producer services' own ``DescribeProducersRequest``
(``broker/requests/producer_types.py``) and goes to the same code as the gRPC
rpc (``broker/producers_api.py``: Read on each topic, then each partition's
producer state on its leader); its answer groups the partitions by topic in
the order the request named them, as Kafka's DescribeProducersResponse does.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.producers_api import ProducersApi
from annal.broker.requests import producer_types as pt
from annal.kafkaproto.wire import Request

DESCRIBE_PRODUCERS = 61
VERSIONS = (0, 0)


class ProducersApis:
    """See the module docstring."""

    def __init__(self, producers: ProducersApi) -> None:
        self._producers = producers

    def register(self, apis: KafkaApis) -> None:
        apis.add(DESCRIBE_PRODUCERS, "DescribeProducers", VERSIONS, self.describe_producers)

    async def describe_producers(self, request: Request) -> Values:
        ask = pt.DescribeProducersRequest(
            [
                pt.DescribeProducersTopic(t.name, list(t.partition_indexes))
                for t in request.body.topics
            ]
        )
        answer = self._producers.describe_producers(ask, request.session)
        return {"throttle_time": 0, "topics": [_topic(t) for t in answer.topics]}


def _topic(t: pt.TopicProducers) -> Values:
    return {"name": t.name, "partitions": [_partition(p) for p in t.partitions]}


def _partition(p: pt.PartitionProducers) -> Values:
    return {
        "partition_index": p.partition_index,
        "error_code": p.error,
        "error_message": p.error_message or None,
        "active_producers": [
            {
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "last_sequence": s.last_sequence,
                "last_timestamp": s.last_timestamp,
                "coordinator_epoch": s.coordinator_epoch,
                "current_txn_start_offset": s.current_txn_start_offset,
            }
            for s in p.active_producers
        ],
    }
