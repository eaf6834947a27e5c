"""A single background thread that runs delayed and periodic storage tasks.

Thread-safe: ``self._cond`` guards the task heap; tasks run on the worker
thread, outside the lock, one at a time.  A task that raises is logged with
its traceback and, when periodic, runs again at its next period.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass(order=True)
class _Task:
    due: float
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_s: float | None = field(compare=False, default=None)


class Scheduler:
    """Runs tasks on one daemon thread; ``initiate_shutdown`` then ``await_shutdown``."""

    def __init__(self, name: str = "storage-scheduler") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._tasks: list[_Task] = []
        self._seq = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def schedule(
        self,
        name: str,
        fn: Callable[[], object],
        delay_ms: int = 0,
        period_ms: int | None = None,
    ) -> None:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` if given."""
        with self._cond:
            if self._stopping:
                return
            due = time.monotonic() + delay_ms / 1000
            period = period_ms / 1000 if period_ms is not None else None
            heapq.heappush(self._tasks, _Task(due, next(self._seq), name, fn, period))
            self._cond.notify()

    def submit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` as soon as possible (an executor for one-off work)."""
        self.schedule(getattr(fn, "__name__", "task"), fn)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (
                    not self._tasks or self._tasks[0].due > time.monotonic()
                ):
                    timeout = self._tasks[0].due - time.monotonic() if self._tasks else None
                    self._cond.wait(timeout)
                if self._stopping:
                    return
                task = heapq.heappop(self._tasks)
            try:
                task.fn()
            except Exception:
                logger.exception("background task %s failed", task.name)
            if task.period_s is not None:
                with self._cond:
                    if not self._stopping:
                        task.due = time.monotonic() + task.period_s
                        heapq.heappush(self._tasks, task)

    def initiate_shutdown(self) -> None:
        with self._cond:
            self._stopping = True
            self._tasks.clear()
            self._cond.notify_all()

    def await_shutdown(self, timeout_s: float | None = None) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def shutdown(self) -> None:
        self.initiate_shutdown()
        self.await_shutdown()
