"""Brokers as local processes: what the tests, the demo and ``annal cluster`` start.

Each broker runs ``python -m annal broker start`` with its settings as
arguments (two listeners: gRPC, and Kafka's protocol on ``PLAINTEXT://``),
its logs under ``<dir>/broker-<id>/logs`` and its output in
``<dir>/broker-<id>/broker.log``, which the broker rotates by size
(``broker.log.1`` to ``.3``; what it prints before its logging starts, the
runner appends there).  Failure drills stop a broker with SIGTERM
(clean) or SIGKILL (crash).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import grpc
from annal.client.security import Security
from annal.deploy.zookeeper import free_port
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
    ) -> None:
        """``metrics_port``: None serves no metrics, 0 a free port (chosen here);
        ``extra_listeners``: more of ``listeners`` (``SASL_SSL://127.0.0.1:PORT``);
        ``wrapper``: a command the broker runs under (``fiu-run -x`` for injected
        I/O errors), which must exec it."""
        self.broker_id = broker_id
        self.zookeeper_connect = zookeeper_connect
        self.directory = Path(directory) / f"broker-{broker_id}"
        self.port = port or free_port()
        self.kafka_port = kafka_port or free_port()
        self.settings = dict(settings or {})
        self.metrics_port = None if metrics_port is None else (metrics_port or free_port())
        self.extra_listeners = extra_listeners
        self.wrapper = list(wrapper)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_endpoint(self) -> str | None:
        return None if self.metrics_port is None else f"127.0.0.1:{self.metrics_port}"

    @property
    def kafka_endpoint(self) -> str:
        """Where Kafka's clients connect (the ``PLAINTEXT://`` listener)."""
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def command(self) -> list[str]:
        settings = {
            "broker.id": str(self.broker_id),
            "zookeeper.connect": self.zookeeper_connect,
            "listeners": f"GRPC://127.0.0.1:{self.port},PLAINTEXT://127.0.0.1:{self.kafka_port}"
            + (f",{self.extra_listeners}" if self.extra_listeners else ""),
            "log.dirs": str(self.log_dir),
            **({} if self.metrics_port is None else {"metrics.port": str(self.metrics_port)}),
            **self.settings,
        }
        rotation = [
            f"--log-file={self.log_path}",
            f"--log-file-max-bytes={LOG_FILE_MAX_BYTES}",
            f"--log-file-backups={LOG_FILE_BACKUPS}",
        ]
        return [sys.executable, "-m", "annal", "broker", "start", *rotation] + [
            f"{key}={value}" for key, value in settings.items()
        ]

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.wrapper, *self.command()],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
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
