"""Reading a topic one of whose partitions has no leader: the consumer names the
partition instead of quietly returning fewer records, and consumer-groups
--describe shows what it can and marks the rest."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from runcli import annal

from annal.topic_partition import TopicPartition


@pytest.mark.timeout(180)
def test_a_partition_without_a_leader_is_named(
    broker_factory: Callable[..., BrokerProcess], caplog: pytest.LogCaptureFixture
) -> None:
    fast = {"zookeeper.session.timeout.ms": "6000"}
    brokers = {i: broker_factory(i, settings=fast) for i in (1, 2)}
    bootstrap = brokers[1].endpoint
    with AdminClient(bootstrap) as admin:
        admin.create_topic("half", assignment={0: [1], 1: [2]})
        with Producer(bootstrap) as producer:
            for i in range(10):
                producer.send("half", value=b"%d" % i, partition=i % 2)
            producer.flush(30)
        with GroupOffsets(bootstrap, "readers") as offsets:
            offsets.commit({TopicPartition("half", 0): 3, TopicPartition("half", 1): 2})
        brokers[2].kill()
        wait_until(
            lambda: admin.describe_topics(["half"])[0].partitions[1].leader < 0,
            60,
            "half-1 without a leader",
        )

    with caplog.at_level(logging.WARNING), SimpleConsumer(bootstrap) as consumer:
        assert consumer.partitions_for("half") == [0]
    assert "half: partition 1 has no leader now" in caplog.text

    console = annal("console-consumer", "--bootstrap-server", bootstrap, "--topic", "half",
                    "--from-beginning", "--max-messages", "5", "--timeout-ms", "5000")  # fmt: skip
    assert console.returncode == 0, console.stderr
    assert len(console.stdout.splitlines()) == 5
    assert "partition 1 has no leader now" in console.stderr

    described = annal("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                      "--group", "readers", "--json")  # fmt: skip
    assert described.returncode == 0, described.stderr
    rows = {r["partition"]: r for r in map(json.loads, described.stdout.splitlines())}
    assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (3, 5, 2)
    assert rows[1]["current_offset"] == 2 and rows[1]["log_end_offset"] == "-"
    assert rows[1]["note"] == "no leader"
    table = annal("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                  "--group", "readers")  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[2].rstrip().endswith("(no leader)")
