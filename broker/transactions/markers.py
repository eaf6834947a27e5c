"""The transaction coordinator's markers: COMMIT or ABORT written to every partition
of a transaction, by each partition's leader (Kafka's TransactionMarkerChannelManager).

``MarkerWriter.write`` sends one WriteTxnMarkers per leading broker (the
brokers' BrokerControl service, over gRPC with the inter-broker security)
and keeps going until every partition holds the marker: a partition whose
leader moved, is offline, or lacks in-sync replicas is tried again after a
backoff with the leaders of the latest metadata; a partition of a topic that
was deleted is done with.  It gives up, returning False, when the caller's
``still_valid`` says this broker no longer coordinates the transaction, or a
leader answers that a newer coordinator has written to the partition
(TRANSACTION_COORDINATOR_FENCED): the new coordinator completes the
transaction from its log.

Thread safety: runs on the broker's event loop; the gRPC channels (one per
broker address) are used from it only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc
from annal.broker.metadata_cache import MetadataSnapshot
from annal.client.retry import Backoff
from annal.client.security import Security
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors
from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0

# What a leader may answer that another try can mend.
_RETRY = frozenset(
    e.number
    for e in (
        errors.NOT_LEADER_OR_FOLLOWER,
        errors.UNKNOWN_TOPIC_OR_PARTITION,
        errors.NOT_ENOUGH_REPLICAS,
        errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        errors.REQUEST_TIMED_OUT,
        errors.KAFKA_STORAGE_ERROR,
        errors.LEADER_NOT_AVAILABLE,
        errors.BROKER_NOT_AVAILABLE,
        errors.UNKNOWN_SERVER_ERROR,
    )
)
_FENCED = frozenset(
    {errors.TRANSACTION_COORDINATOR_FENCED.number, errors.INVALID_PRODUCER_EPOCH.number}
)


@dataclass(frozen=True, slots=True)
class Marker:
    """The end of one transaction, to be written to ``partitions``."""

    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    coordinator_epoch: int

    def request(self, partitions: Iterable[TopicPartition]) -> pb.WriteTxnMarkersRequest:
        topics: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            topics.setdefault(tp.topic, []).append(tp.partition)
        return pb.WriteTxnMarkersRequest(
            markers=[
                pb.TxnMarker(
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    commit=self.commit,
                    coordinator_epoch=self.coordinator_epoch,
                    topics=[pb.TopicPartitions(topic=t, partitions=p) for t, p in topics.items()],
                )
            ]
        )


class MarkerWriter:
    """See the module docstring."""

    def __init__(
        self,
        metadata: Callable[[], MetadataSnapshot],
        security: Security,
        max_backoff_s: float = 2.0,
    ) -> None:
        self._metadata = metadata
        self._security = security
        self._max_backoff_s = max_backoff_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, endpoint: str) -> annal_pb2_grpc.BrokerControlStub:
        channel = self._channels.get(endpoint)
        if channel is None:
            if self._security.tls:
                channel = grpc.aio.secure_channel(endpoint, self._security.credentials())
            else:
                channel = grpc.aio.insecure_channel(endpoint)
            self._channels[endpoint] = channel
        return annal_pb2_grpc.BrokerControlStub(channel)

    async def write(self, marker: Marker, still_valid: Callable[[], bool]) -> bool:
        """True once every partition holds ``marker``; False when this broker may
        no longer complete the transaction (see the module docstring)."""
        remaining = set(marker.partitions)
        backoff = Backoff(self._max_backoff_s)
        while remaining:
            if not still_valid():
                return False
            snapshot = self._metadata()
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in list(remaining):
                if tp.topic not in snapshot.topics:
                    logger.info("%s is gone: no %s marker for it", tp, _word(marker))
                    remaining.discard(tp)
                    continue
                leader = snapshot.leader_of(tp.topic, tp.partition)
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            sent = [
                self._send(snapshot, broker_id, marker, tps) for broker_id, tps in by_leader.items()
            ]
            for done, fenced in await asyncio.gather(*sent):
                if fenced:
                    logger.info(
                        "%s marker of producer %d: a newer coordinator has taken over",
                        _word(marker), marker.producer_id,
                    )  # fmt: skip
                    return False
                remaining.difference_update(done)
            if remaining:
                await asyncio.sleep(backoff.next())
        return True

    async def _send(
        self,
        snapshot: MetadataSnapshot,
        broker_id: int,
        marker: Marker,
        partitions: list[TopicPartition],
    ) -> tuple[set[TopicPartition], bool]:
        """(the partitions now holding the marker, whether a leader fenced us)."""
        broker = snapshot.brokers[broker_id]
        endpoint = f"{broker.host}:{broker.port}"
        try:
            response = await self._stub(endpoint).WriteTxnMarkers(
                marker.request(partitions), timeout=REQUEST_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            logger.info(
                "%s markers to broker %d failed (%s); trying again",
                _word(marker), broker_id, exc.code().name,
            )  # fmt: skip
            return set(), False
        done: set[TopicPartition] = set()
        fenced = False
        for result in response.markers:
            for p in result.partitions:
                tp = TopicPartition(p.topic, p.partition)
                if p.error == errors.NONE.number:
                    done.add(tp)
                elif p.error in _FENCED:
                    fenced = True
                elif p.error not in _RETRY:
                    # refused for good (Kafka treats these as the partition's own
                    # failure): the transaction cannot wait on it forever
                    logger.error(
                        "%s marker of producer %d refused by %s: %s",
                        _word(marker), marker.producer_id, tp,
                        errors.from_wire(p.error).name,
                    )  # fmt: skip
                    done.add(tp)
        return done, fenced

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()


def _word(marker: Marker) -> str:
    return "COMMIT" if marker.commit else "ABORT"
