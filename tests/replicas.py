"""What a partition holds, as the failure tests compare it: one replica's bytes, and
the offsets a consumer reads back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from annal.consumer.simple import SimpleConsumer


def copy_of(dirs: Sequence[Path], topic: str, partition: int) -> bytes:
    """A replica's every ``.log`` of the partition, in offset order, from whichever
    of ``dirs`` (one broker's log dirs) holds it."""
    for d in dirs:
        found = d / f"{topic}-{partition}"
        if found.is_dir():
            return b"".join(f.read_bytes() for f in sorted(found.glob("*.log")))
    return b""


def stored_offsets(consumer: SimpleConsumer, topic: str, partition: int) -> set[int]:
    """Every offset a consumer reads from the partition, start to end."""
    seen: set[int] = set()
    offset = 0
    while True:
        result = consumer.fetch(topic, partition, offset)
        if not result.records:
            return seen
        seen.update(r.offset for r in result.records)
        offset = result.next_offset
