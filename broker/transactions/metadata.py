"""One transactional id's state at its coordinator, and its legal moves (KIP-98).

``TransactionMetadata`` holds what the coordinator knows of a transactional
id: its producer id and epoch, the state of its transaction, the partitions
in it, when it began.  Every change is two steps, as in Kafka's
TransactionMetadata: a ``prepare_*`` method checks the move and returns the
new state as a ``TxnTransit`` (and marks it pending, so that a second request
for the same id meanwhile is answered CONCURRENT_TRANSACTIONS); the
coordinator writes the transit to ``__transaction_state`` and, once the
in-sync replicas hold it, ``complete`` makes it the state (``abandon`` drops
it when the write failed).  Nothing here does I/O.

The states and the moves into each (the previous states allowed)::

    Empty              <- Empty, CompleteCommit, CompleteAbort   (InitProducerId)
    Ongoing            <- Ongoing, Empty, CompleteCommit, CompleteAbort
    PrepareCommit      <- Ongoing                                 (EndTxn commit)
    PrepareAbort       <- Ongoing                                 (EndTxn abort, fence,
                                                                   timeout)
    CompleteCommit     <- PrepareCommit                           (markers written)
    CompleteAbort      <- PrepareAbort
    Dead               <- Empty, CompleteCommit, CompleteAbort    (id expired)

Fencing (a new producer with the same transactional id, or a transaction past
its timeout) aborts the ongoing transaction with the producer epoch bumped,
so that the old producer's epoch is refused by every partition the abort
markers reach.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

from .log_schema import TxnLogValue, TxnState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 0x7FFF  # int16

_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset(
        {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset(
        {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
}


class TxnError(Exception):
    """A request that does not fit the transaction's state: its error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's rule: the last epochs are kept back, so that a fence can still bump."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """A state about to be written; see the module docstring."""

    value: TxnLogValue
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    @property
    def state(self) -> TxnState:
        return self.value.state


@dataclass(slots=True)
class TransactionMetadata:
    """See the module docstring."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.state,
            set(value.partitions),
            value.start_ms,
            value.last_update_ms,
        )

    def as_value(self) -> TxnLogValue:
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.last_update_ms,
            self.start_ms,
        )

    def __str__(self) -> str:
        return (
            f"transactional id {self.transactional_id!r} (producer {self.producer_id} "
            f"epoch {self.producer_epoch}, {self.state.kafka_name})"
        )

    # -- checks shared by the requests of a producer ------------------------------------

    def check_producer(self, producer_id: int, epoch: int) -> None:
        """The producer is the one this id holds, at its current epoch."""
        if producer_id != self.producer_id:
            raise TxnError(
                errors.INVALID_PRODUCER_ID_MAPPING,
                f"{self} does not belong to producer id {producer_id}",
            )
        if epoch != self.producer_epoch:
            raise TxnError(
                errors.PRODUCER_FENCED,
                f"producer epoch {epoch} is fenced by epoch {self.producer_epoch} of {self}",
            )

    def check_not_pending(self) -> None:
        if self.pending is not None:
            raise TxnError(
                errors.CONCURRENT_TRANSACTIONS,
                f"{self} is moving to {self.pending.kafka_name}; retry",
            )

    # -- the moves -------------------------------------------------------------------

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit:
        """InitProducerId on an idle id: the next epoch, no partitions (KIP-360: a
        producer naming its current epoch is continuing after an error; one naming
        the previous epoch is retrying an InitProducerId that succeeded)."""
        bumped = self.producer_epoch + 1
        last = NO_PRODUCER_EPOCH
        if expected_epoch is not None:
            if self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
                last = self.producer_epoch
            elif expected_epoch == self.last_producer_epoch:
                bumped, last = self.producer_epoch, self.last_producer_epoch
            else:
                raise TxnError(
                    errors.PRODUCER_FENCED,
                    f"producer epoch {expected_epoch} is neither the current nor the "
                    f"previous epoch of {self}",
                )
        value = TxnLogValue(
            self.producer_id, bumped, timeout_ms, TxnState.EMPTY, frozenset(), now_ms, -1
        )
        self.pending = TxnState.EMPTY
        return TxnTransit(value, self.last_producer_id, last)

    def prepare_rotation(
        self, producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """InitProducerId when the epochs of this producer id are used up: a new id."""
        value = TxnLogValue(producer_id, 0, timeout_ms, TxnState.EMPTY, frozenset(), now_ms, -1)
        self.pending = TxnState.EMPTY
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return TxnTransit(value, self.producer_id, last_epoch)

    def prepare_add_partitions(
        self, partitions: Iterable[TopicPartition], now_ms: int
    ) -> TxnTransit:
        start = now_ms if self.state != TxnState.ONGOING else self.start_ms
        value = replace(
            self.as_value(),
            state=TxnState.ONGOING,
            partitions=frozenset(self.partitions | set(partitions)),
            start_ms=start,
            last_update_ms=now_ms,
        )
        self.pending = TxnState.ONGOING
        return TxnTransit(value, self.last_producer_id, self.last_producer_epoch)

    def prepare_end(self, commit: bool, now_ms: int, fence: bool = False) -> TxnTransit:
        """PrepareCommit or PrepareAbort of the ongoing transaction; ``fence`` (a
        new producer, or the transaction timed out) aborts it under the next epoch
        (the same epoch once the epochs are used up)."""
        epoch = self.producer_epoch
        if fence and not epoch_exhausted(epoch):
            epoch += 1
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        value = replace(
            self.as_value(), state=state, producer_epoch=epoch, last_update_ms=now_ms
        )
        self.pending = state
        last_epoch = NO_PRODUCER_EPOCH if fence else self.last_producer_epoch
        return TxnTransit(value, self.last_producer_id, last_epoch)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """CompleteCommit or CompleteAbort once every partition holds its marker."""
        state = (
            TxnState.COMPLETE_COMMIT
            if self.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        value = replace(
            self.as_value(), state=state, partitions=frozenset(), last_update_ms=now_ms
        )
        self.pending = state
        return TxnTransit(value, self.last_producer_id, self.last_producer_epoch)

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        value = replace(
            self.as_value(), state=TxnState.DEAD, partitions=frozenset(), last_update_ms=now_ms
        )
        self.pending = TxnState.DEAD
        return TxnTransit(value, self.last_producer_id, self.last_producer_epoch)

    def complete(self, transit: TxnTransit) -> None:
        """The transit was written: it is the state now."""
        target = transit.state
        if self.pending != target or self.state not in _PREVIOUS[target]:
            pending = self.pending.kafka_name if self.pending else "nothing"
            self.pending = None
            raise TxnError(
                errors.UNKNOWN_SERVER_ERROR,
                f"{self} cannot move to {target.kafka_name} (pending {pending})",
            )
        v = transit.value
        self.producer_id = v.producer_id
        self.producer_epoch = v.producer_epoch
        self.timeout_ms = v.timeout_ms
        self.state = target
        self.partitions = set(v.partitions)
        self.start_ms = v.start_ms
        self.last_update_ms = v.last_update_ms
        self.last_producer_id = transit.last_producer_id
        self.last_producer_epoch = transit.last_producer_epoch
        self.pending = None

    def abandon(self) -> None:
        """The transit could not be written: nothing changed."""
        self.pending = None
