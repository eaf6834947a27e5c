"""The broker's network layer: one event loop serving every request.

The loop runs on one thread, ``network``, and serves the broker's gRPC
services with ``grpc.aio``: every connection and every request, however many
clients there are, is a coroutine on it.  A handler does its short work inline
(appends to and reads from the page cache) and waits without a thread: in a
purgatory (``delayed.py``) for events, or on one of three small pools for
work that blocks:

* ``control`` (one thread): controller requests, applied in arrival order
  (opening logs, reading topic configs from ZooKeeper);
* ``admin`` (``ADMIN_THREADS`` threads): ZooKeeper reads and writes of admin
  requests, and ControlledShutdown's wait for the controller;
* ``storage`` (one thread): appends that roll their log to a new segment
  (creating its files takes a millisecond or more, longer while another
  thread's fsync holds the file system's journal).

So the broker's thread count does not grow with its clients.  Requests are
bounded by ``RequestLimits`` (``rpc_guard.py``) and, one by one, by
``socket.request.max.bytes``.

Thread safety: ``start``, ``serve``, ``set_serving`` and ``stop`` are called
from the broker's main thread; ``call`` runs a coroutine on the loop from
any other thread and waits for its result.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
from annal.broker.metrics import BrokerMetrics
from annal.broker.requests.rpc_guard import RequestGuard, RequestLimits
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

logger = logging.getLogger(__name__)

T = TypeVar("T")

ADMIN_THREADS = 4


class NetworkLayer:
    """See the module docstring."""

    def __init__(
        self, limits: RequestLimits, max_request_bytes: int, metrics: BrokerMetrics | None = None
    ) -> None:
        self.limits = limits
        self.metrics = metrics
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="network", daemon=True)
        self._running = threading.Event()
        self.admin_pool = ThreadPoolExecutor(ADMIN_THREADS, thread_name_prefix="admin")
        self.control_pool = ThreadPoolExecutor(1, thread_name_prefix="control")
        self.storage_pool = ThreadPoolExecutor(1, thread_name_prefix="storage")
        self._max_request_bytes = max_request_bytes
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None

    def start(self) -> None:
        self._thread.start()
        self._running.wait()

    @property
    def thread_id(self) -> int:
        ident = self._thread.ident
        assert ident is not None, "start the network layer first"
        return ident

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._running.set)
        self.loop.run_forever()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (not from the loop)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    async def run_control(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the control thread: controller requests, in order."""
        return await self.loop.run_in_executor(self.control_pool, fn)

    async def run_admin(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the admin pool."""
        return await self.loop.run_in_executor(self.admin_pool, fn)

    async def run_storage(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the storage thread: appends that roll a log."""
        return await self.loop.run_in_executor(self.storage_pool, fn)

    def serve(
        self,
        address: str,
        add_services: Callable[[grpc.aio.Server], None],
        credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> int:
        """Bind ``address`` (over TLS with ``credentials``), add the services and
        start serving; the port bound.  RuntimeError when it cannot be bound.
        ``interceptors`` run before the request guard (authentication first)."""
        return self.call(self._serve(address, add_services, credentials, interceptors))

    async def _serve(
        self,
        address: str,
        add_services: Callable[[grpc.aio.Server], None],
        credentials: grpc.ServerCredentials | None,
        interceptors: Sequence[grpc.aio.ServerInterceptor],
    ) -> int:
        server = grpc.aio.server(
            interceptors=[*interceptors, RequestGuard(self.limits, self.metrics)],
            options=[
                ("grpc.max_receive_message_length", self._max_request_bytes),
                ("grpc.max_send_message_length", self._max_request_bytes),
            ],
        )
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        add_services(server)
        port: int = (
            server.add_insecure_port(address)
            if credentials is None
            else server.add_secure_port(address, credentials)
        )
        await server.start()
        self._server = server
        return port

    def set_serving(self, names: list[str], serving: bool = True) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        if self._health is not None:
            health_servicer = self._health
            self.call(_set_all(health_servicer, names, status))

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop serving (in-flight requests get ``grace_s``), then the loop and pools."""
        if self._server is not None and self._running.is_set():
            server = self._server
            health_servicer = self._health

            async def stop_serving() -> None:
                if health_servicer is not None:
                    await health_servicer.enter_graceful_shutdown()
                await server.stop(grace_s)

            try:
                self.call(stop_serving(), grace_s + 5)
            except Exception:  # stopping goes on whatever the server says
                logger.exception("stopping the gRPC server")
        if self._running.is_set():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.admin_pool.shutdown(wait=False, cancel_futures=True)
        self.control_pool.shutdown(wait=False, cancel_futures=True)
        self.storage_pool.shutdown(wait=False, cancel_futures=True)


async def _set_all(servicer: health.aio.HealthServicer, names: list[str], status: int) -> None:
    for name in names:
        await servicer.set(name, status)
