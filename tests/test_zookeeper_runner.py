"""The ZooKeeper runner finds the installation and runs a real server."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from annal.deploy import zookeeper as zookeeper_module
from annal.deploy.zookeeper import (
    ZooKeeperError,
    ZooKeeperServer,
    find_zookeeper,
    four_letter_word,
    free_port,
)
from environment import unavailable


def test_runs_a_real_server(zookeeper: ZooKeeperServer) -> None:
    assert four_letter_word(zookeeper.host, zookeeper.port, "ruok") == "imok"
    assert "Zookeeper version" in four_letter_word(zookeeper.host, zookeeper.port, "srvr")


def test_missing_installation_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    with pytest.raises(ZooKeeperError, match="holds no ZooKeeper jars"):
        find_zookeeper()
    monkeypatch.delenv("ZOOKEEPER_HOME")
    monkeypatch.setattr("annal.deploy.zookeeper.DEBIAN_JAR", tmp_path / "nope.jar")
    with pytest.raises(ZooKeeperError, match="apt-get install zookeeper"):
        find_zookeeper()


@pytest.mark.timeout(90)
def test_the_server_log_is_rotated_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not find_zookeeper().log4j:
        unavailable("no log4j jars here: ZooKeeper logs to its output, unrotated")
    monkeypatch.setattr("annal.deploy.zookeeper.LOG_MAX_BYTES", 4000)
    with ZooKeeperServer(tmp_path) as server:
        rotated = tmp_path / "zookeeper.log.1"
        deadline = time.monotonic() + 60
        while not (tmp_path / "zookeeper.log.3").exists() and time.monotonic() < deadline:
            four_letter_word(server.host, server.port, "srvr")  # each is logged
        assert rotated.exists() and (tmp_path / "zookeeper.log.3").exists()
        assert not (tmp_path / "zookeeper.log.4").exists()
        assert all(p.stat().st_size < 8000 for p in tmp_path.glob("zookeeper.log*"))


@pytest.mark.timeout(30)
def test_free_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    """Outgoing connections take their local ports from the ephemeral range: a
    port from there could be taken before the server it was picked for binds."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == 100
    if low > 21_000:
        assert all(20_000 <= port < low for port in ports)
    for port in ports[:5]:  # each can be bound right away
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_ports_stay_in_the_range_annal_free_ports_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANNAL_FREE_PORTS", "23000-23049")
    ports = [free_port() for _ in range(30)]
    assert all(23_000 <= port <= 23_049 for port in ports) and len(set(ports)) == 30
    for bad in ("23000", "23050-23000", "a-b", "0-10", "60000-70000"):
        monkeypatch.setenv("ANNAL_FREE_PORTS", bad)
        with pytest.raises(ValueError, match=r"ANNAL_FREE_PORTS=.*expected FIRST-LAST"):
            free_port()


@pytest.mark.timeout(90)
def test_a_picked_port_taken_before_zookeeper_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZooKeeper cannot bind port 0 and report it: its port is picked, and should
    another process take it first, picked again; a port the caller gave is not."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        real_pick = zookeeper_module.free_port
        monkeypatch.setattr(
            zookeeper_module, "free_port", lambda host="127.0.0.1": next(picks, None) or real_pick()
        )
        server = ZooKeeperServer(tmp_path / "picked")
        assert server.port == taken
        with server:
            assert server.port != taken
            assert "Zookeeper version" in four_letter_word("127.0.0.1", server.port, "srvr")
        given = ZooKeeperServer(tmp_path / "given", port=taken)
        with pytest.raises(ZooKeeperError, match="Address already in use"):
            given.start()
