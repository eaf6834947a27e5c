"""The transaction coordinator (Kafka's TransactionCoordinator and
TransactionStateManager, KIP-98).

A transactional id belongs to one partition of ``__transaction_state``
(``abs(hash(id)) % transaction.state.log.num.partitions``, Java's string hash);
the broker leading that partition is its coordinator, and the partition's
leader epoch is the coordinator's epoch, which every marker carries so that a
partition refuses the markers of a coordinator that was replaced.

A broker that becomes leader of a partition loads it on its own thread (the
latest record of each id wins, a tombstone forgets it) and answers
COORDINATOR_LOAD_IN_PROGRESS meanwhile; then it finishes what the old
coordinator left half done: a transaction in PrepareCommit or PrepareAbort
gets its markers.  One that stops leading forgets the partition's ids and
answers NOT_COORDINATOR.

The requests of a producer, in order:

* InitProducerId: a producer id (new for a new id) and the next epoch; an
  ongoing transaction of an older producer with the same id is aborted under
  the bumped epoch (the old producer is fenced) and the caller is told
  CONCURRENT_TRANSACTIONS until the abort is complete;
* AddPartitionsToTxn / AddOffsetsToTxn: the partitions the transaction writes
  to (for AddOffsetsToTxn the group's ``__consumer_offsets`` partition);
* EndTxn: PrepareCommit or PrepareAbort is written and the producer answered;
  the markers follow (``markers.py``), then CompleteCommit or CompleteAbort.

Each change is written to the id's partition with acks=all before it is the
state (``metadata.py``).  A transaction left open longer than its timeout is
aborted under a bumped epoch (checked every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``); an id idle
for ``transactional.id.expiration.ms`` is forgotten (a tombstone).

Thread safety: ``self._lock`` guards the partitions map, which leadership
changes (the control thread) and loads (their own threads) change; the
requests, the markers and the timers run on the broker's event loop, and
only they change a ``TransactionMetadata``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from annal.broker.groups.coordinator import OFFSETS_TOPIC, Append, AwaitReplication
from annal.broker.groups.offsets_schema import partition_for
from annal.client.retry import Backoff
from annal.storage.batch import last_header
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch, iter_records

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

from .log_schema import (
    TRANSACTION_STATE_TOPIC,
    TxnLogSchemaError,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from .markers import Marker, MarkerWriter
from .metadata import (
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnError,
    TxnTransit,
    epoch_exhausted,
)

logger = logging.getLogger(__name__)

_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETION_WAIT_S = 1.0  # see TransactionCoordinator._completion
_IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

# Spawns a coroutine on the broker's event loop (callable from any thread).
Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(frozen=True, slots=True)
class TxnSettings:
    """Kafka's settings of the transaction coordinator."""

    log_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    abort_interval_ms: int = 10_000  # ...abort.timed.out.transaction.cleanup.interval.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    expiration_interval_ms: int = 3_600_000  # ...remove.expired.transaction.cleanup.interval.ms
    offsets_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn)
    write_timeout_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    message: str = ""


