"""The gRPC edge of every broker service: what a handler raises becomes a status.

``RequestGuard`` is a server interceptor wrapped around every unary rpc of the
broker (``annal.v1.Annal``, ``annal.v1.BrokerControl``):

* ``InvalidRequest`` (``request_checks``: a request-level field out of range)
  becomes INVALID_ARGUMENT with its message, which names the field and value;
* any other exception is a bug: it is logged once, with its traceback, and
  the caller gets INTERNAL with a one-line message, never gRPC's UNKNOWN
  "Exception calling application" (nor a second traceback from gRPC);
* ``context.abort`` from a handler passes through untouched.

Handlers answer everything they expect (unknown topics, bad partitions,
fenced epochs) in their responses; this is the net under them, not a way to
answer.  Thread-safe: it keeps no state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from annal.broker.request_checks import InvalidRequest

logger = logging.getLogger(__name__)

MAX_DETAIL_CHARS = 300


def one_line(exc: BaseException) -> str:
    """``KeyError: 'x'``: the exception's type and the first line of its text, cut short."""
    text = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return detail if len(detail) <= MAX_DETAIL_CHARS else detail[: MAX_DETAIL_CHARS - 3] + "..."


class RequestGuard(grpc.ServerInterceptor):  # type: ignore[misc]
    """See the module docstring."""

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # streaming rpcs (health Watch) keep gRPC's own handling
        return grpc.unary_unary_rpc_method_handler(
            _guarded(handler_call_details.method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _guarded(method: str, behaviour: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def guarded(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behaviour(request, context)
        except InvalidRequest as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:
            if context.code() is not None:
                raise  # the handler called context.abort: its status stands
            logger.exception("%s failed", method)
            context.abort(
                grpc.StatusCode.INTERNAL,
                f"{method} failed on the broker: {one_line(exc)} (see the broker log)",
            )

    return guarded
