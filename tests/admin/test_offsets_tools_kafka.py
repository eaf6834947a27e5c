"""kafka-get-offsets.sh's refusal of partitions a topic lacks, and
kafka-verifiable-consumer.sh's --group-id, against a real broker."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.deploy.runner import BrokerProcess
from annal.producer.producer import Producer
from runcli import annal

from annal.cli import main
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(180)


def test_get_offsets_names_the_partitions_a_topic_lacks(
    broker_factory: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    broker = broker_factory()
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("four", partitions=4)
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "four"]
    assert main(["get-offsets", *bs, "--partitions", "9"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Topic four does not have any of the requested partitions 9 (it has 4" in captured.err
    assert main(["get-offsets", *bs, "--partitions", "1,9,12"]) == 0  # as Kafka: the rest
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["four:1:0"]
    assert captured.err.splitlines() == [
        "Error: partition 9 does not exist", "Error: partition 12 does not exist",
    ]  # fmt: skip


def test_verifiable_consumer_commits_as_its_group(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("checked", partitions=2)
    with Producer(broker.endpoint) as producer:
        for i in range(10):
            producer.send("checked", value=str(i), partition=i % 2)
        producer.flush(30)
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "checked", "--timeout-ms", "1000"]

    def events(*argv: str) -> list[dict[str, object]]:
        run = annal("verifiable-consumer", *bs, *argv)
        assert run.returncode == 0, run.stderr
        return [json.loads(line) for line in run.stdout.splitlines()]

    first = events("--group-id", "drill", "--max-messages", "6")
    commits = [e for e in first if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] is True for e in commits)
    last: dict[int, int] = {}
    for event in commits:
        for o in event["offsets"]:  # type: ignore[attr-defined]
            last[o["partition"]] = o["offset"]
    with GroupOffsets(broker.endpoint, "drill") as group:
        committed = group.committed()
    assert {tp.partition: o for tp, o in committed.items()} == last
    assert sum(last.values()) == 6 and first[-1]["total"] == 6
    # the next run of the group goes on where the last stopped
    second = events("--group-id", "drill")
    assert second[-1]["total"] == 4
    with GroupOffsets(broker.endpoint, "drill") as group:
        assert group.committed() == {TopicPartition("checked", 0): 5,
                                     TopicPartition("checked", 1): 5}  # fmt: skip