@dataclass(slots=True)
class _Partition:
    """One ``__transaction_state`` partition this broker leads."""

    epoch: int
    loaded: bool = False
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        settings: TxnSettings,
        append: Append,
        await_replication: AwaitReplication,
        new_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter,
        spawn: Spawn,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.settings = settings
        self._append = append
        self._await = await_replication
        self._new_producer_id = new_producer_id
        self._markers = markers
        self._spawn = spawn
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._partitions: dict[int, _Partition] = {}
        self.timed_out = 0  # transactions aborted for their timeout (a metric)
        # transactional id -> set once its prepared transaction is complete
        self._completed: dict[str, asyncio.Event] = {}

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.settings.log_partitions)

    # -- leadership ----------------------------------------------------------------

    def on_leader(self, index: int, log: Log, epoch: int) -> None:
        """This broker now leads partition ``index`` at ``epoch``: load it."""
        part = _Partition(epoch)
        with self._lock:
            self._partitions[index] = part
        threading.Thread(
            target=self._load, args=(index, log, part), name=f"txn-load-{index}", daemon=True
        ).start()

    def on_follower(self, index: int) -> None:
        with self._lock:
            gone = self._partitions.pop(index, None)
        if gone is not None:
            logger.info("no longer the transaction coordinator of %s-%d", _TOPIC, index)

    def _current(self, index: int, part: _Partition) -> bool:
        with self._lock:
            return self._partitions.get(index) is part

    def _load(self, index: int, log: Log, part: _Partition) -> None:
        started = time.monotonic()
        txns: dict[str, TransactionMetadata] = {}
        offset, end, records = log.log_start_offset, log.log_end_offset, 0
        try:
            while offset < end:
                data = log.read(offset, 1 << 20)
                if not data:
                    break
                for record in iter_records(data):
                    if record.offset >= offset and record.key is not None:
                        records += 1
                        _apply(txns, record.key, record.value)
                header = last_header(data)
                assert header is not None
                offset = header.next_offset
        except Exception:
            logger.exception("loading %s-%d failed", _TOPIC, index)
            return
        with self._lock:
            if self._partitions.get(index) is not part:
                return  # leadership moved on meanwhile
            part.txns = txns
            part.loaded = True
        logger.info(
            "loaded %s-%d (coordinator epoch %d): %d transactional ids from %d records "
            "in %.0f ms", _TOPIC, index, part.epoch, len(txns), records,
            (time.monotonic() - started) * 1000,
        )  # fmt: skip
        for meta in txns.values():
            if meta.state in _PREPARED:
                self._spawn(self._complete(index, part, meta))

    def _owner(self, transactional_id: str) -> tuple[int, _Partition]:
        index = self.partition_of(transactional_id)
        with self._lock:
            part = self._partitions.get(index)
        if part is None:
            raise TxnError(
                errors.NOT_COORDINATOR,
                f"this broker does not lead {_TOPIC}-{index}, which holds {transactional_id!r}",
            )
        if not part.loaded:
            raise TxnError(
                errors.COORDINATOR_LOAD_IN_PROGRESS, f"{_TOPIC}-{index} is being loaded"
            )
        return index, part

    def _known(self, transactional_id: str) -> tuple[int, _Partition, TransactionMetadata]:
        index, part = self._owner(transactional_id)
        meta = part.txns.get(transactional_id)
        if meta is None:
            raise TxnError(
                errors.INVALID_PRODUCER_ID_MAPPING,
                f"transactional id {transactional_id!r} has no producer id: "
                "call InitProducerId first",
            )
        return index, part, meta

    # -- writing the log -------------------------------------------------------------

    async def _write(
        self,
        index: int,
        part: _Partition,
        meta: TransactionMetadata,
        transit: TxnTransit,
        replicated: bool = True,
    ) -> None:
        """Write ``transit`` (acks=all) and make it the state; TxnError when it
        could not be written or this broker stopped coordinating meanwhile.
        ``replicated=False``: the state once appended here (see ``_complete``)."""
        tp = TopicPartition(_TOPIC, index)
        record = Record(
            0, self._clock_ms(), encode_key(meta.transactional_id), encode_value(transit.value)
        )
        error, last = self._append(tp, encode_batch([record]))
        message = f"appending to {tp}: {error.name}"
        if error == errors.NONE and replicated:
            waited = await self._await({tp: last}, self.settings.write_timeout_ms)
            error, message = waited[tp]
        if error == errors.NONE and not self._current(index, part):
            error, message = errors.NOT_COORDINATOR, f"{tp} changed leader meanwhile"
        if error != errors.NONE:
            meta.abandon()
            raise TxnError(_WRITE_ERRORS.get(error, error), message)
        meta.complete(transit)

    async def _write_tombstone(
        self, index: int, part: _Partition, meta: TransactionMetadata
    ) -> None:
        tp = TopicPartition(_TOPIC, index)
        record = Record(0, self._clock_ms(), encode_key(meta.transactional_id), None)
        error, last = self._append(tp, encode_batch([record]))
        if error == errors.NONE:
            error, _ = (await self._await({tp: last}, self.settings.write_timeout_ms))[tp]
        if error == errors.NONE and part.txns.get(meta.transactional_id) is meta:
            del part.txns[meta.transactional_id]

    # -- the requests ----------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> InitResult:
        """InitProducerId with a transactional id; ``expected`` is the producer's
        current (id, epoch) when it asks for a new epoch (KIP-360)."""
        try:
            return await self._init(transactional_id, timeout_ms, expected)
        except TxnError as exc:
            return InitResult(exc.code, message=exc.message)

    async def _init(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            raise TxnError(
                errors.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms={timeout_ms} is not in 1.."
                f"{self.settings.max_timeout_ms} (transaction.max.timeout.ms)",
            )
        index, part = self._owner(transactional_id)
        meta = part.txns.get(transactional_id)
        if meta is None:
            try:
                producer_id = await self._new_producer_id()
            except Exception as exc:
                raise TxnError(
                    errors.COORDINATOR_NOT_AVAILABLE, f"cannot allocate a producer id: {exc}"
                ) from None
            index, part = self._owner(transactional_id)  # still ours after the wait?
            meta = part.txns.setdefault(
                transactional_id,
                TransactionMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms),
            )
        meta.check_not_pending()
        if expected is not None and not _valid_producer(meta, *expected):
            raise TxnError(
                errors.PRODUCER_FENCED,
                f"producer {expected[0]} epoch {expected[1]} is not the current one of {meta}",
            )
        if meta.state in _PREPARED:
            raise TxnError(
                errors.CONCURRENT_TRANSACTIONS, f"{meta} is completing its transaction; retry"
            )
        now = self._clock_ms()
        if meta.state == TxnState.ONGOING:
            await self._fence_and_abort(index, part, meta, "a new producer started")
            raise TxnError(
                errors.CONCURRENT_TRANSACTIONS,
                f"{meta}: aborting the previous producer's transaction; retry",
            )
        if epoch_exhausted(meta.producer_epoch) and (
            expected is None or expected[1] == meta.producer_epoch
        ):
            producer_id = await self._new_producer_id()
            meta.check_not_pending()
            transit = meta.prepare_rotation(producer_id, timeout_ms, now, expected is not None)
        else:
            transit = meta.prepare_increment_epoch(
                timeout_ms, None if expected is None else expected[1], now
            )
        await self._write(index, part, meta, transit)
        return InitResult(errors.NONE, meta.producer_id, meta.producer_epoch)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn): NONE or the error; raises
        nothing."""
        try:
            index, part, meta = self._known(transactional_id)
            meta.check_producer(producer_id, epoch)
            await self._completion(meta)
            meta.check_not_pending()
            if meta.state in _PREPARED:
                raise TxnError(
                    errors.CONCURRENT_TRANSACTIONS, f"{meta} is completing its transaction"
                )
            wanted = set(partitions)
            if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
                return errors.NONE
            await self._write(
                index, part, meta, meta.prepare_add_partitions(wanted, self._clock_ms())
            )
        except TxnError as exc:
            _log_refusal("AddPartitionsToTxn", transactional_id, exc)
            return exc.code
        return errors.NONE

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group: str
    ) -> ErrorCode:
        offsets = partition_for(group, self.settings.offsets_partitions)
        return await self.add_partitions(
            transactional_id, producer_id, epoch, [TopicPartition(OFFSETS_TOPIC, offsets)]
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> tuple[ErrorCode, str]:
        """EndTxn: (error, message); the markers follow the answer."""
        try:
            index, part, meta = self._known(transactional_id)
            meta.check_producer(producer_id, epoch)
            meta.check_not_pending()
            _check_end(meta, commit)
            if meta.state != TxnState.ONGOING:
                return errors.NONE, ""  # a retry of an EndTxn already done
            await self._write(index, part, meta, meta.prepare_end(commit, self._clock_ms()))
        except TxnError as exc:
            _log_refusal("EndTxn", transactional_id, exc)
            return exc.code, exc.message
        self._spawn(self._complete(index, part, meta))
        return errors.NONE, ""

    async def _fence_and_abort(
        self, index: int, part: _Partition, meta: TransactionMetadata, why: str
    ) -> None:
        logger.info("aborting the transaction of %s: %s", meta, why)
        await self._write(index, part, meta, meta.prepare_end(False, self._clock_ms(), fence=True))
        self._spawn(self._complete(index, part, meta))

    async def _completion(self, meta: TransactionMetadata) -> None:
        """Wait, up to ``COMPLETION_WAIT_S``, for the previous transaction of
        ``meta`` to be complete (its markers and its Complete state written).

        A producer begins its next transaction as soon as EndTxn is answered,
        while the markers are still being written; Kafka answers its first
        AddPartitionsToTxn CONCURRENT_TRANSACTIONS then, which clients retry
        after a backoff (librdkafka's and the Java client's 20 ms, longer than
        the markers take).  Waiting here gives the same answer without the
        round trip and the backoff; after the wait the request is checked as
        usual (CONCURRENT_TRANSACTIONS if the markers are still out)."""
        if meta.state not in _PREPARED:
            return
        done = self._completed.setdefault(meta.transactional_id, asyncio.Event())
        try:
            await asyncio.wait_for(done.wait(), COMPLETION_WAIT_S)
        except TimeoutError:
            pass

    async def _complete(self, index: int, part: _Partition, meta: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction, then its Complete state.

        The Complete state is the state once appended to this broker's log, without
        waiting for the ISR: the producer's next transaction then starts one
        replication round sooner, and its first write (acks=all, later in the same
        log) carries the Complete record to the ISR with it.  A Complete record lost
        with this broker leaves its successor the Prepare state, whose markers it
        writes again: a second COMMIT or ABORT marker of a transaction changes
        nothing in a partition (Kafka's coordinator re-sends markers after every
        failover the same way)."""
        try:
            await self._write_markers_and_complete(index, part, meta)
        finally:
            done = self._completed.pop(meta.transactional_id, None)
            if done is not None:
                done.set()  # requests waiting for it (``_completion``) go on

    async def _write_markers_and_complete(
        self, index: int, part: _Partition, meta: TransactionMetadata
    ) -> None:
        marker = Marker(
            meta.producer_id,
            meta.producer_epoch,
            meta.state == TxnState.PREPARE_COMMIT,
            frozenset(meta.partitions),
            part.epoch,
        )
        if not await self._markers.write(marker, lambda: self._current(index, part)):
            return
        backoff = Backoff(longest_s=2.0)
        while self._current(index, part) and meta.state in _PREPARED:
            try:
                meta.check_not_pending()
                transit = meta.prepare_complete(self._clock_ms())
                await self._write(index, part, meta, transit, replicated=False)
            except TxnError as exc:
                logger.info("completing the transaction of %s: %s; retrying", meta, exc.message)
                await asyncio.sleep(backoff.next())

    # -- timers ----------------------------------------------------------------------

    async def run_timers(self) -> None:
        """Abort timed-out transactions and forget expired ids, forever."""
        interval_s = self.settings.abort_interval_ms / 1000
        next_expiry = time.monotonic() + self.settings.expiration_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.abort_timed_out()
                if time.monotonic() >= next_expiry:
                    next_expiry = time.monotonic() + self.settings.expiration_interval_ms / 1000
                    await self.expire_ids()
            except Exception:
                logger.exception("the transaction coordinator's timers failed")

    def _loaded(self) -> list[tuple[int, _Partition]]:
        with self._lock:
            return [(i, p) for i, p in self._partitions.items() if p.loaded]

    async def abort_timed_out(self) -> int:
        """Abort every ongoing transaction past its timeout; how many were."""
        now = self._clock_ms()
        aborted = 0
        for index, part in self._loaded():
            for meta in list(part.txns.values()):
                due = meta.start_ms + meta.timeout_ms
                if meta.state != TxnState.ONGOING or meta.pending is not None or due > now:
                    continue
                try:
                    await self._fence_and_abort(
                        index, part, meta, f"open for more than {meta.timeout_ms} ms"
                    )
                    aborted += 1
                    self.timed_out += 1
                except TxnError as exc:
                    logger.info("aborting %s after its timeout: %s", meta, exc.message)
        return aborted

    async def expire_ids(self) -> int:
        now = self._clock_ms()
        expired = 0
        for index, part in self._loaded():
            for meta in list(part.txns.values()):
                idle = now - meta.last_update_ms > self.settings.id_expiration_ms
                if meta.state in _IDLE and meta.pending is None and idle:
                    await self._write_tombstone(index, part, meta)
                    expired += 1
        return expired

    # -- what admins ask -------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        try:
            _, part = self._owner(transactional_id)
        except TxnError as exc:
            return exc.code, None
        meta = part.txns.get(transactional_id)
        if meta is None:
            return errors.TRANSACTIONAL_ID_NOT_FOUND, None
        return errors.NONE, meta

    def listing(self) -> tuple[ErrorCode, list[TransactionMetadata]]:
        """Every transactional id this broker coordinates; COORDINATOR_LOAD_IN_PROGRESS
        while a partition is loading."""
        with self._lock:
            parts = list(self._partitions.values())
        found = [meta for part in parts for meta in part.txns.values()]
        error = errors.NONE if all(p.loaded for p in parts) else errors.COORDINATOR_LOAD_IN_PROGRESS
        return error, sorted(found, key=lambda m: m.transactional_id)

    def open_transactions(self) -> int:
        with self._lock:
            parts = list(self._partitions.values())
        return sum(
            1 for p in parts for m in p.txns.values() if m.state not in (*_IDLE, TxnState.DEAD)
        )

    def known_ids(self) -> int:
        with self._lock:
            parts = list(self._partitions.values())
        return sum(len(p.txns) for p in parts)

    def led_partitions(self) -> int:
        with self._lock:
            return len(self._partitions)


