"""The ZooKeeper runner finds the installation and runs a real server."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.deploy.zookeeper import ZooKeeperError, ZooKeeperServer, find_zookeeper, four_letter_word


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
