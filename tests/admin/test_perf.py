"""annal perf produce / consume against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess


def annal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "annal", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(180)
def test_perf_produce_and_consume(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory()
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("perf", partitions=2)
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "perf"]
    props = ["--producer-props", "acks=1", "linger.ms=5", "compression.type=lz4"]
    produced = annal("perf", "produce", *bs, "--num-records", "20000", *props, "--json")
    assert produced.returncode == 0, produced.stderr
    report = json.loads(produced.stdout)
    assert report["records"] == 20000 and report["records_per_s"] > 0 and report["p99_ms"] > 0
    consumed = annal("perf", "consume", *bs, "--messages", "20000", "--json")
    assert consumed.returncode == 0, consumed.stderr
    assert json.loads(consumed.stdout)["records"] == 20000
    csv = annal("perf", "consume", *bs, "--messages", "20000")  # Kafka's CSV
    assert csv.returncode == 0, csv.stderr
    header, line = csv.stdout.splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec")
    fields = line.split(", ")
    assert len(fields) == 10 and fields[4] == "20000"
    short = annal("perf", "consume", *bs, "--messages", "30000", "--timeout", "1000",
                  "--hide-header")  # fmt: skip
    assert short.returncode == 1 and short.stdout.split(", ")[4] == "20000"
    assert "stopped after 20000 of 30000 records" in short.stderr
    detailed = annal("perf", "consume", *bs, "--messages", "20000", "--show-detailed-stats",
                     "--reporting-interval", "1")  # fmt: skip
    assert detailed.returncode == 0 and len(detailed.stdout.splitlines()) >= 2
    text = annal("perf", "produce", *bs, "--num-records", "10")
    assert "records sent" in text.stdout and "99th" in text.stdout
    bad = annal("perf", "produce", *bs, "--num-records", "1", "--producer-props", "bogus=1")
    assert bad.returncode == 2 and "unsupported producer property" in bad.stderr


@pytest.mark.timeout(120)
def test_perf_produce_reports_progress_as_it_goes(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from annal import perfcmd
    from annal.cli import main

    monkeypatch.setattr(perfcmd, "PROGRESS_S", 0.0)  # a line at every check: each 1000 records
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("progress", partitions=1)
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "progress"]
    assert main(["perf", "produce", *bs, "--num-records", "3000", "--json"]) == 0
    out, err = capsys.readouterr()
    progress = err.splitlines()
    assert len(progress) == 2 and all(" records/sec (" in line for line in progress), err
    assert json.loads(out)["records"] == 3000  # stdout stays one JSON object
