"""Names of everything the storage engine puts on disk, in one place.

A partition directory is ``<topic>-<partition>``.  Segment files are named by
their base offset as 20 zero-padded decimal digits followed by a suffix::

    00000000000000368769.log         the records (v2 batches, back to back)
    00000000000000368769.index       sparse offset index, 8-byte entries
    00000000000000368769.timeindex   sparse time index, 12-byte entries
    00000000000000368769.txnindex    aborted transactions, 34-byte entries (``txn_index``);
                                     only once the segment holds an ABORT marker
    00000000000000368769.snapshot    producer state at that offset (``producer_state``)

Transient suffixes mark files in the middle of a protocol; recovery decides
what to do with each (see docs/storage.md):

    .deleted   waiting for delayed removal after retention or truncation
    .cleaned   output of a compaction pass that has not been committed
    .swap      a committed compaction output, about to replace its inputs
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from annal.topic_partition import TopicPartition as TopicPartition  # its home before

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
TRANSIENT_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)

META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

LOG_DIR_FILES = (
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEANER_CHECKPOINT,
    CLEAN_SHUTDOWN_FILE,
)

_SEGMENT_NAME = re.compile(
    r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)((?:\.deleted|\.cleaned|\.swap)?)$"
)
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``segment_file_name(42, ".log")`` → ``00000000000000000042.log``."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str, str] | None:
    """Split a segment file name into (base offset, suffix, transient suffix).

    Returns None for a name that is not a segment file.
    """
    m = _SEGMENT_NAME.match(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3)


def snapshot_file_name(offset: int) -> str:
    """``snapshot_file_name(42)`` → ``00000000000000000042.snapshot``."""
    return f"{offset:020d}{PRODUCER_SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    """The offset a producer snapshot file is named by; None for other names."""
    m = _SNAPSHOT_NAME.match(name)
    return None if m is None else int(m.group(1))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``orders-3`` → TopicPartition("orders", 3); None if the name has no partition suffix."""
    m = _PARTITION_DIR.match(name)
    if m is None:
        return None
    return TopicPartition(m.group(1), int(m.group(2)))


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and creates in it are durable."""
    fsync_file(path)


def fsync_file(path: Path) -> None:
    """fsync a file already written (cheap when nothing of it is still unwritten)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write a metadata file: tmp → fsync → rename → fsync dir.

    With ``sync=False`` the two fsyncs are left out: a reader (and a process
    killed afterwards) still sees the old file or the new one, but the new one
    is durable against a machine crash only once the caller syncs it
    (``fsync_file`` and ``fsync_dir``, or ``os.sync`` for many files at once).
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)
