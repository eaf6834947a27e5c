"""A consumer group's committed offsets, through the group's coordinator.

``GroupOffsets(bootstrap, group)`` (with ``security``: how to reach the brokers,
the process's default otherwise) finds the coordinator (FindCoordinator,
which creates ``__consumer_offsets`` on first use), commits positions and
reads them back.  A coordinator that moved (NOT_COORDINATOR), is loading
(COORDINATOR_LOAD_IN_PROGRESS), is not known yet (COORDINATOR_NOT_AVAILABLE)
or cannot be reached is looked up again and asked again, with a growing
backoff, up to the timeout; any other refusal is a ``ConsumerError``.

Not thread-safe: one per thread, as the simple consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from annal.client.cluster import ClientError, ClusterConnection
from annal.client.retry import retrying
from annal.client.security import Security
from annal.consumer.simple import ConsumerError
from annal.v1 import annal_pb2 as pb

from annal import errors
from annal.topic_partition import TopicPartition

T = TypeVar("T")


class GroupOffsets:
    """See the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        timeout_s: float = 30.0,
        security: Security | None = None,
    ) -> None:
        if not group:
            raise ValueError("a group id is needed")
        self.cluster = ClusterConnection(bootstrap_servers, timeout_s, security)
        self.group = group
        self.timeout_s = timeout_s
        self._coordinator: str | None = None

    def coordinator(self) -> str:
        """The coordinating broker's endpoint (asked once, then remembered)."""
        if self._coordinator is None:
            self._coordinator = self._retry(self._find)
        return self._coordinator

    def _find(self) -> str:
        try:
            answer = self.cluster.call_any(
                "FindCoordinator", pb.FindCoordinatorRequest(group=self.group)
            )
        except ClientError as exc:
            raise ConsumerError(exc.code, exc.message) from exc
        error = errors.from_wire(answer.error)
        if error is not errors.NONE:
            raise ConsumerError(error, answer.error_message)
        return f"{answer.coordinator.host}:{answer.coordinator.port}"

    def commit(self, offsets: Mapping[TopicPartition, int], metadata: str = "") -> None:
        """Store the next offset to consume of each (topic, partition)."""
        by_topic: dict[str, list[pb.OffsetCommitPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                pb.OffsetCommitPartition(
                    partition=partition, offset=offset, leader_epoch=-1, metadata=metadata
                )
            )
        request = pb.OffsetCommitRequest(
            group=self.group,
            topics=[pb.OffsetCommitTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            timeout_ms=int(self.timeout_s * 1000),
        )

        def attempt() -> None:
            response = self._call("OffsetCommit", request)
            for topic in response.topics:
                for p in topic.partitions:
                    error = errors.from_wire(p.error)
                    if error is not errors.NONE:
                        raise ConsumerError(
                            error, f"commit of {topic.name}-{p.partition}: {p.error_message}"
                        )

        self._retry(attempt)

    def committed(
        self, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """The committed offset of each partition (-1 for none); of every
        partition the group committed when ``partitions`` is None.  A partition
        the broker refuses (TOPIC_AUTHORIZATION_FAILED: no Describe on its topic)
        raises ConsumerError."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)
        request = pb.OffsetFetchRequest(
            group=self.group,
            topics=[pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )

        def attempt() -> dict[TopicPartition, int]:
            response = self._call("OffsetFetch", request)
            error = errors.from_wire(response.error)
            if error is not errors.NONE:
                raise ConsumerError(error, response.error_message)
            found = {}
            for t in response.topics:
                for p in t.partitions:
                    error = errors.from_wire(p.error)
                    if error is not errors.NONE:  # a topic the caller may not describe
                        raise ConsumerError(
                            error, f"committed offset of {t.name}-{p.partition} in {self.group}"
                        )
                    found[TopicPartition(t.name, p.partition)] = p.offset
            return found

        return self._retry(attempt)

    def _call(self, method: str, request: Any) -> Any:
        stub = self.cluster.stub(self.coordinator())
        try:
            return getattr(stub, method)(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if errors.transport_error(exc) is errors.BROKER_NOT_AVAILABLE:  # its broker is gone
                raise ConsumerError(errors.COORDINATOR_NOT_AVAILABLE, exc.details() or "") from exc
            raise ConsumerError.from_rpc(exc) from exc

    def _retry(self, attempt: Callable[[], T]) -> T:
        def find_again(_: object) -> None:
            self._coordinator = None  # it may have moved

        policy = retrying(
            self.timeout_s,
            retry_on=lambda exc: isinstance(exc, ConsumerError) and exc.retriable,
            before_sleep=find_again,
        )
        result: T = policy(attempt)
        return result

    def delete(self) -> None:
        """Delete the group at its coordinator: its committed offsets and metadata.
        ConsumerError NON_EMPTY_GROUP while it has live members (Kafka clients'
        groups; the ZooKeeper-era consumer's members are for the caller to check)."""

        def attempt() -> None:
            response = self._call("DeleteGroup", pb.DeleteGroupRequest(group=self.group))
            error = errors.from_wire(response.error)
            if error is not errors.NONE:
                raise ConsumerError(error, response.error_message or error.name)

        self._retry(attempt)

    def describe(self) -> Any:
        """The group's state and members as its coordinator keeps them
        (``annal.v1.DescribeGroupResponse``; groups of Kafka's clients)."""

        def attempt() -> Any:
            response = self._call("DescribeGroup", pb.DescribeGroupRequest(group=self.group))
            error = errors.from_wire(response.error)
            if error is not errors.NONE:
                raise ConsumerError(error, response.error_message)
            return response

        return self._retry(attempt)

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> GroupOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
