"""How a follower's fetch reaches its leader: over gRPC, or over the leader's Kafka listener.

A replica fetch is the same request either way (Fetch with the follower's
broker id as ``replica_id``, each partition's fetch offset, current leader
epoch and log start offset), answered by the same broker code.  Over gRPC
a fetch of two 64 KiB partitions costs the follower ~330 µs of CPU and the
leader ~630 µs; over the Kafka listener, one frame on a plain TCP
connection (as Kafka's followers fetch over the inter-broker listener),
about half of each.

``GrpcReplicaFetch`` and ``KafkaReplicaFetch`` both turn a list of
``Wanted`` partitions into ``Answer`` per partition.  The one thing a Kafka
Fetch answer lacks is the leader's log end offset, which a follower needs
when the leader finds its fetch offset out of range (is the follower ahead
of the leader's end, or behind its start?); the fetcher asks that partition
again over gRPC then (``Answer.log_end_offset`` is -1 until it does).

Fetch sessions (KIP-227).  ``KafkaReplicaFetch`` fetches in a session with
the leader (``broker/requests/fetch_sessions.py``): its first fetch is full and asks
for a session; each later one names only the partitions whose fetch offset,
log start or leader epoch changed since the previous one, and forgets those
the fetcher no longer asks for (removed, or waiting out an error), so a
fetch of a thousand idle partitions is a few bytes each way and the leader
looks at none of them.  A session the leader no longer knows (it restarted,
or evicted it) or whose epoch is out of step is given up at once for a full
fetch that opens a new one; a failed connection makes the next fetch full
too.  ``GrpcReplicaFetch`` is the fallback (a leader without a Kafka
listener, a listener that refuses connections) and fetches without
sessions: every request names every partition.

Failures: gRPC's come as ``grpc.RpcError``, the Kafka connection's as
``kafkaproto.client.ConnectionFailed`` (``ListenerUnreachable`` when no
connection could be made at all).

Thread safety: one fetcher thread uses each; ``abort`` may come from any
thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from annal.broker.requests.fetch_sessions import FetchSessionHandler, SessionRequest
from annal.kafkaproto.client import (
    FETCH_KEY,
    FETCH_VERSION,
    ConnectionFailed,
    FetchPartition,
    KafkaConnection,
    fetch_request,
)
from annal.kafkaproto.client_security import ConnectionSecurity
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0


class Wanted(NamedTuple):
    """One partition of a replica fetch."""

    tp: TopicPartition
    fetch_offset: int
    leader_epoch: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class Answer:
    """One partition's answer, whichever way it came."""

    error: ErrorCode
    message: str
    high_watermark: int
    log_start_offset: int
    log_end_offset: int  # -1: not told (Kafka's Fetch answer has no such field)
    records: bytes | memoryview


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """The ``replica.fetch.*`` sizes and wait a fetch asks for."""

    max_bytes: int  # per partition
    response_max_bytes: int
    wait_max_ms: int
    min_bytes: int


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
    """Partitions grouped by topic, topics sorted (requests carry them that way)."""
    grouped: dict[str, list[TopicPartition]] = {}
    for tp in sorted(partitions):
        grouped.setdefault(tp.topic, []).append(tp)
    return grouped


def _grouped(wanted: Sequence[Wanted]) -> dict[str, list[Wanted]]:
    found = {w.tp: w for w in wanted}
    return {topic: [found[tp] for tp in tps] for topic, tps in by_topic(found).items()}


