"""A TCP proxy in front of ZooKeeper that tests can cut: a network partition
between one client (a broker, a consumer) and ZooKeeper, and nothing else.

    proxy = ZkProxy(zookeeper.host, zookeeper.port)
    connect = proxy.connect_string("/t3")   # give this to the client instead
    proxy.pause()    # nothing goes through either way; connections stay open
    proxy.resume()   # connections from before the resume are cut, new ones pass
    proxy.close()

While paused the proxy still accepts connections but forwards no byte, as a
partition does; the client's own timeouts notice it (kazoo: SUSPENDED after
two thirds of the session timeout), and ZooKeeper, hearing nothing, expires
the session after its timeout.  ``resume`` cuts the connections that lived
through the pause (what they held is dropped), so the client reconnects and
learns then whether its session survived.

Thread safety: ``pause``, ``resume`` and ``close`` may be called from any
thread; ``self._lock`` guards the connection set.  One accept thread, and two
pump threads per connection.
"""

from __future__ import annotations

import select
import socket
import threading


class _Connection:
    """One client connection and its upstream twin."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class ZkProxy:
    """See the module docstring."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._forwarding = threading.Event()  # cleared while paused
        self._forwarding.set()
        self._stopped = threading.Event()
        self._accepter = threading.Thread(target=self._accept, name="zk-proxy", daemon=True)
        self._accepter.start()

    def connect_string(self, chroot: str = "") -> str:
        return f"127.0.0.1:{self.port}{chroot}"

    @property
    def paused(self) -> bool:
        return not self._forwarding.is_set()

    def pause(self) -> None:
        """Stop forwarding, in both directions, on every connection."""
        self._forwarding.clear()

    def resume(self) -> None:
        """Cut the connections that lived through the pause; forward again."""
        with self._lock:
            held = list(self._connections)
            self._connections.clear()
        for connection in held:
            connection.close()
        self._forwarding.set()

    def close(self) -> None:
        self._stopped.set()
        self._forwarding.set()
        self._accepter.join(5)
        self._listener.close()
        with self._lock:
            held = list(self._connections)
            self._connections.clear()
        for connection in held:
            connection.close()

    def __enter__(self) -> ZkProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            connection = _Connection(client, upstream)
            with self._lock:
                self._connections.add(connection)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump,
                    args=(connection, source, target),
                    name="zk-proxy-pump",
                    daemon=True,
                ).start()

    def _pump(self, connection: _Connection, source: socket.socket, target: socket.socket) -> None:
        try:
            while not connection.closed.is_set() and not self._stopped.is_set():
                if not self._forwarding.wait(0.1):
                    continue  # paused: leave the bytes where they are
                readable, _, _ = select.select([source], [], [], 0.1)
                if not readable or not self._forwarding.is_set():
                    continue
                data = source.recv(65536)
                if not data:
                    break
                if not self._forwarding.is_set():
                    continue  # paused meanwhile: dropped (resume cuts this connection)
                target.sendall(data)
        except (OSError, ValueError):
            pass  # cut by resume or close, or by the other side
        connection.close()
        with self._lock:
            self._connections.discard(connection)
