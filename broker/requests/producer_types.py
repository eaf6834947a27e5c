"""The producer services' own request and answer types: InitProducerId
(``broker/producer_ids.py``; KIP-98, KIP-360) and DescribeProducers
(``broker/producers_api.py``; KIP-664).

Both protocol edges adapt to these, each once: the gRPC service from and to its
protobuf messages (``grpc_producers.py``), the Kafka listener from and to Kafka's
(``broker/kafka/data.py``, ``broker/kafka/producers.py``).

The field names are those of Kafka's requests and responses of the same name
(docs/kafka-protocol.md); errors are Kafka's error numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

# -- InitProducerId --------------------------------------------------------------------


@dataclass(slots=True)
class InitProducerIdRequest:
    transactional_id: str = ""  # empty for an idempotent producer
    transaction_timeout_ms: int = 0
    # the producer's current id and epoch when it asks for a new epoch (v3+, KIP-360)
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(slots=True)
class InitProducerIdResponse:
    error: int = 0
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    error_message: str = ""


# -- DescribeProducers -----------------------------------------------------------------


@dataclass(slots=True)
class DescribeProducersTopic:
    name: str
    partition_indexes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DescribeProducersRequest:
    topics: list[DescribeProducersTopic] = field(default_factory=list)


@dataclass(slots=True)
class ProducerState:
    """One producer of a partition leader's producer state; -1 for what it has none of."""

    producer_id: int
    producer_epoch: int
    last_sequence: int = -1
    last_timestamp: int = -1  # milliseconds since the epoch
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(slots=True)
class PartitionProducers:
    partition_index: int
    error: int = 0
    error_message: str = ""
    active_producers: list[ProducerState] = field(default_factory=list)


@dataclass(slots=True)
class TopicProducers:
    """The answer for one topic of the request, its partitions in the request's order."""

    name: str
    partitions: list[PartitionProducers] = field(default_factory=list)


@dataclass(slots=True)
class DescribeProducersResponse:
    """One topic per topic of the request, in its order (Kafka's answer's shape)."""

    topics: list[TopicProducers] = field(default_factory=list)
