"""What a transactional producer asks the coordinators (KIP-98;
docs/transactions.md), and what their answers mean for it: Kafka's
TransactionManager request handlers, for annal's ``TransactionManager``
(``transactions.py``).

Every request goes to its coordinator, found with FindCoordinator (key type 1
for the transactional id, 0 for a consumer group) and remembered.  Answers
that mean "later" or "elsewhere" (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS,
UNKNOWN_TOPIC_OR_PARTITION, an unreachable or timed-out broker) are asked
again with the clients' backoff (``client/retry.py``) until the deadline,
the coordinator looked up again where it may have moved.  Anything else is a
``TransactionError`` (``classify``):

* fatal: PRODUCER_FENCED and INVALID_PRODUCER_EPOCH (``ProducerFencedError``),
  INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED;
* abortable: the rest (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
  ILLEGAL_GENERATION, ...);
* a retriable error still answered at the deadline is raised as it is
  (``retriable``): the caller decides.

Thread safety: the remembered coordinators are a dict replaced key by key;
requests run on their caller's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import grpc
import tenacity
from annal.client.cluster import ClientError, ClusterConnection
from annal.client.coordinator import GROUP_KEY, TRANSACTION_KEY, find_coordinator
from annal.client.retry import retrying
from annal.v1 import annal_pb2 as pb

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

T = TypeVar("T")
ProducerIds = tuple[int, int]  # (producer id, epoch)

_FENCED = frozenset({errors.PRODUCER_FENCED, errors.INVALID_PRODUCER_EPOCH})
_FATAL = _FENCED | {
    errors.INVALID_PRODUCER_ID_MAPPING,
    errors.INVALID_TXN_STATE,
    errors.INVALID_TRANSACTION_TIMEOUT,
    errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    errors.CLUSTER_AUTHORIZATION_FAILED,
}


class TransactionError(ClientError):
    """A transaction that failed (``transactions.py``): ``fatal`` (close the
    producer), ``abortable`` (call ``abort_transaction()``), or neither:
    ``retriable`` (call the same method again) or a method called out of order."""

    def __init__(
        self, error: ErrorCode | str, message: str = "", *, fatal: bool = False,
        abortable: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(error, message)
        self.fatal = fatal
        self.abortable = abortable and not fatal


class ProducerFencedError(TransactionError):
    """Fatal: another producer with the same transactional id started (or the
    coordinator aborted this producer's transaction for its timeout)."""

    def __init__(self, error: ErrorCode | str, message: str = "") -> None:
        super().__init__(error, message, fatal=True)


class TransactionStateError(TransactionError):
    """A transactional method called out of order (Kafka's IllegalStateException);
    the message says what to call first.  Nothing changed."""

    def __init__(self, message: str) -> None:
        super().__init__(errors.INVALID_TXN_STATE, message)


def classify(error: ErrorCode, message: str) -> TransactionError:
    """The exception a transactional request's ``error`` stands for."""
    if error in _FENCED:
        return ProducerFencedError(
            error,
            f"{message}: this producer is fenced (a newer producer with the same "
            "transactional id started, or the transaction outlived transaction_timeout_ms)",
        )
    if error in _FATAL:
        return TransactionError(error, message, fatal=True)
    return TransactionError(error, message, abortable=not error.retriable)


def _worst(codes: set[ErrorCode]) -> ErrorCode:
    """The error that decides for a request with several: fatal before abortable
    before retriable; OPERATION_NOT_ATTEMPTED only when it is the only one."""
    return min(
        codes,
        key=lambda c: (
            c is errors.OPERATION_NOT_ATTEMPTED, c not in _FATAL, c.retriable, c.number
        ),
    )  # fmt: skip


def _check(number: int, message: str, what: str) -> None:
    error = errors.from_wire(number)
    if error is not errors.NONE:
        raise classify(error, f"{what}: {message or error.name}")


def _check_each(refused: dict[ErrorCode, list[str]], what: str, detail: str = "") -> None:
    """Raise for the worst of per-partition errors (``refused``: error -> partitions)."""
    if refused:
        worst = _worst(set(refused))
        raise classify(worst, f"{what} of {', '.join(refused[worst])}: {detail or worst.name}")


def _by_topic(partitions: Mapping[TopicPartition, object]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        found.setdefault(topic, []).append(partition)
    return found


class TxnRequests:
    """The requests of one transactional id; see the module docstring."""

    def __init__(
        self,
        cluster: ClusterConnection,
        transactional_id: str,
        timeout_ms: int,
        request_timeout_s: float,
    ) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.request_timeout_s = request_timeout_s
        self._coordinators: dict[tuple[int, str], str] = {}  # (key type, key) -> endpoint

    def coordinator(self, key_type: int, key: str) -> str:
        found = self._coordinators.get((key_type, key))
        if found is None:
            try:
                found = find_coordinator(self.cluster, key, key_type)
            except ClientError as exc:
                raise classify(exc.code, exc.message) from exc
            self._coordinators[(key_type, key)] = found
        return found

    def _call(
        self, method: str, request: Any, key_type: int = TRANSACTION_KEY, key: str = ""
    ) -> Any:
        """``method`` at the coordinator of ``key`` (the transactional id by default)."""
        key = key or self.transactional_id
        endpoint = self.coordinator(key_type, key)
        try:
            return getattr(self.cluster.stub(endpoint), method)(
                request, timeout=self.request_timeout_s
            )
        except grpc.RpcError as exc:
            self._coordinators.pop((key_type, key), None)
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise classify(
                errors.transport_error(exc), f"{method} at {endpoint}: {details}"
            ) from exc

    def retrying(self, attempt: Callable[[], T], deadline: float) -> T:
        """``attempt`` until it succeeds, raises what may not be retried, or the
        deadline passes; coordinators are looked up again where they may have moved."""

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if isinstance(exc, ClientError) and (
                exc.code.invalid_metadata or exc.code is errors.REQUEST_TIMED_OUT
            ):
                self._coordinators.clear()
                self.cluster.move_on()

        policy = retrying(
            max(0.0, deadline - time.monotonic()),
            retry_on=lambda exc: isinstance(exc, TransactionError) and exc.retriable,
            before_sleep=before_sleep,
        )
        try:
            result: T = policy(attempt)
        except TransactionError as exc:
            if not exc.retriable:
                raise
            raise TransactionError(exc.code, f"{exc.message} (still so at the deadline)") from exc
        return result

    # -- the requests -----------------------------------------------------------------

    def init_producer_id(self, current: ProducerIds | None, deadline: float) -> ProducerIds:
        """InitProducerId: the id's producer id and a new epoch; ``current`` (the
        producer's id and epoch) asks for the next epoch of the same producer
        (KIP-360)."""
        request = pb.InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms
        )
        if current is not None:
            request.producer_id, request.producer_epoch = current

        def attempt() -> ProducerIds:
            answer = self._call("InitProducerId", request)
            _check(answer.error, answer.error_message, "InitProducerId")
            return int(answer.producer_id), int(answer.producer_epoch)

        return self.retrying(attempt, deadline)

    def add_partitions(
        self,
        ids: ProducerIds,
        partitions: set[TopicPartition],
        deadline: float,
        cancelled: Callable[[], TransactionError | None] = lambda: None,
    ) -> None:
        """AddPartitionsToTxn; ``cancelled`` (checked before each attempt) gives
        the error to stop with instead."""
        request = pb.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=ids[0], producer_epoch=ids[1]
        )
        for topic, numbers in _by_topic(dict.fromkeys(partitions)).items():
            request.topics.add(topic=topic, partitions=numbers)

        def attempt() -> None:
            stop = cancelled()
            if stop is not None:
                raise stop
            answer = self._call("AddPartitionsToTxn", request)
            refused: dict[ErrorCode, list[str]] = {}
            for r in answer.results:
                error = errors.from_wire(r.error)
                if error is not errors.NONE:
                    refused.setdefault(error, []).append(f"{r.topic}-{r.partition}")
            _check_each(refused, "AddPartitionsToTxn", answer.error_message)

        self.retrying(attempt, deadline)

    def add_offsets(self, ids: ProducerIds, group_id: str, deadline: float) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction (its coordinator is looked up first: the lookup creates that
        topic)."""
        self.retrying(lambda: self.coordinator(GROUP_KEY, group_id), deadline)
        request = pb.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=ids[0],
            producer_epoch=ids[1], group=group_id,
        )  # fmt: skip

        def attempt() -> None:
            answer = self._call("AddOffsetsToTxn", request)
            _check(answer.error, answer.error_message, f"AddOffsetsToTxn of group {group_id!r}")

        self.retrying(attempt, deadline)

    def txn_offset_commit(
        self,
        ids: ProducerIds,
        group_id: str,
        positions: Mapping[TopicPartition, int],
        deadline: float,
    ) -> None:
        """TxnOffsetCommit to the group's coordinator: pending until the
        transaction's marker reaches ``__consumer_offsets``."""
        request = pb.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group=group_id, producer_id=ids[0],
            producer_epoch=ids[1], member_id="", generation_id=-1,
        )  # fmt: skip
        for topic, numbers in _by_topic(positions).items():
            entry = request.topics.add(name=topic)
            for partition in numbers:
                entry.partitions.add(
                    partition=partition,
                    offset=positions[TopicPartition(topic, partition)],
                    leader_epoch=-1,
                )

        def attempt() -> None:
            answer = self._call("TxnOffsetCommit", request, GROUP_KEY, group_id)
            refused: dict[ErrorCode, list[str]] = {}
            for t in answer.topics:
                for p in t.partitions:
                    error = errors.from_wire(p.error)
                    if error is not errors.NONE:
                        refused.setdefault(error, []).append(f"{t.name}-{p.partition}")
            _check_each(refused, f"TxnOffsetCommit of group {group_id!r}")

        self.retrying(attempt, deadline)

    def end_txn(self, ids: ProducerIds, commit: bool, deadline: float) -> None:
        """EndTxn: the coordinator commits (or aborts) the open transaction."""
        request = pb.EndTxnRequest(
            transactional_id=self.transactional_id, producer_id=ids[0],
            producer_epoch=ids[1], commit=commit,
        )  # fmt: skip

        def attempt() -> None:
            answer = self._call("EndTxn", request)
            what = f"EndTxn({'commit' if commit else 'abort'})"
            _check(answer.error, answer.error_message, what)

        self.retrying(attempt, deadline)
