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
reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from .epoch_types import EpochEntry
from .errors import CheckpointError
from .files import TopicPartition, atomic_write

VERSION = 0
T = TypeVar("T")


def _write(path: Path, lines: list[str]) -> None:
    text = f"{VERSION}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
    atomic_write(path, text.encode("utf-8"))


def _read(path: Path, parse: Callable[[list[str]], T]) -> list[T]:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"checkpoint {path} is truncated: {len(lines)} lines")
    if lines[0].strip() != str(VERSION):
        raise CheckpointError(f"checkpoint {path} line 1: unknown version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"checkpoint {path} line 2: bad entry count {lines[1]!r}") from None
    entries = [line for line in lines[2:] if line.strip()]
    if count != len(entries):
        raise CheckpointError(
            f"checkpoint {path} declares {count} entries but holds {len(entries)}"
        )
    out = []
    for number, line in enumerate(entries, start=3):
        try:
            out.append(parse(line.split()))
        except (ValueError, IndexError):
            raise CheckpointError(
                f"checkpoint {path} line {number}: malformed entry {line!r}"
            ) from None
    return out


def _offset_entry(fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise ValueError("expected 'topic partition offset'")
    return TopicPartition(fields[0], int(fields[1])), int(fields[2])


def _epoch_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError("expected 'epoch start_offset'")
    return EpochEntry(int(fields[0]), int(fields[1]))


class OffsetCheckpointFile:
    """A log dir's ``topic partition offset`` checkpoint.  Thread-safe: one lock per file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        with self._lock:
            _write(self.path, lines)

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; {} when the file does not exist."""
        with self._lock:
            return dict(_read(self.path, _offset_entry))


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``.  Thread-safe: one lock per file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, entries: Sequence[EpochEntry]) -> None:
        with self._lock:
            _write(self.path, [f"{e.epoch} {e.start_offset}" for e in entries])

    def read(self) -> list[EpochEntry]:
        with self._lock:
            return _read(self.path, _epoch_entry)
