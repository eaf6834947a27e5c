"""The one retry policy of annal, clients and brokers alike: wait 50 ms, then
twice as long each time, at most 1 s (or another ceiling the caller names),
until the operation's time is up (tenacity).

Three shapes of the same policy:

* ``retrying(timeout_s, retry_on=..., until=...)`` is a ``tenacity.Retrying`` for an
  operation that is one call: it calls again after an exception ``retry_on``
  accepts, or while the result fails ``until``, and stops before a wait would pass
  ``timeout_s``: the last exception is raised, or the last result returned.
* ``Budget(timeout_s, attempts)`` is for loops that decide at each turn what to do
  (several partitions, some answered): ``exhausted()`` once at least ``attempts``
  retries were made and the time is up, ``sleep()`` between turns.
* ``Backoff(longest_s)`` is for loops that wait on something else between
  attempts (a session event, a stop signal): ``next()`` is the wait before the
  next attempt, ``reset()`` after a success.

Both wait ``delay(n)`` before retry ``n`` (0-based), so every client backs off alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import tenacity

FIRST_S = 0.05
LONGEST_S = 1.0


def delay(retry: int, longest_s: float = LONGEST_S) -> float:
    """The wait before retry ``retry`` (0, 1, ...): 50 ms doubling, at most
    ``longest_s`` (1 s)."""
    return float(min(FIRST_S * 2 ** min(retry, 16), longest_s))


def waits(longest_s: float = LONGEST_S) -> tenacity.wait.wait_base:
    """The policy as tenacity's wait strategy, for a ``tenacity.Retrying`` of the
    caller's own stop and retry conditions."""
    return tenacity.wait_exponential(multiplier=FIRST_S, max=longest_s)


def retrying(
    timeout_s: float,
    *,
    retry_on: Callable[[BaseException], bool] | None = None,
    until: Callable[[Any], bool] | None = None,
    before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
    stop: tenacity.stop.stop_base | None = None,
) -> tenacity.Retrying:
    """See the module docstring; ``stop`` replaces the deadline when given."""
    retry: tenacity.retry_base = tenacity.retry_never
    if retry_on is not None:
        retry = tenacity.retry_if_exception(retry_on)
    if until is not None:
        retry = retry | tenacity.retry_if_result(lambda result: not until(result))
    return tenacity.Retrying(
        stop=stop if stop is not None else tenacity.stop_before_delay(timeout_s),
        wait=waits(),
        retry=retry,
        reraise=True,
        retry_error_callback=_last_result if until is not None else None,
        before_sleep=before_sleep,
        sleep=time.sleep,
    )


def _last_result(state: tenacity.RetryCallState) -> Any:
    assert state.outcome is not None
    return state.outcome.result()  # raises the last exception, if that is what it was


class Budget:
    """Retries for a loop of its own: at least ``attempts``, and more until
    ``timeout_s`` has passed since it began."""

    def __init__(self, timeout_s: float, attempts: int = 0) -> None:
        self.attempts = attempts
        self.began = time.monotonic()
        self.deadline = self.began + timeout_s
        self.done = 0

    def exhausted(self) -> bool:
        return self.done >= self.attempts and time.monotonic() >= self.deadline

    def expires_in_next_wait(self, within_s: float | None = None) -> bool:
        """Whether waiting once more would pass the deadline, or ``within_s`` from
        the start when given (then give up now)."""
        end = self.deadline if within_s is None else self.began + within_s
        return time.monotonic() + delay(self.done) > end

    def sleep(self) -> None:
        wait = delay(self.done)
        if self.done >= self.attempts:  # the extra retries end at the deadline
            wait = max(0.0, min(wait, self.deadline - time.monotonic()))
        self.done += 1
        time.sleep(wait)

    def describe(self) -> str:
        return f"{self.done} retries in {time.monotonic() - self.began:.1f} s"


class Backoff:
    """The policy's waits one at a time, for a loop that waits on events of its
    own between attempts (``threading.Event.wait(backoff.next())``)."""

    def __init__(self, longest_s: float = LONGEST_S) -> None:
        self.longest_s = longest_s
        self.failures = 0

    def next(self) -> float:
        """The wait after one more failure."""
        wait = delay(self.failures, self.longest_s)
        self.failures += 1
        return wait

    def reset(self) -> None:
        """After a success: the next failure waits the shortest time again."""
        self.failures = 0
