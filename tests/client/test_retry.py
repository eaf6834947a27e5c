"""The one retry policy: 50 ms doubling to 1 s, stopping before a wait would pass
the deadline; retries on the exceptions and results it is told to."""

from __future__ import annotations

import time

import pytest
import tenacity
from annal.client.retry import Backoff, Budget, delay, retrying, waits


def test_the_waits_double_from_50_ms_to_at_most_1_s() -> None:
    assert [delay(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert delay(10_000) == 1.0


def test_retrying_calls_again_on_what_it_is_told_and_no_more() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return "done"

    assert retrying(5, retry_on=lambda e: isinstance(e, ConnectionError))(flaky) == "done"
    assert len(calls) == 3
    with pytest.raises(ValueError, match="for good"):  # not retried: raised at once
        retrying(5, retry_on=lambda e: isinstance(e, ConnectionError))(_refuse)


def _refuse() -> None:
    raise ValueError("for good")


def test_until_returns_the_last_result_when_time_is_up() -> None:
    answers = iter(range(100))
    began = time.monotonic()
    last = retrying(0.3, until=lambda n: n > 1000)(lambda: next(answers))
    assert 0.14 <= time.monotonic() - began < 0.29 and last == 2  # 50 + 100 ms, not 200 more
    assert retrying(5, until=lambda n: n >= 2)(lambda: next(answers)) >= 2


def test_a_budget_gives_its_attempts_and_then_the_rest_of_its_time() -> None:
    budget = Budget(0.0, attempts=2)
    assert not budget.exhausted()
    budget.sleep()
    budget.sleep()
    assert budget.exhausted() and budget.describe().startswith("2 retries in ")
    timed = Budget(0.12)
    assert not timed.expires_in_next_wait()  # 50 ms fits in 120
    timed.sleep()
    assert timed.expires_in_next_wait()  # 50 + 100 ms would not
    assert Budget(10).expires_in_next_wait(within_s=0.01)


def test_backoff_gives_the_same_waits_one_at_a_time_up_to_its_ceiling() -> None:
    backoff = Backoff(longest_s=0.3)
    assert [backoff.next() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    backoff.reset()
    assert backoff.next() == 0.05
    assert [Backoff().next() for _ in range(1)] == [delay(0)]


def test_tenacity_waits_follow_the_same_policy() -> None:
    strategy = waits(longest_s=0.3)
    seen = []
    for attempt in range(1, 6):
        state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
        state.attempt_number = attempt
        seen.append(strategy(state))
    assert seen == [0.05, 0.1, 0.2, 0.3, 0.3]
