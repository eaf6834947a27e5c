"""The purgatory on its own: delayed operations completed by events, expired, cancelled."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from annal.broker.requests.purgatory import DelayedOperation, Purgatory


class Counter(DelayedOperation[str]):
    """Done once ``state['n']`` reaches ``target``."""

    def __init__(self, state: dict[str, int], target: int) -> None:
        self.state = state
        self.target = target
        self.checks = 0

    def try_complete(self) -> str | None:
        self.checks += 1
        return "done" if self.state["n"] >= self.target else None

    def on_expire(self) -> str:
        return "expired"


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_completes_at_once_without_watching() -> None:
    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        assert await purgatory.wait(Counter({"n": 5}, 1), ["a"], 10_000) == "done"
        assert purgatory.waiting == 0 and purgatory.watched_keys() == 0

    run(main())


def test_an_event_on_a_key_completes_it_long_before_the_deadline() -> None:
    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        state = {"n": 0}
        started = time.monotonic()
        task = asyncio.create_task(purgatory.wait(Counter(state, 1), ["a", "b"], 60_000))
        await asyncio.sleep(0)
        assert purgatory.waiting == 1 and purgatory.watched_keys() == 2
        assert purgatory.check_and_complete("b") == 0  # not yet
        state["n"] = 1
        assert purgatory.check_and_complete("other") == 0  # nobody watches it
        assert purgatory.check_and_complete("b") == 1
        assert await task == "done"
        assert time.monotonic() - started < 5
        assert purgatory.waiting == 0 and purgatory.watched_keys() == 0

    run(main())


def test_expires_with_its_own_answer() -> None:
    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        assert await purgatory.wait(Counter({"n": 0}, 1), ["a"], 20) == "expired"
        assert purgatory.watched_keys() == 0

    run(main())


def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        operation = Counter({"n": 0}, 1)
        task = asyncio.create_task(purgatory.wait(operation, ["a"], 60_000))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert purgatory.waiting == 0 and purgatory.watched_keys() == 0
        operation.state["n"] = 1
        assert purgatory.check_and_complete("a") == 0

    run(main())


def test_many_waiters_on_many_keys_complete_only_their_own() -> None:
    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        states = [{"n": 0} for _ in range(300)]
        operations = [Counter(s, 1) for s in states]
        tasks = [
            asyncio.create_task(purgatory.wait(op, [i], 60_000)) for i, op in enumerate(operations)
        ]
        await asyncio.sleep(0)
        states[7]["n"] = 1
        assert purgatory.check_and_complete(7) == 1
        assert await tasks[7] == "done"
        assert sum(op.checks for op in operations) == 300 + 1  # one check each, one more for 7
        for state in states:
            state["n"] = 1
        assert purgatory.check_all() == 299
        assert set(await asyncio.gather(*tasks)) == {"done"}

    run(main())


def test_notify_from_another_thread() -> None:
    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        state = {"n": 0}
        task = asyncio.create_task(purgatory.wait(Counter(state, 1), ["a"], 60_000))
        await asyncio.sleep(0)

        def elsewhere() -> None:
            state["n"] = 1
            purgatory.notify_threadsafe("a")

        threading.Thread(target=elsewhere).start()
        assert await asyncio.wait_for(task, 10) == "done"

    run(main())


def test_an_error_in_a_check_reaches_the_waiter() -> None:
    class Broken(Counter):
        def try_complete(self) -> str | None:
            if self.state["n"]:
                raise RuntimeError("boom")
            return None

    async def main() -> None:
        purgatory: Purgatory[str] = Purgatory("test")
        state = {"n": 0}
        task = asyncio.create_task(purgatory.wait(Broken(state, 1), ["a"], 60_000))
        await asyncio.sleep(0)
        state["n"] = 1
        purgatory.check_and_complete("a")
        with pytest.raises(RuntimeError, match="boom"):
            await task
        assert purgatory.watched_keys() == 0

    run(main())
