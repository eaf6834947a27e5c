"""A local cluster: one ZooKeeper and N brokers as background processes under one directory.

    <dir>/cluster.json        what runs: ZooKeeper's port and pid, each broker's id, ports
                              (gRPC, Kafka's protocol), pid
    <dir>/zookeeper/          its zoo.cfg, data and zookeeper.log
    <dir>/broker-<id>/        its logs/ (log.dirs) and broker.log

The processes outlive the command that started them (``annal cluster up``
returns once every broker is registered and a controller is elected); later
commands find them through ``cluster.json`` and act on their pids.  Brokers
use the ZooKeeper chroot ``/annal``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from annal.client.security import Security
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.deploy.secure import PLAINTEXT, SecureFiles, make_secure_files, store_admin
from annal.deploy.zookeeper import ZooKeeperServer
from annal.zk.client import ZkClient, ZkError

CHROOT = "/annal"
# A short session: a killed broker's registration and leaderships move within seconds.
SETTINGS = {"zookeeper.session.timeout.ms": "6000"}
STATE_FILE = "cluster.json"


class ClusterError(Exception):
    """A cluster command that cannot be carried out; the message says why."""


@dataclass
class BrokerEntry:
    id: int
    port: int
    pid: int | None = None
    metrics_port: int | None = None
    kafka_port: int = 0  # the Kafka-protocol listener


@dataclass
class ClusterState:
    zookeeper_port: int
    zookeeper_pid: int | None
    brokers: list[BrokerEntry] = field(default_factory=list)
    security: str = PLAINTEXT  # or sasl_ssl, ssl (deploy/secure.py)
    # broker settings given to ``up`` (``--override``): every start of a broker takes them
    overrides: dict[str, str] = field(default_factory=dict)
    # settings of one broker (``--broker-override ID:NAME=VALUE``), by broker id as text
    broker_overrides: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def zookeeper_connect(self) -> str:
        return f"127.0.0.1:{self.zookeeper_port}{CHROOT}"


def _check_overrides(overrides: Mapping[str, str], flag: str = "--override") -> None:
    """ClusterError naming the first override a broker would refuse."""
    from annal.broker.config import BrokerConfig, ConfigError

    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", **SETTINGS}
    try:
        BrokerConfig.from_properties({**base, **overrides})
    except ConfigError as exc:
        raise ClusterError(f"{flag}: {exc}") from None


def _check_broker_overrides(
    brokers: int, overrides: Mapping[str, str], per_broker: Mapping[int, Mapping[str, str]]
) -> None:
    for broker_id, settings in sorted(per_broker.items()):
        if not 1 <= broker_id <= brokers:
            raise ClusterError(
                f"--broker-override {broker_id}:...: no broker {broker_id} "
                f"(the brokers are 1..{brokers})"
            )
        if "broker.id" in settings:
            raise ClusterError(f"--broker-override {broker_id}:broker.id: ids are given by up")
        _check_overrides({**overrides, **settings}, f"--broker-override {broker_id}")


def _controller(state: ClusterState) -> int | None:
    """The controller's broker id, None when unknown (ZooKeeper down or no controller)."""
    if not pid_alive(state.zookeeper_pid):
        return None
    try:
        with ZkClient(state.zookeeper_connect, timeout_s=5) as zk:
            return zk.get_controller()
    except ZkError:
        return None


def _learn(entry: BrokerEntry, process: BrokerProcess, timeout_s: float) -> None:
    """The ports ``process`` bound, once it serves, into ``entry``."""
    process.wait_for_ports(timeout_s)
    entry.port, entry.kafka_port = process.port, process.kafka_port
    entry.metrics_port = process.metrics_port


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


