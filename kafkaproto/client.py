"""One blocking Kafka-protocol connection to one listener: the client side of the wire.

Used where annal itself speaks Kafka's protocol to a broker in bulk: the
Spark reader's raw fetches (``consumer/kafka_fetch.py``) and the followers'
replica fetches (``broker/replication/replica_fetcher.py``).  A connection to a secured
listener runs TLS and logs in with SASL before its first request
(``kafkaproto/client_security.py``); a refused login raises
``AuthenticationFailed``.  A request is encoded with
``wire.encode_request`` (kio's schemas), sent as one frame, and its answer
read and decoded before the next request goes: one request at a time, a
lock serializes callers.

Failures of the connection itself (reset, closed, timed out, a frame that
does not parse or answers another request) close it and raise
``ConnectionFailed``; the next ``exchange`` connects again.  A listener
that cannot be connected to at all raises ``ListenerUnreachable`` (within
``CONNECT_TIMEOUT_S``), so that a caller can tell a firewalled or absent
listener from a broker that went away mid-answer.

Thread safety: every method may be called from any thread.  ``abort`` does
not wait for the lock: it shuts the socket down under a waiting
``exchange`` (a long poll), which then fails with ``ConnectionFailed``.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from annal.kafkaproto.client_security import ConnectionSecurity, LoginRefused, login_steps
from annal.kafkaproto.wire import MalformedRequest, decode_response, encode_request

CONNECT_TIMEOUT_S = 5.0
MAX_FRAME_BYTES = 256 << 20  # far above any answer annal asks for
FETCH_KEY = 1
FETCH_VERSION = 11  # the newest without tagged fields: leader epochs, log start offsets


class FetchPartition(NamedTuple):
    """One partition of a Fetch request (-1: the field is not used)."""

    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


def fetch_request(
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    topics: Mapping[str, Sequence[FetchPartition]],
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """A Fetch v11 request's values for ``exchange``: read uncommitted,
    ``replica_id`` -1 for a consumer or a follower's broker id; by default no
    fetch session (KIP-227: ``session_id``, ``session_epoch`` and the partitions
    an incremental fetch ``forgotten``, by topic)."""
    return {
        "replica_id": replica_id,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p.partition,
                        "current_leader_epoch": p.current_leader_epoch,
                        "fetch_offset": p.fetch_offset,
                        "log_start_offset": p.log_start_offset,
                        "partition_max_bytes": p.max_bytes,
                    }
                    for p in partitions
                ],
            }
            for topic, partitions in topics.items()
        ],
        "forgotten_topics_data": [
            {"topic": topic, "partitions": list(partitions)}
            for topic, partitions in (forgotten or {}).items()
        ],
        "rack_id": "",
    }


class ConnectionFailed(Exception):
    """The connection failed (the message says how); it is closed."""


class ListenerUnreachable(ConnectionFailed):
    """No connection could be made to the listener."""


class AuthenticationFailed(ConnectionFailed):
    """The listener refused this connection's SASL login (or its TLS handshake)."""


class KafkaConnection:
    """See the module docstring; ``endpoint`` is the listener's ``host:port``."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float,
        client_id: str = "annal",
        security: ConnectionSecurity | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.security = security or ConnectionSecurity()
        self._ssl_context = self.security.ssl_context() if self.security.tls else None
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._correlation = 0

    def exchange(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """Send one request (``values`` as ``wire.build`` takes them) and return
        the decoded answer's body."""
        with self._lock:
            try:
                return self._exchange(self._connected(), api_key, version, values)
            except (OSError, MalformedRequest, ConnectionFailed) as exc:
                self._close_locked()
                if isinstance(exc, ConnectionFailed):
                    raise
                raise ConnectionFailed(f"Kafka listener {self.endpoint}: {exc}") from exc

    def _exchange(
        self, sock: socket.socket, api_key: int, version: int, values: dict[str, Any]
    ) -> Any:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        sock.sendall(encode_request(api_key, version, self._correlation, self.client_id, values))
        size = int.from_bytes(self._read(sock, 4), "big")
        if not 0 < size <= MAX_FRAME_BYTES:
            raise ConnectionFailed(f"a {size}-byte answer frame from {self.endpoint}")
        correlation, body = decode_response(self._read(sock, size), api_key, version)
        if correlation != self._correlation:
            raise ConnectionFailed(
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
            self._socket = sock  # closed by the caller if what follows fails
            if self._ssl_context is not None:
                sock = self._socket = self._tls(sock, host.strip("[]"))
            if self.security.login is not None:
                self._log_in(sock)
        return self._socket

    def _tls(self, sock: socket.socket, host: str) -> ssl.SSLSocket:
        assert self._ssl_context is not None
        try:
            return self._ssl_context.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            raise AuthenticationFailed(
                f"Kafka listener {self.endpoint}: its certificate is not trusted: "
                f"{exc.verify_message}"
            ) from None
        except ssl.SSLError as exc:
            raise AuthenticationFailed(
                f"Kafka listener {self.endpoint}: TLS handshake failed: {exc.reason or exc}"
            ) from None

    def _log_in(self, sock: socket.socket) -> None:
        login = self.security.login
        assert login is not None
        steps = login_steps(login)
        try:
            request = next(steps)
            while True:
                request = steps.send(self._exchange(sock, *request))
        except StopIteration:
            return
        except LoginRefused as exc:
            raise AuthenticationFailed(
                f"Kafka listener {self.endpoint}: SASL {login.mechanism} login as "
                f"{login.username} refused: {exc}"
            ) from None

    def _read(self, sock: socket.socket, size: int) -> memoryview:
        """Exactly ``size`` bytes, read-only (kio's readers take them without a
        copy); ConnectionFailed when the broker closes first."""
        frame = bytearray(size)
        view = memoryview(frame)
        got = 0
        while got < size:
            n = sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionFailed(f"Kafka listener {self.endpoint} closed the connection")
            got += n
        return view.toreadonly()

    def abort(self) -> None:
        """End an exchange under way (it raises ConnectionFailed) without waiting for it."""
        sock = self._socket
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (any more)

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._socket is not None:
            try:
                self._socket.close()
            finally:
                self._socket = None
