"""The one writer of a leader's ISR changes (Kafka's ISR-change propagation).

Leaders decide ISR changes in requests (a follower caught up) and in the
ISR-expiration task (a follower fell behind); neither waits for ZooKeeper.
They hand each change (``partition.IsrChange``) to this writer, whose
thread, in order of arrival:

1. writes the partition's state znode, conditioned on the version the leader
   last knew (a stale version or a ZooKeeper error leaves the ISR as it was);
   given ``write_states``, the changes queued together (a restarted follower
   catching up on thousands of partitions at once) go in one call, up to
   ``MAX_BATCH`` of them, which a pipelined ZooKeeper write answers in about
   one round trip; without it, one write after another;
2. reports the outcome to ``on_written`` (the replica manager has the
   partition commit or drop the change, ``Partition.complete_isr_change``,
   and wakes the requests waiting on it: acks=all produces, long polls);
3. once its queue is empty, leaves one ISR-change notification for the
   controller naming every partition written since the last one, which the
   controller relays to every broker's metadata cache.

If the broker dies between 1 and 3 the controller learns of the change at
its next full read of the partition states; the znode is the truth.

While the broker's ZooKeeper session is SUSPENDED (``session_changed``, from
the ZooKeeper client's listener) the writer holds: it writes nothing, and the
changes wait in its queue, still pending in their partitions (a leader cut
off from ZooKeeper changes no ISR).  CONNECTED resumes it, with a new
session after a LOST too; the version check refuses what the controller
overtook meanwhile.

Thread safety: ``submit`` and ``session_changed`` may be called from any
thread and never block; everything else happens on the writer's own thread.
``self._may_write`` (an event) is the hold.  ``initiate_shutdown``
and ``await_shutdown`` stop it; changes still queued are dropped (the
partitions' pending changes stay pending, which only keeps their high
watermarks conservative until the next leader takes over).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence

from annal.broker.replication.partition import IsrChange
from annal.storage.files import TopicPartition
from annal.zk.client import SessionEvent, StaleVersionError, ZkError
from annal.zk.layout import PartitionState

logger = logging.getLogger(__name__)

# (partition, state to write, expected znode version) -> the new version;
# raises StaleVersionError when the version moved, ZkError when ZooKeeper fails.
StateWriter = Callable[[TopicPartition, PartitionState, int], int]
# Many of those in one go, in order: for each, the new version or the error raised.
StatesWriter = Callable[
    [Sequence[tuple[TopicPartition, PartitionState, int]]], Sequence[int | Exception]
]

MAX_BATCH = 1000  # changes written in one StatesWriter call


class IsrChangeWriter:
    """See the module docstring."""

    def __init__(
        self,
        write_state: StateWriter,
        notify_controller: Callable[[list[TopicPartition]], None],
        on_written: Callable[[IsrChange, int | None], None],
        *,
        write_states: StatesWriter | None = None,
    ) -> None:
        self._write_state = write_state
        self._write_states = write_states
        self._notify_controller = notify_controller
        self._on_written = on_written
        self._queue: queue.Queue[IsrChange | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._may_write = threading.Event()  # cleared while the session is suspended
        self._may_write.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="isr-change-writer", daemon=True)
        self._thread.start()

    def submit(self, change: IsrChange) -> None:
        """Queue a leader's ``change``; never blocks."""
        self._queue.put(change)

    def session_changed(self, event: SessionEvent) -> None:
        """The ZooKeeper session listener: hold on SUSPENDED or LOST, resume on
        CONNECTED.  Never blocks."""
        if event is SessionEvent.CONNECTED:
            self._may_write.set()
        else:
            self._may_write.clear()

    @property
    def holding(self) -> bool:
        """True while writes wait for the session to be connected again."""
        return not self._may_write.is_set()

    def _wait_for_session(self) -> bool:
        """Block while held; False when stopping."""
        while not self._may_write.wait(0.2):
            if self._stopping.is_set():
                return False
        return not self._stopping.is_set()

    def _run(self) -> None:
        written: list[TopicPartition] = []
        while not self._stopping.is_set():
            try:
                item = self._queue.get(timeout=None if not written else 0)
            except queue.Empty:
                self._announce(written)
                written = []
                continue
            if item is None:
                break
            batch, stop = self._more([item])
            if not self._write_all(batch, written) or stop:
                break
        self._announce(written)

    def _more(self, batch: list[IsrChange]) -> tuple[list[IsrChange], bool]:
        """``batch`` and the changes queued behind it (with a batched writer, up to
        MAX_BATCH); True when the stop sentinel came up."""
        limit = MAX_BATCH if self._write_states is not None else 1
        while len(batch) < limit:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _write_all(self, batch: list[IsrChange], written: list[TopicPartition]) -> bool:
        """Write ``batch``, report each outcome, add the written partitions to
        ``written``; False when stopping."""
        if not self._wait_for_session():
            return False
        if len(batch) == 1 or self._write_states is None:
            outcomes = [self._write(change) for change in batch]
        else:
            outcomes = self._write_many(batch)
        for change, version in zip(batch, outcomes, strict=True):
            if version is not None:
                written.append(change.tp)
            self._on_written(change, version)
        return True

    def _write_many(self, batch: Sequence[IsrChange]) -> list[int | None]:
        assert self._write_states is not None
        try:
            found = self._write_states([(c.tp, c.state, c.expected_version) for c in batch])
        except ZkError as exc:
            logger.warning("%d ISR changes not written: %s", len(batch), exc)
            return [None] * len(batch)
        except Exception:  # the writer outlives any one bad write
            logger.exception("%d ISR changes not written", len(batch))
            return [None] * len(batch)
        return [self._outcome(change, got) for change, got in zip(batch, found, strict=True)]

    def _outcome(self, change: IsrChange, got: int | Exception) -> int | None:
        if not isinstance(got, Exception):
            return got
        if isinstance(got, StaleVersionError):
            logger.info("ISR change of %s refused (%s): %s", change.tp, change.why, got)
        else:
            logger.warning("ISR change of %s not written (%s): %s", change.tp, change.why, got)
        return None

    def _write(self, change: IsrChange) -> int | None:
        try:
            return self._write_state(change.tp, change.state, change.expected_version)
        except StaleVersionError as exc:
            logger.info("ISR change of %s refused (%s): %s", change.tp, change.why, exc)
        except ZkError as exc:
            logger.warning("ISR change of %s not written (%s): %s", change.tp, change.why, exc)
        except Exception:  # the writer outlives any one bad write
            logger.exception("ISR change of %s not written (%s)", change.tp, change.why)
        return None

    def _announce(self, written: list[TopicPartition]) -> None:
        if not written or not self._wait_for_session():
            return
        try:
            self._notify_controller(written)
        except ZkError as exc:
            logger.warning(
                "ISR-change notification for %d partitions failed: %s", len(written), exc
            )

    def initiate_shutdown(self) -> None:
        self._stopping.set()
        self._queue.put(None)

    def await_shutdown(self, timeout_s: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
