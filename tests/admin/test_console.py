"""console-producer and console-consumer as processes, against a real broker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.zk.client import ZkClient


@pytest.fixture
def broker(
    zk_connect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[BrokerProcess]:
    process = BrokerProcess(1, zk_connect, tmp_path)
    process.start()
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_controller() == 1, 60, "broker 1 up and controller")
    with AdminClient(process.endpoint) as admin:
        admin.create_topic("lines", partitions=2)
    yield process
    process.kill()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n--- broker log ---\n{process.tail_log()}")


def annal(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "annal", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(180)
def test_console_round_trip(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.endpoint]
    lines = "a:one\nb:two\nc:three\nno separator\n"
    sent = annal("console-producer", *bs, "--topic", "lines", "--property", "parse.key=true",
                 "--property", "key.separator=:", stdin=lines)  # fmt: skip
    assert sent.returncode == 1 and "line 4: no key separator" in sent.stderr
    read = annal("console-consumer", *bs, "--topic", "lines", "--from-beginning",
                 "--max-messages", "3", "--property", "print.key=true")  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.splitlines()) == ["a\tone", "b\ttwo", "c\tthree"]
    one = annal("console-consumer", *bs, "--topic", "lines", "--partition", "0", "--offset",
                "earliest", "--timeout-ms", "500", "--property", "print.offset=true")  # fmt: skip
    assert one.returncode == 0 and "Processed a total of" in one.stderr
    assert all(line.startswith("Offset:") for line in one.stdout.splitlines())
    bad = annal("console-consumer", *bs, "--topic", "lines", "--offset", "5")
    assert bad.returncode == 2 and "--offset needs --partition" in bad.stderr
    missing = annal("console-producer", *bs, "--topic", "nope", stdin="x\n")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
