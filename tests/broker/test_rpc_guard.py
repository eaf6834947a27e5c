"""The safety net under every rpc handler: an in-process gRPC server whose
handlers fail in each way a handler can."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from annal.broker.request_checks import InvalidRequest
from annal.broker.rpc_guard import RequestGuard, one_line


def _ok(request: bytes, context: grpc.ServicerContext) -> bytes:
    return b"fine:" + request


def _bug(request: bytes, context: grpc.ServicerContext) -> bytes:
    raise RuntimeError("no such thing\nsecond line")


def _invalid(request: bytes, context: grpc.ServicerContext) -> bytes:
    raise InvalidRequest("timeout_ms", -1, ">= 0")


def _aborted(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.NOT_FOUND, "gone")
    raise AssertionError("abort returns by raising")


HANDLERS: dict[str, Callable[[bytes, grpc.ServicerContext], bytes]] = {
    "Ok": _ok,
    "Bug": _bug,
    "Invalid": _invalid,
    "Aborted": _aborted,
}


@pytest.fixture
def call() -> Iterator[Callable[[str], Any]]:
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[RequestGuard()])
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "test.Guarded",
                {n: grpc.unary_unary_rpc_method_handler(h) for n, h in HANDLERS.items()},
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def invoke(method: str) -> Any:
        return channel.unary_unary(f"/test.Guarded/{method}")(b"x", timeout=10)

    yield invoke
    channel.close()
    server.stop(None)


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
    assert len(logged) == 1 and logged[0].name == "annal.broker.rpc_guard"
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


def test_one_line() -> None:
    assert one_line(ValueError("a\nb")) == "ValueError: a"
    assert one_line(RuntimeError()) == "RuntimeError"
    assert len(one_line(ValueError("x" * 1000))) == 300
