"""Checkpoint files: small text files rewritten whole, atomically.

Offset checkpoints (one per log dir: ``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``)::

    0                 version
    2                 number of entries
    orders 0 1520     topic, partition, offset
    orders 1 1498

``leader-epoch-checkpoint`` (one per partition)::

    0                 version
    2                 number of entries
    0 0               epoch, start offset
    3 1210

Writes go tmp → fsync → rename → fsync dir (``files.atomic_write``), so a
reader sees the old file or the new one, never a mix.  The one exception is
a leader-epoch checkpoint written because an epoch began (KAFKA-15046): it is
renamed into place without the fsyncs, and synced by the log's next flush,
before its recovery point moves past the new entry (docs/storage.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from .epoch_types import EpochEntry
from .errors import CheckpointError, MalformedCheckpointError
from .files import TopicPartition, atomic_write

VERSION = 0
T = TypeVar("T")


def _write(path: Path, lines: list[str], sync: bool = True) -> None:
    text = f"{VERSION}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
    atomic_write(path, text.encode("utf-8"), sync=sync)


def _read(path: Path, parse: Callable[[list[str]], T]) -> list[T]:
    """Parse a checkpoint; every error names the file and the line (1-based)."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise MalformedCheckpointError(f"checkpoint {path}: not text ({exc})") from None
    lines = text.splitlines()
    if not lines:
        raise MalformedCheckpointError(
            f"checkpoint {path} line 1: missing version line (empty file)"
        )
    if lines[0].strip() != str(VERSION):
        raise MalformedCheckpointError(
            f"checkpoint {path} line 1: unknown version {lines[0]!r} (expected {VERSION})"
        )
    if len(lines) < 2:
        raise MalformedCheckpointError(f"checkpoint {path} line 2: missing entry count")
    try:
        count = int(lines[1])
    except ValueError:
        raise MalformedCheckpointError(
            f"checkpoint {path} line 2: bad entry count {lines[1]!r}"
        ) from None
    if count < 0:
        raise MalformedCheckpointError(f"checkpoint {path} line 2: negative entry count {count}")
    # Blank lines are tolerated; the others are entries, numbered as in the file.
    entries = [(number, line) for number, line in enumerate(lines[2:], start=3) if line.strip()]
    if count != len(entries):
        raise MalformedCheckpointError(
            f"checkpoint {path} line 2: declares {count} entries but the file holds {len(entries)}"
        )
    out = []
    for number, line in entries:
        try:
            out.append(parse(line.split()))
        except ValueError as exc:
            raise MalformedCheckpointError(
                f"checkpoint {path} line {number}: malformed entry {line!r} ({exc})"
            ) from None
    return out


def _int(field: str, what: str) -> int:
    try:
        return int(field)
    except ValueError:
        raise ValueError(f"{what} {field!r} is not an integer") from None


def _offset_entry(fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise ValueError(f"expected 'topic partition offset', got {len(fields)} fields")
    return (
        TopicPartition(fields[0], _int(fields[1], "partition")),
        _int(fields[2], "offset"),
    )


def _epoch_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError(f"expected 'epoch start_offset', got {len(fields)} fields")
    return EpochEntry(_int(fields[0], "epoch"), _int(fields[1], "start offset"))


class OffsetCheckpointFile:
    """A log dir's ``topic partition offset`` checkpoint.

    Thread-safe: ``self._lock`` (one per file) serialises reads and writes of
    the file, so a read never races a rename of the same path.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Replace the file with ``offsets`` (sorted by topic, partition), atomically."""
        lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        with self._lock:
            _write(self.path, lines)

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; {} when the file does not exist."""
        with self._lock:
            return dict(_read(self.path, _offset_entry))


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``.

    Thread-safe: ``self._lock`` (one per file) serialises reads and writes of
    the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, entries: Sequence[EpochEntry], *, sync: bool = True) -> None:
        """Replace the file with ``entries`` in the given order, atomically; with
        ``sync=False`` not yet durable against a machine crash (a sync of the file
        systems makes it so)."""
        with self._lock:
            _write(self.path, [f"{e.epoch} {e.start_offset}" for e in entries], sync)

    def read(self) -> list[EpochEntry]:
        """The checkpointed entries; [] when the file does not exist."""
        with self._lock:
            return _read(self.path, _epoch_entry)
