"""The transaction rpcs (gRPC and Kafka's listener): who may ask what, and the
answers' shape.  The coordinator (``coordinator.py``) decides.

Authorization, as Kafka's KafkaApis checks it:

* FindCoordinator (key type 1) and DescribeTransactions: Describe on the
  transactional id; ListTransactions lists only the ids the caller may Describe;
* InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn: Write on the
  transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
* AddPartitionsToTxn also Write on each topic (TOPIC_AUTHORIZATION_FAILED);
  a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, and when any
  partition is refused the others are OPERATION_NOT_ATTEMPTED;
* AddOffsetsToTxn also Read on the group (GROUP_AUTHORIZATION_FAILED).

``__transaction_state`` is created on the first FindCoordinator for a
transactional id (COORDINATOR_NOT_AVAILABLE until it has leaders).

Requests and answers are the broker's own types (``broker/requests/txn_types.py``;
FindCoordinator's ``group_types.py``, InitProducerId's ``producer_types.py``),
which each protocol's edge adapts to.

Thread safety: runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from annal.broker.config import BrokerConfig
from annal.broker.metadata_cache import MetadataCache
from annal.broker.producer_ids import refused_init
from annal.broker.requests import group_types as gt
from annal.broker.requests import producer_types as pt
from annal.broker.requests import txn_types as tt
from annal.broker.security.authorization import (
    ALLOW_ALL,
    GROUP,
    INTERNAL,
    TRANSACTIONAL_ID,
    RequestAuthorizer,
    denial,
)
from annal.security.acl import AclOperation, Resource
from annal.security.session import Session

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

from .coordinator import TransactionCoordinator, TxnSettings
from .log_schema import TRANSACTION_STATE_TOPIC, TxnState
from .metadata import TransactionMetadata


class TransactionApi:
    """See the module docstring."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        metadata: MetadataCache,
        create_topic: Callable[[int], Awaitable[None]],
        authorizer: RequestAuthorizer = ALLOW_ALL,
    ) -> None:
        self.coordinator = coordinator
        self._metadata = metadata
        self._create_topic = create_topic
        self._authorizer = authorizer

    def _id_refusal(
        self, session: Session, operation: AclOperation, transactional_id: str
    ) -> tuple[ErrorCode, str] | None:
        resource = Resource(TRANSACTIONAL_ID, transactional_id)
        if self._authorizer.allowed(session, operation, resource):
            return None
        return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, denial(session, operation, resource)

    async def find_coordinator(
        self, transactional_id: str, session: Session = INTERNAL
    ) -> gt.FindCoordinatorResponse:
        """The leader of the id's ``__transaction_state`` partition."""
        refusal = self._id_refusal(session, AclOperation.DESCRIBE, transactional_id)
        if refusal is None and not transactional_id:
            refusal = errors.INVALID_REQUEST, "the transactional id is empty"
        if refusal is not None:
            return gt.FindCoordinatorResponse(refusal[0].number, refusal[1])
        cache = self._metadata.snapshot()
        if TRANSACTION_STATE_TOPIC not in cache.topics:
            await self._create_topic(len(cache.brokers))
            return gt.FindCoordinatorResponse(
                errors.COORDINATOR_NOT_AVAILABLE.number,
                f"{TRANSACTION_STATE_TOPIC} is being created; ask again",
            )
        index = self.coordinator.partition_of(transactional_id)
        leader = cache.leader_of(TRANSACTION_STATE_TOPIC, index)
        if leader < 0:
            return gt.FindCoordinatorResponse(
                errors.COORDINATOR_NOT_AVAILABLE.number,
                f"{TRANSACTION_STATE_TOPIC}-{index} has no leader now",
            )
        broker = cache.brokers[leader]
        return gt.FindCoordinatorResponse(
            coordinator=gt.Coordinator(broker.broker_id, broker.host, broker.port)
        )

    async def init_producer_id(
        self, request: pt.InitProducerIdRequest, session: Session = INTERNAL
    ) -> pt.InitProducerIdResponse:
        """InitProducerId with a transactional id (Write on it); a producer id of
        -1 asks for none in particular (KIP-360's id and epoch otherwise)."""
        refusal = self._id_refusal(session, AclOperation.WRITE, request.transactional_id)
        if refusal is not None:
            return refused_init(*refusal)
        expected = None
        if request.producer_id >= 0:
            expected = (request.producer_id, request.producer_epoch)
        result = await self.coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected
        )
        if result.error != errors.NONE:
            return refused_init(result.error, result.message)
        return pt.InitProducerIdResponse(
            errors.NONE.number, result.producer_id, result.producer_epoch
        )

    async def add_partitions(
        self, request: tt.AddPartitionsToTxnRequest, session: Session = INTERNAL
    ) -> tt.AddPartitionsToTxnResponse:
        wanted = [TopicPartition(t.name, p) for t in request.topics for p in t.partitions]
        refusal = self._id_refusal(session, AclOperation.WRITE, request.transactional_id)
        if refusal is not None:
            return _per_partition(wanted, {}, refusal[0], refusal[1])
        refused_topics = self._authorizer.refused_topics(
            session, AclOperation.WRITE, {tp.topic for tp in wanted}
        )
        cache = self._metadata.snapshot()
        refused: dict[TopicPartition, ErrorCode] = {}
        message = ""
        for tp in wanted:
            if tp.topic in refused_topics:
                refused[tp] = errors.TOPIC_AUTHORIZATION_FAILED
                message = refused_topics[tp.topic].message
            elif tp.partition not in cache.topics.get(tp.topic, {}):
                refused[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
                message = message or f"{tp} does not exist"
        if refused:
            return _per_partition(wanted, refused, errors.OPERATION_NOT_ATTEMPTED, message)
        error = await self.coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, wanted
        )
        return _per_partition(wanted, {}, error, "")

    async def add_offsets(
        self, request: tt.AddOffsetsToTxnRequest, session: Session = INTERNAL
    ) -> tt.TxnResponse:
        refusal = self._id_refusal(session, AclOperation.WRITE, request.transactional_id)
        group = Resource(GROUP, request.group_id)
        if refusal is None and not self._authorizer.allowed(session, AclOperation.READ, group):
            refusal = errors.GROUP_AUTHORIZATION_FAILED, denial(session, AclOperation.READ, group)
        if refusal is not None:
            return tt.TxnResponse(refusal[0].number, refusal[1])
        error = await self.coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        return tt.TxnResponse(error.number)

    async def end_txn(
        self, request: tt.EndTxnRequest, session: Session = INTERNAL
    ) -> tt.TxnResponse:
        refusal = self._id_refusal(session, AclOperation.WRITE, request.transactional_id)
        if refusal is not None:
            return tt.TxnResponse(refusal[0].number, refusal[1])
        error, message = await self.coordinator.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed
        )
        return tt.TxnResponse(error.number, message)

    def describe(
        self, request: tt.DescribeTransactionsRequest, session: Session = INTERNAL
    ) -> tt.DescribeTransactionsResponse:
        response = tt.DescribeTransactionsResponse()
        for transactional_id in request.transactional_ids:
            refusal = self._id_refusal(session, AclOperation.DESCRIBE, transactional_id)
            if refusal is not None:
                error, meta = refusal[0], None
            else:
                error, meta = self.coordinator.describe(transactional_id)
            response.transaction_states.append(
                tt.TransactionState(error.number, transactional_id)
                if meta is None
                else _described(error, transactional_id, meta)
            )
        return response

    def listing(
        self, request: tt.ListTransactionsRequest, session: Session = INTERNAL
    ) -> tt.ListTransactionsResponse:
        known = {s.kafka_name for s in TxnState}
        states = set(request.state_filters)
        pids = set(request.producer_id_filters)
        error, found = self.coordinator.listing()
        response = tt.ListTransactionsResponse(error.number, sorted(states - known))
        for meta in found:
            if states and meta.state.kafka_name not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            resource = Resource(TRANSACTIONAL_ID, meta.transactional_id)
            if not self._authorizer.allowed(
                session, AclOperation.DESCRIBE, resource, log_denied=False
            ):
                continue
            response.transaction_states.append(
                tt.TransactionListing(
                    meta.transactional_id, meta.producer_id, meta.state.kafka_name
                )
            )
        return response


