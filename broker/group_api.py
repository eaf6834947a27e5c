"""Group rpcs: FindCoordinator, OffsetCommit, OffsetFetch, answered through the
group coordinator (``coordinator.py``).

Thread safety: runs on the event loop; creating the offsets topic runs on
the admin pool.
"""

from __future__ import annotations

from annal.broker import request_checks as checks
from annal.broker.admin_manager import AdminManager
from annal.broker.coordinator import OFFSETS_TOPIC, CommitEntry, OffsetsCoordinator
from annal.broker.data_api import Deadline, code, wait_ms
from annal.broker.metadata_cache import MetadataCache
from annal.v1 import annal_pb2 as pb

from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition


class GroupApi:
    """See the module docstring."""

    def __init__(
        self, coordinator: OffsetsCoordinator, metadata: MetadataCache, admin: AdminManager
    ) -> None:
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
