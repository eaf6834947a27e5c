"""Which partition a record goes to: Kafka's default partitioner.

A record with a key goes to ``toPositive(murmur2(key)) % partitions``, the
same function as Kafka's Java client (seed 0x9747b28c, 4-byte little-endian
blocks, the tail mixed in the same order), so the same key lands on the same
partition whichever client wrote it.  Records without a key stick to one
partition until a batch closes, then move on (KIP-480), choosing among the
partitions that have a leader when any do.

Thread safety: ``DefaultPartitioner`` guards changes to its sticky choices
with a lock; ``sticky`` (topic → partition) may be read without it.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Sequence
from typing import Protocol

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int, like ``Utils.murmur2``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length // 4
    for (k,) in struct.iter_unpack("<I", data[: blocks * 4]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[blocks * 4 :]
    rest = len(tail)
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


class Partitioner(Protocol):
    """Pluggable: anything with these two methods can replace the default."""

    def partition(
        self, topic: str, key: bytes | None, partitions: int, available: Sequence[int]
    ) -> int: ...

    def on_new_batch(self, topic: str, previous: int) -> None: ...


class DefaultPartitioner:
    """murmur2 for keys, sticky spreading for null keys.  Thread-safe."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self.sticky: dict[str, int] = {}

    def partition(
        self, topic: str, key: bytes | None, partitions: int, available: Sequence[int] = ()
    ) -> int:
        if partitions <= 0:
            raise ValueError(f"topic {topic!r} has no partitions")
        if key is not None:
            return to_positive(murmur2(key)) % partitions
        with self._lock:
            chosen = self.sticky.get(topic)
            if chosen is None or chosen >= partitions:
                chosen = self._pick(partitions, available)
                self.sticky[topic] = chosen
            return chosen

    def on_new_batch(self, topic: str, previous: int) -> None:
        """A batch for ``previous`` closed: null-key records move to another partition."""
        with self._lock:
            if self.sticky.get(topic) == previous:
                del self.sticky[topic]

    def _pick(self, partitions: int, available: Sequence[int]) -> int:
        choices = [p for p in (available or range(partitions)) if p < partitions]
        return self._rng.choice(choices) if choices else self._rng.randrange(partitions)