class GrpcReplicaFetch:
    """Replica fetches as gRPC calls on the fetcher's channel to the leader."""

    def __init__(self, stub: annal_pb2_grpc.AnnalStub, broker_id: int) -> None:
        self._stub = stub
        self._broker_id = broker_id

    def fetch(self, wanted: Sequence[Wanted], limits: FetchLimits) -> dict[TopicPartition, Answer]:
        request = pb.FetchRequest(
            replica_id=self._broker_id,
            max_wait_ms=limits.wait_max_ms,
            min_bytes=limits.min_bytes,
            max_bytes=limits.response_max_bytes,
        )
        for topic, partitions in _grouped(wanted).items():
            out = request.topics.add(name=topic)
            for w in partitions:
                out.partitions.add(
                    partition=w.tp.partition,
                    fetch_offset=w.fetch_offset,
                    partition_max_bytes=limits.max_bytes,
                    current_leader_epoch=w.leader_epoch,
                    log_start_offset=w.log_start_offset,
                )
        response = self._stub.Fetch(request, timeout=limits.wait_max_ms / 1000 + REQUEST_TIMEOUT_S)
        return {
            TopicPartition(t.name, p.partition): Answer(
                errors.from_wire(p.error),
                p.error_message,
                p.high_watermark,
                p.log_start_offset,
                p.log_end_offset,
                p.records,
            )
            for t in response.topics
            for p in t.partitions
        }


class KafkaReplicaFetch:
    """Replica fetches as Kafka Fetch v11 requests on one connection to the
    leader's Kafka listener at ``endpoint``, secured as that listener is
    (``security``: TLS, and a SASL login, before the first fetch), in a fetch
    session with the leader (see the module docstring).  The answers hold the
    partitions the leader had something new for."""

    def __init__(
        self,
        endpoint: str,
        broker_id: int,
        wait_max_ms: int,
        security: ConnectionSecurity | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._broker_id = broker_id
        self._connection = KafkaConnection(
            endpoint,
            wait_max_ms / 1000 + REQUEST_TIMEOUT_S,
            f"annal-replica-{broker_id}",
            security,
        )
        self.session: FetchSessionHandler[Wanted] = FetchSessionHandler()

    def fetch(self, wanted: Sequence[Wanted], limits: FetchLimits) -> dict[TopicPartition, Answer]:
        partitions = {w.tp: w for w in wanted}
        error = errors.NONE
        for _ in range(2):  # a session refused: once more, as a full fetch
            request = self.session.request(partitions)
            try:
                body = self._connection.exchange(
                    FETCH_KEY, FETCH_VERSION, self._values(request, limits)
                )
            except ConnectionFailed:
                self.session.reset()  # the next fetch is full, closing the session
                raise
            error = errors.from_wire(body.error_code.value)
            if error == errors.NONE:
                self.session.answered(request, int(body.session_id))
                return _answers(body)
            self.session.refused(error)
            if request.full:
                break
            logger.info(
                "fetch session %d with the leader at %s refused (%s): fetching in full",
                request.session_id,
                self.endpoint,
                error,
            )
        return {w.tp: Answer(error, "", -1, -1, -1, b"") for w in wanted}

    def _values(self, request: SessionRequest[Wanted], limits: FetchLimits) -> dict[str, Any]:
        topics = {
            topic: [
                FetchPartition(
                    w.tp.partition,
                    w.fetch_offset,
                    limits.max_bytes,
                    w.leader_epoch,
                    w.log_start_offset,
                )
                for w in partitions
            ]
            for topic, partitions in _grouped(list(request.partitions.values())).items()
        }
        forgotten: Mapping[str, list[int]] = {
            topic: [tp.partition for tp in tps]
            for topic, tps in by_topic(request.forgotten).items()
        }
        return fetch_request(
            self._broker_id,
            limits.wait_max_ms,
            limits.min_bytes,
            limits.response_max_bytes,
            topics,
            request.session_id,
            request.epoch,
            forgotten,
        )

    def abort(self) -> None:
        self._connection.abort()

    def close(self) -> None:
        self._connection.close()


def _answers(body: Any) -> dict[TopicPartition, Answer]:
    return {
        TopicPartition(t.topic, p.partition_index): Answer(
            errors.from_wire(p.error_code.value),
            "",
            p.high_watermark,
            p.log_start_offset,
            -1,
            p.records or b"",
        )
        for t in body.responses
        for p in t.partitions
    }
