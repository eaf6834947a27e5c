"""The gRPC edge of every broker service: request limits, and what a handler
raises becomes a status.

``RequestGuard`` is a ``grpc.aio`` server interceptor wrapped around every
unary rpc of the broker (``annal.v1.Annal``, ``annal.v1.BrokerControl``,
health):

* the request limits (``RequestLimits``, Kafka's ``queued.max.requests`` and
  ``queued.max.request.bytes``) admit the request or answer
  RESOURCE_EXHAUSTED with the setting named, before any work is done;
* ``InvalidRequest`` (``request_checks``: a request-level field out of range)
  becomes INVALID_ARGUMENT with its message, which names the field and value;
* any other exception is a bug: it is logged once, with its traceback, and
  the caller gets INTERNAL with a one-line message, never gRPC's UNKNOWN
  "Exception calling application" (nor a second traceback from gRPC);
* ``context.abort`` from a handler, and a caller's cancellation, pass
  through untouched;
* with ``BrokerMetrics``, each answer is counted and timed by API, and an
  error in it (a refused request's status, a response's top-level error
  code) counted by name.

Handlers answer everything they expect (unknown topics, bad partitions,
fenced epochs) in their responses; this is the net under them, not a way to
answer.  A single request larger than ``socket.request.max.bytes`` never
gets here: gRPC refuses it (RESOURCE_EXHAUSTED) while reading it.

Thread safety: runs on the event loop only, as does ``RequestLimits``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from annal.broker.metrics import BrokerMetrics
from annal.broker.requests.request_checks import InvalidRequest

from annal.errors import from_wire

logger = logging.getLogger(__name__)

MAX_DETAIL_CHARS = 300


def one_line(exc: BaseException) -> str:
    """``KeyError: 'x'``: the exception's type and the first line of its text, cut short."""
    text = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return detail if len(detail) <= MAX_DETAIL_CHARS else detail[: MAX_DETAIL_CHARS - 3] + "..."


class RequestLimits:
    """What the broker holds at once, as Kafka bounds its request queue.

    ``max_requests`` (``queued.max.requests``): requests being worked on; one
    parked in a purgatory (a long poll, an acks=all wait) does not count, as
    in Kafka, where a delayed operation has left the request queue.
    ``max_bytes`` (``queued.max.request.bytes``, -1 for no limit): the bytes
    of every request in the broker, parked ones included.

    gRPC takes a request in whole (``admit``: both bounds at once, after gRPC
    has read it).  The Kafka listener takes a request's bytes first
    (``reserve``), from the size that opens its frame and before reading the
    rest, as Kafka's memory pool does, and counts the request once it is read
    and decoded (``start``); ``release`` ends either kind, ``unreserve`` gives
    back the bytes of a frame that never started.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.active = 0
        self.bytes = 0
        self.refused = 0

    def admit(self, size: int) -> str | None:
        """Take a request of ``size`` bytes in, or say why not."""
        if self.active >= self.max_requests:
            self.refused += 1
            return (
                f"the broker is working on queued.max.requests={self.max_requests} requests; "
                "try again shortly"
            )
        if self.max_bytes >= 0 and self.bytes + size > self.max_bytes:
            self.refused += 1
            return (
                f"a {size}-byte request would take the broker past queued.max.request.bytes="
                f"{self.max_bytes} ({self.bytes} bytes held now); try again shortly"
            )
        self.active += 1
        self.bytes += size
        return None

    def release(self, size: int) -> None:
        self.active -= 1
        self.bytes -= size

    def reserve(self, size: int) -> bool:
        """Hold ``size`` bytes for a frame about to be read, or say no (False) while
        ``queued.max.request.bytes`` has no room for it.  A frame larger than the
        whole bound is taken when nothing else is held, as Kafka's memory pool
        takes it, rather than never (``socket.request.max.bytes`` bounds it)."""
        if self.max_bytes >= 0 and self.bytes > 0 and self.bytes + size > self.max_bytes:
            return False
        self.bytes += size
        return True

    def unreserve(self, size: int) -> None:
        """Give back the bytes of a frame that was not started (see ``reserve``)."""
        self.bytes -= size

    def start(self) -> bool:
        """Count a request whose bytes are reserved, or say no (False) while the broker
        works on ``queued.max.requests`` requests."""
        if self.active >= self.max_requests:
            return False
        self.active += 1
        return True

    def parked(self) -> None:
        """A request started waiting in a purgatory."""
        self.active -= 1

    def unparked(self) -> None:
        self.active += 1


Behaviour = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class RequestGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """See the module docstring."""

    def __init__(
        self, limits: RequestLimits | None = None, metrics: BrokerMetrics | None = None
    ) -> None:
        self._limits = limits
        self._metrics = metrics

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # streaming rpcs (health Watch) keep gRPC's own handling
        method = handler_call_details.method
        behaviour = _guarded(method, handler.unary_unary, self._limits)
        if self._metrics is not None:
            behaviour = _measured(method.rsplit("/", 1)[-1], behaviour, self._metrics)
        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _guarded(method: str, behaviour: Behaviour, limits: RequestLimits | None) -> Behaviour:
    async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
        size = request.ByteSize() if hasattr(request, "ByteSize") else len(request)
        if limits is not None and (refusal := limits.admit(size)) is not None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        try:
            result = behaviour(request, context)
            return await result if asyncio.iscoroutine(result) else result
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            logger.exception("%s failed", method)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"{method} failed on the broker: {one_line(exc)} (see the broker log)",
            )
        finally:
            if limits is not None:
                limits.release(size)

    return guarded


def _measured(api: str, guarded: Behaviour, metrics: BrokerMetrics) -> Behaviour:
    """``guarded`` with its answers counted and timed, and their errors counted."""

    async def measured(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            response = await guarded(request, context)
        except grpc.aio.AbortError:
            status = context.code()
            metrics.request_error(api, status.name if status is not None else "ABORTED")
            raise
        finally:
            metrics.request_done(api, (time.perf_counter() - started) * 1000.0)
        error = getattr(response, "error", 0)
        if isinstance(error, int) and error != 0:
            metrics.request_error(api, from_wire(error).name)
        return response

    return measured
