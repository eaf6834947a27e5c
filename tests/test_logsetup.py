"""A broker's own log: ``log.format=json`` and the size-rotated ``--log-file``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from annal.deploy.runner import BrokerProcess, wait_until
from annal.zk.client import ZkClient

ROTATING = """
import logging, sys
from pathlib import Path
from annal import logsetup
logsetup.configure("INFO", sys.argv[2], Path(sys.argv[1]), max_bytes=600, backups=2)
log = logging.getLogger("annal.test")
for i in range(40):
    log.info("line %03d %s", i, "x" * 40)
print("printed after the rotations", flush=True)
try:
    raise ValueError("boom")
except ValueError:
    log.exception("failed")
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_log_file_rotates_by_size_and_takes_stdout_along(tmp_path: Path, log_format: str) -> None:
    path = tmp_path / "broker.log"
    run = subprocess.run([sys.executable, "-c", ROTATING, str(path), log_format],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr == ""  # all of it went to the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker.log", "broker.log.1",
                                                           "broker.log.2"]  # fmt: skip
    assert all(p.stat().st_size <= 700 for p in tmp_path.iterdir())
    current = path.read_text()
    assert "printed after the rotations" in current
    older = (tmp_path / "broker.log.1").read_text()
    assert "line 0" in older and "line 039" not in older  # .1 is newer than .2, older than now
    if log_format == "json":
        events = [json.loads(line) for line in current.splitlines() if line.startswith("{")]
        (failed,) = [e for e in events if e["message"] == "failed"]
        assert failed["level"] == "ERROR" and failed["logger"] == "annal.test"
        assert "ValueError: boom" in failed["exception"] and failed["time"].endswith("+00:00")
    else:
        assert " INFO [annal.test] line 039 " in current


@pytest.mark.timeout(120)
def test_a_broker_logs_json_lines(zk_connect: str, tmp_path: Path) -> None:
    broker = BrokerProcess(4, zk_connect, tmp_path, settings={"log.format": "json"})
    broker.start()
    try:
        with ZkClient(zk_connect) as zk:
            wait_until(lambda: zk.get_broker(4) is not None, 60, "broker 4 registered")
        wait_until(lambda: "serving on" in broker.log_path.read_text(), 30, "the serving line")
        events = [json.loads(line) for line in broker.log_path.read_text().splitlines()]
        assert {"time", "level", "logger", "thread", "message"} <= set(events[0])
        assert any(e["message"].startswith("broker 4 serving on") for e in events)
    finally:
        broker.kill()


def test_a_bad_log_format_is_a_config_error(zk_connect: str, tmp_path: Path) -> None:
    broker = BrokerProcess(5, zk_connect, tmp_path, settings={"log.format": "xml"})
    broker.start()
    assert broker.process is not None and broker.process.wait(60) == 1
    assert "log.format='xml': expected text or json" in broker.tail_log()
