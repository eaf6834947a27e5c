"""What one ``__consumer_offsets`` partition holds, in memory: the groups'
committed offsets, their metadata, and the transactional offset commits not
yet decided (Kafka's GroupMetadata offsets and pendingTransactionalOffsetCommits).

The coordinator changes it as its own appends are replicated and as markers
are written (``coordinator.py``); loading the partition replays its batches
through ``apply_batch``.  Both follow the same rules, so a coordinator that
loads the log ends with what the previous one had in memory:

* every offset is kept with the offset of the batch that stored it (Kafka's
  CommitRecordMetadataAndOffset); a commit replaces the partition's committed
  offset only when its batch is later in the log, so completion order does
  not matter, only log order;
* a transactional commit (KIP-98, a batch with the transactional bit and the
  producer id) is pending, per group and producer id, invisible to
  OffsetFetch: a COMMIT marker of its producer makes it the committed offset
  (unless a later batch already committed that partition), an ABORT marker
  drops it.  A second commit of the same partition in the same transaction
  replaces the first;
* a tombstone (OffsetDelete, a group's deletion) deletes the committed offset
  and drops the pending ones of that partition from every producer, as
  Kafka's GroupMetadata.removeOffsets does (Kafka's loader keeps those
  pending offsets; annal drops them there too, so that loading agrees);
* a group's metadata record sets it; its tombstone removes it (the group's
  offsets go with the offset tombstones written beside it).

Thread safety: none of its own; the coordinator's lock guards every call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from annal.broker.groups.offsets_schema import (
    GroupMetadataValue,
    OffsetsSchemaError,
    OffsetValue,
    decode_group_key,
    decode_group_value,
    decode_key,
    decode_value,
)
from annal.storage.batch import CURRENT_MAGIC, MAGIC_OFFSET, BatchHeader
from annal.storage.control import ControlRecordType, decode_control_type
from annal.storage.errors import CorruptRecordError
from annal.storage.files import TopicPartition
from annal.storage.legacy import decode_legacy_entry
from annal.storage.records import Record, decode_batch

logger = logging.getLogger(__name__)


class Stored(NamedTuple):
    """An offset and the offset of the log batch that holds its record."""

    value: OffsetValue
    log_offset: int


class OffsetsState:
    """See the module docstring."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, Stored]] = {}
        self.groups: dict[str, GroupMetadataValue] = {}
        # group -> producer id -> partition -> its pending commit
        self.pending: dict[str, dict[int, dict[TopicPartition, Stored]]] = {}
        # producer id -> the groups holding its pending commits
        self.producer_groups: dict[int, set[str]] = {}

    # -- changes ----------------------------------------------------------------------

    def commit(self, group: str, tp: TopicPartition, stored: Stored) -> None:
        """A committed offset, unless a later batch committed the partition already."""
        offsets = self.committed.setdefault(group, {})
        current = offsets.get(tp)
        if current is None or current.log_offset <= stored.log_offset:
            offsets[tp] = stored  # (of one batch, the last record wins)

    def delete(self, group: str, tp: TopicPartition, log_offset: int) -> None:
        """A tombstone at ``log_offset``: what was stored before it goes."""
        offsets = self.committed.get(group)
        if offsets is not None:
            current = offsets.get(tp)
            if current is not None and current.log_offset < log_offset:
                del offsets[tp]
                if not offsets:
                    del self.committed[group]
        by_producer = self.pending.get(group)
        if by_producer is None:
            return
        for producer_id, partitions in list(by_producer.items()):
            stored = partitions.get(tp)
            if stored is not None and stored.log_offset < log_offset:
                self._unpend(group, producer_id, tp)

    def set_group(self, group: str, value: GroupMetadataValue | None) -> None:
        if value is None:
            self.groups.pop(group, None)
        else:
            self.groups[group] = value

    def add_pending(self, producer_id: int, group: str, tp: TopicPartition, stored: Stored) -> None:
        """A transactional commit of ``producer_id``, pending until its marker."""
        partitions = self.pending.setdefault(group, {}).setdefault(producer_id, {})
        current = partitions.get(tp)
        if current is None or current.log_offset <= stored.log_offset:
            partitions[tp] = stored
        self.producer_groups.setdefault(producer_id, set()).add(group)

    def complete(self, producer_id: int, commit: bool, before: int | None = None) -> None:
        """The producer's transaction ended (its marker was written): its pending
        commits stored below ``before`` (all when None) are committed or dropped."""
        for group in list(self.producer_groups.get(producer_id, ())):
            partitions = self.pending.get(group, {}).get(producer_id, {})
            for tp, stored in list(partitions.items()):
                if before is not None and stored.log_offset >= before:
                    continue  # a later transaction's
                self._unpend(group, producer_id, tp)
                if commit:
                    self.commit(group, tp, stored)

    def _unpend(self, group: str, producer_id: int, tp: TopicPartition) -> None:
        by_producer = self.pending[group]
        partitions = by_producer[producer_id]
        del partitions[tp]
        if partitions:
            return
        del by_producer[producer_id]
        if not by_producer:
            del self.pending[group]
        groups = self.producer_groups[producer_id]
        groups.discard(group)
        if not groups:
            del self.producer_groups[producer_id]

    def remove_group(self, group: str) -> None:
        """Forget the group: metadata, committed and pending offsets."""
        self.groups.pop(group, None)
        self.committed.pop(group, None)
        for producer_id in list(self.pending.get(group, {})):
            for tp in list(self.pending[group][producer_id]):
                self._unpend(group, producer_id, tp)

    # -- replaying the log --------------------------------------------------------------

    def replay(self, data: bytes, start: int) -> tuple[int, int]:
        """Replay the entries of ``data``, read from the log at ``start`` (its first
        batch may begin below it); (records applied, the offset after the last
        entry).  Legacy (v0/v1) entries are never transactional."""
        position, end, applied, following = 0, len(data), 0, start
        while position < end:
            if position + MAGIC_OFFSET < end and data[position + MAGIC_OFFSET] < CURRENT_MAGIC:
                legacy, position = decode_legacy_entry(data, position)
                for record in legacy:
                    if record.offset >= start and record.key is not None:
                        applied += 1
                        self.apply_record(record.key, record.value, record.offset)
                if legacy:
                    following = max(following, legacy[-1].offset + 1)
                continue
            header, records = decode_batch(data, position)
            applied += self.apply_batch(header, records, start)
            following = max(following, header.next_offset)
            position += header.size
        return applied, following

    def apply_batch(self, header: BatchHeader, records: Sequence[Record], start: int = 0) -> int:
        """Replay one batch read from the partition (records below ``start`` were
        read already); the count of records applied.  A record these schemas do
        not describe is logged and skipped."""
        if header.is_control:
            if records and header.base_offset >= start:
                try:
                    kind = decode_control_type(records[0].key)
                except CorruptRecordError as exc:
                    logger.warning("skipping an unreadable control record: %s", exc)
                    return 0
                if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    self.complete(header.producer_id, kind == ControlRecordType.COMMIT)
            return 0
        applied = 0
        producer_id = header.producer_id if header.is_transactional else None
        for record in records:
            if record.offset >= start and record.key is not None:
                applied += 1
                self.apply_record(record.key, record.value, header.base_offset, producer_id)
        return applied

    def apply_record(
        self,
        key_bytes: bytes,
        value: bytes | None,
        log_offset: int,
        producer_id: int | None = None,
    ) -> None:
        """Replay one record of the batch at ``log_offset``, of a transaction of
        ``producer_id`` (None: not transactional)."""
        try:
            key = decode_key(key_bytes)
            if key is None:
                group = decode_group_key(key_bytes)
                if group is not None:
                    self.set_group(group, None if value is None else decode_group_value(value))
                return
            tp = TopicPartition(key.topic, key.partition)
            if producer_id is None:
                if value is None:
                    self.delete(key.group, tp, log_offset)
                else:
                    self.commit(key.group, tp, Stored(decode_value(value), log_offset))
            elif value is None:
                pending = self.pending.get(key.group, {}).get(producer_id, {})
                if tp in pending:
                    self._unpend(key.group, producer_id, tp)
            else:
                self.add_pending(
                    producer_id, key.group, tp, Stored(decode_value(value), log_offset)
                )
        except OffsetsSchemaError as exc:
            logger.warning("skipping an unreadable offsets record: %s", exc)

    # -- reading ------------------------------------------------------------------------

    def offsets(self, group: str) -> dict[TopicPartition, OffsetValue]:
        return {tp: s.value for tp, s in self.committed.get(group, {}).items()}

    def unstable(self, group: str, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Those of ``partitions`` the group has pending transactional commits of."""
        by_producer = self.pending.get(group)
        if not by_producer:
            return set()
        return {tp for tp in partitions if any(tp in p for p in by_producer.values())}

    def has_offsets(self, group: str) -> bool:
        """Committed or pending offsets (Kafka's GroupMetadata.hasOffsets)."""
        return group in self.committed or group in self.pending

    def partitions(self, group: str) -> set[TopicPartition]:
        """Every partition the group has a committed or a pending offset of."""
        found = set(self.committed.get(group, {}))
        for partitions in self.pending.get(group, {}).values():
            found.update(partitions)
        return found

    def offset_groups(self) -> set[str]:
        return set(self.committed) | set(self.pending)
