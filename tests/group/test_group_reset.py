"""``annal consumer-groups --reset-offsets`` and ``--delete``, as
kafka-consumer-groups.sh: a plan unless --execute, offsets kept in range, and
refused while the group has live members."""

from __future__ import annotations

import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from environment import require_module
from runcli import annal

from annal.topic_partition import TopicPartition

R0, R1 = TopicPartition("r", 0), TopicPartition("r", 1)


def groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    run = annal("consumer-groups", "--bootstrap-server", bootstrap, *args)
    return run.returncode, run.stdout, run.stderr


@pytest.mark.timeout(180)
def test_reset_offsets_and_delete(broker: BrokerProcess) -> None:
    kafka = require_module("kafka")
    b = broker.endpoint
    with AdminClient(b) as admin:
        admin.create_topic("r", 2)
    with Producer(b) as producer:
        for i in range(20):
            producer.send("r", value=b"%d" % i, partition=i % 2, timestamp_ms=1_000_000 + i)
        producer.flush(30)
    with GroupOffsets(b, "g") as offsets:
        offsets.commit({R0: 5, R1: 5})

        def committed() -> dict[TopicPartition, int]:
            return offsets.committed()

        code, out, err = groups(b, "--reset-offsets", "--group", "g", "--topic", "r",
                                "--to-earliest")  # fmt: skip
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
        assert [line.split()[2:] for line in lines[1:3]] == [["0", "5", "0"], ["1", "5", "0"]]
        assert "dry run" in lines[-1] and committed() == {R0: 5, R1: 5}

        steps = [
            (["--topic", "r", "--to-earliest", "--execute"], {R0: 0, R1: 0}),
            (["--topic", "r", "--shift-by", "3", "--execute"], {R0: 3, R1: 3}),
            (["--topic", "r", "--shift-by", "-10", "--execute"], {R0: 0, R1: 0}),
            (["--topic", "r:1", "--to-offset", "100", "--execute"], {R0: 0, R1: 10}),
            (["--all-topics", "--to-datetime", "1970-01-01T00:16:40.004", "--execute"],
             {R0: 2, R1: 2}),  # the first records at or after 1,000,004 ms
            (["--all-topics", "--to-datetime", "2100-01-01T00:00:00", "--execute"],
             {R0: 10, R1: 10}),
            (["--topic", "r", "--to-offset", "4", "--dry-run"], {R0: 10, R1: 10}),
        ]  # fmt: skip
        for args, expected in steps:
            code, out, err = groups(b, "--reset-offsets", "--group", "g", *args)
            assert code == 0, (args, err)
            assert committed() == expected, args

        for args, problem in [
            (["--topic", "r"], "needs one of --to-earliest"),
            (["--to-latest"], "needs --topic or --all-topics"),
            (["--topic", "nope", "--to-latest"], "topic 'nope' does not exist"),
            (["--topic", "r:7", "--to-latest"], "r has no partition 7"),
            (["--topic", "r", "--to-datetime", "yesterday"], "is not a time like"),
        ]:
            code, _, err = groups(b, "--reset-offsets", "--group", "g", *args)
            assert code in (1, 2) and problem in err, (args, err)

    # a group with a live member (a Kafka client) is neither reset nor deleted
    member = kafka.KafkaConsumer("r", bootstrap_servers=broker.kafka_endpoint, group_id="kg",
                                 auto_offset_reset="earliest", session_timeout_ms=6000,
                                 heartbeat_interval_ms=500)  # fmt: skip
    try:
        wait_until(lambda: bool(member.poll(200) is not None and member.assignment()), 60,
                   "the member assigned")  # fmt: skip
        member.commit()
        code, _, err = groups(b, "--reset-offsets", "--group", "kg", "--all-topics",
                              "--to-earliest", "--execute")  # fmt: skip
        assert code == 1 and "has 1 live member" in err
        code, _, err = groups(b, "--delete", "--group", "kg")
        assert code == 1 and "has 1 live member" in err
    finally:
        member.close()

    code, out, err = groups(b, "--delete", "--group", "g")
    assert code == 0 and "'g'" in out, err
    with GroupOffsets(b, "g") as offsets:
        assert offsets.committed() == {}
    code, _, err = groups(b, "--delete", "--group", "g")
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err
    code, _, err = groups(b, "--delete", "--group", "kg")  # its member left
    assert code == 0, err
