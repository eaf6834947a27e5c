"""The console's background sampler: offsets over time, and what follows from them.

Every ``interval_s`` seconds the sampler reads one ``Sample``: the log end
offset of every partition and the committed offset of every consumer group's
partitions.  It keeps the last hour of samples in a ring buffer (a bounded
deque: the oldest sample goes when a new one comes), from which the pages'
charts are drawn:

* lag of a group's partition: log end offset minus committed offset, as
  kafka-consumer-groups.sh computes it (never below 0; a partition the group
  committed nothing for has no lag);
* produce rate of a topic: how far its partitions' log end offsets moved
  between two samples, per second;
* consume rate of a group: how far its committed offsets moved, per second.

An offset that went backwards (a topic deleted and created again, a group's
offsets reset) counts as no progress rather than negative progress.

The maths are pure functions of samples; ``Sampler`` only runs the reading
function on a thread and keeps what it returns.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

T = TypeVar("T")
HORIZON_S = 3600.0

Offsets = Mapping[TopicPartition, int]
Point = tuple[float, float]  # (seconds since the epoch, value)


@dataclass(frozen=True, slots=True)
class Sample:
    """What the cluster said at ``at`` (seconds since the epoch)."""

    at: float
    end_offsets: Offsets = field(default_factory=dict)
    committed: Mapping[str, Offsets] = field(default_factory=dict)  # group -> offsets


class Ring(Generic[T]):
    """A fixed-capacity buffer of the newest items, oldest first; thread-safe."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a ring holds at least one item")
        self._items: deque[T] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._items.maxlen or 0

    def append(self, item: T) -> None:
        with self._lock:
            self._items.append(item)

    def items(self) -> list[T]:
        with self._lock:
            return list(self._items)

    def latest(self) -> T | None:
        with self._lock:
            return self._items[-1] if self._items else None

    def __len__(self) -> int:
        return len(self._items)


def capacity_for(horizon_s: float, interval_s: float) -> int:
    """How many samples cover ``horizon_s`` at one every ``interval_s`` (both ends)."""
    if interval_s <= 0:
        raise ValueError("the sample interval must be positive")
    return math.ceil(horizon_s / interval_s) + 1


def partition_lag(end_offsets: Offsets, committed: Offsets) -> dict[TopicPartition, int]:
    """Each committed partition's lag: log end minus committed offset, at least 0.
    Partitions with nothing committed (-1) or no known log end are left out."""
    out: dict[TopicPartition, int] = {}
    for tp, offset in committed.items():
        end = end_offsets.get(tp)
        if offset < 0 or end is None or end < 0:
            continue
        out[tp] = max(0, end - offset)
    return out


def total_lag(end_offsets: Offsets, committed: Offsets) -> int:
    return sum(partition_lag(end_offsets, committed).values())


def _progress(before: Offsets, after: Offsets, keep: Callable[[TopicPartition], bool]) -> int:
    """How far the offsets of the partitions in both samples moved forward."""
    moved = 0
    for tp, offset in after.items():
        earlier = before.get(tp)
        if earlier is None or earlier < 0 or offset < 0 or not keep(tp):
            continue
        moved += max(0, offset - earlier)
    return moved


def rate(moved: int, seconds: float) -> float:
    """Records per second; 0 over no time."""
    return moved / seconds if seconds > 0 else 0.0


def produce_rate(earlier: Sample, later: Sample, topic: str) -> float:
    """Records appended to ``topic`` per second between two samples."""
    moved = _progress(earlier.end_offsets, later.end_offsets, lambda tp: tp.topic == topic)
    return rate(moved, later.at - earlier.at)


def produce_rates(earlier: Sample, later: Sample) -> dict[str, float]:
    """Every topic's produce rate between two samples."""
    topics = {tp.topic for tp in later.end_offsets}
    return {t: produce_rate(earlier, later, t) for t in sorted(topics)}


def consume_rate(earlier: Sample, later: Sample, group: str, topic: str | None = None) -> float:
    """Records per second ``group`` committed past (of ``topic``, or of all topics)."""
    moved = _progress(
        earlier.committed.get(group, {}),
        later.committed.get(group, {}),
        lambda tp: topic is None or tp.topic == topic,
    )
    return rate(moved, later.at - earlier.at)


def _pairs(samples: Sequence[Sample]) -> Iterable[tuple[Sample, Sample]]:
    return itertools.pairwise(samples)


def produce_series(samples: Sequence[Sample], topic: str) -> list[Point]:
    """(time, produce rate) at each sample after the first."""
    return [(b.at, produce_rate(a, b, topic)) for a, b in _pairs(samples)]


def consume_series(samples: Sequence[Sample], group: str, topic: str | None = None) -> list[Point]:
    """(time, consume rate) at each sample after the first the group committed in."""
    return [
        (b.at, consume_rate(a, b, group, topic))
        for a, b in _pairs(samples)
        if group in a.committed and group in b.committed
    ]


def lag_series(samples: Sequence[Sample], group: str) -> list[Point]:
    """(time, the group's total lag) at each sample the group was seen in."""
    return [
        (s.at, float(total_lag(s.end_offsets, s.committed[group])))
        for s in samples
        if group in s.committed
    ]


class Sampler:
    """Calls ``read`` every ``interval_s`` seconds on a thread of its own and keeps
    the last ``horizon_s`` of samples.  A failed read is remembered (``error``)
    and the next one tried on time: the cluster may come back."""

    def __init__(
        self,
        read: Callable[[], Sample],
        interval_s: float,
        horizon_s: float = HORIZON_S,
    ) -> None:
        self.read = read
        self.interval_s = interval_s
        self.samples: Ring[Sample] = Ring(capacity_for(horizon_s, interval_s))
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def sample_once(self) -> None:
        try:
            self.samples.append(self.read())
            self.error = None
        except Exception as exc:  # the cluster may be unreachable; try again next time
            self.error = f"{type(exc).__name__}: {exc}"
            logger.info("sampling failed: %s", self.error)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))
