"""The group services' own request and answer types: FindCoordinator, OffsetCommit,
TxnOffsetCommit (KIP-98, KIP-447), OffsetFetch, ListGroups, DeleteGroup and
DescribeGroup as ``GroupApi`` (``broker/groups/group_api.py``) takes and gives them.

Both protocol edges adapt to these, each once: the gRPC service from and to its
protobuf messages (``grpc_groups.py``), the Kafka listener from and to Kafka's
(``broker/kafka/groups.py``).

The field names are those of Kafka's requests and responses of the same name
(docs/kafka-protocol.md); errors are Kafka's error numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GROUP_KEY = 0  # FindCoordinator's key type of a consumer group
TRANSACTION_KEY = 1  # FindCoordinator's key type of a transactional id (KIP-98)

# -- FindCoordinator -------------------------------------------------------------------


@dataclass(slots=True)
class FindCoordinatorRequest:
    key: str  # the group id, or the transactional id with key type 1
    key_type: int = GROUP_KEY


@dataclass(slots=True)
class Coordinator:
    """The coordinating broker, as its metadata advertises it."""

    node_id: int
    host: str
    port: int


@dataclass(slots=True)
class FindCoordinatorResponse:
    error: int = 0
    error_message: str = ""
    coordinator: Coordinator | None = None  # None with an error


# -- OffsetCommit and TxnOffsetCommit ----------------------------------------------------


@dataclass(slots=True)
class OffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str = ""


@dataclass(slots=True)
class OffsetCommitTopic:
    name: str
    partitions: list[OffsetCommitPartition] = field(default_factory=list)


@dataclass(slots=True)
class OffsetCommitRequest:
    group_id: str
    topics: list[OffsetCommitTopic] = field(default_factory=list)
    timeout_ms: int = 0  # how long to wait for the offsets topic's replicas


@dataclass(slots=True)
class TxnOffsetCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: list[OffsetCommitTopic] = field(default_factory=list)
    member_id: str = ""  # v3+ (KIP-447); empty and -1 when not checked
    generation_id: int = -1
    group_instance_id: str | None = None


@dataclass(slots=True)
class OffsetCommitPartitionResponse:
    partition_index: int
    error: int
    error_message: str = ""


@dataclass(slots=True)
class OffsetCommitTopicResponse:
    name: str
    partitions: list[OffsetCommitPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class OffsetCommitResponse:
    """The answer to OffsetCommit and to TxnOffsetCommit alike."""

    topics: list[OffsetCommitTopicResponse] = field(default_factory=list)


# -- OffsetFetch -----------------------------------------------------------------------


@dataclass(slots=True)
class OffsetFetchTopic:
    name: str
    partition_indexes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class OffsetFetchRequest:
    group_id: str
    topics: list[OffsetFetchTopic] = field(default_factory=list)  # none: every partition
    require_stable: bool = False  # v7+ (KIP-447)


@dataclass(slots=True)
class OffsetFetchPartitionResponse:
    partition_index: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str = ""
    error: int = 0


@dataclass(slots=True)
class OffsetFetchTopicResponse:
    name: str
    partitions: list[OffsetFetchPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class OffsetFetchResponse:
    error: int = 0
    error_message: str = ""
    topics: list[OffsetFetchTopicResponse] = field(default_factory=list)


# -- ListGroups, DeleteGroup, DescribeGroup ----------------------------------------------


@dataclass(slots=True)
class ListGroupsRequest:
    states_filter: list[str] = field(default_factory=list)  # v4+ (KIP-518); none: every state


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str


@dataclass(slots=True)
class ListGroupsResponse:
    error: int = 0
    groups: list[ListedGroup] = field(default_factory=list)


@dataclass(slots=True)
class DeleteGroupRequest:
    group_id: str


@dataclass(slots=True)
class DeleteGroupResponse:
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class DescribeGroupRequest:
    group_id: str


@dataclass(slots=True)
class AssignedPartitions:
    """A topic's partitions in a member's assignment (Kafka's consumer protocol)."""

    topic: str
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[AssignedPartitions] = field(default_factory=list)


@dataclass(slots=True)
class DescribeGroupResponse:
    error: int = 0
    error_message: str = ""
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""  # the assignment protocol chosen in the last rebalance
    members: list[DescribedGroupMember] = field(default_factory=list)
