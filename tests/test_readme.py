"""The README's quick start, run as written: its shell lines (PORT and KAFKA_PORT
replaced by the ports ``cluster up`` printed), kcat and the Python example."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.deploy.runner import BrokerProcess, wait_until

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[1]


def blocks(after: str) -> list[str]:
    """The fenced blocks of README.md from the heading ``after`` to the next heading."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {after}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:\w*)\n(.*?)```", section, re.S)


def commands(block: str) -> list[str]:
    """Shell lines of a block, continuation lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    subprocess.run(
        [str(ROOT / ".venv/bin/annal"), "cluster", "down", "--dir", str(tmp_path)],
        capture_output=True, timeout=120,
    )  # fmt: skip


def test_the_quick_start_works_as_written(cluster_dir: Path) -> None:
    env = {**os.environ, "ANNAL_CLUSTER_DIR": str(cluster_dir)}
    shell, kcat, python = blocks("Quick start: a local cluster")[:3]
    lines = commands(shell)
    assert lines[0].startswith(".venv/bin/annal cluster up")

    def run(line: str) -> str:
        done = subprocess.run(
            line, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    printed = run(lines[0])
    grpc = re.search(r"^bootstrap servers: 127\.0\.0\.1:(\d+)", printed, re.M)
    kafka = re.search(r"^Kafka bootstrap servers: 127\.0\.0\.1:(\d+)", printed, re.M)
    assert grpc and kafka, printed
    ports = {"PORT": kafka.group(1), "KAFKA_PORT": kafka.group(1)}  # either list works

    def filled(line: str) -> str:
        return re.sub(r"\b(KAFKA_PORT|PORT)\b", lambda m: ports[m.group(1)], line)

    outputs = []
    for line in lines[1:-1]:
        outputs.append(run(filled(line)))
        if "cluster kill" in line:
            describe = filled(lines[lines.index(line) + 1])
            wait_until(
                lambda d=describe: "Offline: 2" in run(d), 60, "new leaders, broker 2 offline"
            )
    assert "Created topic events." in outputs[0]
    assert "ReplicationFactor: 3" in outputs[1]

    if shutil.which("kcat"):
        assert "3 brokers" in run(filled(commands(kcat)[0]))
    example = subprocess.run(
        [sys.executable, "-c", filled(python)], capture_output=True, text=True, timeout=120
    )
    assert example.returncode == 0, example.stderr
    run(lines[-1])


def kafka_protocol_examples() -> list[str]:
    text = (ROOT / "docs" / "kafka-protocol.md").read_text()
    section = text.split("## Examples\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:\w*)\n(.*?)```", section, re.S)


def test_the_kafka_protocol_examples_print_what_they_wrote(broker: BrokerProcess) -> None:
    """docs/kafka-protocol.md's examples, each run as written against a broker
    with a 6-partition topic ``events``: each reads back what was written."""
    from annal.admin.client import AdminClient

    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("events", partitions=6)
    port = broker.kafka_endpoint.rsplit(":", 1)[1]
    shell, *programs = kafka_protocol_examples()
    assert len(programs) == 3  # confluent-kafka, kafka-python, aiokafka
    for program in programs:
        done = subprocess.run(
            [sys.executable, "-c", program.replace("KAFKA_PORT", port)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "b'v'" in done.stdout, (program, done.stdout)  # partition 0 from its start
    if shutil.which("kcat"):
        for line in commands(shell.replace("KAFKA_PORT", port)):
            done = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, f"{line}\n{done.stderr}"
        assert done.stdout.split()[-1] == "hello"  # the last line reads partition 0 back
