"""The admin path's own request and answer types: Metadata, topics, partitions,
configs, elections, reassignments, DeleteRecords and DescribeLogDirs as the
broker's services (``AdminManager``, ``DataApi``) take and give them.

Both protocol edges adapt to these, each once: the gRPC service from and to its
protobuf messages (``grpc_admin.py``), the Kafka listener from and to Kafka's
(``broker/kafka/admin.py``, ``broker/kafka/cluster.py``).

The field names are those of annal.proto (which follows Kafka's where the two
APIs agree); errors are Kafka's error numbers, config sources Kafka's
ConfigSource numbers (KIP-226).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from annal.broker.metadata_cache import LiveBroker

# -- results shared by several APIs -------------------------------------------------------


@dataclass(slots=True)
class TopicResult:
    """One topic's (or broker resource's) outcome: NONE, or why not."""

    name: str
    error: int = 0
    error_message: str = ""


# -- Metadata --------------------------------------------------------------------------


@dataclass(slots=True)
class MetadataRequest:
    topics: list[str] = field(default_factory=list)  # none: every topic
    allow_auto_topic_creation: bool = False


@dataclass(slots=True)
class PartitionMetadata:
    partition: int
    error: int = 0
    leader: int = -1
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TopicMetadata:
    name: str
    error: int = 0
    partitions: list[PartitionMetadata] = field(default_factory=list)
    is_internal: bool = False


@dataclass(slots=True)
class MetadataResponse:
    brokers: list[LiveBroker] = field(default_factory=list)
    cluster_id: str = ""
    controller_id: int = -1
    topics: list[TopicMetadata] = field(default_factory=list)


# -- CreateTopics, CreatePartitions, DeleteTopics ---------------------------------------


@dataclass(slots=True)
class CreatableTopic:
    name: str
    num_partitions: int = -1  # -1: num.partitions
    replication_factor: int = -1  # -1: default.replication.factor
    assignment: dict[int, list[int]] = field(default_factory=dict)  # partition -> brokers
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class CreateTopicsRequest:
    topics: list[CreatableTopic] = field(default_factory=list)
    timeout_ms: int = 0
    validate_only: bool = False


@dataclass(slots=True)
class CreateTopicsResponse:
    topics: list[TopicResult] = field(default_factory=list)


@dataclass(slots=True)
class CreatePartitionsTopic:
    name: str
    count: int
    assignment: list[list[int]] = field(default_factory=list)  # each new partition's brokers


@dataclass(slots=True)
class CreatePartitionsRequest:
    topics: list[CreatePartitionsTopic] = field(default_factory=list)
    timeout_ms: int = 0
    validate_only: bool = False


@dataclass(slots=True)
class CreatePartitionsResponse:
    topics: list[TopicResult] = field(default_factory=list)


@dataclass(slots=True)
class DeleteTopicsRequest:
    topics: list[str] = field(default_factory=list)
    timeout_ms: int = 0


@dataclass(slots=True)
class DeleteTopicsResponse:
    topics: list[TopicResult] = field(default_factory=list)


# -- DescribeConfigs, AlterConfigs ----------------------------------------------------------


@dataclass(slots=True)
class DescribeConfigsRequest:
    topics: list[str] = field(default_factory=list)
    include_defaults: bool = False
    brokers: list[str] = field(default_factory=list)  # a broker id, or "" (KIP-226)
    include_synonyms: bool = False


@dataclass(slots=True)
class ConfigEntry:
    """A topic's setting: ``is_default`` when the topic does not override it."""

    name: str
    value: str
    is_default: bool = False


@dataclass(slots=True)
class TopicConfigs:
    name: str
    error: int = 0
    error_message: str = ""
    entries: list[ConfigEntry] = field(default_factory=list)


@dataclass(slots=True)
class ConfigSynonym:
    name: str
    value: str | None  # None: no value at that level, or a sensitive one
    source: int


@dataclass(slots=True)
class BrokerConfigEntry:
    """A broker's setting as Kafka's DescribeConfigs gives it (KIP-226)."""

    name: str
    value: str | None  # None: sensitive, or no value at all
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)


@dataclass(slots=True)
class BrokerConfigs:
    name: str  # the broker id asked about, or "" for the cluster default
    error: int = 0
    error_message: str = ""
    entries: list[BrokerConfigEntry] = field(default_factory=list)


@dataclass(slots=True)
class DescribeConfigsResponse:
    topics: list[TopicConfigs] = field(default_factory=list)
    brokers: list[BrokerConfigs] = field(default_factory=list)


@dataclass(slots=True)
class ConfigChange:
    """One resource's change: a topic's overrides or a broker level's dynamic
    settings (the broker id, or "" for the cluster default)."""

    name: str
    set: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)


@dataclass(slots=True)
class AlterConfigsRequest:
    topics: list[ConfigChange] = field(default_factory=list)
    validate_only: bool = False
    brokers: list[ConfigChange] = field(default_factory=list)


@dataclass(slots=True)
class AlterConfigsResponse:
    topics: list[TopicResult] = field(default_factory=list)
    brokers: list[TopicResult] = field(default_factory=list)


# -- ElectLeaders, AlterPartitionReassignments -------------------------------------------


@dataclass(slots=True)
class TopicPartitions:
    topic: str
    partitions: list[int] = field(default_factory=list)  # none: every partition


@dataclass(slots=True)
class ElectLeadersRequest:
    topic_partitions: list[TopicPartitions] = field(default_factory=list)  # none: all
    timeout_ms: int = 0


@dataclass(slots=True)
class ElectionResult:
    topic: str
    partition: int
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class ElectLeadersResponse:
    results: list[ElectionResult] = field(default_factory=list)
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class ReassignablePartition:
    topic: str
    partition: int
    replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class AlterPartitionReassignmentsRequest:
    partitions: list[ReassignablePartition] = field(default_factory=list)


@dataclass(slots=True)
class ReassignmentResult:
    topic: str
    partition: int
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class AlterPartitionReassignmentsResponse:
    results: list[ReassignmentResult] = field(default_factory=list)


# -- DeleteRecords, DescribeLogDirs -------------------------------------------------------


@dataclass(slots=True)
class DeleteRecordsPartition:
    topic: str
    partition: int
    offset: int  # -1: the high watermark


@dataclass(slots=True)
class DeleteRecordsRequest:
    partitions: list[DeleteRecordsPartition] = field(default_factory=list)
    timeout_ms: int = 0


@dataclass(slots=True)
class DeleteRecordsResult:
    topic: str
    partition: int
    low_watermark: int = -1
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class DeleteRecordsResponse:
    results: list[DeleteRecordsResult] = field(default_factory=list)


@dataclass(slots=True)
class DescribeLogDirsRequest:
    topics: list[str] = field(default_factory=list)  # none: every topic


@dataclass(slots=True)
class LogDirPartition:
    topic: str
    partition: int
    size: int = 0
    offset_lag: int = 0
    is_future: bool = False


@dataclass(slots=True)
class LogDirDescription:
    path: str
    error: int = 0
    partitions: list[LogDirPartition] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(slots=True)
class DescribeLogDirsResponse:
    log_dirs: list[LogDirDescription] = field(default_factory=list)
