"""The leader-epoch cache of one partition (KIP-101/279).

An ordered list of ``EpochEntry(epoch, start_offset)``: leader epoch ``epoch``
wrote the offsets from ``start_offset`` up to the next entry's start (or the
log end).  Both fields strictly increase.  Followers use it to find where
their log diverges from the leader's (``end_offset_for``), never truncating by
high watermark alone.  Persisted to ``leader-epoch-checkpoint`` (a
truncation at once, a new epoch at the log's next flush, below); rebuilt
from batch headers when the log is recovered.

Durability (KAFKA-15046).  A truncation is written tmp → fsync → rename →
fsync dir.  A new epoch (``assign``, once per partition per leader change,
on leaders and followers alike) is kept in memory only: a file written, let
alone fsynced, per partition would make the first record after an election
cost file-system work on every replica (with thousands of partitions, seconds).
The entries reach the file, durably, in ``sync``, which the log calls before
it moves its recovery point: an entry not yet written always starts above the
recovery point, where recovery after a crash (of the process or the machine)
rebuilds entries from the batches again.  A checkpoint left empty or torn by
a machine crash does not parse; the cache then starts empty and says so
(``lost``), and the log recovers every segment to rebuild it.
"""

from __future__ import annotations

import logging
import threading

from .checkpoints import LeaderEpochCheckpointFile
from .epoch_types import EpochEntry
from .errors import MalformedCheckpointError
from .files import TopicPartition

logger = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochFileCache"]


class LeaderEpochFileCache:
    """The epoch → start offset entries of one partition, persisted as the module
    docstring says.

    Thread-safe: one lock, ``self._lock``, guards the entry list, the
    checkpoint writes (so the file always matches a state the cache has been
    in) and ``_unwritten``.  Readers take the same
    lock and get copies.
    """

    def __init__(
        self, topic_partition: TopicPartition, checkpoint: LeaderEpochCheckpointFile
    ) -> None:
        self.topic_partition = topic_partition
        self._checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        self._unwritten = False  # an entry is in memory only (``assign``)
        self.lost = False  # the checkpoint did not parse: rebuild from the log
        try:
            entries = checkpoint.read()
        except MalformedCheckpointError as exc:
            logger.warning("%s; rebuilding the leader epochs from the log", exc)
            entries = []
            self.lost = True
        for entry in entries:
            self._put(entry)

    def _put(self, entry: EpochEntry) -> bool:
        latest = self._entries[-1] if self._entries else None
        if (
            latest is not None
            and entry.epoch == latest.epoch
            and entry.start_offset >= latest.start_offset
        ):
            return False
        self._entries = [
            e
            for e in self._entries
            if e.epoch < entry.epoch and e.start_offset < entry.start_offset
        ]
        self._entries.append(entry)
        return True

    def _flush(self) -> None:
        self._checkpoint.write(self._entries)
        self._unwritten = False

    def sync(self, synced: bool = False) -> None:
        """Write and make durable the entries ``assign`` made (the log's flush);
        ``synced``: the file systems are synced after this call (at a clean
        shutdown), so the file is written but not fsynced."""
        with self._lock:
            if self._unwritten:
                self._checkpoint.write(self._entries, sync=not synced)
            self._unwritten = False

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        Entries that would break the ordering (an epoch >= ``epoch`` or a start
        >= ``start_offset``) are dropped first, as the log diverged there.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(
                f"invalid leader epoch entry ({epoch}, {start_offset}) for {self.topic_partition}"
            )
        with self._lock:
            if self._put(EpochEntry(epoch, start_offset)):
                self._unwritten = True

    @property
    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def epoch_entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch.

        The latest epoch ends at the log end offset.  An older epoch ends where
        the next larger epoch starts, reported with the largest known epoch at
        or below the requested one (the requested epoch itself when it precedes
        every entry).  An unknown epoch above the latest gives (-1, -1).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._entries[-1].epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = [e for e in self._entries if e.epoch <= requested_epoch]
            if not floor:
                return requested_epoch, higher.start_offset
            return floor[-1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the last entry starting at or before it."""
        with self._lock:
            found = None
            for entry in self._entries:
                if entry.start_offset > offset:
                    break
                found = entry.epoch
            return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there).

        A negative ``end_offset`` (undefined) changes nothing.
        """
        if end_offset < 0:
            return
        with self._lock:
            kept = [e for e in self._entries if e.start_offset < end_offset]
            if len(kept) != len(self._entries):
                self._entries = kept
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before ``start_offset``; the one holding it now starts there."""
        with self._lock:
            if not self._entries or self._entries[0].start_offset >= start_offset:
                return
            before = [e for e in self._entries if e.start_offset <= start_offset]
            after = [e for e in self._entries if e.start_offset > start_offset]
            self._entries = [EpochEntry(before[-1].epoch, start_offset), *after]
            self._flush()

    def clear_and_flush(self) -> None:
        """Forget every entry and persist the empty cache."""
        with self._lock:
            self._entries = []
            self._flush()
