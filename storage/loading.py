"""Loading a broker's logs at start-up on ``num.recovery.threads.per.data.dir``
threads per log dir (Kafka's setting, default 1).

Each log dir gets a pool of its own, so the dirs (usually one disk each) load
side by side and each disk serves at most that many logs at once; with one
dir and one thread the logs load on the caller's thread.  A log's loading
(and its recovery after a crash) reads and rewrites only its own files, so
the logs of a dir load in any order.

A log that fails to load does not stop the others: every log is tried, and
the caller gets the loaded logs and the failures, each with its log, to
report together (``LogLoadError``).

Thread safety: ``run_per_dir`` is called from one thread; ``run`` must be
safe to call for different items at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from .errors import LogDirError

T = TypeVar("T")
R = TypeVar("R")

SHOWN_FAILURES = 10  # failures a LogLoadError's message lists one by one


class LogLoadError(LogDirError):
    """Logs that could not be loaded, each with its directory and the error."""

    def __init__(self, failures: Sequence[tuple[Path, Exception]], total: int) -> None:
        self.failures = list(failures)
        listed = "; ".join(
            f"{path}: {type(exc).__name__}: {exc}" for path, exc in failures[:SHOWN_FAILURES]
        )
        more = len(failures) - SHOWN_FAILURES
        super().__init__(
            f"cannot load {len(failures)} of {total} logs: {listed}"
            + (f"; and {more} more" if more > 0 else "")
            + ". The other logs were loaded and closed again; no checkpoint was written. "
            "Move the broken log directories aside (their partitions are copied again from "
            "the other replicas) or repair them, then start again"
        )


def run_per_dir(
    work: Mapping[Path, Sequence[T]],
    run: Callable[[T], R],
    threads_per_dir: int,
) -> tuple[list[tuple[T, R]], list[tuple[T, Exception]]]:
    """``run`` on every item of every dir, ``threads_per_dir`` at a time per dir:
    (item, result) for those that succeeded and (item, error) for those that
    raised, each in the order given."""
    if threads_per_dir < 1:
        raise ValueError(f"threads per dir must be at least 1, not {threads_per_dir}")
    busy = {d: items for d, items in work.items() if items}

    def attempt(item: T) -> tuple[T, R | _Failed]:
        try:
            return item, run(item)
        except Exception as exc:  # reported with the others, never lost
            return item, _Failed(exc)

    if len(busy) <= 1 and threads_per_dir == 1:
        outcomes = [attempt(item) for items in busy.values() for item in items]
    else:
        pools = {
            d: ThreadPoolExecutor(
                min(threads_per_dir, len(items)), thread_name_prefix=f"log-loading-{d.name}"
            )
            for d, items in busy.items()
        }
        try:
            futures = [pools[d].submit(attempt, i) for d, items in busy.items() for i in items]
            outcomes = [future.result() for future in futures]
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True, cancel_futures=True)
    done: list[tuple[T, R]] = []
    failed: list[tuple[T, Exception]] = []
    for item, outcome in outcomes:
        if isinstance(outcome, _Failed):
            failed.append((item, outcome.error))
        else:
            done.append((item, outcome))
    return done, failed


class _Failed:
    """What a failed item's run raised."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error
