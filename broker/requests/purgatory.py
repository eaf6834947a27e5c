"""Waiting requests as delayed operations (Kafka's DelayedOperationPurgatory).

A request that cannot be answered yet (a long-poll Fetch short of
``min_bytes``, an acks=all Produce not yet on the whole ISR, a DeleteRecords
whose followers have not followed) becomes a ``DelayedOperation``: an
object that can say whether it is done (``try_complete``) and what it
answers when its time runs out (``on_expire``).  The purgatory watches it
under keys, usually the topic-partitions it involves, and is told of events
by key (``check_and_complete``): an append, a high watermark or log start
that moved, a leader or ISR change, a partition stopped.  Each event
re-checks only the operations watching that key: no polling, no condition
variable that every append wakes, and no thread per waiting request: a
waiting operation is an asyncio future plus one timer.

The life of an operation, in ``wait``:

1. ``try_complete()`` at once: most requests never wait.
2. Otherwise it is watched under each of its keys and a timer is set for its
   deadline.
3. The first of these answers it: an event on one of its keys whose
   ``try_complete()`` returns an answer; the timer (``on_expire()``); the
   caller's cancellation (a client that gave up or disconnected), which
   raises CancelledError in the caller.
4. Whatever answered, the timer is cancelled and every watch removed, so a
   finished or abandoned operation leaves nothing behind.

Thread safety: a purgatory belongs to one event loop; ``wait`` and
``check_and_complete`` run on it.  Other threads (the ISR-expiration task, the
log manager's background work) call ``notify_threadsafe``, which hands the
key to the loop.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class DelayedOperation(abc.ABC, Generic[T]):
    """A waiting request: when it can answer, and what it answers at its deadline."""

    @abc.abstractmethod
    def try_complete(self) -> T | None:
        """The answer if the operation can complete now, else None.  Called on
        the loop, once at the start and then on every event on its keys, so it
        must be cheap and must not block."""

    @abc.abstractmethod
    def on_expire(self) -> T:
        """The answer when the deadline comes first."""


class _Watch(Generic[T]):
    __slots__ = ("future", "keys", "operation")

    def __init__(
        self, operation: DelayedOperation[T], keys: tuple[Hashable, ...], future: asyncio.Future[T]
    ) -> None:
        self.operation = operation
        self.keys = keys
        self.future = future


class Parking(Protocol):
    """Told when a request starts and stops waiting (the broker's request limits)."""

    def parked(self) -> None: ...

    def unparked(self) -> None: ...


class Purgatory(Generic[T]):
    """Delayed operations of one kind, watched by key; see the module docstring."""

    def __init__(
        self,
        name: str,
        loop: asyncio.AbstractEventLoop | None = None,
        parking: Parking | None = None,
    ) -> None:
        self.name = name
        self._loop = loop
        self._parking = parking
        self._watchers: dict[Hashable, dict[_Watch[T], None]] = {}
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Operations waiting now."""
        return self._waiting

    def watched_keys(self) -> int:
        """Keys with at least one waiting operation."""
        return len(self._watchers)

    async def wait(
        self, operation: DelayedOperation[T], keys: Iterable[Hashable], timeout_ms: int
    ) -> T:
        """The operation's answer: at once, on an event on one of ``keys``, or
        from ``on_expire`` after ``timeout_ms``."""
        answer = operation.try_complete()
        if answer is not None:
            return answer
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        future: asyncio.Future[T] = loop.create_future()
        watch = _Watch(operation, tuple(dict.fromkeys(keys)), future)
        for key in watch.keys:
            self._watchers.setdefault(key, {})[watch] = None
        self._waiting += 1
        if self._parking is not None:
            self._parking.parked()
        timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire, watch)
        try:
            return await future
        finally:
            timer.cancel()
            self._waiting -= 1
            if self._parking is not None:
                self._parking.unparked()
            self._unwatch(watch)

    def check_and_complete(self, key: Hashable) -> int:
        """Something happened to ``key``: re-check the operations watching it.
        Returns how many completed.  Runs on the loop."""
        watches = self._watchers.get(key)
        if not watches:
            return 0
        completed = 0
        for watch in list(watches):
            if watch.future.done():
                continue
            try:
                answer = watch.operation.try_complete()
            except Exception as exc:  # answered with the error, never lost
                watch.future.set_exception(exc)
                completed += 1
                continue
            if answer is not None:
                watch.future.set_result(answer)
                completed += 1
        return completed

    def check_all(self) -> int:
        """Re-check every waiting operation (a change that touches all keys)."""
        return sum(self.check_and_complete(key) for key in list(self._watchers))

    def notify_threadsafe(self, key: Hashable) -> None:
        """``check_and_complete(key)`` from any thread; nothing before the first wait."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.check_and_complete, key)

    def _expire(self, watch: _Watch[T]) -> None:
        if watch.future.done():
            return
        try:
            watch.future.set_result(watch.operation.on_expire())
        except Exception as exc:
            watch.future.set_exception(exc)

    def _unwatch(self, watch: _Watch[T]) -> None:
        for key in watch.keys:
            watches = self._watchers.get(key)
            if watches is not None:
                watches.pop(watch, None)
                if not watches:
                    del self._watchers[key]

    def __repr__(self) -> str:
        return f"Purgatory({self.name}, waiting={self._waiting}, keys={len(self._watchers)})"
