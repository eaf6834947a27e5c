"""Partition reassignment on real brokers: replicas added and dropped, the leader
moved off a dropped broker, the data intact, bad plans refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.storage.files import partition_dir_name

from annal.cli import main


def plan_file(tmp_path: Path, name: str, moves: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()
                ],
            }
        )
    )
    return str(path)


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    directory = broker.log_dir / partition_dir_name(topic, partition)
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


@pytest.mark.timeout(300)
def test_partitions_move_to_other_brokers(
    broker_factory: Callable[..., BrokerProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    brokers = {i: broker_factory(i) for i in (1, 2, 3)}
    bs = ["--bootstrap-server", ",".join(b.endpoint for b in brokers.values())]
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic("moving", assignment={0: [1, 2], 1: [2, 3]})
    sent = {0: [b"zero-%04d" % i for i in range(1500)], 1: [b"one-%04d" % i for i in range(1500)]}
    with Producer(bs[1], acks="all") as producer:
        for partition, values in sent.items():
            for value in values:
                producer.send("moving", value=value, partition=partition)
        producer.flush(60)

    # partition 0 leaves broker 1 (its leader) for broker 3; partition 1 gains broker 1
    plan = plan_file(tmp_path, "plan.json", {("moving", 0): [3, 2], ("moving", 1): [2, 3, 1]})
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", plan, "--execute"]) == 0
    out = capsys.readouterr().out
    assert "Successfully started partition reassignments for moving-0,moving-1" in out
    rollback = json.loads(out.split("Current partition replica assignment\n\n")[1].splitlines()[0])
    assert rollback["partitions"][0] == {"topic": "moving", "partition": 0, "replicas": [1, 2]}

    def verified() -> bool:
        code = main(["reassign-partitions", *bs, "--reassignment-json-file", plan, "--verify"])
        capsys.readouterr()
        return code == 0

    wait_until(verified, 120, "the reassignment complete")
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", plan, "--verify",
                 "--json"]) == 0  # fmt: skip
    statuses = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {s["status"] for s in statuses} == {"complete"} and len(statuses) == 2

    def settled() -> bool:  # as broker 2's metadata cache shows it (a moment after)
        with AdminClient(brokers[2].endpoint) as admin:
            p0, p1 = admin.describe_topics(["moving"])[0].partitions
        return (p0.replicas, p0.leader, sorted(p0.isr)) == ((3, 2), 3, [2, 3]) and (
            p1.replicas,
            p1.leader,
        ) == ((2, 3, 1), 2)

    wait_until(settled, 60, "the new assignment and leaders everywhere")
    wait_until(lambda: sorted(admin_isr(brokers[2], 1)) == [1, 2, 3], 60, "broker 1 in sync")
    wait_until(
        lambda: not (brokers[1].log_dir / partition_dir_name("moving", 0)).exists(),
        60,
        "broker 1's copy of moving-0 deleted",
    )
    with SimpleConsumer(bs[1]) as consumer:
        for partition, values in sent.items():
            assert [r.value for r in consumer.iterate("moving", partition, 0)] == values
    assert log_bytes(brokers[3], "moving", 0) == log_bytes(brokers[2], "moving", 0)


def admin_isr(broker: BrokerProcess, partition: int) -> tuple[int, ...]:
    with AdminClient(broker.endpoint) as admin:
        return admin.describe_topics(["moving"])[0].partitions[partition].isr


@pytest.mark.timeout(120)
def test_bad_plans_are_refused(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = ["--bootstrap-server", broker.endpoint]
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("kept", partitions=1)
    plan = plan_file(
        tmp_path,
        "bad.json",
        {("kept", 0): [1, 9], ("kept", 5): [1], ("nope", 0): [1]},
    )
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", plan, "--execute"]) == 1
    out = capsys.readouterr().out
    assert "Failed to reassign kept-0: INVALID_REPLICA_ASSIGNMENT brokers [9]" in out
    assert "Failed to reassign kept-5: UNKNOWN_TOPIC_OR_PARTITION" in out
    assert "Failed to reassign nope-0: UNKNOWN_TOPIC_OR_PARTITION" in out
    twice = plan_file(tmp_path, "twice.json", {("kept", 0): [1, 1]})
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", twice, "--execute"]) == 2
    assert "replicas: [1, 1] lists an entry twice" in capsys.readouterr().err

    (tmp_path / "garbage.json").write_text("{not json")
    garbage = str(tmp_path / "garbage.json")
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", garbage, "--execute"]) == 2
    assert "is not JSON" in capsys.readouterr().err
    (tmp_path / "empty.json").write_text('{"version": 1}')
    empty = str(tmp_path / "empty.json")
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", empty, "--verify"]) == 2
    assert "the file: has no 'partitions'" in capsys.readouterr().err
    missing = str(tmp_path / "missing.json")
    assert main(["reassign-partitions", *bs, "--reassignment-json-file", missing, "--verify"]) == 2
    assert "cannot read" in capsys.readouterr().err
    with AdminClient(broker.endpoint) as admin:
        assert admin.describe_topics(["kept"])[0].partitions[0].replicas == (1,)
