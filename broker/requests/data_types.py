"""The data path's own request and answer types: Produce and Fetch as the broker's
services take and give them.

Both protocol edges adapt to these, each once: the gRPC service from and to its
protobuf messages (``grpc_data.py``), the Kafka listener from and to Kafka's
(``broker/kafka/data.py``).  Neither edge builds the other's messages, so a
Kafka client's records are never copied into a protobuf message and out again,
and a follower's fetch over the Kafka listener costs what Kafka's protocol costs.

The field names are those of Kafka's Produce and Fetch (and of annal.proto,
which follows them); errors are Kafka's error numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# -- Produce -------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionProduceData:
    partition: int
    records: bytes


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partitions: list[PartitionProduceData] = field(default_factory=list)


@dataclass(slots=True)
class ProduceRequest:
    acks: int
    timeout_ms: int
    topics: list[TopicProduceData] = field(default_factory=list)
    transactional_id: str = ""


@dataclass(slots=True)
class ProduceRecordError:
    """A record that made its batch fail (KIP-467): its index in the batch."""

    batch_index: int
    message: str = ""


@dataclass(slots=True)
class PartitionProduceResponse:
    partition: int
    error: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str = ""
    record_errors: list[ProduceRecordError] = field(default_factory=list)


@dataclass(slots=True)
class TopicProduceResponse:
    name: str
    partitions: list[PartitionProduceResponse] = field(default_factory=list)


@dataclass(slots=True)
class ProduceResponse:
    topics: list[TopicProduceResponse] = field(default_factory=list)


# -- Fetch ---------------------------------------------------------------------------

NO_LEADER_EPOCH = -1  # a fetch that does not name the leader epoch it expects


@dataclass(slots=True)
class PartitionFetchData:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = NO_LEADER_EPOCH
    log_start_offset: int = 0  # a follower's log start (KIP-107); consumers send -1 or 0


@dataclass(slots=True)
class TopicFetchData:
    name: str
    partitions: list[PartitionFetchData] = field(default_factory=list)


@dataclass(slots=True)
class FetchRequest:
    replica_id: int = -1
    max_wait_ms: int = 0
    min_bytes: int = 0
    max_bytes: int = 0
    topics: list[TopicFetchData] = field(default_factory=list)
    isolation_level: int = 0


@dataclass(slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(slots=True)
class PartitionFetchResponse:
    partition: int
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    error_message: str = ""
    log_end_offset: int = -1
    last_stable_offset: int = -1
    aborted_transactions: list[AbortedTransaction] = field(default_factory=list)


@dataclass(slots=True)
class TopicFetchResponse:
    name: str
    partitions: list[PartitionFetchResponse] = field(default_factory=list)


@dataclass(slots=True)
class FetchResponse:
    topics: list[TopicFetchResponse] = field(default_factory=list)


# -- ListOffsets ---------------------------------------------------------------------


@dataclass(slots=True)
class PartitionListOffsets:
    partition: int
    timestamp: int  # -1 latest, -2 earliest, else the first offset at or after it
    current_leader_epoch: int = NO_LEADER_EPOCH


@dataclass(slots=True)
class TopicListOffsets:
    name: str
    partitions: list[PartitionListOffsets] = field(default_factory=list)


@dataclass(slots=True)
class ListOffsetsRequest:
    replica_id: int = -1
    topics: list[TopicListOffsets] = field(default_factory=list)
    isolation_level: int = 0


@dataclass(slots=True)
class PartitionListOffsetsResponse:
    partition: int
    error: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


@dataclass(slots=True)
class TopicListOffsetsResponse:
    name: str
    partitions: list[PartitionListOffsetsResponse] = field(default_factory=list)


@dataclass(slots=True)
class ListOffsetsResponse:
    topics: list[TopicListOffsetsResponse] = field(default_factory=list)


# -- OffsetsForLeaderEpoch -------------------------------------------------------------


@dataclass(slots=True)
class PartitionEpoch:
    partition: int
    current_leader_epoch: int
    leader_epoch: int


@dataclass(slots=True)
class TopicEpochs:
    name: str
    partitions: list[PartitionEpoch] = field(default_factory=list)


@dataclass(slots=True)
class OffsetsForLeaderEpochRequest:
    replica_id: int = -1
    topics: list[TopicEpochs] = field(default_factory=list)


@dataclass(slots=True)
class PartitionEpochEnd:
    partition: int
    error: int
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(slots=True)
class TopicEpochEnds:
    name: str
    partitions: list[PartitionEpochEnd] = field(default_factory=list)


@dataclass(slots=True)
class OffsetsForLeaderEpochResponse:
    topics: list[TopicEpochEnds] = field(default_factory=list)
