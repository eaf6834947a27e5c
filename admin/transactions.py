"""Transaction administration over the brokers' gRPC API, as Kafka's Admin client
does it for kafka-transactions.sh (KIP-664; docs/transactions.md):

* ``list_transactions``: ListTransactions of every live broker (each answers
  for the transactional ids it coordinates), merged, each with its coordinator;
* ``describe_transaction``: FindCoordinator (key type 1), then
  DescribeTransactions on that broker;
* ``describe_producers``: DescribeProducers of partitions on their leaders;
* ``find_hanging``: Kafka's FindHangingTransactions: of the partitions searched,
  the open transactions (a producer with a current transaction start offset)
  open longer than the largest transaction timeout a producer may have, whose
  producer id no coordinator lists, whose transactional id the coordinator does
  not know, or whose transaction the coordinator does not hold Ongoing or
  Prepare* with that partition in it: nobody will ever write their marker;
* ``abort_transaction``: Kafka's Admin.abortTransaction: an ABORT marker for
  the producer, written by the partition's leader as a transaction coordinator
  would have it written (BrokerControl.WriteTxnMarkers; the caller needs
  ClusterAction on the cluster).  ``abort_spec_at`` finds the producer, epoch
  and coordinator epoch from the open transaction that starts at an offset.

Requests that meet a moved leader or coordinator (or one still loading) are
asked again, with the clients' backoff (``client/retry.py``), until the
client's timeout; any other refusal is an ``AdminError`` naming what was asked
of whom.

Thread safety: as the ``AdminClient`` it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from annal.admin.client import AdminClient, AdminError
from annal.client.cluster import ClientError
from annal.client.retry import retrying
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors
from annal.topic_partition import TopicPartition

T = TypeVar("T")

TRANSACTION_KEY = 1  # FindCoordinator's key type of a transactional id
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60_000  # Kafka's transaction.max.timeout.ms
OPEN_STATES = frozenset(("Ongoing", "PrepareCommit", "PrepareAbort"))
BATCH = 500  # partitions per DescribeProducers request, as Kafka's tool sends them
# answers that mean "ask again": a leader or coordinator moved, or is loading
RETRIED = frozenset((
    errors.NOT_LEADER_OR_FOLLOWER, errors.LEADER_NOT_AVAILABLE, errors.NOT_COORDINATOR,
    errors.COORDINATOR_NOT_AVAILABLE, errors.COORDINATOR_LOAD_IN_PROGRESS,
))  # fmt: skip


@dataclass(frozen=True, slots=True, order=True)
class TransactionListing:
    """One transactional id a coordinator knows (``list_transactions``)."""

    coordinator: int
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (``describe_transaction``)."""

    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # when the current transaction began; -1 when none is
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True, order=True)
class ProducerState:
    """One producer of a partition's leader (DescribeProducers); -1 for what it
    has none of."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_start_offset >= 0


@dataclass(frozen=True, slots=True, order=True)
class OpenTransaction:
    """A producer's open transaction on one partition."""

    partition: TopicPartition
    producer: ProducerState


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """What an ABORT marker for a hanging transaction carries (Kafka's
    AbortTransactionSpec)."""

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def open_transactions(
    producers: Mapping[TopicPartition, Sequence[ProducerState]],
    now_ms: int,
    max_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
) -> list[OpenTransaction]:
    """The transactions open longer than ``max_timeout_ms`` (since their producer's
    last batch, as Kafka's tool measures it): no coordinator lets one run so long."""
    return sorted(
        OpenTransaction(tp, p)
        for tp, states in producers.items()
        for p in states
        if p.in_transaction and now_ms - p.last_timestamp_ms > max_timeout_ms
    )


def hanging_transactions(
    candidates: Iterable[OpenTransaction],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TransactionDescription | None],
) -> list[OpenTransaction]:
    """Of the open transactions, those their coordinator will never end: no
    transactional id lists their producer id, the id is unknown (None), or its
    transaction is not Ongoing/Prepare* with their partition in it."""
    out = []
    for txn in candidates:
        transactional_id = transactional_ids.get(txn.producer.producer_id)
        found = descriptions.get(transactional_id) if transactional_id is not None else None
        if found is None or found.state not in OPEN_STATES or txn.partition not in found.partitions:
            out.append(txn)
    return sorted(out)


