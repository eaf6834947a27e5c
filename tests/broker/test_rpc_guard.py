"""The safety net under every rpc handler: an in-process ``grpc.aio`` server whose
handlers fail in each way a handler can, and the request limits."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest
from annal.broker.requests.request_checks import InvalidRequest
from annal.broker.requests.rpc_guard import RequestGuard, RequestLimits, one_line


async def _ok(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b"fine:" + request


async def _bug(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    raise RuntimeError("no such thing\nsecond line")


async def _invalid(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    raise InvalidRequest("timeout_ms", -1, ">= 0")


async def _aborted(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await context.abort(grpc.StatusCode.NOT_FOUND, "gone")
    raise AssertionError("abort returns by raising")


RELEASE = threading.Event()


async def _slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    """Holds its request until the test releases it."""
    while not RELEASE.is_set():
        await asyncio.sleep(0.01)
    return b"done"


HANDLERS: dict[str, Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]] = {
    "Ok": _ok,
    "Bug": _bug,
    "Invalid": _invalid,
    "Aborted": _aborted,
    "Slow": _slow,
}


class Server:
    """A guarded aio server on its own event loop thread."""

    def __init__(self, limits: RequestLimits | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = self.run(self._start(limits))

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    async def _start(self, limits: RequestLimits | None) -> int:
        self.server = grpc.aio.server(interceptors=[RequestGuard(limits)])
        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "test.Guarded",
                    {n: grpc.unary_unary_rpc_method_handler(h) for n, h in HANDLERS.items()},
                )
            ]
        )
        port: int = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return port

    def stop(self) -> None:
        self.run(self.server.stop(None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def client(port: int) -> tuple[grpc.Channel, Callable[..., Any]]:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def invoke(method: str, payload: bytes = b"x") -> Any:
        return channel.unary_unary(f"/test.Guarded/{method}")(payload, timeout=10)

    return channel, invoke


@pytest.fixture
def call() -> Iterator[Callable[..., Any]]:
    server = Server(None)
    channel, invoke = client(server.port)
    yield invoke
    channel.close()
    server.stop()


def status(call: Callable[[str], Any], method: str) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(method)
    return info.value.code(), info.value.details() or ""


@pytest.mark.timeout(60)
def test_a_bug_is_internal_with_one_line_and_logged_once(
    call: Callable[[str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    code, details = status(call, "Bug")
    assert code == grpc.StatusCode.INTERNAL
    assert details == (
        "/test.Guarded/Bug failed on the broker: RuntimeError: no such thing (see the broker log)"
    )
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert len(logged) == 1 and logged[0].name == "annal.broker.requests.rpc_guard"
    assert logged[0].getMessage() == "/test.Guarded/Bug failed"
    assert not any("Exception calling application" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(60)
def test_invalid_requests_and_aborts_keep_their_status(
    call: Callable[[str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert call("Ok") == b"fine:x"
    assert status(call, "Invalid") == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "timeout_ms must be >= 0, not -1",
    )
    assert status(call, "Aborted") == (grpc.StatusCode.NOT_FOUND, "gone")
    assert [r for r in caplog.records if r.exc_info is not None] == []


@pytest.mark.timeout(60)
def test_request_limits_answer_resource_exhausted() -> None:
    limits = RequestLimits(max_requests=1, max_bytes=100)
    server = Server(limits)
    channel, invoke = client(server.port)
    RELEASE.clear()
    try:
        with pytest.raises(grpc.RpcError) as too_big:
            invoke("Ok", b"y" * 101)
        assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queued.max.request.bytes=100" in (too_big.value.details() or "")
        held = channel.unary_unary("/test.Guarded/Slow").future(b"x", timeout=10)
        while limits.active == 0:  # the slow request is in
            time.sleep(0.01)
        with pytest.raises(grpc.RpcError) as busy:
            invoke("Ok")
        assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queued.max.requests=1" in (busy.value.details() or "")
        RELEASE.set()
        assert held.result() == b"done"
        assert invoke("Ok") == b"fine:x"  # released: admitted again
        assert (limits.active, limits.bytes, limits.refused) == (0, 0, 2)
    finally:
        RELEASE.set()
        channel.close()
        server.stop()


def test_one_line() -> None:
    assert one_line(ValueError("a\nb")) == "ValueError: a"
    assert one_line(RuntimeError()) == "RuntimeError"
    assert len(one_line(ValueError("x" * 1000))) == 300
