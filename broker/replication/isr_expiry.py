"""ISR expiration: a leader drops the in-sync followers that stopped keeping up
(Kafka's isr-expiration task, ``replica.lag.time.max.ms``).

A follower in a partition's ISR is out of sync when it has not been caught up
with the leader's log end for ``replica.lag.time.max.ms``.  A follower that
holds the whole log (its log end is the leader's) counts as caught up as long
as its broker keeps fetching from this leader, whichever partitions it
fetches (a fetch session's fetch stands for all of its partitions, as in
Kafka); one that does not is measured from its last fetch that reached the
log end (``Partition.maybe_shrink_isr``).

Nothing is looked at per partition while nothing happens.  A led partition is
*watched* from the moment one of its in-sync followers may not hold the whole
log: it became led (the followers' ends are unknown), the leader appended, an
in-sync follower fetched from elsewhere than the log end, the ISR changed.
Each tick (every half ``replica.lag.time.max.ms``) looks at the watched
partitions only; one whose in-sync followers all hold the whole log leaves
the watch.  Every follower fetch records when its broker last fetched
(``fetched``); a broker silent for ``replica.lag.time.max.ms`` has each led
partition it is in the ISR of watched once, so a dead or frozen follower
leaves those ISRs even when nothing is being written.

Thread safety: ``self._lock`` guards the watched set; a partition joins and
leaves it under its own lock (the order is always partition, then watch).
``fetched`` is a single dict store, called on every follower fetch without a
lock.  The tick runs on the expiration thread, or from a test.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from annal.storage.files import TopicPartition

if TYPE_CHECKING:
    from annal.broker.replication.partition import Partition

logger = logging.getLogger(__name__)


class IsrWatch:
    """The led partitions to look at, and when each follower broker last fetched."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: set[Partition] = set()
        self._last_fetch_ms: dict[int, int] = {}
        self._stalls_seen: dict[int, int] = {}  # broker -> the last fetch its stall was seen at

    def add(self, partition: Partition) -> None:
        with self._lock:
            self._watched.add(partition)

    def discard(self, partition: Partition) -> None:
        with self._lock:
            self._watched.discard(partition)

    def watched(self) -> list[Partition]:
        with self._lock:
            return list(self._watched)

    def fetched(self, replica_id: int, now_ms: int) -> None:
        """Broker ``replica_id`` fetched as a follower at ``now_ms``."""
        self._last_fetch_ms[replica_id] = now_ms

    def last_fetch_ms(self, replica_id: int) -> int:
        """When broker ``replica_id`` last fetched as a follower (0: not yet)."""
        return self._last_fetch_ms.get(replica_id, 0)

    def newly_stalled(self, now_ms: int, max_lag_ms: int) -> set[int]:
        """Follower brokers silent for ``max_lag_ms``, each reported once per silence."""
        stalled = set()
        for broker, last in list(self._last_fetch_ms.items()):
            if now_ms - last > max_lag_ms and self._stalls_seen.get(broker) != last:
                self._stalls_seen[broker] = last
                stalled.add(broker)
        return stalled


class IsrExpiration:
    """The tick over the watched partitions, and the thread that runs it."""

    def __init__(
        self,
        watch: IsrWatch,
        max_lag_ms: int,
        hosted: Callable[[TopicPartition], Partition | None],
        every_partition: Callable[[], Iterable[Partition]],
        clock_ms: Callable[[], int],
    ) -> None:
        self.watch = watch
        self.max_lag_ms = max_lag_ms
        self._hosted = hosted
        self._every_partition = every_partition
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="isr-expiration", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval_s = max(self.max_lag_ms / 2, 50) / 1000
        while not self._stop.wait(interval_s):
            try:
                self.tick()
            except Exception:  # the task outlives any one bad partition
                logger.exception("ISR expiration failed")

    def tick(self) -> int:
        """Look at the watched partitions (and those of follower brokers gone
        silent); returns how many were looked at."""
        stalled = self.watch.newly_stalled(self._clock_ms(), self.max_lag_ms)
        if stalled:
            for partition in self._every_partition():
                if stalled.intersection(partition.isr):
                    partition.watch_isr()
        watched = self.watch.watched()
        for partition in watched:
            if self._hosted(partition.tp) is not partition:
                self.watch.discard(partition)  # stopped or replaced meanwhile
                continue
            partition.maybe_shrink_isr(self.max_lag_ms)
        return len(watched)

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
