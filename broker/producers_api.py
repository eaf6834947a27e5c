"""DescribeProducers (KIP-664) on a partition leader: the producers its log's
producer state holds (``storage/producer_state.py``), for finding and aborting
hanging transactions (``annal transactions``, docs/transactions.md).

Each partition asked for is answered as Kafka 3.0's
``KafkaApis.handleDescribeProducersRequest`` answers it, topic by topic:

* an illegal topic name: INVALID_TOPIC_EXCEPTION;
* no Read on the topic: TOPIC_AUTHORIZATION_FAILED (the message names the
  caller);

then partition by partition: a partition led here (and not fenced:
``broker/replication/leadership_fence.py``) is answered with one ``ProducerState`` per
producer id (epoch, last sequence, last batch's timestamp, the coordinator
epoch of its last marker, the first offset of its open transaction, -1 for
those it has none of); one hosted but not led, or one that exists elsewhere,
NOT_LEADER_OR_FOLLOWER (Kafka answers followers too; annal answers only
leaders, which hold the state a hanging transaction is judged and aborted
by); a negative index, or a partition neither hosted here nor in the
metadata cache, UNKNOWN_TOPIC_OR_PARTITION; a storage failure reading the
state, its own code.

Requests and answers are the broker's own types (``broker/requests/producer_types.py``):
one topic answered per topic asked for, its partitions in the order asked.

Thread safety: runs on the broker's event loop; reading a log's producer
state takes that log's lock for a copy of the table.
"""

from __future__ import annotations

from collections.abc import Callable

from annal.broker.metadata_cache import MetadataSnapshot
from annal.broker.replication.replica_manager import ReplicaManager
from annal.broker.requests import producer_types as pt
from annal.broker.requests import request_checks as checks
from annal.broker.security.authorization import ALLOW_ALL, RequestAuthorizer
from annal.security.acl import AclOperation
from annal.security.session import Session
from annal.storage.errors import StorageError
from annal.storage.files import TopicPartition
from annal.storage.producer_state import ProducerStateEntry

from annal import errors
from annal.errors import ErrorCode


class ProducersApi:
    """See the module docstring.  ``metadata`` gives the broker's metadata cache
    (which topics and partitions exist); without it only hosted partitions are
    known."""

    def __init__(
        self,
        replicas: ReplicaManager,
        authorizer: RequestAuthorizer = ALLOW_ALL,
        metadata: Callable[[], MetadataSnapshot] | None = None,
    ) -> None:
        self._replicas = replicas
        self._authorizer = authorizer
        self._metadata = metadata or MetadataSnapshot

    def describe_producers(
        self, request: pt.DescribeProducersRequest, session: Session
    ) -> pt.DescribeProducersResponse:
        response = pt.DescribeProducersResponse()
        cache = self._metadata()
        refused = self._authorizer.refused_topics(
            session, AclOperation.READ, {t.name for t in request.topics}
        )
        for topic in request.topics:
            refusal = checks.topic_name(topic.name)
            error, message = (refusal.error, refusal.message) if refusal else (errors.NONE, "")
            if error is errors.NONE and topic.name in refused:
                error, message = errors.TOPIC_AUTHORIZATION_FAILED, refused[topic.name].message
            answered = pt.TopicProducers(topic.name)
            response.topics.append(answered)
            for index in topic.partition_indexes:
                out = pt.PartitionProducers(index)
                answered.partitions.append(out)
                tp = TopicPartition(topic.name, index)
                if error is errors.NONE:
                    self._describe(tp, cache, out)
                else:
                    _refuse(out, error, message)
        return response

    def _describe(
        self, tp: TopicPartition, cache: MetadataSnapshot, out: pt.PartitionProducers
    ) -> None:
        partition = self._replicas.partition(tp) if tp.partition >= 0 else None
        if partition is None:
            if tp.partition in cache.topics.get(tp.topic, {}):
                _refuse(
                    out, errors.NOT_LEADER_OR_FOLLOWER,
                    f"broker {self._replicas.broker_id} does not lead {tp}",
                )  # fmt: skip
            else:
                _refuse(out, errors.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
            return
        if not partition.leads_now:
            refusal = self._replicas.fence.refusal(tp)
            _refuse(
                out, errors.NOT_LEADER_OR_FOLLOWER,
                refusal or f"broker {self._replicas.broker_id} does not lead {tp}",
            )  # fmt: skip
            return
        try:
            producers = partition.log.producer_state()
        except StorageError as exc:
            _refuse(out, exc.code, str(exc))
            return
        out.active_producers.extend(producer_state(e) for _, e in sorted(producers.items()))


def producer_state(entry: ProducerStateEntry) -> pt.ProducerState:
    """One producer of a partition's producer state, as DescribeProducers gives it."""
    return pt.ProducerState(
        entry.producer_id,
        entry.producer_epoch,
        entry.last_seq,
        entry.last_timestamp,
        entry.coordinator_epoch,
        entry.current_txn_first_offset,
    )


def _refuse(out: pt.PartitionProducers, error: ErrorCode, message: str) -> None:
    out.error = error.number
    out.error_message = message
