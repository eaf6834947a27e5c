"""WriteTxnMarkers on a partition leader: the transaction coordinator's COMMIT and
ABORT markers (KIP-98; Kafka's KafkaApis.handleWriteTxnMarkersRequest).

For each marker of a request (one producer's transaction) and each of its
partitions, in request order, the leader appends one control batch
(``ReplicaManager.append_control``): a partition whose name or index is not
one (the port is the clients' too) is refused as Produce refuses it,
UNKNOWN_TOPIC_OR_PARTITION when this
broker does not host the partition, NOT_LEADER_OR_FOLLOWER when it does not
lead it (or is fenced), NOT_ENOUGH_REPLICAS when its ISR is smaller than
``min.insync.replicas``, INVALID_PRODUCER_EPOCH for a producer epoch older
than the partition's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch
older than the producer's last marker.  Kafka writes markers with acks=-1, so
the appended partitions are answered once the ISR holds their markers
(NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT otherwise), within
``timeout_ms`` (Kafka's request.timeout.ms, 30 s, cut at the caller's
deadline).

A marker durably written to a partition of ``__consumer_offsets`` completes
the transactional offset commits of its producer there: ``written(partition
index, producer id, commit)`` is called then (the group coordinator's
``complete_txn``); should it raise, that partition is answered
UNKNOWN_SERVER_ERROR, as Kafka answers it.

Only brokers send this (ClusterAction on the cluster: the callers check;
``refused_markers`` builds the answer that refuses every partition).  The
request and its answer are the broker's own types (``broker/requests/txn_types.py``),
to which the BrokerControl rpc and Kafka's listener each adapt.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from annal.broker.groups.coordinator import OFFSETS_TOPIC
from annal.broker.replication.replica_manager import AppendResult, ReplicaManager
from annal.broker.requests import request_checks as checks
from annal.broker.requests import txn_types as tt
from annal.storage.files import TopicPartition

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 30_000

# (appended partition -> its last offset, timeout ms) -> (error, message) per partition
AwaitReplication = Callable[
    [dict[TopicPartition, int], int], Awaitable[dict[TopicPartition, tuple[ErrorCode, str]]]
]
# (partition index of __consumer_offsets, producer id, commit)
MarkerWritten = Callable[[int, int, bool], None]

_Slot = tuple[int, int]  # (marker index, partition index within the marker's answer)


class TxnMarkerWriter:
    """See the module docstring.  Without ``await_replication`` the answer comes
    right after the leader's appends (an ISR of one, or tests)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        await_replication: AwaitReplication | None = None,
        written: MarkerWritten | None = None,
    ) -> None:
        self._replicas = replicas
        self._await_replication = await_replication
        self._written = written

    async def write(
        self, request: tt.WriteTxnMarkersRequest, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> tt.WriteTxnMarkersResponse:
        response = tt.WriteTxnMarkersResponse()
        appended: dict[TopicPartition, int] = {}
        slots: dict[_Slot, TopicPartition] = {}
        for m, marker in enumerate(request.markers):
            out = tt.WritableTxnMarkerResult(marker.producer_id)
            response.markers.append(out)
            commit = marker.transaction_result
            for topic in marker.topics:
                for index in topic.partition_indexes:
                    tp = TopicPartition(topic.name, index)
                    refusal = checks.topic_partition(topic.name, index)
                    result = (
                        AppendResult(refusal.error, message=refusal.message)
                        if refusal is not None
                        else self._replicas.append_control(
                            tp,
                            marker.producer_id,
                            marker.producer_epoch,
                            commit,
                            marker.coordinator_epoch,
                        )
                    )
                    if result.error != errors.NONE:
                        logger.info(
                            "%s marker of producer %d (epoch %d, coordinator epoch %d) not "
                            "written to %s: %s",
                            _word(commit), marker.producer_id, marker.producer_epoch,
                            marker.coordinator_epoch, tp, result.message or result.error.name,
                        )  # fmt: skip
                    else:
                        appended[tp] = max(appended.get(tp, -1), result.last_offset)
                        slots[(m, len(out.partitions))] = tp
                    out.partitions.append(
                        tt.PartitionResult(topic.name, index, result.error.number)
                    )
        if not slots:
            return response
        outcomes: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        if self._await_replication is not None:
            outcomes = await self._await_replication(appended, timeout_ms)
        for (m, slot), tp in slots.items():
            error, message = outcomes.get(tp, (errors.NONE, ""))
            marker = request.markers[m]
            if error == errors.NONE and tp.topic == OFFSETS_TOPIC:
                error = self._completed(tp.partition, marker.producer_id, marker.transaction_result)
            elif error != errors.NONE:
                logger.info("marker of producer %d on %s: %s", marker.producer_id, tp, message)
            response.markers[m].partitions[slot].error = error.number
        return response

    def _completed(self, index: int, producer_id: int, commit: bool) -> ErrorCode:
        """Tell the group coordinator; UNKNOWN_SERVER_ERROR when that fails."""
        if self._written is None:
            return errors.NONE
        try:
            self._written(index, producer_id, commit)
        except Exception:
            logger.exception(
                "completing the transactional offset commits of producer %d on %s-%d",
                producer_id, OFFSETS_TOPIC, index,
            )  # fmt: skip
            return errors.UNKNOWN_SERVER_ERROR
        return errors.NONE


def refused_markers(
    request: tt.WriteTxnMarkersRequest, error: ErrorCode
) -> tt.WriteTxnMarkersResponse:
    """Every partition of every marker answered ``error``."""
    return tt.WriteTxnMarkersResponse(
        [
            tt.WritableTxnMarkerResult(
                marker.producer_id,
                [
                    tt.PartitionResult(topic.name, index, error.number)
                    for topic in marker.topics
                    for index in topic.partition_indexes
                ],
            )
            for marker in request.markers
        ]
    )


def _word(commit: bool) -> str:
    return "COMMIT" if commit else "ABORT"
