"""Scripts written for Kafka's tools run unchanged against annal: ``bin/kafka-*.sh``
answer with annal's commands, which take a Kafka listener or ``--zookeeper`` where
Kafka's tools do (librdkafka's test suite calls kafka-topics.sh and kafka-acls.sh
this way)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from annal.security.acl import AclBindingFilter, ResourcePatternFilter, ResourceType

from annal.cli import main
from annal.kafka_bootstrap import KafkaBootstrapError, _grpc_in, grpc_bootstrap, grpc_listener_of

pytestmark = pytest.mark.timeout(240)

BIN = Path(__file__).resolve().parents[2] / "bin"
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster_broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory(1, {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    })  # fmt: skip


def script(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``bin/NAME args``, with annal run by this interpreter."""
    env = {**os.environ, "ANNAL": f"{sys.executable} -m annal"}
    return subprocess.run(
        [str(BIN / name), *args], input=stdin, capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip


def test_every_script_is_executable_and_names_an_annal_command() -> None:
    scripts = sorted(BIN.glob("kafka-*.sh"))
    assert len(scripts) >= 15
    for path in scripts:
        assert os.access(path, os.X_OK), path
        assert "annal-run" in path.read_text(), path


def test_librdkafkas_calls_of_kafka_topics_and_kafka_acls(cluster_broker: BrokerProcess) -> None:
    topic = f"scripted-{next(_names)}"
    zookeeper = cluster_broker.zookeeper_connect
    created = script(
        "kafka-topics.sh", "--zookeeper", zookeeper, "--create", "--topic", topic,
        "--replication-factor", "1", "--partitions", "2",
        "--config", "message.timestamp.type=LogAppendTime",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert f"Created topic {topic}." in created.stdout

    kafka = cluster_broker.kafka_endpoint
    described = script(
        "kafka-topics.sh", "--bootstrap-server", kafka, "--describe", "--topic", topic
    )
    assert described.returncode == 0, described.stderr
    assert f"Topic: {topic}\tPartitionCount: 2" in described.stdout

    added = script(
        "kafka-acls.sh", "--bootstrap-server", kafka, "--add", "--deny-principal", "User:*",
        "--operation", "All", "--deny-host", "*", "--topic", topic,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    with AdminClient(cluster_broker.endpoint) as admin:
        found = admin.describe_acls(AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC)))
    assert [(b.pattern.name, b.entry.principal, b.entry.operation.name) for b in found] == [
        (topic, "User:*", "ALL")
    ]


def test_console_scripts_take_the_older_broker_list(cluster_broker: BrokerProcess) -> None:
    topic = f"console-{next(_names)}"
    assert main(["topics", "create", "--zookeeper", cluster_broker.zookeeper_connect,
                 "--topic", topic]) == 0  # fmt: skip
    kafka = cluster_broker.kafka_endpoint
    sent = script("kafka-console-producer.sh", "--broker-list", kafka, "--topic", topic,
                  stdin="one\ntwo\n")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    read = script("kafka-console-consumer.sh", "--bootstrap-server", kafka, "--topic", topic,
                  "--from-beginning", "--max-messages", "2")  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["one", "two"]


def test_server_start_without_a_properties_file_prints_kafkas_usage() -> None:
    started = script("kafka-server-start.sh")
    assert started.returncode == 1
    assert "USAGE:" in started.stderr and "server.properties" in started.stderr


def test_a_kafka_listener_given_to_annal_finds_the_brokers_grpc_listener(
    cluster_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka, grpc = cluster_broker.kafka_endpoint, cluster_broker.endpoint
    assert grpc_listener_of(kafka) == grpc
    # gRPC addresses and addresses nobody answers on are kept as given
    assert grpc_bootstrap(f"{kafka},{grpc},127.0.0.1:1") == f"{grpc},127.0.0.1:1"
    assert main(["topics", "list", "--bootstrap-server", kafka]) == 0
    assert "Kafka listener" not in capsys.readouterr().err


def test_a_command_needs_exactly_one_way_to_the_cluster(
    cluster_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as neither:
        main(["topics", "list"])
    assert neither.value.code == 2
    assert "exactly one of --bootstrap-server and --zookeeper" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["topics", "list", "--zookeeper", cluster_broker.zookeeper_connect,
              "--bootstrap-server", cluster_broker.endpoint])  # fmt: skip
    assert main(["topics", "list", "--zookeeper", cluster_broker.zookeeper_connect]) == 0


def test_listener_settings_name_the_grpc_entry() -> None:
    assert _grpc_in("PLAINTEXT://h:1,GRPC://g:2", "k:9") == "g:2"
    assert _grpc_in("GRPCS://:7,GRPC://g:2", "k:9") == "k:7"  # no host: the one given
    assert _grpc_in("GRPC://0.0.0.0:3", "kafka.example:9") == "kafka.example:3"
    assert _grpc_in("PLAINTEXT://h:1", "k:9") is None


def test_a_kafka_listener_whose_grpc_listener_cannot_be_found_says_what_to_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from annal.kafkaproto import client

    def refuse(self: object, api_key: int, version: int, values: object) -> object:
        raise client.ConnectionFailed("the broker closed the connection")

    monkeypatch.setattr(client.KafkaConnection, "exchange", refuse)
    with pytest.raises(KafkaBootstrapError, match=r"h:9 is a Kafka listener.*GRPC://.*closed"):
        grpc_listener_of("h:9")
