"""The group coordinator's offsets: commits stored in ``__consumer_offsets``.

A group belongs to one partition of the offsets topic
(``offsets_schema.partition_for``); the broker leading that partition is the
group's coordinator.  It keeps every committed offset of its partitions in
memory (``offsets_state.py``) and answers OffsetFetch from there.  An
OffsetCommit is appended to the partition as records (Kafka's schemas) with
acks=all and answered once the in-sync replicas hold it; only then does the
cache change.  Every append is the coordinator's (``AppendOrigin.COORDINATOR``
in the replica manager, as Kafka's group coordinator appends).

Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447) are one
batch carrying the producer id and epoch, base sequence 0 and the
transactional bit, as Kafka's GroupMetadataManager.storeOffsets writes them;
the log's producer state fences an older epoch (INVALID_PRODUCER_EPOCH).
Once replicated they are pending, per group and producer id, until the
partition's leader has written the transaction's marker and calls
``complete_txn``: COMMIT makes them the group's committed offsets (unless a
later batch committed the partition already), ABORT drops them.  OffsetFetch
does not show pending offsets; with ``require_stable`` (KIP-447) it answers
UNSTABLE_OFFSET_COMMIT for their partitions (``unstable``).

``complete_txn`` may come at any moment relative to a transactional append
of the same producer still waiting for its replicas, or to a load: it
applies to the commits stored below the log end offset of that moment, and
is remembered meanwhile, so that a commit registered later that it covers is
completed at once.  It must be called once the marker is written and before
the transaction coordinator is answered (the producer cannot start another
transaction before that), which makes "below the log end offset" exactly
"before the marker".

Leadership moves with the controller's LeaderAndIsr: a broker that becomes
leader of an offsets partition loads it (reads the log from its start up to
its end, control batches included: a marker completes the pending commits of
its producer, which stay pending when no marker follows them) on its own
thread and answers COORDINATOR_LOAD_IN_PROGRESS meanwhile; one that stops
leading drops the partition's cache and answers NOT_COORDINATOR.

Groups of Kafka's clients (``group_membership.py``) also store their state
here after each rebalance: Kafka's group metadata record (key v2, value v3),
loaded with the offsets; deleting a group appends its tombstone with
tombstones for each of its partitions (committed or pending).

Thread safety: ``self._lock`` guards the caches and the loading set (loads
run on their own threads); ``commit`` runs on the broker's event loop, and
its append and its wait for replication (a delayed operation) happen
outside the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from annal.broker.groups.offsets_schema import (
    GroupMetadataValue,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_key,
    encode_value,
    partition_for,
)
from annal.broker.groups.offsets_state import OffsetsState, Stored
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes
TXN_BASE_SEQUENCE = 0  # Kafka's transactional offset commits all start at 0


@dataclass(frozen=True, slots=True)
class CommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


# What the coordinator needs of the replica manager: an acks=all append as the
# coordinator (error, last offset) and the wait for the in-sync replicas
# ({tp: (error, message)}).
Append = Callable[[TopicPartition, bytes], tuple[ErrorCode, int]]
AwaitReplication = Callable[
    [dict[TopicPartition, int], int], Awaitable[Mapping[TopicPartition, tuple[ErrorCode, str]]]
]
Outcome = dict[TopicPartition, tuple[ErrorCode, str]]


class OffsetsCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        partitions: int,
        append: Append,
        await_replication: AwaitReplication,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.partitions = partitions
        self._append = append
        self._await = await_replication
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._states: dict[int, OffsetsState] = {}  # offsets partition -> its cache
        self._logs: dict[int, Log] = {}  # the partitions this broker leads
        self._loading: set[int] = set()
        self._generation: dict[int, int] = {}  # bumps on each leadership change
        # transactional appends waiting for their replicas, per offsets partition
        self._txn_appends: dict[int, int] = {}
        # while a partition loads or has transactional appends under way: each
        # producer's last completed transaction (the log end offset then, commit?)
        self._completions: dict[int, dict[int, tuple[int, bool]]] = {}

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.partitions)

    # -- leadership ----------------------------------------------------------------

    def on_leader(self, index: int, log: Log) -> None:
        """This broker now leads offsets partition ``index``: load it in the background."""
        with self._lock:
            generation = self._generation.get(index, 0) + 1
            self._generation[index] = generation
            self._states.pop(index, None)
            self._logs[index] = log
            self._completions[index] = {}
            self._loading.add(index)
        threading.Thread(
            target=self._load, args=(index, log, generation), name=f"offsets-load-{index}",
            daemon=True,
        ).start()  # fmt: skip

    def on_follower(self, index: int) -> None:
        with self._lock:
            self._generation[index] = self._generation.get(index, 0) + 1
            self._states.pop(index, None)
            self._logs.pop(index, None)
            self._completions.pop(index, None)
            self._loading.discard(index)

    def _load(self, index: int, log: Log, generation: int) -> None:
        started = time.monotonic()
        state = OffsetsState()
        offset, records = log.log_start_offset, 0
        try:
            while offset < log.log_end_offset:  # markers written meanwhile are read too
                data = log.read(offset, 1 << 20)
                if not data:
                    break
                applied, offset = state.replay(data, offset)
                records += applied
        except Exception:
            logger.exception("loading offsets partition %d failed", index)
            return
        with self._lock:
            if self._generation.get(index) != generation:
                return  # leadership moved on meanwhile
            for producer_id, (before, commit) in self._completions.get(index, {}).items():
                state.complete(producer_id, commit, before)
            self._states[index] = state
            self._loading.discard(index)
            self._forget_completions(index)
        logger.info(
            "loaded offsets partition %d: %d groups from %d records in %.0f ms",
            index,
            len(state.offset_groups()),
            records,
            (time.monotonic() - started) * 1000,
        )

    def _state(self, index: int) -> ErrorCode:
        """NONE when this broker can answer for partition ``index`` (caller holds the lock)."""
        if index in self._loading:
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self._states:
            return errors.NOT_COORDINATOR
        return errors.NONE

    def _forget_completions(self, index: int) -> None:
        """Completions are remembered only while something may still need them."""
        idle = index not in self._loading and not self._txn_appends.get(index)
        if idle and index in self._completions:
            self._completions[index] = {}

    # -- the requests ----------------------------------------------------------------

    async def commit(self, group: str, entries: Sequence[CommitEntry], timeout_ms: int) -> Outcome:
        """(error, message) per (topic, partition) of ``entries``."""
        return await self._store(group, entries, timeout_ms, None)

    async def txn_commit(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        entries: Sequence[CommitEntry],
        timeout_ms: int,
    ) -> Outcome:
        """TxnOffsetCommit: ``entries`` as one transactional batch of the producer,
        pending until ``complete_txn``; (error, message) per (topic, partition)."""
        return await self._store(group, entries, timeout_ms, (producer_id, producer_epoch))

    async def _store(
        self,
        group: str,
        entries: Sequence[CommitEntry],
        timeout_ms: int,
        producer: tuple[int, int] | None,
    ) -> Outcome:
        index = self.partition_of(group)
        with self._lock:
            state = self._state(index)
            generation = self._generation.get(index)
        if state != errors.NONE:
            return {TopicPartition(e.topic, e.partition): (state, "") for e in entries}
        out: Outcome = {}
        accepted = []
        for e in entries:
            if len(e.metadata.encode("utf-8")) > MAX_METADATA_BYTES:
                out[TopicPartition(e.topic, e.partition)] = (
                    errors.OFFSET_METADATA_TOO_LARGE,
                    f"metadata is limited to {MAX_METADATA_BYTES} bytes",
                )
            else:
                accepted.append(e)
        if not accepted:
            return out
        now = self._clock_ms()
        values = [
            (TopicPartition(e.topic, e.partition),
             OffsetValue(e.offset, e.leader_epoch, e.metadata, now))
            for e in accepted
        ]  # fmt: skip
        records = [
            Record(i, now, encode_key(OffsetKey(group, tp.topic, tp.partition)), encode_value(v))
            for i, (tp, v) in enumerate(values)
        ]
        if producer is not None:
            error, message = await self._store_txn(
                index, generation, group, producer, records, values, timeout_ms
            )
        else:
            error, message, base = await self._append_and_wait(
                index, encode_batch(records), len(records), timeout_ms
            )
            if error == errors.NONE:
                with self._lock:
                    cache = self._states.get(index)
                    if cache is not None and self._generation.get(index) == generation:
                        for tp, value in values:
                            cache.commit(group, tp, Stored(value, base))
        for tp, _ in values:
            out[tp] = (error, message if error != errors.NONE else "")
        return out

    async def _store_txn(
        self,
        index: int,
        generation: int | None,
        group: str,
        producer: tuple[int, int],
        records: list[Record],
        values: list[tuple[TopicPartition, OffsetValue]],
        timeout_ms: int,
    ) -> tuple[ErrorCode, str]:
        producer_id, producer_epoch = producer
        batch = encode_batch(
            records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=TXN_BASE_SEQUENCE,
            is_transactional=True,
        )
        with self._lock:
            self._txn_appends[index] = self._txn_appends.get(index, 0) + 1
        error, message, base = errors.UNKNOWN_SERVER_ERROR, "", -1
        try:
            error, message, base = await self._append_and_wait(
                index, batch, len(records), timeout_ms
            )
        finally:
            with self._lock:
                self._txn_appends[index] -= 1
                if not self._txn_appends[index]:
                    del self._txn_appends[index]
                cache = self._states.get(index)
                if (
                    error == errors.NONE
                    and cache is not None
                    and self._generation.get(index) == generation
                ):
                    for tp, value in values:
                        cache.add_pending(producer_id, group, tp, Stored(value, base))
                    done = self._completions.get(index, {}).get(producer_id)
                    if done is not None and done[0] > base:  # its marker came meanwhile
                        cache.complete(producer_id, done[1], done[0])
                self._forget_completions(index)
        return error, message

    def complete_txn(self, partition_index: int, producer_id: int, commit: bool) -> None:
        """The COMMIT (``commit``) or ABORT marker of the producer's transaction is
        written to offsets partition ``partition_index``: its pending offsets there
        become committed, or are dropped.  Nothing when this broker does not lead
        the partition (its next leader reads the marker from the log)."""
        with self._lock:
            log = self._logs.get(partition_index)
            if log is None:
                return
            before = log.log_end_offset
            if partition_index in self._loading or self._txn_appends.get(partition_index):
                self._completions.setdefault(partition_index, {})[producer_id] = (before, commit)
            cache = self._states.get(partition_index)
            if cache is not None:
                cache.complete(producer_id, commit, before)

    def fetch(
        self, group: str, wanted: Sequence[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetValue | None]]:
        """(error, committed value per partition: None when the group has none);
        ``wanted`` None means every partition the group committed."""
        index = self.partition_of(group)
        with self._lock:
            state = self._state(index)
            if state != errors.NONE:
                return state, {}
            offsets = self._states[index].offsets(group)
        if wanted is None:
            return errors.NONE, dict(offsets)
        return errors.NONE, {key: offsets.get(key) for key in wanted}

    def unstable(self, group: str, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Those of ``partitions`` with transactional offsets of the group pending
        (OffsetFetch's UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        with self._lock:
            cache = self._states.get(self.partition_of(group))
            return set() if cache is None else cache.unstable(group, partitions)

    def has_offsets(self, group: str) -> bool:
        """Whether the group has committed or pending offsets (in a partition this
        broker leads)."""
        with self._lock:
            cache = self._states.get(self.partition_of(group))
            return cache is not None and cache.has_offsets(group)

    def groups(self) -> list[str]:
        """Groups with committed or pending offsets in the partitions this broker leads."""
        with self._lock:
            return sorted({g for cache in self._states.values() for g in cache.offset_groups()})

    # -- group metadata (the classic membership protocol) ----------------------------

    def term(self, group: str) -> tuple[ErrorCode, int]:
        """(NONE, this broker's term as the group's coordinator: it changes with
        every leadership change of the group's partition), or why it is not."""
        index = self.partition_of(group)
        with self._lock:
            return self._state(index), self._generation.get(index, 0)

    def group_metadata(self, group: str) -> GroupMetadataValue | None:
        """The group's metadata as last stored (None: never, or deleted)."""
        with self._lock:
            cache = self._states.get(self.partition_of(group))
            return None if cache is None else cache.groups.get(group)

    def metadata_groups(self) -> list[str]:
        """Groups with stored metadata in the partitions this broker leads."""
        with self._lock:
            return sorted({g for cache in self._states.values() for g in cache.groups})

    async def store_group(
        self, group: str, value: GroupMetadataValue | None, timeout_ms: int
    ) -> tuple[ErrorCode, str]:
        """Append the group's metadata (None: a tombstone, with tombstones for its
        committed and pending offsets) with acks=all; the cache changes once the
        ISR holds it."""
        index = self.partition_of(group)
        with self._lock:
            state = self._state(index)
            generation = self._generation.get(index)
            cache = self._states.get(index)
            offsets = sorted(cache.partitions(group)) if cache and value is None else []
        if state != errors.NONE:
            return state, ""
        now = self._clock_ms()
        records = [
            Record(0, now, encode_group_key(group),
                   None if value is None else encode_group_value(value))
        ] + [
            Record(i + 1, now, encode_key(OffsetKey(group, topic, partition)), None)
            for i, (topic, partition) in enumerate(offsets)
        ]  # fmt: skip
        error, message, base = await self._append_and_wait(
            index, encode_batch(records), len(records), timeout_ms
        )
        if error == errors.NONE:
            with self._lock:
                cache = self._states.get(index)
                if cache is not None and self._generation.get(index) == generation:
                    cache.set_group(group, value)
                    for tp in offsets:
                        cache.delete(group, tp, base)
        return error, message

    async def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition], timeout_ms: int
    ) -> tuple[ErrorCode, str]:
        """Tombstones for the group's offsets of ``partitions`` (pending ones too)."""
        index = self.partition_of(group)
        with self._lock:
            state = self._state(index)
            generation = self._generation.get(index)
        if state != errors.NONE:
            return state, ""
        now = self._clock_ms()
        batch = encode_batch([
            Record(i, now, encode_key(OffsetKey(group, topic, partition)), None)
            for i, (topic, partition) in enumerate(partitions)
        ])  # fmt: skip
        error, message, base = await self._append_and_wait(
            index, batch, len(partitions), timeout_ms
        )
        if error == errors.NONE:
            with self._lock:
                cache = self._states.get(index)
                if cache is not None and self._generation.get(index) == generation:
                    for key in partitions:
                        cache.delete(group, TopicPartition(key.topic, key.partition), base)
        return error, message

    async def _append_and_wait(
        self, index: int, batch: bytes, count: int, timeout_ms: int
    ) -> tuple[ErrorCode, str, int]:
        """(error, message, the batch's base offset) of an acks=all append of a
        batch of ``count`` records."""
        tp = TopicPartition(OFFSETS_TOPIC, index)
        error, last = self._append(tp, batch)
        if error == errors.NONE:
            error, message = (await self._await({tp: last}, timeout_ms))[tp]
        else:
            message = f"appending to {tp}: {error}"
        return _COMMIT_ERRORS.get(error, error), message, last - count + 1


# Commit failures as Kafka reports them to the committing consumer.
_COMMIT_ERRORS = {
    errors.NOT_LEADER_OR_FOLLOWER: errors.NOT_COORDINATOR,
    errors.UNKNOWN_TOPIC_OR_PARTITION: errors.NOT_COORDINATOR,
    errors.NOT_ENOUGH_REPLICAS: errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: errors.COORDINATOR_NOT_AVAILABLE,
}
