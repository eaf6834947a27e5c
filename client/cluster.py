"""The clients' view of the cluster: channels to brokers and partition routing.

Every client (admin, producer, consumers) holds one ``ClusterConnection``:
one gRPC channel and stub per broker endpoint, the bootstrap servers to ask
for Metadata, and what the last Metadata said (partition counts, leader
endpoints) so that requests go straight to partition leaders.  Clients talk
to the cluster only through ``annal.v1``.

Thread safety: the stub cache is guarded by ``self._lock``; the routing maps
are replaced whole on refresh, so readers see one version or the next.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Self

import grpc
from annal.client.retry import retrying
from annal.client.security import PLAINTEXT, Security, default_security
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors
from annal.allocator import keep_large_buffers
from annal.errors import AnnalError, ErrorCode
from annal.topic_partition import TopicPartition

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class ClientError(AnnalError):
    """A request the cluster refused or that could not be made: ``code`` is one
    of Kafka's error codes (``error`` its name), ``message`` says what and where."""

    def __init__(self, error: ErrorCode | str, message: str = "") -> None:
        code = error if isinstance(error, ErrorCode) else errors.lookup(error)
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message

    @property
    def error(self) -> str:
        return self.code.name

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError, context: str = "") -> Self:
        """The error a failed call stands for (``errors.transport_error``): the
        clients' one translation of gRPC's failures."""
        details = exc.details() if callable(getattr(exc, "details", None)) else ""
        message = "; ".join(part for part in (context, details or "") if part)
        return cls(errors.transport_error(exc), message)


def parse_bootstrap(servers: str) -> list[str]:
    """``"h1:9092,h2:9092"`` → endpoints; ValueError naming a malformed one."""
    endpoints = [s.strip() for s in servers.split(",") if s.strip()]
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {endpoint!r} is not host:port")
    if not endpoints:
        raise ValueError("no bootstrap servers given")
    return endpoints


class ClusterConnection:
    """See the module docstring; ``close`` releases every channel."""

    def __init__(
        self, bootstrap_servers: str, timeout_s: float = 30.0, security: Security | None = None
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        # where call_any starts: the first server, until ``move_on`` (a client
        # whose leader may have moved asks another broker next: one cut off
        # from the cluster answers with what it last knew)
        self._first = 0
        self.timeout_s = timeout_s
        self.security = security or default_security()
        self._lock = threading.Lock()
        self._stubs: dict[str, annal_pb2_grpc.AnnalStub] = {}
        self._channels: list[grpc.Channel] = []
        self.partition_counts: dict[str, int] = {}
        # topics the last Metadata refused (TOPIC_AUTHORIZATION_FAILED): not
        # missing, forbidden, which retrying will not change
        self.unauthorized: set[str] = set()
        self.leaders: dict[TopicPartition, str] = {}
        self.available: dict[str, tuple[int, ...]] = {}  # partitions with a known leader
        # gRPC endpoint -> the same broker's Kafka listener of this client's
        # security protocol, where it has one
        self.kafka_listeners: dict[str, str] = {}
        keep_large_buffers()  # megabyte answers reuse their pages (annal/allocator.py)

    def stub(self, endpoint: str) -> annal_pb2_grpc.AnnalStub:
        with self._lock:
            stub = self._stubs.get(endpoint)
            if stub is None:
                channel = self.security.channel(
                    endpoint,
                    options=[
                        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ],
                )
                self._channels.append(channel)
                stub = self._stubs[endpoint] = annal_pb2_grpc.AnnalStub(channel)
            return stub

    def call_any(self, method: str, request: Any) -> Any:
        """Call ``method`` on the first bootstrap server that answers, starting
        with the one ``move_on`` last chose (the first, until then).

        An unreachable server moves on to the next; any other gRPC failure is
        a ClientError with the status name; none answering is
        BROKER_NOT_AVAILABLE.
        """
        last: grpc.RpcError | None = None
        start = self._first % max(len(self.bootstrap), 1)
        for endpoint in self.bootstrap[start:] + self.bootstrap[:start]:
            try:
                return getattr(self.stub(endpoint), method)(request, timeout=self.timeout_s)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise ClientError.from_rpc(exc) from exc
                last = exc
        detail = f" ({last.details()})" if last is not None else ""
        raise ClientError(
            errors.BROKER_NOT_AVAILABLE,
            f"no broker answered at {', '.join(self.bootstrap)}{detail}",
        )

    def _kafka_listener(self, broker: pb.Broker) -> str | None:
        """The broker's Kafka listener of this client's security protocol, if any."""
        for e in broker.kafka_endpoints:
            if e.security_protocol == self.security.protocol:
                return f"{e.host}:{e.port}"
        if self.security.protocol == PLAINTEXT and broker.kafka_port:
            return f"{broker.kafka_host}:{broker.kafka_port}"
        return None

    def refresh(self, topics: Sequence[str]) -> pb.MetadataResponse:
        """Ask for Metadata and update partition counts and leaders of ``topics``.

        A broker that has not heard from a controller yet (just started) lists
        no brokers: that answer is not the cluster's, so the request is asked
        again, with a short backoff, until ``timeout_s``."""
        ask = retrying(self.timeout_s, until=lambda answer: bool(answer.brokers))
        metadata: pb.MetadataResponse = ask(
            self.call_any, "Metadata", pb.MetadataRequest(topics=list(topics))
        )
        brokers = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers}
        listeners = dict(self.kafka_listeners)
        for b in metadata.brokers:
            found = self._kafka_listener(b)
            if found:
                listeners[brokers[b.id]] = found
            else:
                listeners.pop(brokers[b.id], None)
        self.kafka_listeners = listeners
        counts = dict(self.partition_counts)
        leaders = dict(self.leaders)
        for topic in metadata.topics:
            if topic.error == pb.TOPIC_AUTHORIZATION_FAILED:
                counts.pop(topic.name, None)
                self.unauthorized.add(topic.name)
                continue
            self.unauthorized.discard(topic.name)
            if topic.error in (pb.UNKNOWN_TOPIC_OR_PARTITION, pb.INVALID_TOPIC_EXCEPTION):
                counts.pop(topic.name, None)  # no such topic (an illegal name cannot be one)
                continue
            counts[topic.name] = len(topic.partitions)
            for p in topic.partitions:
                leader = brokers.get(p.leader)
                if leader is None:
                    leaders.pop(TopicPartition(topic.name, p.partition), None)
                else:
                    leaders[TopicPartition(topic.name, p.partition)] = leader
        self.partition_counts, self.leaders = counts, leaders
        self._update_available()
        return metadata

    def move_on(self) -> None:
        """Ask the next bootstrap server first from now on (after an answer that
        may mean a leader moved: the broker asked last may be the stale one)."""
        with self._lock:
            self._first = (self._first + 1) % max(len(self.bootstrap), 1)

    def forget(self, topics: Sequence[str] | None = None) -> None:
        """Drop known leaders (of ``topics``, or all) so the next lookup refreshes."""
        if topics is None:
            self.leaders = {}
        else:
            dropped = set(topics)
            self.leaders = {k: v for k, v in self.leaders.items() if k[0] not in dropped}
        self._update_available()

    def _update_available(self) -> None:
        available: dict[str, list[int]] = {}
        for topic, partition in self.leaders:
            available.setdefault(topic, []).append(partition)
        self.available = {t: tuple(sorted(ps)) for t, ps in available.items()}

    def close(self) -> None:
        with self._lock:
            for channel in self._channels:
                channel.close()
            self._channels.clear()
            self._stubs.clear()
