"""The Kafka-protocol listener (``PLAINTEXT://``): asyncio streams on the broker's loop.

Every connection is two coroutines on the broker's one event loop, beside
gRPC: a reader that takes frames off the socket, and a writer that sends the
answers.  Kafka promises answers on a connection in the order of its
requests, so:

1. the reader reads a frame's 4-byte size and waits until the broker's
   request limits (``RequestLimits``, shared with gRPC) hold that many bytes
   for it under Kafka's ``queued.max.request.bytes``; only then does it read
   the rest of the frame, as Kafka's memory pool is asked before a request's
   bytes are read, so that concurrent large frames wait in the clients'
   sockets rather than in the broker's memory;
2. it checks and decodes the request (``wire``, ``apis``), and waits until
   ``queued.max.requests`` takes one more request in; while it waits (here
   or in step 1) it reads nothing more from this connection, so a client
   past the limits is slowed down, not refused;
3. it starts the request's handler as a task and queues the task;
   handlers start in arrival order, so appends from one connection are made
   in the order sent; the request's limits are released when the task ends,
   however it ends, and a frame's bytes are given back at once when it
   closes the connection or is answered without a handler;
4. the writer awaits the queued tasks one by one and writes each answer.

A connection holds at most ``MAX_IN_FLIGHT`` requests; its reader waits
for room.  Before step 1, a TLS listener runs the TLS handshake, and a SASL
listener answers the SASL requests in step 1 itself and refuses every other
request until the client has authenticated (``authentication``); each
request carries the connection's ``Session`` (its principal) to the handlers.

A frame larger than ``socket.request.max.bytes``, one that does not parse,
an api key or version not served, or a request a handler finds malformed
(``InvalidRequest``) closes the connection after the answers already due,
with a warning naming the client and the reason — as Kafka's broker closes
such connections.  A handler's unexpected failure is logged
with its traceback and closes the connection too; the broker carries on.

Thread safety: ``start`` and ``stop`` are coroutines for the broker's loop
(``NetworkLayer.call``); everything else runs on it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from annal.broker.kafka.apis import KafkaApis, UnsupportedRequest
from annal.broker.kafka.authentication import (
    AUTHENTICATION_TIMEOUT_S,
    AuthenticationFailed,
    ConnectionAuthenticator,
    ListenerSecurity,
    plaintext_mistake,
    start_tls,
)
from annal.broker.requests.request_checks import InvalidRequest
from annal.broker.requests.rpc_guard import RequestLimits, one_line
from annal.kafkaproto.wire import (
    MalformedRequest,
    Request,
    decode_request,
    encode_response,
    peek_head,
    response,
)
from kio.serial.readers import read_int32

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64
LIMITS_RECHECK_S = 0.01


class ConnectionClosing(Exception):
    """The connection must close: the message says why (it is logged)."""


class KafkaListener:
    """See the module docstring."""

    def __init__(
        self,
        apis: KafkaApis,
        limits: RequestLimits,
        max_request_bytes: int,
        security: ListenerSecurity | None = None,
    ) -> None:
        self._apis = apis
        self._limits = limits
        self._max_request_bytes = max_request_bytes
        self.security = security or ListenerSecurity()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.frames_waiting = 0  # frames whose size is read, waiting for request bytes

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; the port bound (OSError when it cannot be)."""
        self._server = await asyncio.start_server(self._accepted, host or "0.0.0.0", port)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        peercert = None
        if self.security.ssl_context is not None:
            try:
                peercert = await start_tls(self.security, writer, client)
            except AuthenticationFailed as exc:
                logger.warning("closing Kafka connection from %s: %s", client, exc)
                writer.close()
                self._connections.discard(task)
                return
        auth = ConnectionAuthenticator(self.security, host.lstrip("/"), peercert)
        deadline = None
        if not auth.authenticated:
            deadline = asyncio.get_running_loop().call_later(
                AUTHENTICATION_TIMEOUT_S, self._too_slow, auth, client, task, writer
            )
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        reading = asyncio.Event()  # set while the reader reads: the sender may cancel it
        reading.set()
        sender = asyncio.ensure_future(self._send(answers, writer, client, task, reading))
        cancelled = False
        try:
            await self._receive(reader, answers, host, auth)
        except ConnectionClosing as exc:
            logger.warning("closing Kafka connection from %s: %s", client, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except asyncio.CancelledError:  # the broker stopping, or the sender gave up
            cancelled = True
        reading.clear()
        try:
            if cancelled:  # the broker stopping (or the sender gave up): wait for no answer
                sender.cancel()
            elif not sender.done():
                await answers.put(None)  # the sender makes room: it reads or drains
            await asyncio.wait([sender])
        except asyncio.CancelledError:  # the broker stopping: no answers are waited for
            pass
        finally:
            if deadline is not None:
                deadline.cancel()
            sender.cancel()
            writer.close()
            self._connections.discard(task)

    @staticmethod
    def _too_slow(
        auth: ConnectionAuthenticator,
        client: str,
        connection: asyncio.Task[None],
        writer: asyncio.StreamWriter,
    ) -> None:
        if not auth.authenticated:
            logger.warning(
                "closing Kafka connection from %s: not authenticated within %.0f s",
                client,
                AUTHENTICATION_TIMEOUT_S,
            )
            writer.close()
            connection.cancel()

    async def _receive(
        self,
        reader: asyncio.StreamReader,
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
        host: str,
        auth: ConnectionAuthenticator,
    ) -> None:
        while True:
            try:
                prefix = await reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise ConnectionClosing(
                        f"the connection ended inside a frame's size ({len(exc.partial)} of 4"
                        " bytes)"
                    ) from None
                return  # closed between requests: the normal end
            size, _ = read_int32(prefix, 0)
            if size < 0 or size > self._max_request_bytes:
                raise ConnectionClosing(
                    plaintext_mistake(prefix)
                    or f"a frame of {size} bytes is outside 0..socket.request.max.bytes="
                    f"{self._max_request_bytes}"
                )
            await self._reserve(size)
            try:
                request = await self._read_request(reader, answers, host, auth, size)
                if request is not None:
                    await self._start()
            except BaseException:
                self._limits.unreserve(size)
                raise
            if request is None:  # answered here: nothing more holds its bytes
                self._limits.unreserve(size)
                continue
            task = asyncio.ensure_future(self._apis_answer(request))
            task.add_done_callback(functools.partial(self._release, size))
            await answers.put(task)

    async def _read_request(
        self,
        reader: asyncio.StreamReader,
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
        host: str,
        auth: ConnectionAuthenticator,
        size: int,
    ) -> Request | None:
        """Read a ``size``-byte frame and decode it: the request for a handler, or
        None when it was answered here (SASL, ApiVersions of a version not
        served); ConnectionClosing when the connection must close."""
        try:
            frame = await reader.readexactly(size)
            received = time.perf_counter()
        except asyncio.IncompleteReadError as exc:
            raise ConnectionClosing(
                f"the connection ended inside a {size}-byte frame ({len(exc.partial)} bytes came)"
            ) from None
        if auth.bare_tokens:
            answer, closing = await auth.bare_token(frame)
            if closing is not None:
                raise ConnectionClosing(closing)
            await answers.put(_done(answer))
            return None
        try:
            head = peek_head(frame)
            refusal = self._apis.check(head)
            if refusal is not None:  # ApiVersions of a version not served
                body = self._apis.refusal_body(refusal)
                await answers.put(_done(encode_response(head, body)))
                return None
            intercepted = auth.intercepts(head.api_key)
            if not intercepted:
                auth.check_allowed(head.api_key, self._apis.supported[head.api_key].name)
            request = decode_request(frame, head, host, auth.session, received)
            if intercepted:
                values, closing = await auth.answer(request)
                await answers.put(_done(encode_response(head, response(head, values))))
                if closing is not None:
                    raise ConnectionClosing(closing)
                return None
        except (MalformedRequest, UnsupportedRequest, AuthenticationFailed) as exc:
            raise ConnectionClosing(str(exc)) from None
        return request

    async def _reserve(self, size: int) -> None:
        """Wait until ``queued.max.request.bytes`` has room for a ``size``-byte frame,
        and hold that room (``frames_waiting`` counts the frames waiting here)."""
        if self._limits.reserve(size):
            return
        self.frames_waiting += 1
        try:
            while not self._limits.reserve(size):
                await asyncio.sleep(LIMITS_RECHECK_S)
        finally:
            self.frames_waiting -= 1

    async def _start(self) -> None:
        """Wait until ``queued.max.requests`` takes one more request in."""
        while not self._limits.start():
            await asyncio.sleep(LIMITS_RECHECK_S)

    def _release(self, size: int, _task: asyncio.Task[bytes | None]) -> None:
        self._limits.release(size)

    async def _apis_answer(self, request: Request) -> bytes | None:
        """The answer's frame (None for none); the task running this releases the
        request's limits when it ends, however it ends."""
        values = await self._apis.handle(request)
        if values is None:
            return None
        return encode_response(request.head, response(request.head, values))

    async def _send(
        self,
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
        writer: asyncio.StreamWriter,
        client: str,
        connection: asyncio.Task[None],
        reading: asyncio.Event,
    ) -> None:
        """Write the answers in request order; on a failed handler, log why and
        stop, and the reader with it."""
        while (task := await answers.get()) is not None:
            try:
                frame = await task
            except InvalidRequest as exc:
                logger.warning("closing Kafka connection from %s: %s", client, exc)
                break
            except Exception as exc:
                logger.exception("a Kafka request from %s failed: %s", client, one_line(exc))
                break
            if frame is None:
                continue
            writer.write(frame)
            try:
                await writer.drain()
            except ConnectionError:
                break
        else:
            return
        if reading.is_set():
            connection.cancel()
        # Answers nobody will read: their requests still finish (limits released).
        while not answers.empty():
            pending = answers.get_nowait()
            if pending is not None:
                pending.add_done_callback(_ignore)


def _done(frame: bytes) -> asyncio.Task[bytes | None]:
    async def ready() -> bytes | None:
        return frame

    return asyncio.ensure_future(ready())


def _ignore(task: asyncio.Task[bytes | None]) -> None:
    if not task.cancelled():
        task.exception()