_TOPIC = TRANSACTION_STATE_TOPIC

# Append failures as Kafka reports them to the producer.
_WRITE_ERRORS = {
    errors.NOT_LEADER_OR_FOLLOWER: errors.NOT_COORDINATOR,
    errors.UNKNOWN_TOPIC_OR_PARTITION: errors.NOT_COORDINATOR,
    errors.KAFKA_STORAGE_ERROR: errors.NOT_COORDINATOR,
    errors.NOT_ENOUGH_REPLICAS: errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: errors.COORDINATOR_NOT_AVAILABLE,
    errors.REQUEST_TIMED_OUT: errors.COORDINATOR_NOT_AVAILABLE,
    errors.MESSAGE_TOO_LARGE: errors.UNKNOWN_SERVER_ERROR,
}


def _valid_producer(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: a producer asking for a new epoch is the id's producer (or the one
    before a rotation, whose epochs ran out)."""
    return (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == meta.producer_id
        or (producer_id == meta.last_producer_id and epoch_exhausted(epoch))
    )


def _check_end(meta: TransactionMetadata, commit: bool) -> None:
    """EndTxn's answer for a transaction that is not ongoing (Kafka's table)."""
    state = meta.state
    if state == TxnState.ONGOING:
        return
    matches = state in (
        (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT)
        if commit
        else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT)
    )
    if matches and state in _PREPARED:
        raise TxnError(errors.CONCURRENT_TRANSACTIONS, f"{meta} is being completed; retry")
    if not matches:
        word = "commit" if commit else "abort"
        raise TxnError(errors.INVALID_TXN_STATE, f"cannot {word}: {meta} has no open transaction")


def _log_refusal(api: str, transactional_id: str, exc: TxnError) -> None:
    level = logging.DEBUG if exc.code.retriable else logging.INFO
    logger.log(level, "%s of %r refused: %s", api, transactional_id, exc.message)


def _apply(txns: dict[str, TransactionMetadata], key: bytes, value: bytes | None) -> None:
    try:
        transactional_id = decode_key(key)
        if value is None:
            txns.pop(transactional_id, None)
        else:
            txns[transactional_id] = TransactionMetadata.from_log(
                transactional_id, decode_value(value)
            )
    except TxnLogSchemaError as exc:
        logger.warning("skipping an unreadable %s record: %s", _TOPIC, exc)


def spawn_on(loop: asyncio.AbstractEventLoop) -> Spawn:
    """A ``Spawn`` running coroutines on ``loop``, logging any that fails."""

    def spawn(coro: Coroutine[Any, Any, None]) -> None:
        future = asyncio.run_coroutine_threadsafe(coro, loop)

        def done(f: Any) -> None:
            if not f.cancelled() and f.exception() is not None:
                logger.error("a transaction coordinator task failed", exc_info=f.exception())

        future.add_done_callback(done)

    return spawn
