"""The group coordinator's offsets: commits stored in ``__consumer_offsets``.

A group belongs to one partition of the offsets topic
(``offsets_schema.partition_for``); the broker leading that partition is the
group's coordinator.  It keeps every committed offset of its partitions in
memory and answers OffsetFetch from there.  An OffsetCommit is appended to the
partition as records (Kafka's schemas) with acks=all and answered once the
in-sync replicas hold it; only then does the cache change.

Leadership moves with the controller's LeaderAndIsr: a broker that becomes
leader of an offsets partition loads it (reads the log from its start, the
latest value of each key winning, tombstones deleting) on its own thread and
answers COORDINATOR_LOAD_IN_PROGRESS meanwhile; one that stops leading drops
the partition's cache and answers NOT_COORDINATOR.

Groups of Kafka's clients (``group_membership.py``) also store their state
here after each rebalance: Kafka's group metadata record (key v2, value v3),
loaded with the offsets; its tombstone deletes the group and its offsets.

Thread safety: ``self._lock`` guards the caches and the loading set (loads
run on their own threads); ``commit`` runs on the broker's event loop, and
its append and its wait for replication (a delayed operation) happen
outside the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from annal.broker.offsets_schema import (
    GroupMetadataValue,
    OffsetKey,
    OffsetsSchemaError,
    OffsetValue,
    decode_group_key,
    decode_group_value,
    decode_key,
    decode_value,
    encode_group_key,
    encode_group_value,
    encode_key,
    encode_value,
    partition_for,
)
from annal.storage.batch import last_header
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch, iter_records

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes


@dataclass(frozen=True, slots=True)
class CommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


# What the coordinator needs of the replica manager: an acks=all append (error,
# last offset) and the wait for the in-sync replicas ({tp: (error, message)}).
Append = Callable[[TopicPartition, bytes], tuple[ErrorCode, int]]
AwaitReplication = Callable[
    [dict[TopicPartition, int], int], Awaitable[Mapping[TopicPartition, tuple[ErrorCode, str]]]
]


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
        # offsets partition -> group -> (topic, partition) -> value
        self._caches: dict[int, dict[str, dict[TopicPartition, OffsetValue]]] = {}
        # offsets partition -> group -> its metadata (groups of Kafka's clients)
        self._group_caches: dict[int, dict[str, GroupMetadataValue]] = {}
        self._loading: set[int] = set()
        self._generation: dict[int, int] = {}  # bumps on each leadership change

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.partitions)

    # -- leadership ----------------------------------------------------------------

    def on_leader(self, index: int, log: Log) -> None:
        """This broker now leads offsets partition ``index``: load it in the background."""
        with self._lock:
            generation = self._generation.get(index, 0) + 1
            self._generation[index] = generation
            self._caches.pop(index, None)
            self._group_caches.pop(index, None)
            self._loading.add(index)
        threading.Thread(
            target=self._load, args=(index, log, generation), name=f"offsets-load-{index}",
            daemon=True,
        ).start()  # fmt: skip

    def on_follower(self, index: int) -> None:
        with self._lock:
            self._generation[index] = self._generation.get(index, 0) + 1
            self._caches.pop(index, None)
            self._group_caches.pop(index, None)
            self._loading.discard(index)

    def _load(self, index: int, log: Log, generation: int) -> None:
        started = time.monotonic()
        cache: dict[str, dict[TopicPartition, OffsetValue]] = {}
        groups: dict[str, GroupMetadataValue] = {}
        offset, end, records = log.log_start_offset, log.log_end_offset, 0
        try:
            while offset < end:
                data = log.read(offset, 1 << 20)
                if not data:
                    break
                for record in iter_records(data):
                    if record.offset >= offset and record.key is not None:
                        records += 1
                        _apply(cache, groups, record.key, record.value)
                header = last_header(data)
                assert header is not None
                offset = header.next_offset
        except Exception:
            logger.exception("loading offsets partition %d failed", index)
            return
        with self._lock:
            if self._generation.get(index) != generation:
                return  # leadership moved on meanwhile
            self._caches[index] = cache
            self._group_caches[index] = groups
            self._loading.discard(index)
        logger.info(
            "loaded offsets partition %d: %d groups from %d records in %.0f ms",
            index,
            len(cache),
            records,
            (time.monotonic() - started) * 1000,
        )

    def _state(self, index: int) -> ErrorCode:
        """NONE when this broker can answer for partition ``index`` (caller holds the lock)."""
        if index in self._loading:
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self._caches:
            return errors.NOT_COORDINATOR
        return errors.NONE

    # -- the requests ----------------------------------------------------------------

    async def commit(
        self, group: str, entries: Sequence[CommitEntry], timeout_ms: int
    ) -> dict[TopicPartition, tuple[ErrorCode, str]]:
        """(error, message) per (topic, partition) of ``entries``."""
        index = self.partition_of(group)
        with self._lock:
            state = self._state(index)
            generation = self._generation.get(index)
        if state != errors.NONE:
            return {TopicPartition(e.topic, e.partition): (state, "") for e in entries}
        out: dict[TopicPartition, tuple[ErrorCode, str]] = {}
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
        batch = encode_batch(
            [
                Record(
                    i,
                    now,
                    encode_key(OffsetKey(group, e.topic, e.partition)),
                    encode_value(OffsetValue(e.offset, e.leader_epoch, e.metadata, now)),
                )
                for i, e in enumerate(accepted)
            ]
        )
        error, message = await self._append_and_wait(index, batch, timeout_ms)
        if error == errors.NONE:
            with self._lock:
                cache = self._caches.get(index)
                if cache is not None and self._generation.get(index) == generation:
                    offsets = cache.setdefault(group, {})
                    for e in accepted:
                        offsets[TopicPartition(e.topic, e.partition)] = OffsetValue(
                            e.offset, e.leader_epoch, e.metadata, now
                        )
        for e in accepted:
            out[TopicPartition(e.topic, e.partition)] = (
                error,
                message if error != errors.NONE else "",
            )
        return out

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
            offsets = dict(self._caches[index].get(group, {}))
        if wanted is None:
            return errors.NONE, dict(offsets)
        return errors.NONE, {key: offsets.get(key) for key in wanted}

    def has_offsets(self, group: str) -> bool:
        """Whether the group has committed offsets (in a partition this broker leads)."""
        with self._lock:
            return bool(self._caches.get(self.partition_of(group), {}).get(group))

    def groups(self) -> list[str]:
        """Groups with committed offsets in the partitions this broker leads."""
        with self._lock:
            return sorted({g for cache in self._caches.values() for g in cache})

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
            return self._group_caches.get(self.partition_of(group), {}).get(group)

    def metadata_groups(self) -> list[str]:
        """Groups with stored metadata in the partitions this broker leads."""
        with self._lock:
            return sorted({g for cache in self._group_caches.values() for g in cache})

    async def store_group(
        self, group: str, value: GroupMetadataValue | None, timeout_ms: int
    ) -> tuple[ErrorCode, str]:
        """Append the group's metadata (None: a tombstone, which also deletes its
        offsets) with acks=all; the cache changes once the ISR holds it."""
        index = self.partition_of(group)
        with self._lock:
            state = self._state(index)
            generation = self._generation.get(index)
            offsets = list(self._caches.get(index, {}).get(group, {})) if value is None else []
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
        error, message = await self._append_and_wait(index, encode_batch(records), timeout_ms)
        if error == errors.NONE:
            with self._lock:
                if self._generation.get(index) == generation and index in self._caches:
                    if value is None:
                        self._group_caches[index].pop(group, None)
                        self._caches[index].pop(group, None)
                    else:
                        self._group_caches[index][group] = value
        return error, message

    async def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition], timeout_ms: int
    ) -> tuple[ErrorCode, str]:
        """Tombstones for the group's committed offsets of ``partitions``."""
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
        error, message = await self._append_and_wait(index, batch, timeout_ms)
        if error == errors.NONE:
            with self._lock:
                cache = self._caches.get(index, {}).get(group)
                if cache is not None and self._generation.get(index) == generation:
                    for key in partitions:
                        cache.pop(key, None)
        return error, message

    async def _append_and_wait(
        self, index: int, batch: bytes, timeout_ms: int
    ) -> tuple[ErrorCode, str]:
        tp = TopicPartition(OFFSETS_TOPIC, index)
        error, last = self._append(tp, batch)
        if error == errors.NONE:
            error, message = (await self._await({tp: last}, timeout_ms))[tp]
        else:
            message = f"appending to {tp}: {error}"
        return _COMMIT_ERRORS.get(error, error), message


# Commit failures as Kafka reports them to the committing consumer.
_COMMIT_ERRORS = {
    errors.NOT_LEADER_OR_FOLLOWER: errors.NOT_COORDINATOR,
    errors.UNKNOWN_TOPIC_OR_PARTITION: errors.NOT_COORDINATOR,
    errors.NOT_ENOUGH_REPLICAS: errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: errors.COORDINATOR_NOT_AVAILABLE,
}


def _apply(
    cache: dict[str, dict[TopicPartition, OffsetValue]],
    groups: dict[str, GroupMetadataValue],
    key_bytes: bytes,
    value: bytes | None,
) -> None:
    try:
        key = decode_key(key_bytes)
        if key is None:
            group = decode_group_key(key_bytes)
            if group is not None and value is None:
                groups.pop(group, None)
            elif group is not None and value is not None:
                groups[group] = decode_group_value(value)
            return
        offsets = cache.setdefault(key.group, {})
        if value is None:
            offsets.pop(TopicPartition(key.topic, key.partition), None)
            if not offsets:
                del cache[key.group]
        else:
            offsets[TopicPartition(key.topic, key.partition)] = decode_value(value)
    except OffsetsSchemaError as exc:
        logger.warning("skipping an unreadable offsets record: %s", exc)
