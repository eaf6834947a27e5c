"""The ZooKeeper-based group consumer on a secured cluster (``annal cluster up
--security sasl_ssl``): a SASL_SSL user with Read on the topic and the group
consumes and commits, through ``GroupConsumer``'s security arguments and
through ``annal console-consumer --group --command-config``; a wrong password
is refused, and the password shows in no log line."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from annal.client.security import Security
from annal.consumer.group import GroupConsumer
from annal.consumer.group_offsets import GroupOffsets
from annal.consumer.simple import ConsumerError
from annal.deploy.runner import wait_until
from annal.producer.producer import Producer
from runcli import annal
from secured_cluster import secured_cluster

from annal.topic_partition import TopicPartition

PASSWORD = "reader-s3cret"
WRONG = "not-the-readers-password"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """One broker with ACLs on; user ``reader`` may Read topic ``events`` and
    group ``readers``; twenty records in ``events``."""
    with secured_cluster(tmp_path / "cluster", [
        ["topics", "create", "--topic", "events", "--partitions", "2"],
        ["configs", "--entity-type", "users", "--entity-name", "reader", "--alter",
         "--add-config", f"SCRAM-SHA-512=[password={PASSWORD}]"],
        ["acls", "--add", "--allow-principal", "User:reader", "--operation", "Read",
         "--topic", "events", "--group", "readers"],
    ]) as status:  # fmt: skip
        endpoint = status["endpoint"]
        keystore = str(Path(status["ca"]).parent / "admin.pem")
        as_admin = {"security_protocol": "SSL", "ssl_cafile": status["ca"],
                    "ssl_certfile": keystore, "ssl_keyfile": keystore}  # fmt: skip
        with Producer(endpoint, **as_admin) as producer:
            for i in range(20):
                producer.send("events", value=b"e%02d" % i, partition=i % 2)
            producer.flush(30)
        yield {**status, "keystore": keystore}


def reader(secured: dict[str, Any], password: str) -> dict[str, str]:
    # The cluster's GRPCS:// listener requires a client certificate; the
    # password makes every call the reader's, whatever the certificate says.
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": secured["ca"],
        "ssl_certfile": secured["keystore"],
        "ssl_keyfile": secured["keystore"],
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "reader",
        "sasl_plain_password": password,
    }


@pytest.mark.timeout(240)
def test_a_sasl_ssl_user_consumes_and_commits_in_its_group(
    secured: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    zk = secured["zookeeper"]
    config = tmp_path / "reader.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={secured['ca']}\n"
        f"ssl.keystore.location={secured['keystore']}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="reader" password="{PASSWORD}";\n'
    )
    console = annal("console-consumer", "--zookeeper", zk, "--topic", "events", "--group",
                    "readers", "--from-beginning", "--max-messages", "5", "--timeout-ms",
                    "20000", "--command-config", str(config))  # fmt: skip
    assert console.returncode == 0, console.stderr
    first = console.stdout.split()
    assert len(first) == 5  # committed as the reader when it exited

    consumer = GroupConsumer(zk, "readers", auto_offset_reset="smallest",
                             consumer_timeout_ms=30_000, **reader(secured, PASSWORD))  # fmt: skip
    try:
        (stream,) = consumer.create_message_streams({"events": 1})["events"]
        rest = [next(stream).value.decode() for _ in range(15)]
        consumer.commit_offsets()
    finally:
        consumer.shutdown()
    assert sorted(first + rest) == [f"e{i:02d}" for i in range(20)]  # each once
    admin = Security("SSL", secured["ca"], secured["keystore"], secured["keystore"])
    with GroupOffsets(secured["endpoint"], "readers", 30, admin) as offsets:
        committed = offsets.committed([TopicPartition("events", 0), TopicPartition("events", 1)])
    assert committed == {TopicPartition("events", 0): 10, TopicPartition("events", 1): 10}
    # the reader may not describe "private": its committed offset is refused, not -1
    done = annal("topics", "create", "--bootstrap-server", secured["endpoint"],
                 "--command-config", secured["admin_config"], "--topic", "private")  # fmt: skip
    assert done.returncode == 0, done.stderr
    as_reader = Security("SASL_SSL", secured["ca"], secured["keystore"], secured["keystore"],
                         "reader", PASSWORD)  # fmt: skip
    with (
        GroupOffsets(secured["endpoint"], "readers", 30, as_reader) as offsets,
        pytest.raises(ConsumerError, match="TOPIC_AUTHORIZATION_FAILED.*private-0 in readers"),
    ):
        offsets.committed([TopicPartition("events", 0), TopicPartition("private", 0)])

    caplog.set_level(logging.WARNING, logger="annal.consumer.group")
    refused = GroupConsumer(zk, "readers", rebalance_backoff_ms=200, consumer_timeout_ms=100,
                            **reader(secured, WRONG))  # fmt: skip
    try:
        refused.create_message_streams({"events": 1})

        def failed() -> bool:
            return any("SASL_AUTHENTICATION_FAILED" in r.getMessage() for r in caplog.records)

        wait_until(failed, 60, "the wrong password refused")
        assert refused.owned() == {}
    finally:
        refused.shutdown()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "authentication of user 'reader' failed: invalid username or password" in logged
    assert WRONG not in logged and PASSWORD not in logged
