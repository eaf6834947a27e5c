"""Shared fixtures: a real ZooKeeper server (one per test session, a chroot per test)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.deploy.zookeeper import ZooKeeperServer, free_port_range
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient

_chroots = itertools.count()


def _ports_of_this_worker() -> None:
    """Parallel workers (pytest-xdist: ``gw0``, ``gw1``, ...) each start their own
    ZooKeeper and brokers; each picks ports from a slice of its own, which the
    processes it starts inherit through ``ANNAL_FREE_PORTS``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return
    index = int(worker.removeprefix("gw"))
    first, end = free_port_range()
    size = (end - first) // count
    os.environ["ANNAL_FREE_PORTS"] = f"{first + index * size}-{first + (index + 1) * size - 1}"


_ports_of_this_worker()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper from the machine's installation, on a free port."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A connect string with a chroot of this test's own; ZooKeeper's log on failure."""
    yield f"{zookeeper.connect_string}/t{next(_chroots)}"
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n--- ZooKeeper log ({zookeeper.log_path}) ---\n{zookeeper.tail_log(60)}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


def _start_broker(
    zk_connect: str,
    directory: Path,
    started: list[BrokerProcess],
    broker_id: int = 1,
    settings: Mapping[str, str] | None = None,
    extra_listeners: str = "",
    prepare: Callable[[ZkClient], None] | None = None,
    wrapper: Sequence[str] = (),
) -> BrokerProcess:
    """Start a real broker process and wait until it is registered, a controller
    elected, and its metadata lists it.  ``prepare`` writes to ZooKeeper first
    (e.g. the ACLs the brokers need to talk to each other under an authorizer);
    ``wrapper`` is a command the broker runs under (``fiu-run -x``)."""
    if prepare is not None:
        with ZkClient(zk_connect) as zk:
            zk.ensure_persistent_paths()
            prepare(zk)
    process = BrokerProcess(
        broker_id, zk_connect, directory, settings=settings, extra_listeners=extra_listeners,
        wrapper=wrapper,
    )  # fmt: skip
    started.append(process)
    process.start()
    with ZkClient(zk_connect) as zk:
        wait_until(
            lambda: zk.get_broker(broker_id) is not None, 60, f"broker {broker_id} registered"
        )
        wait_until(lambda: zk.get_controller() is not None, 60, "a controller")
    wait_until(lambda: metadata_lists(process.endpoint, [broker_id]), 60, "metadata served")
    return process


def _kill_brokers(started: list[BrokerProcess], failed: bool) -> None:
    for process in started:
        process.kill()
        if failed:
            header = f"--- broker {process.broker_id} log ({process.log_path}) ---"
            print(f"\n{header}\n{process.tail_log()}")


@pytest.fixture
def broker_factory(
    zk_connect: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BrokerProcess]]:
    """Start real broker processes (each call waits until that broker is registered
    and a controller elected); they are killed afterwards, and their logs printed
    when the test failed."""
    started: list[BrokerProcess] = []

    def start(
        broker_id: int = 1,
        settings: Mapping[str, str] | None = None,
        extra_listeners: str = "",
        wrapper: Sequence[str] = (),
    ) -> BrokerProcess:
        return _start_broker(
            zk_connect,
            tmp_path_factory.mktemp("brokers"),
            started,
            broker_id,
            settings,
            extra_listeners,
            wrapper=wrapper,
        )

    yield start
    report = getattr(request.node, "rep_call", None)
    _kill_brokers(started, report is not None and report.failed)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One real broker, also the controller."""
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker_factory(
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., BrokerProcess]]:
    """As ``broker_factory``, for brokers a whole module shares (in a chroot of the
    module's own); killed after its last test, logs printed when one failed."""
    connect = f"{zookeeper.connect_string}/t{next(_chroots)}"
    failed_before = request.session.testsfailed
    started: list[BrokerProcess] = []

    def start(
        broker_id: int = 1,
        settings: Mapping[str, str] | None = None,
        extra_listeners: str = "",
        prepare: Callable[[ZkClient], None] | None = None,
    ) -> BrokerProcess:
        return _start_broker(
            connect,
            tmp_path_factory.mktemp("brokers"),
            started,
            broker_id,
            settings,
            extra_listeners,
            prepare,
        )

    yield start
    _kill_brokers(started, request.session.testsfailed > failed_before)


@pytest.fixture
def serve() -> Iterator[Callable[[annal_pb2_grpc.AnnalServicer], str]]:
    """Serve stand-in brokers (gRPC servicers) on free ports; stopped afterwards."""
    servers: list[grpc.Server] = []

    def start(servicer: annal_pb2_grpc.AnnalServicer) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        annal_pb2_grpc.add_AnnalServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(None)
