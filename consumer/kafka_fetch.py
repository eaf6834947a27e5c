"""Fetches of one partition over a broker's Kafka listener: the bulk readers' transport.

A reader that moves megabytes per fetch and wants the raw batches (the Spark
reader) pays per byte in the transport.  Over gRPC, serving and receiving a
megabyte costs about a millisecond of CPU at each end; a Kafka-protocol
Fetch carries the same batches as one length-prefixed frame on a plain TCP
connection, for about half of that.  Every broker whose Metadata names a
PLAINTEXT Kafka listener (``kafka_host``/``kafka_port``) serves Fetch v4 to v12
there; ``SimpleConsumer.fetch_raw`` uses it when the client's own security
is PLAINTEXT, and gRPC otherwise.

``KafkaFetchConnection`` is one blocking connection to one listener, one
request at a time (a lock serializes callers).  Any failure of the connection
itself (reset, closed, timed out, an answer that does not parse) closes it
and raises ``FetchConnectionError``: the caller treats it as the broker
being unavailable, refreshes metadata and tries again.  A listener that
cannot be connected to at all raises ``ListenerUnreachable`` (within
``CONNECT_TIMEOUT_S``): the caller goes over gRPC to that broker instead,
which is the right thing when a firewall lets only the gRPC port through,
and costs nothing more when the broker is down (the gRPC call fails too).

Thread safety: ``fetch`` and ``close`` may be called from any thread.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

from annal.kafkaproto.wire import MalformedRequest, decode_response, encode_request

FETCH_KEY = 1
FETCH_VERSION = 11  # the newest without tagged fields: log start offsets and leader epochs
MAX_FRAME_BYTES = 256 << 20  # far above any answer a reader asks for


CONNECT_TIMEOUT_S = 5.0


class FetchConnectionError(Exception):
    """The connection failed (the message says how); it is closed."""


class ListenerUnreachable(FetchConnectionError):
    """No connection could be made to the listener."""


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """One partition's part of a Fetch answer: Kafka's error number, the high
    watermark and log start offset, the batches, and what went wrong in words."""

    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    message: str = ""


class KafkaFetchConnection:
    """See the module docstring; ``endpoint`` is the listener's ``host:port``."""

    def __init__(self, endpoint: str, timeout_s: float, client_id: str = "annal") -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._correlation = 0

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
    ) -> PartitionAnswer:
        """One Fetch of ``topic``-``partition`` from ``offset``, as a consumer
        (replica id -1, read uncommitted)."""
        values = {
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        with self._lock:
            body = self._exchange(values)
        if body.error_code.value != 0:
            # a session error; this client never opens sessions
            return PartitionAnswer(body.error_code.value, -1, -1, b"")
        for t in body.responses:
            for p in t.partitions:
                if t.topic == topic and p.partition_index == partition:
                    return PartitionAnswer(
                        p.error_code.value, p.high_watermark, p.log_start_offset, p.records or b""
                    )
        self.close()
        raise FetchConnectionError(
            f"the Fetch answer from {self.endpoint} does not name {topic}-{partition}"
        )

    def _exchange(self, values: dict[str, Any]) -> Any:
        """Send one request and read its answer (callers hold the lock)."""
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        frame = encode_request(FETCH_KEY, FETCH_VERSION, self._correlation, self.client_id, values)
        try:
            sock = self._connected()
            sock.sendall(frame)
            size = int.from_bytes(self._read(sock, 4), "big")
            if not 0 < size <= MAX_FRAME_BYTES:
                raise FetchConnectionError(f"a {size}-byte answer frame from {self.endpoint}")
            correlation, body = decode_response(self._read(sock, size), FETCH_KEY, FETCH_VERSION)
        except (OSError, MalformedRequest, FetchConnectionError) as exc:
            self._close_locked()
            if isinstance(exc, FetchConnectionError):
                raise
            raise FetchConnectionError(f"Kafka listener {self.endpoint}: {exc}") from exc
        if correlation != self._correlation:
            self._close_locked()
            raise FetchConnectionError(
                f"answer {correlation} from {self.endpoint} to request {self._correlation}"
            )
        return body

    def _connected(self) -> socket.socket:
        if self._socket is None:
            host, _, port = self.endpoint.rpartition(":")
            try:
                sock = socket.create_connection(
                    (host, int(port)), timeout=min(self.timeout_s, CONNECT_TIMEOUT_S)
                )
            except OSError as exc:
                raise ListenerUnreachable(f"Kafka listener {self.endpoint}: {exc}") from exc
            sock.settimeout(self.timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket = sock
        return self._socket

    def _read(self, sock: socket.socket, size: int) -> memoryview:
        """Exactly ``size`` bytes, read-only (kio's readers take them without a
        copy); FetchConnectionError when the broker closes first."""
        frame = bytearray(size)
        view = memoryview(frame)
        got = 0
        while got < size:
            n = sock.recv_into(view[got:])
            if n == 0:
                raise FetchConnectionError(f"Kafka listener {self.endpoint} closed the connection")
            got += n
        return view.toreadonly()

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._socket is not None:
            try:
                self._socket.close()
            finally:
                self._socket = None
