"""Brokers as local processes: what the tests, the demo and ``annal cluster`` start.

Each broker runs ``python -m annal broker start`` with its settings as
arguments (two listeners: gRPC, and Kafka's protocol on ``PLAINTEXT://``),
its logs under ``<dir>/broker-<id>/logs`` and its output in
``<dir>/broker-<id>/broker.log``, which the broker rotates by size
(``broker.log.1`` to ``.3``; what it prints before its logging starts, the
runner appends there).  Failure drills stop a broker with SIGTERM
(clean) or SIGKILL (crash).

Ports are not picked here: a listener given no port is bound to port 0, and
the broker writes the ports the kernel gave it to ``<dir>/broker-<id>/ports.json``
once it serves (``annal broker start --ports-file``), where the runner reads
them.  A restarted broker binds the same ports again, so its clients' addresses
stay good; the kernel hands out odd ports to ``bind`` and even ones to
outgoing connections, so the port is still free then (should another process
have bound it meanwhile, the broker takes a new one).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import grpc
from annal.client.security import Security
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

# broker.log is rotated by the broker past this size, keeping broker.log.1 ... .3
LOG_FILE_MAX_BYTES = 64 * 1024 * 1024
LOG_FILE_BACKUPS = 3


def wait_until(
    predicate: Callable[[], object], timeout_s: float, what: str = "condition", poll_s: float = 0.05
) -> None:
    """Poll ``predicate`` until it is true; TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s:.1f} s")
        time.sleep(poll_s)


def metadata_lists(
    endpoint: str,
    broker_ids: Iterable[int],
    timeout_s: float = 2.0,
    security: Security | None = None,
) -> bool:
    """True once the broker at ``endpoint`` answers Metadata listing ``broker_ids``:
    the controller's UpdateMetadata has reached it, so it is ready for clients
    (reached as ``security`` says: plaintext gRPC by default)."""
    try:
        with (security or Security()).channel(endpoint) as channel:
            metadata = annal_pb2_grpc.AnnalStub(channel).Metadata(
                pb.MetadataRequest(), timeout=timeout_s
            )
    except grpc.RpcError:
        return False
    return set(broker_ids) <= {b.id for b in metadata.brokers}