class TransactionAdmin:
    """See the module docstring; the cluster is ``admin``'s."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin
        self._cluster = admin.cluster
        self.timeout_s = admin.timeout_s

    # -- coordinators -----------------------------------------------------------------

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        """Every transactional id the coordinators know (only those in ``states``,
        of ``producer_ids``, when given), by coordinator and id."""
        request = pb.ListTransactionsRequest(
            state_filters=list(states), producer_id_filters=list(producer_ids)
        )
        found: list[TransactionListing] = []
        for broker, endpoint in sorted(self._brokers().items()):

            def ask(broker: int = broker, endpoint: str = endpoint) -> Any:
                answer = self._rpc(endpoint, "ListTransactions", request, f"broker {broker}")
                _raise(errors.from_wire(answer.error), f"ListTransactions on broker {broker}")
                return answer

            answer = self._retrying(ask)
            found.extend(
                TransactionListing(broker, t.transactional_id, t.producer_id, t.state)
                for t in answer.transactions
            )
        return sorted(found)

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """The transactional id's state at its coordinator; AdminError
        TRANSACTIONAL_ID_NOT_FOUND when it knows no such id."""
        return self._retrying(self._describe_once, transactional_id)

    def _describe_once(self, transactional_id: str) -> TransactionDescription:
        coordinator = self.find_coordinator(transactional_id)
        endpoint = f"{coordinator.host}:{coordinator.port}"
        request = pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])
        where = f"broker {coordinator.id}"
        (t,) = self._rpc(endpoint, "DescribeTransactions", request, where).transactions
        _raise(
            errors.from_wire(t.error),
            f"transactional id {transactional_id!r} at its coordinator, broker {coordinator.id}",
        )
        return TransactionDescription(
            coordinator.id,
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            t.state,
            t.transaction_timeout_ms,
            t.transaction_start_time_ms,
            tuple(TopicPartition(tp.topic, p) for tp in t.topics for p in tp.partitions),
        )

    def find_coordinator(self, transactional_id: str) -> pb.Broker:
        """The transaction coordinator of ``transactional_id`` (FindCoordinator, key
        type 1, asked of any bootstrap server)."""
        request = pb.FindCoordinatorRequest(group=transactional_id, key_type=TRANSACTION_KEY)
        try:
            answer = self._cluster.call_any("FindCoordinator", request)
        except ClientError as exc:
            raise AdminError(exc.code, exc.message) from exc
        error = errors.from_wire(answer.error)
        detail = answer.error_message or error.name
        _raise(error, f"coordinator of transactional id {transactional_id!r}: {detail}")
        coordinator: pb.Broker = answer.coordinator
        return coordinator

    # -- partition leaders ------------------------------------------------------------

    def describe_producers(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[ProducerState, ...]]:
        """Each partition's producers, as its leader knows them (by producer id)."""
        found: dict[TopicPartition, tuple[ProducerState, ...]] = {}
        wanted = list(dict.fromkeys(partitions))
        for start in range(0, len(wanted), BATCH):
            found.update(self._retrying(self._producers_once, wanted[start : start + BATCH]))
        return found

    def _producers_once(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[ProducerState, ...]]:
        self._refresh(sorted({tp.topic for tp in partitions}))
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            by_leader.setdefault(self._leader(tp), []).append(tp)
        found = {}
        for leader, tps in by_leader.items():
            request = pb.DescribeProducersRequest(topics=_grouped(tps))
            answer = self._rpc(leader, "DescribeProducers", request, f"the leader at {leader}")
            for p in answer.partitions:
                tp = TopicPartition(p.topic, p.partition)
                error = errors.from_wire(p.error)
                detail = p.error_message or error.name
                _raise(error, f"producers of {tp} at its leader {leader}: {detail}")
                found[tp] = tuple(_producer(s) for s in p.producers)
        return found

    def find_hanging(
        self,
        broker_id: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        max_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> list[OpenTransaction]:
        """The hanging transactions (module docstring) of ``topic`` (one
        ``partition`` of it, when given) or of every topic, in the partitions with
        a replica on ``broker_id`` when given; give ``topic`` or ``broker_id``."""
        if topic is None and broker_id is None:
            raise ValueError("give a topic or a broker id to search")
        if partition is not None and topic is None:
            raise ValueError("a partition needs its topic")
        if topic is not None and partition is not None:
            searched = [TopicPartition(topic, partition)]
        else:
            topics = self._admin.describe_topics([topic] if topic is not None else [])
            searched = [
                TopicPartition(t.name, p.partition)
                for t in topics
                for p in t.partitions
                if broker_id is None or broker_id in p.replicas
            ]
        candidates = open_transactions(self.describe_producers(searched), now_ms(), max_timeout_ms)
        if not candidates:
            return []
        pids = {c.producer.producer_id for c in candidates}
        ids = {
            t.producer_id: t.transactional_id
            for t in self.list_transactions(producer_ids=pids)
            if t.producer_id in pids
        }
        descriptions: dict[str, TransactionDescription | None] = {}
        for transactional_id in sorted(set(ids.values())):
            try:
                descriptions[transactional_id] = self.describe_transaction(transactional_id)
            except AdminError as exc:
                if exc.code is not errors.TRANSACTIONAL_ID_NOT_FOUND:
                    raise
                descriptions[transactional_id] = None
        return hanging_transactions(candidates, ids, descriptions)

    def abort_spec_at(self, tp: TopicPartition, start_offset: int) -> AbortSpec | None:
        """The abort of the open transaction of ``tp`` that starts at
        ``start_offset`` (its producer, epoch and coordinator epoch, as the
        leader knows them), or None when none starts there."""
        for p in self.describe_producers([tp])[tp]:
            if p.current_txn_start_offset == start_offset:
                return AbortSpec(tp, p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0))
        return None

    def abort_transaction(self, spec: AbortSpec) -> None:
        """Write an ABORT marker of ``spec``'s producer to its partition, through the
        partition's leader (BrokerControl.WriteTxnMarkers; ClusterAction needed)."""
        self._retrying(self._abort_once, spec)

    def _abort_once(self, spec: AbortSpec) -> None:
        tp = spec.partition
        self._refresh([tp.topic])
        leader = self._leader(tp)
        marker = pb.TxnMarker(
            producer_id=spec.producer_id,
            producer_epoch=spec.producer_epoch,
            commit=False,
            coordinator_epoch=max(spec.coordinator_epoch, 0),
            topics=[pb.TopicPartitions(topic=tp.topic, partitions=[tp.partition])],
        )
        with self._cluster.security.channel(leader) as channel:
            stub = annal_pb2_grpc.BrokerControlStub(channel)
            try:
                answer = stub.WriteTxnMarkers(
                    pb.WriteTxnMarkersRequest(markers=[marker]), timeout=self.timeout_s
                )
            except grpc.RpcError as exc:
                where = f"WriteTxnMarkers to the leader at {leader}"
                raise AdminError.from_rpc(exc, where) from exc
        for result in answer.markers:
            for p in result.partitions:
                error = errors.from_wire(p.error)
                _raise(error, f"the ABORT marker of producer {spec.producer_id} (epoch "
                       f"{spec.producer_epoch}, coordinator epoch {marker.coordinator_epoch}) "
                       f"on {tp}, at its leader {leader}")  # fmt: skip

    # -- plumbing ---------------------------------------------------------------------

    def _retrying(self, call: Callable[..., T], *args: Any) -> T:
        def retried(exc: BaseException) -> bool:
            return isinstance(exc, AdminError) and exc.code in RETRIED

        result: T = retrying(self.timeout_s, retry_on=retried)(call, *args)
        return result

    def _brokers(self) -> dict[int, str]:
        """The live brokers' gRPC endpoints, by id."""
        metadata = self._refresh([])
        return {b.id: f"{b.host}:{b.port}" for b in metadata.brokers}

    def _refresh(self, topics: Sequence[str]) -> pb.MetadataResponse:
        try:
            return self._cluster.refresh(topics)
        except ClientError as exc:
            raise AdminError(exc.code, exc.message) from exc

    def _leader(self, tp: TopicPartition) -> str:
        """The gRPC endpoint of ``tp``'s leader, as the last Metadata of its topic said."""
        if tp.topic in self._cluster.unauthorized:
            raise AdminError(
                errors.TOPIC_AUTHORIZATION_FAILED, f"not authorized to describe topic {tp.topic!r}"
            )
        count = self._cluster.partition_counts.get(tp.topic)
        if count is None or not 0 <= tp.partition < count:
            what = f"topic {tp.topic!r}" if count is None else f"partition {tp}"
            raise AdminError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"{what} does not exist")
        leader = self._cluster.leaders.get(tp)
        if leader is None:
            raise AdminError(errors.LEADER_NOT_AVAILABLE, f"{tp} has no live leader now")
        return leader

    def _rpc(self, endpoint: str, method: str, request: Any, where: str) -> Any:
        try:
            return getattr(self._cluster.stub(endpoint), method)(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise AdminError.from_rpc(exc, f"{method} to {where}") from exc


def _raise(error: errors.ErrorCode, what: str) -> None:
    """AdminError(``error``, ``what``) unless ``error`` is NONE."""
    if error is not errors.NONE:
        raise AdminError(error, what)


def _producer(s: pb.ProducerState) -> ProducerState:
    return ProducerState(
        s.producer_id,
        s.producer_epoch,
        s.last_sequence,
        s.last_timestamp_ms,
        s.coordinator_epoch,
        s.current_txn_start_offset,
    )


def _grouped(partitions: Iterable[TopicPartition]) -> list[pb.TopicPartitions]:
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [pb.TopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()]
