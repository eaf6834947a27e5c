"""``annal topics`` against a real broker on a real ZooKeeper."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient, AdminError
from annal.client.cluster import ClientError
from annal.consumer.group_offsets import GroupOffsets
from annal.deploy.runner import BrokerProcess
from annal.deploy.zookeeper import free_port
from annal.producer.producer import Producer

from annal import errors, topicscmd
from annal.cli import main
from annal.topic_partition import TopicPartition


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


@pytest.mark.timeout(240)
def test_kafka_topics_options(
    broker_factory: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-topics.sh's options: Configs on the topic line, --topics-with-overrides,
    --exclude-internal, --if-exists, regex --topic, --replica-assignment."""
    first = broker_factory(1)
    broker_factory(2)
    bs = ["--bootstrap-server", first.endpoint]

    def out(*argv: str, code: int = 0) -> str:
        assert main(list(argv)) == code, capsys.readouterr()
        return capsys.readouterr().out

    out("topics", "--create", *bs, "--topic", "orders-1", "--replica-assignment", "1:2,2:1")
    out("topics", "create", *bs, "--topic", "orders-2", "--config", "retention.ms=1000",
        "--config", "cleanup.policy = compact")  # fmt: skip
    out("topics", "create", *bs, "--topic", "orders-3")
    out("topics", "create", *bs, "--topic", "other")
    with GroupOffsets(first.endpoint, "g") as offsets:  # creates __consumer_offsets
        offsets.commit({TopicPartition("other", 0): 0})

    described = json.loads(out("topics", "describe", *bs, "--topic", "orders-1", "--json"))
    assert [p["replicas"] for p in described["partitions"]] == [[1, 2], [2, 1]]
    assert described["configs"] == {}
    text = out("topics", "--describe", *bs, "--topic", "orders-2").splitlines()
    assert text[0] == (
        "Topic: orders-2\tPartitionCount: 1\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,retention.ms=1000"
    )
    assert text[1].startswith("\tTopic: orders-2\tPartition: 0\tLeader: ")
    assert out("topics", "describe", *bs, "--topic", "other").splitlines()[0].endswith(
        "\tConfigs: "
    )
    overridden = out("topics", "describe", *bs, "--topics-with-overrides").splitlines()
    assert [line.split("\t")[0] for line in overridden] == ["Topic: __consumer_offsets",
                                                            "Topic: orders-2"]  # fmt: skip
    assert out("topics", "--list", *bs).split() == [
        "__consumer_offsets", "orders-1", "orders-2", "orders-3", "other",
    ]  # fmt: skip
    assert out("topics", "list", *bs, "--exclude-internal").split() == [
        "orders-1", "orders-2", "orders-3", "other",
    ]  # fmt: skip
    assert out("topics", "list", *bs, "--topic", "orders-.*").split() == [
        "orders-1", "orders-2", "orders-3",
    ]  # fmt: skip
    assert out("topics", "list", *bs, "--topic", "other,orders-1").split() == ["orders-1", "other"]
    names = [line.split("\t")[0] for line in out("topics", "describe", *bs, "--topic", ".*",
                                                  "--exclude-internal").splitlines()]  # fmt: skip
    assert [n for n in names if n] == ["Topic: orders-1", "Topic: orders-2", "Topic: orders-3",
                                       "Topic: other"]  # fmt: skip

    # --alter --replica-assignment lists every partition; the existing ones' are skipped
    out("topics", "alter", *bs, "--topic", "orders-1", "--partitions", "3",
        "--replica-assignment", "1:2,2:1,2:1")  # fmt: skip
    grown = json.loads(out("topics", "describe", *bs, "--topic", "orders-1", "--json"))
    assert [p["replicas"] for p in grown["partitions"]] == [[1, 2], [2, 1], [2, 1]]
    assert main(["topics", "alter", *bs, "--topic", "orders-1", "--partitions", "4",
                 "--replica-assignment", "1:2"]) == 1  # fmt: skip
    assert "INVALID_REPLICA_ASSIGNMENT: --replica-assignment lists 1 partitions for 4" in (
        capsys.readouterr().err
    )
    out("topics", "alter", *bs, "--topic", "orders-[23]", "--partitions", "2")
    for name in ("orders-2", "orders-3"):
        assert len(json.loads(out("topics", "describe", *bs, "--topic", name, "--json"))[
            "partitions"]) == 2  # fmt: skip

    # --if-exists: a missing topic is no error, and nothing is done
    for action in (["alter", "--partitions", "5"], ["delete"], ["describe"]):
        assert out("topics", action[0], *bs, "--topic", "nope", "--if-exists", *action[1:]) == ""
        assert main(["topics", action[0], *bs, "--topic", "nope.*", *action[1:]]) == 1
        assert "Topic 'nope.*' does not exist as expected" in capsys.readouterr().err
    assert main(["topics", "delete", *bs, "--topic", "nope"]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    assert main(["topics", "describe", *bs, "--if-exists"]) == 2
    assert "--if-exists needs --topic" in capsys.readouterr().err
    assert main(["topics", "list", *bs, "--topic", "orders-("]) == 2
    assert "is an invalid regex" in capsys.readouterr().err

    assert out("topics", "delete", *bs, "--topic", "orders-[23]").splitlines() == [
        "Deleted topic orders-2.", "Deleted topic orders-3.",
    ]  # fmt: skip
    assert out("topics", "list", *bs, "--exclude-internal").split() == ["orders-1", "other"]


def test_topics_usage_errors_print_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (
        ["topics", "describe", "--bootstrap-server", "x:1", "--bogus"],
        ["topics", "--describe", "--bogus", "--bootstrap-server", "x:1"],
    ):
        with pytest.raises(SystemExit) as usage:
            main(argv)
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: annal topics describe ") and "--topics-with-overrides" in err
        assert "unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["topics", "create", "--bootstrap-server", "x:1", "--topic", "t",
              "--replica-assignment", "1:2:1"])  # fmt: skip
    assert "duplicate entries: 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["topics", "create", "--bootstrap-server", "x:1", "--topic", "t",
              "--replica-assignment", "1:2,3"])  # fmt: skip
    assert "partition 1 has different replication factor: [3]" in capsys.readouterr().err
    assert main(["topics", "create", "--bootstrap-server", "x:1", "--topic", "t",
                 "--replica-assignment", "1", "--partitions", "2"]) == 2  # fmt: skip
    assert "--replica-assignment replaces --partitions" in capsys.readouterr().err
    assert topicscmd.parse_replica_assignment("1:2, 2:3") == [[1, 2], [2, 3]]
    assert topicscmd.topic_filter("'a.*, b'").pattern == "a.*|b"