class BrokerProcess:
    """One broker process under ``directory``; not thread-safe."""

    def __init__(
        self,
        broker_id: int,
        zookeeper_connect: str,
        directory: Path,
        port: int = 0,
        settings: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        kafka_port: int = 0,
        extra_listeners: str = "",
        wrapper: Sequence[str] = (),
        rebind: bool = False,
    ) -> None:
        """``port``, ``kafka_port``: 0 binds a port the kernel picks (learned once the
        broker serves, then kept for its restarts); ``metrics_port``: None serves no
        metrics, 0 likewise a port the kernel picks; ``extra_listeners``: more of
        ``listeners`` (``SASL_SSL://127.0.0.1:0``; a port of 0 there, or in a
        ``listeners`` setting, is learned and kept too); ``wrapper``: a command the
        broker runs under (``fiu-run -x`` for injected I/O errors), which must exec
        it; ``rebind``: the given ports were the kernel's picks too, so one taken
        meanwhile by another process is replaced by a new one rather than failing."""
        self.broker_id = broker_id
        self.zookeeper_connect = zookeeper_connect
        self.directory = Path(directory) / f"broker-{broker_id}"
        self._port = port
        self._kafka_port = kafka_port
        self.settings = dict(settings or {})
        self._metrics_port = metrics_port
        self.extra_listeners = extra_listeners
        self.wrapper = list(wrapper)
        self.process: subprocess.Popen[bytes] | None = None
        # every port the kernel picked for this broker, by listener name ("metrics"
        # for the metrics port): bound again at each restart
        self._learned: dict[str, int] = {}
        self._rebind = rebind
        self._given = (port, kafka_port, metrics_port)

    @property
    def port(self) -> int:
        """The gRPC listener's port (waiting for a broker just started to serve)."""
        if not self._port:
            self._learn_ports()
        return self._port

    @property
    def kafka_port(self) -> int:
        """The ``PLAINTEXT://`` listener's port (else the first Kafka listener's)."""
        if not self._kafka_port:
            self._learn_ports()
        return self._kafka_port

    @property
    def metrics_port(self) -> int | None:
        """The metrics port: ``metrics_port``'s, else that of a ``metrics.port``
        setting (0 in either: the one the broker bound); None without metrics."""
        if self._metrics_port is None and "metrics.port" in self.settings:
            given = int(self.settings["metrics.port"])
            if given == 0 and "metrics" not in self._learned:
                self._learn_ports()
            if given < 0:
                return None  # metrics off
            return self._learned.get("metrics") if given == 0 else given
        if self._metrics_port == 0:
            self._learn_ports()
        return self._metrics_port

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_endpoint(self) -> str | None:
        port = self.metrics_port
        return None if port is None else f"127.0.0.1:{port}"

    @property
    def kafka_endpoint(self) -> str:
        """Where Kafka's clients connect (the ``PLAINTEXT://`` listener)."""
        return f"127.0.0.1:{self.kafka_port}"

    def listener_port(self, name: str) -> int:
        """The port the listener ``name`` (``SASL_SSL``, ...) bound."""
        if name.upper() not in self._learned:
            self._learn_ports()
        if name.upper() not in self._learned:
            raise KeyError(f"broker {self.broker_id} has no listener named {name}")
        return self._learned[name.upper()]

    def listener_endpoint(self, name: str) -> str:
        """Where the listener ``name`` listens, as bound."""
        return f"127.0.0.1:{self.listener_port(name)}"

    @property
    def ports_path(self) -> Path:
        return self.directory / "ports.json"

    def wait_for_ports(self, timeout_s: float = 120.0) -> None:
        """Wait until the ports the kernel picks for this broker are known (at once
        when none is left to learn)."""
        if not (self._port and self._kafka_port and self._metrics_port != 0):
            self._learn_ports(timeout_s)

    def _learn_ports(self, timeout_s: float = 120.0) -> None:
        """Read the ports the broker bound from its ports file, waiting for it."""
        if self.process is None:
            raise RuntimeError(
                f"broker {self.broker_id} has not been started: its ports are known "
                "once it serves"
            )
        process = self.process

        def written() -> bool:
            if self.ports_path.exists():
                return True
            if process.poll() is not None:
                raise RuntimeError(
                    f"broker {self.broker_id} exited (code {process.returncode}) before "
                    f"serving:\n{self.tail_log(20)}"
                )
            return False

        wait_until(written, timeout_s, f"broker {self.broker_id} serving (its ports file)")
        ports = json.loads(self.ports_path.read_text())
        grpc_listener = ports["grpc"]
        kafka: dict[str, int] = ports["kafka"]
        self._learned[grpc_listener["listener"]] = grpc_listener["port"]
        self._learned.update(kafka)
        self._port = self._port or grpc_listener["port"]
        self._kafka_port = self._kafka_port or kafka.get("PLAINTEXT", next(iter(kafka.values()), 0))
        if ports.get("metrics"):
            self._learned["metrics"] = ports["metrics"]
            if self._metrics_port == 0:
                self._metrics_port = ports["metrics"]

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def command(self) -> list[str]:
        listeners = (
            f"GRPC://127.0.0.1:{self._port},PLAINTEXT://127.0.0.1:{self._kafka_port}"
            + (f",{self.extra_listeners}" if self.extra_listeners else "")
        )
        settings = {
            "broker.id": str(self.broker_id),
            "zookeeper.connect": self.zookeeper_connect,
            "listeners": listeners,
            "log.dirs": str(self.log_dir),
            **({} if self._metrics_port is None else {"metrics.port": str(self._metrics_port)}),
            **self.settings,
        }
        settings["listeners"] = self._pinned(settings["listeners"])
        if settings.get("metrics.port") == "0" and "metrics" in self._learned:
            settings["metrics.port"] = str(self._learned["metrics"])
        rotation = [
            f"--log-file={self.log_path}",
            f"--log-file-max-bytes={LOG_FILE_MAX_BYTES}",
            f"--log-file-backups={LOG_FILE_BACKUPS}",
            f"--ports-file={self.ports_path}",
        ]
        return [sys.executable, "-m", "annal", "broker", "start", *rotation] + [
            f"{key}={value}" for key, value in settings.items()
        ]

    def _pinned(self, listeners: str) -> str:
        """``listeners`` with each port of 0 the kernel already gave this broker."""
        return _with_ports(
            listeners, lambda name, port: port or self._learned.get(name.upper(), 0)
        )

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ports_path.unlink(missing_ok=True)
        self._release_taken_ports()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.wrapper, *self.command()],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _release_taken_ports(self) -> None:
        """Ports the kernel picked before (or, with ``rebind``, any given) that
        another process holds now: bound anew, to be learned again."""
        self._learned = {name: port for name, port in self._learned.items() if not _taken(port)}

        def release(port: int | None, given: int | None) -> int | None:
            movable = self._rebind or not given
            return 0 if port and movable and _taken(port) else port

        given_port, given_kafka, given_metrics = self._given
        self._port = release(self._port, given_port) or 0
        self._kafka_port = release(self._kafka_port, given_kafka) or 0
        self._metrics_port = release(self._metrics_port, given_metrics)
        if self._rebind and "listeners" in self.settings:  # a cluster's secured listeners
            self.settings["listeners"] = _with_ports(
                self.settings["listeners"], lambda _, port: 0 if port and _taken(port) else port
            )

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def freeze(self, timeout_s: float = 10.0) -> None:
        """SIGSTOP, returning once every thread of the process is stopped (a
        loaded machine can take a while to get there), so that nothing it was
        doing goes on after this returns."""
        assert self.process is not None, "start the broker first"
        os.kill(self.process.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self.process.pid}/task")

        def stopped() -> bool:
            for stat in tasks.glob("*/stat"):
                try:
                    state = stat.read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue  # a thread that just ended
                if state not in ("T", "t"):
                    return False
            return True

        wait_until(stopped, timeout_s, f"broker {self.broker_id} stopped (SIGSTOP)", poll_s=0.01)

    def thaw(self) -> None:
        """SIGCONT: a frozen broker runs again."""
        assert self.process is not None, "start the broker first"
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (a clean shutdown); returns the exit code."""
        return self._signal(signal.SIGTERM, timeout_s)

    def kill(self, timeout_s: float = 10.0) -> int | None:
        """SIGKILL: a crash, as failure drills want it."""
        return self._signal(signal.SIGKILL, timeout_s)

    def _signal(self, signum: int, timeout_s: float) -> int | None:
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            os.kill(process.pid, signum)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_s)
        return process.returncode

    def tail_log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text("utf-8", "replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _with_ports(listeners: str, port_of: Callable[[str, int], int]) -> str:
    """A ``listeners`` setting (``NAME://host:port,...``) with each port replaced by
    ``port_of(NAME, port)``."""
    changed = []
    for listener in listeners.split(","):
        name, sep, address = listener.strip().partition("://")
        host, _, port = address.rpartition(":")
        if sep and port.isdigit():
            listener = f"{name}://{host}:{port_of(name, int(port))}"
        changed.append(listener)
    return ",".join(changed)


def _taken(port: int) -> bool:
    """Whether a process listens on (or holds) ``port`` on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False
