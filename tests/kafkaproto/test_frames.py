"""kafkaproto/frames.py: frames come out whole and in order however the bytes are
cut by the transport (random cuts, frames larger than the scratch buffer), a
connection that ends inside a frame or sends a refused size says so, and
reading pauses while frames wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from annal.kafkaproto.frames import MAX_QUEUED, SCRATCH_BYTES, FrameConnection, FrameError
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(120)


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def refuse_over(limit: int) -> Any:
    def check(prefix: bytes, size: int) -> str | None:
        return None if 0 <= size <= limit else f"a frame of {size} bytes"

    return check


def feed(connection: FrameConnection, data: bytes, cuts: list[int]) -> None:
    """Hand ``data`` to the protocol as a transport would: into the buffers it
    offers, in pieces no larger than the cuts say."""
    at, i = 0, 0
    while at < len(data):
        buffer = connection.get_buffer(-1)
        assert len(buffer) > 0
        piece = min(len(buffer), cuts[i % len(cuts)], len(data) - at)
        buffer[:piece] = data[at : at + piece]
        connection.buffer_updated(piece)
        at += piece
        i += 1


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def opened(limit: int = 1 << 24) -> FrameConnection:
    connection = FrameConnection(refuse_over(limit), lambda c: None)
    connection.connection_made(FakeTransport())
    return connection


async def drain(connection: FrameConnection, count: int) -> list[bytes]:
    return [bytes(frame) for frame in [await connection.read_frame() for _ in range(count)]
            if frame is not None]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 300), st.integers(SCRATCH_BYTES - 8, SCRATCH_BYTES + 300)),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 70_000), min_size=1, max_size=6),
)
def test_frames_come_out_whole_and_in_order_however_cut(sizes: list[int], cuts: list[int]) -> None:
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]

    async def run() -> list[bytes]:
        connection = opened()
        got: list[bytes] = []
        for i, payload in enumerate(payloads):  # one at a time: reading pauses when many wait
            feed(connection, framed([payload]), cuts[i % len(cuts) :] + cuts)
            got += await drain(connection, 1)
        connection.eof_received()
        assert await connection.read_frame() is None
        return got

    assert asyncio.run(run()) == payloads


def test_many_small_frames_in_one_read_and_reading_pauses_while_they_wait() -> None:
    async def run() -> None:
        connection = opened()
        transport = connection.transport
        assert isinstance(transport, FakeTransport)
        payloads = [b"r%03d" % i for i in range(3 * MAX_QUEUED)]
        feed(connection, framed(payloads), [SCRATCH_BYTES])
        assert transport.paused
        assert await drain(connection, len(payloads)) == payloads
        assert not transport.paused

    asyncio.run(run())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00", "ended inside a frame's size (2 of 4 bytes)"),
        (b"\x00\x00\x00\x0ahello", "ended inside a 10-byte frame (5 bytes came)"),
        ((SCRATCH_BYTES * 2).to_bytes(4, "big") + b"x" * 100,
         f"ended inside a {SCRATCH_BYTES * 2}-byte frame (100 bytes came)"),
    ],
)  # fmt: skip
def test_an_end_inside_a_frame_is_an_error_after_the_whole_ones(
    data: bytes, message: str
) -> None:
    async def run() -> None:
        connection = opened()
        feed(connection, framed([b"whole"]) + data, [7])
        connection.eof_received()
        assert await connection.read_frame() == b"whole"
        with pytest.raises(FrameError, match=message.replace("(", r"\(").replace(")", r"\)")):
            await connection.read_frame()

    asyncio.run(run())


def test_a_refused_size_stops_reading() -> None:
    async def run() -> None:
        connection = opened(limit=1000)
        transport = connection.transport
        assert isinstance(transport, FakeTransport)
        feed(connection, framed([b"ok"]) + (5000).to_bytes(4, "big") + b"rest", [64])
        assert transport.paused
        assert await connection.read_frame() == b"ok"
        with pytest.raises(FrameError, match="a frame of 5000 bytes"):
            await connection.read_frame()

    asyncio.run(run())


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(1, 500), min_size=1))
def test_random_bytes_give_frames_or_a_clear_error(data: bytes, cuts: list[int]) -> None:
    async def run() -> None:
        connection = opened(limit=2000)
        feed(connection, data, cuts)
        connection.eof_received()
        while True:
            try:
                frame = await connection.read_frame()
            except FrameError as exc:
                assert "frame" in str(exc)
                return
            if frame is None:
                return

    asyncio.run(run())
