"""Shared fixtures: a real ZooKeeper server (one per test session, a chroot per test)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from annal.deploy.zookeeper import ZooKeeperServer

_chroots = itertools.count()


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
