"""Group rpcs: FindCoordinator, OffsetCommit, OffsetFetch, answered through the
group coordinator (``coordinator.py``); ListGroups and DescribeGroup from the
membership of Kafka's clients' groups (``group_membership.py``).

Thread safety: runs on the event loop; creating the offsets topic runs on
the admin pool.
"""

from __future__ import annotations

from typing import Any

from annal.broker import request_checks as checks
from annal.broker.admin_manager import AdminManager
from annal.broker.coordinator import OFFSETS_TOPIC, CommitEntry, OffsetsCoordinator
from annal.broker.data_api import Deadline, code, wait_ms
from annal.broker.group_membership import GroupMembership
from annal.broker.metadata_cache import MetadataCache
from annal.v1 import annal_pb2 as pb
from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment as AssignmentV0,
)
from kio.schema.consumer_protocol_assignment.v1.data import (
    ConsumerProtocolAssignment as AssignmentV1,
)
from kio.schema.consumer_protocol_assignment.v2.data import (
    ConsumerProtocolAssignment as AssignmentV2,
)
from kio.schema.consumer_protocol_assignment.v3.data import (
    ConsumerProtocolAssignment as AssignmentV3,
)
from kio.serial import entity_reader
from kio.serial.readers import read_int16

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

_ASSIGNMENTS: list[Any] = [AssignmentV0, AssignmentV1, AssignmentV2, AssignmentV3]


class GroupApi:
    """See the module docstring."""

    def __init__(
        self,
        coordinator: OffsetsCoordinator,
        metadata: MetadataCache,
        admin: AdminManager,
        membership: GroupMembership,
    ) -> None:
        self._membership = membership
        self._coordinator = coordinator
        self._metadata = metadata
        self._admin = admin

    async def find_coordinator(
        self, request: pb.FindCoordinatorRequest
    ) -> pb.FindCoordinatorResponse:
        """The leader of the group's offsets partition; the offsets topic is
        created on first use (COORDINATOR_NOT_AVAILABLE until it has leaders)."""
        if refusal := checks.group_id(request.group):
            return pb.FindCoordinatorResponse(
                error=code(refusal.error), error_message=refusal.message
            )
        cache = self._metadata.snapshot()
        if OFFSETS_TOPIC not in cache.topics:
            await self._admin.blocking(self._admin.create_offsets_topic_now, len(cache.brokers))
            return pb.FindCoordinatorResponse(
                error=pb.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{OFFSETS_TOPIC} is being created; ask again",
            )
        index = self._coordinator.partition_of(request.group)
        leader = cache.leader_of(OFFSETS_TOPIC, index)
        if leader < 0:
            return pb.FindCoordinatorResponse(
                error=pb.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{OFFSETS_TOPIC}-{index} has no leader now",
            )
        broker = cache.brokers[leader]
        return pb.FindCoordinatorResponse(
            coordinator=pb.Broker(id=broker.broker_id, host=broker.host, port=broker.port)
        )

    async def offset_commit(
        self, request: pb.OffsetCommitRequest, context: Deadline
    ) -> pb.OffsetCommitResponse:
        checks.check_timeout_ms(request.timeout_ms)
        group_refusal = checks.group_id(request.group)
        outcome: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        entries = []
        for t in request.topics:
            for p in t.partitions:
                refusal = group_refusal or checks.commit_partition(
                    t.name, p.partition, p.offset, p.leader_epoch
                )
                if refusal is not None:
                    outcome[TopicPartition(t.name, p.partition)] = (refusal.error, refusal.message)
                else:
                    entries.append(
                        CommitEntry(t.name, p.partition, p.offset, p.leader_epoch, p.metadata)
                    )
        if entries:
            outcome.update(
                await self._coordinator.commit(
                    request.group, entries, wait_ms(request.timeout_ms, context)
                )
            )
        response = pb.OffsetCommitResponse()
        for t in request.topics:
            out = response.topics.add(name=t.name)
            for p in t.partitions:
                error, message = outcome[TopicPartition(t.name, p.partition)]
                out.partitions.add(partition=p.partition, error=code(error), error_message=message)
        return response

    def offset_fetch(self, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        """The group's committed offsets; the response has one error field, so a
        refused group id, topic name or partition answers the whole request."""
        refusal = checks.group_id(request.group)
        for t in request.topics:
            refusal = refusal or checks.topic_name(t.topic)
            for p in t.partitions:
                refusal = refusal or checks.partition_index(t.topic, p)
        if refusal is not None:
            return pb.OffsetFetchResponse(error=code(refusal.error), error_message=refusal.message)
        wanted = [TopicPartition(t.topic, p) for t in request.topics for p in t.partitions] or None
        error, found = self._coordinator.fetch(request.group, wanted)
        response = pb.OffsetFetchResponse(error=code(error))
        by_topic: dict[str, pb.OffsetFetchTopic] = {}
        for (topic, partition), value in sorted(found.items()):
            out = by_topic.get(topic)
            if out is None:
                out = by_topic[topic] = response.topics.add(name=topic)
            if value is None:
                out.partitions.add(partition=partition, offset=-1, leader_epoch=-1)
            else:
                out.partitions.add(
                    partition=partition,
                    offset=value.offset,
                    leader_epoch=value.leader_epoch,
                    metadata=value.metadata,
                )
        return response

    def list_groups(self) -> pb.ListGroupsResponse:
        return pb.ListGroupsResponse(
            groups=[
                pb.GroupListing(group=g, protocol_type=t, state=s)
                for g, t, s in self._membership.listing()
            ]
        )

    async def delete_group(self, request: pb.DeleteGroupRequest) -> pb.DeleteGroupResponse:
        if refusal := checks.group_id(request.group):
            return pb.DeleteGroupResponse(error=code(refusal.error), error_message=refusal.message)
        error = await self._membership.delete(request.group)
        messages = {
            errors.NON_EMPTY_GROUP: f"group {request.group!r} has live members",
            errors.GROUP_ID_NOT_FOUND: f"no group {request.group!r}",
        }
        return pb.DeleteGroupResponse(error=code(error), error_message=messages.get(error, ""))

    def describe_group(self, request: pb.DescribeGroupRequest) -> pb.DescribeGroupResponse:
        if refusal := checks.group_id(request.group):
            return pb.DescribeGroupResponse(
                error=code(refusal.error), error_message=refusal.message
            )
        error, group = self._membership.describe(request.group)
        if error != errors.NONE:
            return pb.DescribeGroupResponse(error=code(error))
        if group is None:
            return pb.DescribeGroupResponse(state="Empty")
        return pb.DescribeGroupResponse(
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol=group.protocol or "",
            members=[
                pb.GroupMemberInfo(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id or "",
                    client_id=m.client_id,
                    client_host=m.client_host,
                    assignment=[
                        pb.TopicPartitions(topic=t, partitions=ps)
                        for t, ps in consumer_assignment(m.assignment)
                    ],
                )
                for m in group.members.values()
            ],
        )


def consumer_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """The partitions in a member's assignment (Kafka's consumer protocol:
    a version, then ConsumerProtocolAssignment); none when it is not one."""
    if len(data) < 2:
        return []
    try:
        version, _ = read_int16(data, 0)
        schema = _ASSIGNMENTS[min(max(int(version), 0), len(_ASSIGNMENTS) - 1)]
        assignment, _ = entity_reader(schema)(data, 2)
    except Exception:  # another protocol's bytes: nothing to show
        return []
    return [(t.topic, sorted(int(p) for p in t.partitions)) for t in assignment.assigned_partitions]
