"""One Kafka-protocol connection's bytes: size-prefixed frames in, answers out.

``FrameConnection`` is the asyncio protocol of each accepted connection.  It
is a ``BufferedProtocol``: the transport reads straight into buffers it
offers, so a request is copied once, from the socket (or from TLS's
decryption) into the frame's own buffer:

* between frames, reads go into a scratch buffer, from which every frame
  that arrived whole (small requests, often several per read) is copied out
  and queued;
* a frame too large for what is left of the scratch buffer gets a buffer of
  its own, sized by its 4-byte prefix, and the rest of it is read directly
  into that.

Over TLS this matters more than the copies suggest: asyncio's TLS layer
decrypts into the offered buffer record by record, where a stream reader
would allocate a buffer of the largest read size for every TLS record
(librdkafka writes a produce request as dozens of small records).

``read_frame`` gives the queued frames in order, raising ``FrameError``
with the reason when the connection ended inside a frame or a frame's size
was refused (``check_size``: too large, or bytes that are not Kafka's).
Reading pauses while ``MAX_QUEUED`` frames wait, so a client that sends
faster than its requests are taken is held back by TCP.

Writing is the transport's, with ``drain`` waiting while the transport's
buffer is above its high-water mark, as a stream writer's does.
``start_tls`` upgrades the connection in place (server side); a connection
made with ``tls_first`` reads nothing before it, so the client's first TLS
bytes are left for the handshake.

Thread safety: one event loop; everything runs on it.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable
from typing import Any

SCRATCH_BYTES = 64 * 1024
MAX_QUEUED = 8  # frames read ahead of the reader before reading pauses

SizeCheck = Callable[[bytes, int], str | None]  # (prefix, size) -> why refused, or None


class FrameError(Exception):
    """The connection cannot go on: it ended inside a frame, or a frame's size was
    refused.  The message says which."""


class FrameConnection(asyncio.BufferedProtocol):
    """See the module docstring.  ``on_open`` is called with the connection once
    the transport is there (it starts the connection's task)."""

    def __init__(
        self,
        check_size: SizeCheck,
        on_open: Callable[[FrameConnection], None],
        tls_first: bool = False,
    ) -> None:
        self._check_size = check_size
        self._on_open = on_open
        self._tls_first = tls_first  # read nothing before start_tls takes over the bytes
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._start = 0  # scratch[_start:_end]: bytes read, not yet taken
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being read into its own buffer
        self._frame_got = 0
        self._ready: collections.deque[memoryview] = collections.deque()
        self._error: FrameError | None = None
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._paused_writing = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._lost: Exception | None = None
        self._closed = False

    # -- the transport's side ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        first = self.transport is None
        self.transport = transport
        if first:  # start_tls makes it again with the TLS transport
            if self._tls_first:
                transport.pause_reading()  # the ClientHello is start_tls's to read
            self._on_open(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._frame_got :]
        if self._end == len(self._scratch):  # a partial frame at the end: move it first
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._frame_got += nbytes
            if self._frame_got == len(self._frame):
                self._ready.append(memoryview(self._frame).toreadonly())
                self._frame = None
        else:
            self._end += nbytes
            self._take_frames()
        if len(self._ready) >= MAX_QUEUED and not self._paused_reading and self.transport:
            self._paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def _take_frames(self) -> None:
        """Queue every whole frame in the scratch buffer; start a large one's own buffer."""
        while self._error is None and self._end - self._start >= 4:
            at = self._start
            prefix = bytes(self._scratch[at : at + 4])
            size = int.from_bytes(prefix, "big", signed=True)
            refused = self._check_size(prefix, size)
            if refused is not None:
                self._fail(FrameError(refused))
                return
            have = self._end - at - 4
            if have >= size:
                self._ready.append(memoryview(bytes(self._view[at + 4 : at + 4 + size])))
                self._start = at + 4 + size
            elif size > len(self._scratch) - 4:  # will not fit: a buffer of its own
                self._frame = bytearray(size)
                self._frame[:have] = self._view[at + 4 : self._end]
                self._frame_got = have
                self._start = self._end = 0
                return
            else:
                break
        if self._start == self._end:
            self._start = self._end = 0

    def _compact(self) -> None:
        left = self._end - self._start
        self._scratch[:left] = self._view[self._start : self._end]
        self._start, self._end = 0, left

    def eof_received(self) -> bool:
        self._eof = True
        if self._frame is not None:
            self._fail(FrameError(
                f"the connection ended inside a {len(self._frame)}-byte frame "
                f"({self._frame_got} bytes came)"
            ))  # fmt: skip
        elif 0 < self._end - self._start < 4:
            self._fail(FrameError(
                f"the connection ended inside a frame's size ({self._end - self._start} of 4 "
                "bytes)"
            ))  # fmt: skip
        elif self._end > self._start:
            size = int.from_bytes(self._scratch[self._start : self._start + 4], "big")
            self._fail(FrameError(
                f"the connection ended inside a {size}-byte frame "
                f"({self._end - self._start - 4} bytes came)"
            ))  # fmt: skip
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionResetError("connection lost")
        self._closed = True
        if not self._eof and self._error is None and self._frame is None:
            self._eof = True  # lost between frames: as an end
        elif not self._eof:
            self.eof_received()
        self._wake()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("connection lost"))
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- the connection task's side ---------------------------------------------------

    async def read_frame(self) -> memoryview | None:
        """The next request frame (without its size prefix), read-only; None when the
        client closed the connection between frames.  FrameError when it cannot go on."""
        while not self._ready:
            if self._error is not None:
                raise self._error
            if self._eof or self._closed:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._ready.popleft()
        if self._paused_reading and len(self._ready) < MAX_QUEUED // 2 and self.transport:
            self._paused_reading = False
            self.transport.resume_reading()
        return frame

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport is not None and not self._closed:
            self.transport.write(data)

    async def drain(self) -> None:
        if self._closed:
            raise ConnectionResetError("connection lost")
        if self._paused_writing:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    async def start_tls(self, context: ssl.SSLContext, timeout_s: float) -> None:
        """The TLS handshake (server side); the connection then reads and writes TLS."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.transport = await loop.start_tls(
            self.transport, self, context, server_side=True, ssl_handshake_timeout=timeout_s
        )

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default if self.transport is None else self.transport.get_extra_info(name, default)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: FrameError) -> None:
        self._error = error
        if self.transport is not None and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
