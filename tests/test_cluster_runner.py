"""``annal cluster``: up, status --json, kill, start, stop, down, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runcli import annal


@pytest.mark.timeout(300)
def test_local_cluster_lifecycle(tmp_path: Path) -> None:
    d = str(tmp_path / "cluster")
    up = annal("cluster", "--dir", d, "up", "--brokers", "2")
    try:
        assert up.returncode == 0, up.stderr
        assert "bootstrap servers: 127.0.0.1:" in up.stdout and "/annal" in up.stdout
        status = json.loads(annal("cluster", "--dir", d, "status", "--json").stdout)
        assert set(status) >= {"zookeeper", "controller", "brokers", "dir"}
        assert status["zookeeper"].endswith("/annal")
        assert status["controller"] in (1, 2)
        assert [(b["id"], b["alive"]) for b in status["brokers"]] == [(1, True), (2, True)]
        assert all({"id", "endpoint", "pid", "alive"} <= set(b) for b in status["brokers"])

        assert annal("cluster", "--dir", d, "kill", "2").returncode == 0
        status = json.loads(annal("cluster", "--dir", d, "status", "--json").stdout)
        assert [b["alive"] for b in status["brokers"]] == [True, False]
        again = annal("cluster", "--dir", d, "kill", "2")
        assert again.returncode == 1 and "broker 2 is not running" in again.stderr
        started = annal("cluster", "--dir", d, "start", "2")
        assert started.returncode == 0, started.stderr
        assert annal("cluster", "--dir", d, "stop", "1").returncode == 0
        status = json.loads(annal("cluster", "--dir", d, "status", "--json").stdout)
        assert [b["alive"] for b in status["brokers"]] == [False, True]
        unknown = annal("cluster", "--dir", d, "stop", "9")
        assert unknown.returncode == 1 and "no broker 9" in unknown.stderr
    finally:
        down = annal("cluster", "--dir", d, "down")
    assert down.returncode == 0, down.stderr
    missing = annal("cluster", "--dir", d, "status")
    assert missing.returncode == 1 and "no cluster in" in missing.stderr
    bad = annal("cluster", "--dir", d, "up", "--brokers", "x")
    assert bad.returncode == 2
