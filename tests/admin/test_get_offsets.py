"""``annal get-offsets`` against a real broker."""

from __future__ import annotations

import json

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from annal.producer.producer import Producer

from annal.cli import main


@pytest.mark.timeout(120)
def test_offsets_latest_earliest_and_by_time(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = ["--bootstrap-server", broker.endpoint]
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("clock", partitions=2)
    with Producer(broker.endpoint, acks="all") as producer:
        for i in range(5):
            producer.send("clock", value=b"v", partition=0, timestamp_ms=1000 * (i + 1))
        producer.flush(30)
    assert main(["get-offsets", *bs, "--topic", "clock"]) == 0
    assert capsys.readouterr().out.splitlines() == ["clock:0:5", "clock:1:0"]
    assert main(["get-offsets", *bs, "--topic", "clock", "--time", "earliest"]) == 0
    assert capsys.readouterr().out.splitlines() == ["clock:0:0", "clock:1:0"]
    assert main(["get-offsets", *bs, "--topic", "clock", "--time", "2500", "--json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"topic": "clock", "partition": 0, "offset": 2},
        {"topic": "clock", "partition": 1, "offset": None},  # nothing that recent
    ]
    assert main(["get-offsets", *bs, "--partitions", "1", "--time", "-1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["clock:1:0"]
    assert main(["get-offsets", *bs, "--time", "soon"]) == 2
    assert "--time 'soon' is not latest" in capsys.readouterr().err
    assert main(["get-offsets", *bs, "--topic", "nope"]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
