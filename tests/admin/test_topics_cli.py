"""``annal topics`` against a real broker on a real ZooKeeper."""

from __future__ import annotations

import json

import pytest
from annal.admin.client import AdminClient, AdminError
from annal.client.cluster import ClientError
from annal.deploy.runner import BrokerProcess
from annal.deploy.zookeeper import free_port
from annal.producer.producer import Producer

from annal import errors, topicscmd
from annal.cli import main


@pytest.mark.timeout(180)
def test_topics_commands(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    bs = ["--bootstrap-server", f"127.0.0.1:{free_port()},{broker.endpoint}"]  # first one is dead
    assert main(["topics", "create", *bs, "--topic", "users", "--partitions", "3",
                 "--config", "cleanup.policy=compact"]) == 0  # fmt: skip
    assert "Created topic users." in capsys.readouterr().out
    assert main(["topics", "create", *bs, "--topic", "users", "--partitions", "3"]) == 1
    assert "TOPIC_ALREADY_EXISTS" in capsys.readouterr().err
    assert main(["topics", "create", *bs, "--topic", "users", "--if-not-exists"]) == 0
    assert main(["topics", "create", *bs, "--topic", "bad", "--config", "cleanup.policy=x"]) == 1
    assert "INVALID_CONFIG" in capsys.readouterr().err
    assert main(["topics", "create", *bs, "--topic", "wide", "--replication-factor", "3"]) == 1
    assert "INVALID_REPLICATION_FACTOR" in capsys.readouterr().err
    assert main(["topics", "list", *bs, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ["users"]
    assert main(["topics", *bs, "--list", "--json"]) == 0  # kafka-topics.sh's spelling
    assert json.loads(capsys.readouterr().out) == ["users"]
    assert main(["topics", "--create", "--topic", "spelled", *bs, "--partitions", "2"]) == 0
    assert main(["topics", "--delete", "--topic", "spelled", *bs]) == 0
    capsys.readouterr()
    assert main(["topics", "describe", *bs, "--topic", "users", "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["replication_factor"] == 1
    assert [(p["partition"], p["leader"]) for p in described["partitions"]] == [
        (0, 1),
        (1, 1),
        (2, 1),
    ]
    assert main(["topics", "describe", *bs]) == 0
    assert "Topic: users\tPartitionCount: 3\tReplicationFactor: 1" in capsys.readouterr().out
    assert main(["topics", "alter", *bs, "--topic", "users", "--partitions", "5"]) == 0
    assert "now has 5 partitions" in capsys.readouterr().out
    assert main(["topics", "describe", *bs, "--topic", "users", "--json"]) == 0
    grown = json.loads(capsys.readouterr().out)["partitions"]
    assert [(p["partition"], p["leader"]) for p in grown] == [(p, 1) for p in range(5)]
    with Producer(broker.endpoint) as producer:
        assert producer.send("users", value=b"new", key=b"k", partition=4).result(30).offset == 0
    assert main(["topics", "alter", *bs, "--topic", "users", "--partitions", "2"]) == 1
    assert "INVALID_PARTITIONS" in capsys.readouterr().err
    with AdminClient(broker.endpoint) as admin:
        with pytest.raises(AdminError, match=r"INVALID_REPLICA_ASSIGNMENT.*brokers \[9\]"):
            admin.create_partitions("users", 7, [[1], [9]])
        with pytest.raises(AdminError, match="1 replica lists given for 2 new partitions"):
            admin.create_partitions("users", 7, [[1]])
        assert len(admin.describe_topics(["users"])[0].partitions) == 5  # nothing changed
    assert main(["topics", "alter", *bs, "--topic", "nope", "--partitions", "2"]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    assert main(["topics", "delete", *bs, "--topic", "users"]) == 0
    capsys.readouterr()
    assert main(["topics", "describe", *bs, "--topic", "users"]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    assert main(["topics", "delete", *bs, "--topic", "users"]) == 1


def test_usage_and_connection_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "list", "--bootstrap-server", "nohostport"]) == 2
    assert "is not host:port" in capsys.readouterr().err
    assert main(["topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"]) == 1
    err = capsys.readouterr().err
    assert "annal topics list: BROKER_NOT_AVAILABLE: no broker answered at 127.0.0.1:" in err
    assert "hint: no broker answered: is the cluster up" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as info:
        main(["topics", "create", "--bootstrap-server", "x:1"])  # no --topic
    assert info.value.code == 2


def test_a_request_error_no_command_caught_is_reported_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def busy(args: object, client: object) -> int:
        raise ClientError(errors.BROKER_BUSY, "queued.max.requests=500")

    monkeypatch.setattr(topicscmd, "_run", busy)
    assert main(["topics", "list", "--bootstrap-server", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "annal topics: BROKER_BUSY: queued.max.requests=500",
        "annal topics: hint: the broker is at its request limits (queued.max.requests); try again",
    ]


def test_kafka_spelling_of_the_action() -> None:
    assert topicscmd.kafka_spelling(["topics", "--describe", "--topic", "t"]) == [
        "topics", "describe", "--topic", "t",
    ]  # fmt: skip
    assert topicscmd.kafka_spelling(["topics", "list", "--json"]) == ["topics", "list", "--json"]
    assert topicscmd.kafka_spelling(["cluster", "--list"]) == ["cluster", "--list"]
    with pytest.raises(SystemExit) as usage:
        topicscmd.kafka_spelling(["topics", "--create", "--delete"])
    assert usage.value.code == 2
