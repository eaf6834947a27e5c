"""The transactional producer (KIP-98; docs/transactions.md): the part of
annal's ``Producer`` that Kafka's clients call the TransactionManager.

A producer made with a ``transactional_id`` is idempotent and writes its
records in transactions, with Kafka's methods (``TransactionMethods``, mixed
into ``Producer``):

* ``init_transactions()`` finds the id's transaction coordinator
  (FindCoordinator, key type 1) and gets the producer id and epoch from it
  (InitProducerId).  A newer epoch fences every older producer with the same
  id; an open transaction of one is aborted first (the coordinator answers
  CONCURRENT_TRANSACTIONS meanwhile, which is retried).
* ``begin_transaction()`` opens a transaction, on this side only.
* ``send`` within it: before the first batch to a partition leaves, the
  sender thread adds the partition to the transaction (AddPartitionsToTxn),
  for every partition of its round and every partition with records waiting,
  in one request.  Batches are transactional (the attribute bit 4) with the
  producer id, epoch and sequence numbers, which start at 0 for each epoch.
* ``send_offsets_to_transaction(offsets, group_id)`` adds the group's offsets
  partition (AddOffsetsToTxn) and commits the offsets to the group's
  coordinator (TxnOffsetCommit); the group sees them only if the transaction
  commits.
* ``commit_transaction()`` sends everything waiting, waits for every
  acknowledgement, then asks the coordinator to commit (EndTxn).
* ``abort_transaction()`` drops what was not sent yet (its futures fail with
  OPERATION_NOT_ATTEMPTED), waits for what is in flight, then asks the
  coordinator to abort.  When a batch's outcome is unknown (it ran out of
  retries, or was refused for its sequence), the epoch is bumped afterwards
  with InitProducerId carrying the current id and epoch (KIP-360), so that
  the next transaction's sequences start afresh.

The requests themselves, their retries (COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, for up
to ``max_block_ms`` or the ``timeout_s`` given) and what their errors mean are
in ``txn_requests.py``.  What fails is a ``TransactionError``:

* fatal (``fatal``): PRODUCER_FENCED and INVALID_PRODUCER_EPOCH
  (``ProducerFencedError``: a newer producer with the same id started, or the
  coordinator aborted this transaction for its timeout),
  INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED.  Every
  method refuses from then on, naming the error: close the producer.
* abortable (``abortable``): anything else that failed the transaction (a
  record refused, a topic the producer may not write, offsets the group
  refused).  ``send`` and ``commit_transaction`` refuse; ``abort_transaction``
  works, and then a new transaction can begin.
* ``retriable``: ``commit_transaction`` or ``abort_transaction`` that ran out of
  time (``max_block_ms``, or the ``timeout_s`` given) may be called again.

Methods called out of order raise ``TransactionStateError`` naming what to
call first, and change nothing.  ``close()`` aborts an open transaction, as
Kafka's producer does when closed.

The states are Kafka's: UNINITIALIZED, INITIALIZING, READY, IN_TRANSACTION,
COMMITTING, ABORTING, ABORTABLE_ERROR, FATAL_ERROR.

Thread safety: the state is guarded by the producer's mutex (``send`` checks
it while holding it); coordinator requests run on the caller's thread, except
AddPartitionsToTxn, which runs on the sender thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, NoReturn

from annal.producer.txn_requests import (
    ProducerFencedError,
    ProducerIds,
    TransactionError,
    TransactionStateError,
    TxnRequests,
    classify,
)

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

if TYPE_CHECKING:
    import threading

    from annal.producer.producer import Producer, _Batch

__all__ = [
    "ProducerFencedError",
    "TransactionError",
    "TransactionManager",
    "TransactionMethods",
    "TransactionStateError",
    "TxnState",
]

logger = logging.getLogger(__name__)


class TxnState(Enum):
    """Kafka's TransactionManager states."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionManager:
    """See the module docstring; one per transactional ``Producer``."""

    def __init__(
        self, producer: Producer, transactional_id: str, timeout_ms: int, lock: threading.Lock
    ) -> None:
        if timeout_ms <= 0:
            raise ValueError(f"transaction_timeout_ms must be positive, not {timeout_ms}")
        self._producer = producer
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._lock = lock  # the producer's mutex
        self.state = TxnState.UNINITIALIZED
        self._error: TransactionError | None = None  # why ABORTABLE_ERROR or FATAL_ERROR
        self._partitions: set[TopicPartition] = set()  # added to the open transaction
        self._started = False  # the coordinator holds an open transaction of ours
        self._ending: bool | None = None  # the EndTxn sent (True: commit), None before
        self._bump_needed = False  # a batch's outcome is unknown: new epoch after the abort
        self._requests = TxnRequests(
            producer.cluster, transactional_id, timeout_ms, producer.request_timeout_s
        )

    # -- the application's calls ----------------------------------------------------

    def init_transactions(self, timeout_s: float | None = None) -> None:
        with self._lock:
            if self.state is not TxnState.UNINITIALIZED:
                raise self._refusal("init_transactions()")
            self.state = TxnState.INITIALIZING
        try:
            producer_id, epoch = self._requests.init_producer_id(None, self._deadline(timeout_s))
        except TransactionError as exc:
            with self._lock:
                if exc.fatal:
                    self.state, self._error = TxnState.FATAL_ERROR, exc
                else:
                    self.state = TxnState.UNINITIALIZED  # may be called again
            raise
        with self._lock:
            self._set_producer(producer_id, epoch)
            self.state = TxnState.READY

    def begin_transaction(self) -> None:
        with self._lock:
            if self.state is not TxnState.READY:
                raise self._refusal("begin_transaction()")
            self.state = TxnState.IN_TRANSACTION

    def send_offsets(
        self, offsets: Mapping[TopicPartition, int], group_id: str, timeout_s: float | None
    ) -> None:
        if not group_id:
            raise ValueError("send_offsets_to_transaction() needs a group id")
        positions = {TopicPartition(*key): offset for key, offset in offsets.items()}
        for tp, offset in positions.items():
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"the offset of {tp} must be a non-negative int, not {offset!r}")
        with self._lock:
            if self.state is not TxnState.IN_TRANSACTION:
                raise self._refusal("send_offsets_to_transaction()")
        deadline = self._deadline(timeout_s)
        try:
            self._requests.add_offsets(self._ids(), group_id, deadline)
            with self._lock:
                self._started = True
            self._requests.txn_offset_commit(self._ids(), group_id, positions, deadline)
        except TransactionError as exc:
            self._fail(exc, may_retry=False)

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        with self._lock:
            if self.state is TxnState.IN_TRANSACTION:
                self.state = TxnState.COMMITTING
            elif self.state is not TxnState.COMMITTING:  # COMMITTING: called again
                raise self._refusal("commit_transaction()")
        deadline = self._deadline(timeout_s)
        self._flush("commit_transaction()", deadline)
        with self._lock:
            if self.state is not TxnState.COMMITTING:  # a record failed meanwhile
                raise self._refusal("commit_transaction()")
            started, self._ending = self._started, True
        if started:
            try:
                self._requests.end_txn(self._ids(), True, deadline)
            except TransactionError as exc:
                self._fail(exc, may_retry=True)
        self._completed()

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        with self._lock:
            abortable = (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING)
            if self.state in abortable or (
                self.state is TxnState.COMMITTING and self._ending is None
            ):
                self.state = TxnState.ABORTING
            else:
                raise self._refusal("abort_transaction()")
        deadline = self._deadline(timeout_s)
        in_doubt = self._producer._drop_unsent(
            errors.OPERATION_NOT_ATTEMPTED,
            f"the transaction of {self.transactional_id!r} was aborted before this record was sent",
        )
        self._flush("abort_transaction()", deadline)
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                raise self._refusal("abort_transaction()")
            self._bump_needed = self._bump_needed or in_doubt
            started, bump, self._ending = self._started, self._bump_needed, False
            current = (self._producer.producer_id, self._producer.producer_epoch)
        try:
            if started:
                self._requests.end_txn(current, False, deadline)
            if bump:  # KIP-360: the next transaction's sequences start afresh
                producer_id, epoch = self._requests.init_producer_id(current, deadline)
                with self._lock:
                    self._set_producer(producer_id, epoch)
        except TransactionError as exc:
            self._fail(exc, may_retry=True)
        self._completed()

    def close(self, timeout_s: float | None) -> None:
        """Abort an open transaction (the producer is closing); failures are logged."""
        with self._lock:
            open_states = (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING)
            if self.state not in open_states:
                return
        logger.info("closing: aborting the open transaction of %r", self.transactional_id)
        try:
            self.abort_transaction(timeout_s)
        except TransactionError as exc:
            logger.warning(
                "aborting the transaction of %r on close: %s", self.transactional_id, exc
            )

    # -- the producer's calls ---------------------------------------------------------

    def check_send(self) -> None:
        """Refuse a send outside an open transaction (callers hold the mutex)."""
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refusal("send()")

    def prepare_send(self, groups: dict[str, list[_Batch]]) -> bool:
        """Before a send round leaves (sender thread): add its partitions, and those
        with records waiting, to the transaction.  False when the round cannot go:
        its batches failed (the transaction failed, or is being aborted)."""
        producer = self._producer
        with self._lock:
            failure = self._error
            if failure is None and self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                failure = TransactionError(
                    errors.OPERATION_NOT_ATTEMPTED,
                    f"the transaction of {self.transactional_id!r} is being aborted",
                )
            wanted = {TopicPartition(b.topic, b.partition) for g in groups.values() for b in g}
            new = wanted - self._partitions
            if new:  # and every other partition with records waiting: one request
                new |= (producer._open.keys() | producer._ready.keys()) - self._partitions
        if failure is None and new:
            try:
                self._requests.add_partitions(
                    self._ids(), new, self._deadline(None), self._cancelled
                )
            except TransactionError as exc:
                failure = self._failed(exc)
            else:
                with self._lock:
                    self._partitions |= new
                    self._started = True
        if failure is not None:
            producer._abandon(groups, failure.code, failure.message)
            return False
        return True

    def batch_failed(self, batch: _Batch, error: ErrorCode, message: str, in_doubt: bool) -> None:
        """A batch of the transaction failed (an I/O thread; the mutex is not held):
        the transaction can only be aborted, or the producer is fenced.
        ``in_doubt``: the log may hold it, so the epoch must be bumped."""
        tp = TopicPartition(batch.topic, batch.partition)
        exc = classify(error, f"a record of the transaction was not written to {tp}: {message}")
        with self._lock:
            self._bump_needed = self._bump_needed or in_doubt
        self._failed(exc)

    # -- state ------------------------------------------------------------------------

    def _refusal(self, what: str) -> TransactionError:
        """Why ``what`` cannot be done in the current state (callers hold the mutex)."""
        state, tid = self.state, self.transactional_id
        error = self._error
        if state is TxnState.FATAL_ERROR and error is not None:
            message = f"{what} is refused: the producer had a fatal error ({error}); close it"
            if isinstance(error, ProducerFencedError):
                return ProducerFencedError(error.code, message)
            return TransactionError(error.code, message, fatal=True)
        if state is TxnState.ABORTABLE_ERROR and error is not None:
            return TransactionError(
                error.code,
                f"{what} is refused: the transaction failed ({error}); call "
                "abort_transaction(), then begin_transaction() for a new one",
                abortable=True,
            )
        advice = {
            TxnState.UNINITIALIZED: "call init_transactions() first, then begin_transaction()",
            TxnState.INITIALIZING: "init_transactions() has not finished",
            TxnState.READY: "no transaction is open: call begin_transaction() first",
            TxnState.IN_TRANSACTION: "a transaction is open already: commit_transaction() "
            "or abort_transaction() it first",
            TxnState.COMMITTING: "commit_transaction() has not finished: call it again",
            TxnState.ABORTING: "abort_transaction() has not finished: call it again",
        }.get(state, f"not in state {state.name}")
        return TransactionStateError(f"{what} with transactional_id {tid!r}: {advice}")

    def _failed(self, exc: TransactionError, *, may_retry: bool = False) -> TransactionError:
        """Record a failure: fatal ones end the producer, others fail an open
        transaction (unless ``may_retry`` and the same call may be made again).
        The error to raise."""
        with self._lock:
            if exc.fatal:
                if self.state is not TxnState.FATAL_ERROR:
                    self.state, self._error = TxnState.FATAL_ERROR, exc
                return exc
            if may_retry and exc.retriable:
                return exc
            if not exc.abortable:
                exc = TransactionError(exc.code, exc.message, abortable=True)
            if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                self.state, self._error = TxnState.ABORTABLE_ERROR, exc
            return exc

    def _fail(self, exc: TransactionError, *, may_retry: bool) -> NoReturn:
        failure = self._failed(exc, may_retry=may_retry)
        if failure is exc:
            raise exc
        raise failure from exc

    def _completed(self) -> None:
        with self._lock:
            self.state = TxnState.READY
            self._partitions.clear()
            self._started = False
            self._ending = None
            self._error = None

    def _set_producer(self, producer_id: int, epoch: int) -> None:
        """A new producer id or epoch: every partition's sequences start at 0
        (callers hold the mutex)."""
        producer = self._producer
        producer.producer_id, producer.producer_epoch = producer_id, epoch
        producer._sequences.clear()
        self._bump_needed = False
        logger.info("transactional id %r: producer id %d, epoch %d",
                    self.transactional_id, producer_id, epoch)  # fmt: skip

    def _ids(self) -> ProducerIds:
        return self._producer.producer_id, self._producer.producer_epoch

    def _cancelled(self) -> TransactionError | None:
        """Why the sender's AddPartitionsToTxn should stop: abort_transaction()
        drops the batches it is for."""
        if self.state is TxnState.ABORTING:
            return TransactionError(
                errors.OPERATION_NOT_ATTEMPTED, "the transaction is being aborted"
            )
        return None

    def _deadline(self, timeout_s: float | None) -> float:
        return time.monotonic() + (self._producer.max_block_s if timeout_s is None else timeout_s)

    def _flush(self, what: str, deadline: float) -> None:
        try:
            self._producer.flush(max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            raise TransactionError(
                errors.REQUEST_TIMED_OUT, f"{what} ran out of time: {exc}; call it again"
            ) from exc


class TransactionMethods:
    """Kafka's transactional methods of ``Producer`` (module docstring); each
    raises TransactionStateError on a producer without a ``transactional_id``."""

    _txn: TransactionManager | None

    def _transactions(self, what: str) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError(
                f"{what} needs a transactional producer: give it a transactional_id"
            )
        return self._txn

    @property
    def transactional_id(self) -> str | None:
        return None if self._txn is None else self._txn.transactional_id

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """Find the transaction coordinator and get this transactional id's
        producer id and a new epoch, fencing older producers with the same id
        (and aborting their open transaction).  Once per producer; waits up to
        ``timeout_s`` (``max_block_ms`` when None)."""
        self._transactions("init_transactions()").init_transactions(timeout_s)

    def begin_transaction(self) -> None:
        """Open a transaction: what is sent until it ends is committed or aborted
        as one."""
        self._transactions("begin_transaction()").begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_id: str,
        timeout_s: float | None = None,
    ) -> None:
        """Commit ``offsets`` (the next offset to consume of each partition, keyed by
        TopicPartition or a plain (topic, partition) tuple) for ``group_id`` as
        part of the open transaction: the group sees them only if it commits."""
        self._transactions("send_offsets_to_transaction()").send_offsets(
            offsets, group_id, timeout_s
        )

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Send everything waiting, wait for every acknowledgement, then commit.
        A failed record fails the commit (abortable: call ``abort_transaction()``)."""
        self._transactions("commit_transaction()").commit_transaction(timeout_s)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Drop what was not sent, wait for what is in flight, then abort: nothing
        of the transaction becomes visible to read_committed consumers."""
        self._transactions("abort_transaction()").abort_transaction(timeout_s)
