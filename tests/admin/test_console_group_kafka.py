"""``console-consumer --group`` with ``--bootstrap-server``: a member of a group of
Kafka's protocol at the broker's coordinator, sharing partitions with the other
members (Kafka's clients too) and committing what it printed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from runcli import annal

from annal.kafka_group_member import assigned_partitions, assignment, range_assign
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(240)

FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2"}


def send(endpoint: str, values: list[str]) -> None:
    with Producer(endpoint) as producer:
        for i, value in enumerate(values):
            producer.send("shared", value=value, partition=i % 2)
        producer.flush(30)


def test_console_consumers_of_a_kafka_group_share_and_resume(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(1, FAST)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("shared", partitions=2)
    send(broker.endpoint, [f"a{i}" for i in range(6)])
    consume = ["console-consumer", "--bootstrap-server", broker.endpoint, "--topic", "shared",
               "--group", "printers"]  # fmt: skip

    first = annal(*consume, "--from-beginning", "--max-messages", "4")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.split()) == 4
    with GroupOffsets(broker.endpoint, "printers") as group:
        assert sum(group.committed().values()) == 4  # what it printed, committed on exit
    rest = annal(*consume, "--timeout-ms", "2000")  # goes on where the group stopped
    assert rest.returncode == 0, rest.stderr
    assert sorted(first.stdout.split() + rest.stdout.split()) == sorted(f"a{i}" for i in range(6))

    # a Kafka client and a console consumer in one group: a partition each
    reader = ck.Consumer({"bootstrap.servers": broker.kafka_endpoint, "group.id": "printers",
                          "enable.auto.commit": False})  # fmt: skip
    reader.subscribe(["shared"])
    console = subprocess.Popen(
        [sys.executable, "-m", "annal", *consume, "--timeout-ms", "8000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        def balanced() -> bool:
            reader.poll(0.2)
            with GroupOffsets(broker.endpoint, "printers") as group:
                members = group.describe().members
            shares = sorted(sum(len(a.partitions) for a in m.assignment) for m in members)
            return shares == [1, 1] and len(reader.assignment()) == 1

        wait_until(balanced, 60, "the partitions shared by two members")
        mine = reader.assignment()[0].partition
        send(broker.endpoint, ["b0", "b1", "b2", "b3"])  # b0, b2 to 0; b1, b3 to 1
        got: list[str] = []

        def read() -> bool:
            message = reader.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value().decode())
            return len(got) >= 2

        wait_until(read, 60, "the Kafka client's share")
        out, err = console.communicate(timeout=60)
    finally:
        if console.poll() is None:
            console.kill()
        reader.close()
    assert console.returncode == 0, err
    expected = {0: ["b0", "b2"], 1: ["b1", "b3"]}
    assert got == expected[mine] and out.split() == expected[1 - mine], (got, out, err)
    with GroupOffsets(broker.endpoint, "printers") as group:
        assert group.committed()[TopicPartition("shared", 1 - mine)] == 5


def test_range_assignment_and_the_consumer_protocol() -> None:
    assert range_assign({"b": ["t"], "a": ["t", "u"]}, {"t": 3, "u": 1}) == {
        "a": [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)],
        "b": [TopicPartition("t", 2)],
    }
    mine = [TopicPartition("t", 2), TopicPartition("t", 0)]
    assert assigned_partitions(assignment(mine)) == sorted(mine)