def _described(
    error: ErrorCode, transactional_id: str, meta: TransactionMetadata
) -> tt.TransactionState:
    topics: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return tt.TransactionState(
        error.number,
        transactional_id,
        meta.state.kafka_name,
        meta.timeout_ms,
        meta.start_ms,
        meta.producer_id,
        meta.producer_epoch,
        [tt.TransactionTopic(topic, partitions) for topic, partitions in topics.items()],
    )


def _per_partition(
    wanted: list[TopicPartition],
    refused: dict[TopicPartition, ErrorCode],
    others: ErrorCode,
    message: str,
) -> tt.AddPartitionsToTxnResponse:
    return tt.AddPartitionsToTxnResponse(
        [
            tt.PartitionResult(tp.topic, tp.partition, refused.get(tp, others).number)
            for tp in wanted
        ],
        message,
    )


def settings_of(config: BrokerConfig) -> TxnSettings:
    """The coordinator's settings from the broker's (Kafka's names)."""
    return TxnSettings(
        log_partitions=config.transaction_state_log_num_partitions,
        max_timeout_ms=config.transaction_max_timeout_ms,
        abort_interval_ms=config.transaction_abort_interval_ms,
        id_expiration_ms=config.transactional_id_expiration_ms,
        expiration_interval_ms=config.transaction_expiration_interval_ms,
        offsets_partitions=config.offsets_topic_num_partitions,
    )
