"""AdminClient: topic administration over the brokers' gRPC API.

Any broker answers Metadata; CreateTopics and DeleteTopics write ZooKeeper
through the broker that receives them and wait for the controller to act.
Kafka error codes come back as ``AdminError`` carrying the error name.

Thread safety: one channel per client; gRPC stubs are thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

DEFAULT_TIMEOUT_S = 30.0


class AdminError(Exception):
    """A request the cluster refused; ``error`` is Kafka's error name."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}" if message else error)
        self.error = error


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


def parse_bootstrap(servers: str) -> list[str]:
    endpoints = [s.strip() for s in servers.split(",") if s.strip()]
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {endpoint!r} is not host:port")
    if not endpoints:
        raise ValueError("no bootstrap servers given")
    return endpoints


class AdminClient:
    """Topic admin against the cluster reachable through ``bootstrap_servers``."""

    def __init__(self, bootstrap_servers: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.endpoints = parse_bootstrap(bootstrap_servers)
        self.timeout_s = timeout_s
        self._channel: grpc.Channel | None = None
        self._stub: annal_pb2_grpc.AnnalStub | None = None

    def _call(self, method: str, request: object) -> object:
        """Try each bootstrap server until one answers."""
        last: grpc.RpcError | None = None
        endpoints = self.endpoints if self._stub is None else [None]
        for endpoint in endpoints:
            if endpoint is not None:
                self._channel = grpc.insecure_channel(endpoint)
                self._stub = annal_pb2_grpc.AnnalStub(self._channel)
            assert self._stub is not None
            try:
                return getattr(self._stub, method)(request, timeout=self.timeout_s)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise AdminError(exc.code().name, exc.details() or "") from None
                last = exc
                self._stub = None
        raise AdminError(
            "BROKER_NOT_AVAILABLE",
            f"no broker answered at {', '.join(self.endpoints)}"
            + (f" ({last.details()})" if last is not None else ""),
        )

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        config: Mapping[str, str] | None = None,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        topic = pb.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            configs=dict(config or {}),
        )
        for partition, brokers in (assignment or {}).items():
            topic.assignment[partition].brokers.extend(brokers)
        request = pb.CreateTopicsRequest(topics=[topic], timeout_ms=int(self.timeout_s * 1000))
        response = self._call("CreateTopics", request)
        result = response.topics[0]  # type: ignore[attr-defined]
        if result.error != pb.NONE:
            raise AdminError(pb.ErrorCode.Name(result.error), result.error_message)

    def delete_topic(self, name: str) -> None:
        request = pb.DeleteTopicsRequest(topics=[name], timeout_ms=int(self.timeout_s * 1000))
        result = self._call("DeleteTopics", request).topics[0]  # type: ignore[attr-defined]
        if result.error != pb.NONE:
            raise AdminError(pb.ErrorCode.Name(result.error), result.error_message)

    def list_topics(self) -> list[str]:
        metadata = self._call("Metadata", pb.MetadataRequest())
        return sorted(t.name for t in metadata.topics)  # type: ignore[attr-defined]

    def describe_topics(self, names: Sequence[str] = ()) -> list[TopicInfo]:
        metadata = self._call("Metadata", pb.MetadataRequest(topics=list(names)))
        out = []
        for topic in metadata.topics:  # type: ignore[attr-defined]
            if topic.error == pb.UNKNOWN_TOPIC_OR_PARTITION:
                raise AdminError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic.name!r} does not exist"
                )
            out.append(
                TopicInfo(
                    topic.name,
                    tuple(
                        PartitionInfo(
                            p.partition,
                            p.leader,
                            p.leader_epoch,
                            tuple(p.replicas),
                            tuple(p.isr),
                            tuple(p.offline_replicas),
                        )
                        for p in topic.partitions
                    ),
                    topic.is_internal,
                )
            )
        return sorted(out, key=lambda t: t.name)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