class LocalCluster:
    """Commands on the cluster under ``directory``.  Not thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory).resolve()

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def load(self) -> ClusterState:
        try:
            raw = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster in {self.directory} (start one with: annal cluster up --dir "
                f"{self.directory})"
            ) from None
        return ClusterState(
            raw["zookeeper_port"],
            raw.get("zookeeper_pid"),
            [BrokerEntry(**b) for b in raw["brokers"]],
            raw.get("security", PLAINTEXT),
            dict(raw.get("overrides", {})),
            {k: dict(v) for k, v in raw.get("broker_overrides", {}).items()},
        )

    @property
    def secure_files(self) -> SecureFiles:
        return SecureFiles(self.directory / "security")

    def client_security(self, state: ClusterState) -> Security | None:
        """How this tool reaches the brokers: as the super user when secured."""
        return self.secure_files.admin_security() if state.security != PLAINTEXT else None

    def _settings(self, state: ClusterState, entry: BrokerEntry) -> dict[str, str]:
        own = state.broker_overrides.get(str(entry.id), {})
        if state.security == PLAINTEXT:
            return {**SETTINGS, **state.overrides, **own}
        count = len(state.brokers)
        secured = self.secure_files.broker_settings(
            entry.id, count, entry.port, entry.kafka_port, security=state.security
        )
        return {**SETTINGS, **state.overrides, **own, **secured}

    def save(self, state: ClusterState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_path)

    def broker(self, state: ClusterState, entry: BrokerEntry) -> BrokerProcess:
        return BrokerProcess(
            entry.id,
            state.zookeeper_connect,
            self.directory,
            port=entry.port,
            settings=self._settings(state, entry),
            metrics_port=entry.metrics_port,
            kafka_port=entry.kafka_port,
            rebind=True,
        )

    def up(
        self,
        brokers: int,
        timeout_s: float = 90.0,
        security: str = PLAINTEXT,
        overrides: Mapping[str, str] | None = None,
        progress: Callable[[str], None] = lambda line: None,
        broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
    ) -> ClusterState:
        """Start ZooKeeper and ``brokers`` brokers and wait until they serve;
        ``overrides``: broker settings on top of the local cluster's, and
        ``broker_overrides`` those of one broker (by id) on top of those (both
        kept in the cluster's state, so restarted brokers take them too);
        ``progress`` hears a line at each step."""
        if self.state_path.exists() and any(pid_alive(b.pid) for b in self.load().brokers):
            raise ClusterError(f"a cluster is already running in {self.directory}")
        _check_overrides(overrides or {})
        _check_broker_overrides(brokers, overrides or {}, broker_overrides or {})
        password = None
        if security != PLAINTEXT:
            _, password = make_secure_files(self.directory, brokers, security)
        zookeeper = ZooKeeperServer(self.directory / "zookeeper")
        zookeeper.start()
        assert zookeeper.process is not None
        progress(f"ZooKeeper serving on 127.0.0.1:{zookeeper.port}")
        pid, kept = zookeeper.process.pid, dict(overrides or {})
        state = ClusterState(zookeeper.port, pid, security=security, overrides=kept)
        state.broker_overrides = {
            str(broker_id): dict(settings)
            for broker_id, settings in (broker_overrides or {}).items()
        }
        if password is not None:
            store_admin(state.zookeeper_connect, password)
        # every port is the kernel's pick, learned once the broker serves
        state.brokers = [BrokerEntry(i, 0, metrics_port=0) for i in range(1, brokers + 1)]
        processes = []
        for entry in state.brokers:
            process = self.broker(state, entry)
            process.start()
            entry.pid = process.pid
            processes.append(process)
        self.save(state)
        plural = "s" if brokers > 1 else ""
        progress(f"{brokers} broker{plural} started; waiting for them to register")
        with ZkClient(state.zookeeper_connect) as zk:
            try:
                for entry, process in zip(state.brokers, processes, strict=True):
                    _learn(entry, process, timeout_s)
                self.save(state)
                wait_until(
                    lambda: len(zk.get_brokers()) == brokers, timeout_s, "every broker registered"
                )
                wait_until(lambda: zk.get_controller() is not None, timeout_s, "a controller")
                progress(f"registered; broker {zk.get_controller()} is the controller")
                ids = [b.id for b in state.brokers]
                for b in state.brokers:
                    wait_until(
                        lambda b=b: metadata_lists(  # type: ignore[misc]
                            f"127.0.0.1:{b.port}", ids, security=self.client_security(state)
                        ),
                        timeout_s,
                        f"broker {b.id} serving metadata",
                    )
            except (TimeoutError, RuntimeError) as exc:
                logs = "\n".join(
                    f"--- broker {b.id} ---\n{self.broker(state, b).tail_log(20)}"
                    for b in state.brokers
                )
                raise ClusterError(f"{exc}\n{logs}") from None
        return state

    def status(self) -> dict[str, Any]:
        state = self.load()
        controller = _controller(state)
        return {
            "zookeeper": state.zookeeper_connect,
            "zookeeper_alive": pid_alive(state.zookeeper_pid),
            "controller": controller,
            "brokers": [
                {
                    "id": b.id,
                    "endpoint": f"127.0.0.1:{b.port}",
                    "metrics_endpoint": (
                        None if b.metrics_port is None else f"127.0.0.1:{b.metrics_port}"
                    ),
                    "kafka_endpoint": f"127.0.0.1:{b.kafka_port}" if b.kafka_port else None,
                    "pid": b.pid,
                    "alive": pid_alive(b.pid),
                }
                for b in state.brokers
            ],
            "dir": str(self.directory),
            "security": state.security,
            **self._security_files(state),
        }

    def _security_files(self, state: ClusterState) -> dict[str, str]:
        if state.security == PLAINTEXT:
            return {}
        files = self.secure_files
        return {
            "admin_config": str(files.admin_config),
            "kafka_admin_config": str(files.kafka_admin_config),
            "ca": str(files.ca),
        }

    def certificate(self, name: str) -> list[Path]:
        """Issue ``name`` a certificate under a secured cluster's CA, with its client
        settings (deploy/client_certs.py); the files written."""
        from annal.deploy.client_certs import CertificateError, issue_client

        state = self.load()
        if state.security == PLAINTEXT:
            raise ClusterError(
                f"the cluster in {self.directory} is plaintext: it has no CA to issue "
                "certificates (start one with --security ssl or sasl_ssl)"
            )
        try:
            return issue_client(self.secure_files, name, state.security)
        except CertificateError as exc:
            raise ClusterError(str(exc)) from None

    def _entry(self, state: ClusterState, broker_id: int) -> BrokerEntry:
        for entry in state.brokers:
            if entry.id == broker_id:
                return entry
        raise ClusterError(
            f"no broker {broker_id} in {self.directory}; brokers: {[b.id for b in state.brokers]}"
        )

    def signal_broker(self, broker_id: int, signum: int, timeout_s: float = 30.0) -> None:
        """SIGTERM (stop) or SIGKILL (kill) one broker and wait for it to exit."""
        state = self.load()
        entry = self._entry(state, broker_id)
        if not pid_alive(entry.pid):
            raise ClusterError(f"broker {broker_id} is not running")
        assert entry.pid is not None
        os.kill(entry.pid, signum)
        wait_until(lambda: not pid_alive(entry.pid), timeout_s, f"broker {broker_id} exited")

    def _terminate(self, entries: list[BrokerEntry], timeout_s: float) -> None:
        for entry in entries:
            if pid_alive(entry.pid):
                assert entry.pid is not None
                os.kill(entry.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for entry in entries:
            while pid_alive(entry.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(entry.pid):
                assert entry.pid is not None
                os.kill(entry.pid, signal.SIGKILL)

    def start_broker(self, broker_id: int, timeout_s: float = 60.0) -> None:
        state = self.load()
        entry = self._entry(state, broker_id)
        if pid_alive(entry.pid):
            raise ClusterError(f"broker {broker_id} is already running (pid {entry.pid})")
        process = self.broker(state, entry)
        started_ms = int(time.time() * 1000)
        process.start()
        entry.pid = process.pid
        self.save(state)
        try:
            _learn(entry, process, timeout_s)
        except RuntimeError as exc:
            raise ClusterError(str(exc)) from None
        self.save(state)  # a port another process took meanwhile was bound anew

        def registered_again() -> bool:
            if not process.alive:
                raise ClusterError(f"broker {broker_id} exited:\n{process.tail_log(20)}")
            found = zk.get_broker(broker_id)
            return found is not None and found.timestamp_ms >= started_ms

        with ZkClient(state.zookeeper_connect) as zk:
            wait_until(registered_again, timeout_s, f"broker {broker_id} registered")
        wait_until(
            lambda: metadata_lists(
                process.endpoint, [broker_id], security=self.client_security(state)
            ),
            timeout_s,
            f"broker {broker_id} serving metadata",
        )

    def down(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every broker, the controller last (so the others' controlled
        shutdowns find it serving), SIGKILL what outlives ``timeout_s``; then
        ZooKeeper."""
        state = self.load()
        controller = _controller(state)
        others = [b for b in state.brokers if b.id != controller]
        last = [b for b in state.brokers if b.id == controller]
        for group in (others, last):
            self._terminate(group, timeout_s)
        if pid_alive(state.zookeeper_pid):
            assert state.zookeeper_pid is not None
            os.kill(state.zookeeper_pid, signal.SIGTERM)
            wait_until(lambda: not pid_alive(state.zookeeper_pid), timeout_s, "ZooKeeper exited")
        self.state_path.unlink(missing_ok=True)
