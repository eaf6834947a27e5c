"""kafka-consumer-groups.sh's views of a group (--members, --state, --all-groups,
--list --state) and its other reset scopes (--to-current, --by-duration,
--from-file with --export), with a Kafka client's group on a real broker."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from runcli import annal

from annal import groupresetcmd
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(240)

FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2"}


def test_members_state_and_reset_scopes(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory(1, FAST)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("ledger", partitions=2)
    with Producer(broker.endpoint) as producer:
        for i in range(6):
            producer.send("ledger", value=str(i), partition=i % 2)
        producer.flush(30)
    bs = ["--bootstrap-server", broker.endpoint]

    def run(*argv: str, code: int = 0) -> tuple[str, str]:
        done = annal("consumer-groups", *bs, *argv)
        assert done.returncode == code, done.stderr
        return done.stdout, done.stderr

    reader = ck.Consumer({
        "bootstrap.servers": broker.kafka_endpoint, "group.id": "live", "client.id": "reader-1",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    reader.subscribe(["ledger"])
    try:
        seen = 0
        while seen < 6:
            message = reader.poll(1.0)
            if message is not None and message.error() is None:
                seen += 1
        reader.commit(asynchronous=False)

        members, _ = run("--describe", "--group", "live", "--members")
        lines = members.splitlines()
        assert lines[0] == "" and lines[1].split() == [
            "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
        ]  # fmt: skip
        assert lines[1].startswith("GROUP           CONSUMER-ID")
        cells = lines[2].split()
        assert cells[0] == "live" and cells[3:] == ["reader-1", "2"]
        verbose, _ = run("--describe", "--group", "live", "--members", "--verbose")
        assert verbose.splitlines()[1].rstrip().endswith("#PARTITIONS     ASSIGNMENT")
        assert verbose.splitlines()[2].endswith(" ledger(0,1)")
        state, _ = run("--describe", "--group", "live", "--state")
        lines = state.splitlines()
        assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY",
                                    "STATE", "#MEMBERS"]  # fmt: skip
        assert lines[2].split() == ["live", broker.endpoint, "(1)", "range", "Stable", "1"]
        listed, _ = run("--list", "--state")
        assert listed.splitlines() == ["GROUP           STATE", "live            Stable"]
        assert run("--list", "--state", "empty")[0].splitlines() == ["GROUP           STATE"]
        busy, err = run("--delete-offsets", "--group", "live", "--topic", "ledger", code=1)
        assert "Error: Encounter some partition level error" in busy, err
        assert f"{'ledger':<30} {'0':<15} Error: GROUP_SUBSCRIBED_TO_TOPIC" in busy
        everything, _ = run("--describe", "--all-groups", "--json")
        assert '"lag": 0' in everything and '"group": "live"' in everything
    finally:
        reader.close()

    wait_until(lambda: "Empty" in run("--list", "--state")[0], 30, "the group empty")
    out, err = run("--describe", "--group", "live", "--members")
    assert out == "" and "Consumer group 'live' has no active members." in err
    out, err = run("--describe", "--group", "nope", "--state")
    assert out == "" and "Error: Consumer group 'nope' does not exist." in err
    run("--describe", "--members", code=2)  # no --group nor --all-groups
    run("--list", "--members", code=2)

    deleted, _ = run("--delete-offsets", "--group", "live", "--topic", "ledger:0")
    assert deleted.splitlines()[0] == (
        "Request succeed for deleting offsets with topic ledger:0 group live"
    )
    assert deleted.splitlines()[3].split() == ["ledger", "0", "Successful"]
    with GroupOffsets(broker.endpoint, "live") as group:
        assert group.committed() == {TopicPartition("ledger", 1): 3}
    unknown, _ = run("--delete-offsets", "--group", "live", "--topic", "nope", code=1)
    assert f"{'nope':<30} Not Provided    Error: UNKNOWN_TOPIC_OR_PARTITION" in unknown
    run("--delete-offsets", "--group", "live", code=2)  # no --topic

    reset = ["--reset-offsets", "--group", "live"]
    out, _ = run(*reset, "--topic", "ledger", "--to-current", "--export")
    assert out == "ledger,0,3\nledger,1,3\n\n"  # 0 has no offset now: its log end
    plan = tmp_path / "plan.csv"
    plan.write_text("ledger,0,1\nledger,1,9\n")  # 9 is past the end: kept at 3
    out, _ = run(*reset, "--from-file", str(plan), "--execute", "--export")
    assert out == "ledger,0,1\nledger,1,3\n\n"
    with GroupOffsets(broker.endpoint, "live") as group:
        assert group.committed() == {TopicPartition("ledger", 0): 1,
                                     TopicPartition("ledger", 1): 3}  # fmt: skip
    plan.write_text("other,ledger,0,2\nlive,ledger,1,2\n")  # with groups: ours only
    out, _ = run(*reset, "--from-file", str(plan), "--export")
    assert out == "ledger,1,2\n\n"
    out, _ = run(*reset, "--all-topics", "--by-duration", "PT1H", "--execute")
    assert [line.split()[-1] for line in out.splitlines()[1:3]] == ["0", "0"]
    _, err = run(*reset, "--all-topics", "--by-duration", "1H", code=2)
    assert "'1H' is not a duration like PnDTnHnMnS" in err


def test_durations_read_as_java_reads_them() -> None:
    read = groupresetcmd.parse_duration
    assert read("PT30M") == 1_800_000 and read("P1DT12H") == 129_600_000
    assert read("PT0.5S") == 500 and read("-PT1S") == -1000 and read("pt1m") == 60_000
    for bad in ("P", "PT", "1H", "P1H", "PT1D"):
        with pytest.raises(argparse.ArgumentTypeError):
            read(bad)
