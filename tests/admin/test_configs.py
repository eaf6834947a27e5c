"""``annal configs`` on a real broker: overrides shown, changed at once on the broker
that hosts the topic, bad changes refused with nothing written."""

from __future__ import annotations

import json

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import ProduceError, Producer

from annal.cli import main

ASSIGNMENTS = [
    ("retention.ms=1000", {"retention.ms": "1000"}),
    ("a=1, b=2", {"a": "1", "b": "2"}),
    ("cleanup.policy=[compact,delete],a=1", {"cleanup.policy": "compact,delete", "a": "1"}),
    ("", {}),
    ("retention.ms", "expects KEY=VALUE pairs, got 'retention.ms'"),
    ("=5", "expects KEY=VALUE pairs"),
]


def produce_one(endpoint: str, size: int) -> str:
    """The error name of producing one record of ``size`` bytes ("NONE" when stored)."""
    with Producer(endpoint, retries=0) as producer:
        try:
            producer.send("tuned", key=b"k", value=b"x" * size).result(30)
        except ProduceError as exc:
            return exc.error
    return "NONE"


@pytest.mark.timeout(180)
def test_configs_describe_and_alter(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = ["--bootstrap-server", broker.endpoint]
    topic = ["--entity-type", "topics", "--entity-name", "tuned"]
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("tuned", partitions=1, config={"retention.ms": "86400000"})
    assert main(["configs", *bs, *topic, "--describe"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Dynamic configs for topic tuned are:",
        "  retention.ms=86400000",
    ]
    assert produce_one(broker.endpoint, 5000) == "NONE"
    assert main(["configs", *bs, *topic, "--describe", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "topic": "tuned",
        "configs": [{"name": "retention.ms", "value": "86400000", "is_default": False}],
    }

    change = "max.message.bytes=2000,cleanup.policy=[compact,delete]"
    assert main(["configs", *bs, *topic, "--alter", "--add-config", change]) == 0
    assert "Completed updating config for topic tuned." in capsys.readouterr().out
    assert main(["configs", *bs, *topic, "--describe", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  max.message.bytes=2000" in lines and "  cleanup.policy=compact,delete" in lines
    assert "  segment.bytes=1073741824  (default)" in lines
    # the broker applies it at once: a 5000-byte record is now too large
    wait_until(lambda: produce_one(broker.endpoint, 5000) == "MESSAGE_TOO_LARGE", 30, "applied")

    assert main(["configs", *bs, *topic, "--alter", "--delete-config", "max.message.bytes"]) == 0
    capsys.readouterr()
    wait_until(lambda: produce_one(broker.endpoint, 5000) == "NONE", 30, "the default back")

    # refused, nothing written
    assert main(["configs", *bs, *topic, "--alter", "--add-config", "retention.ms=soon"]) == 1
    assert "INVALID_CONFIG" in capsys.readouterr().err
    assert main(["configs", *bs, *topic, "--alter", "--add-config", "colour=blue"]) == 1
    assert "unknown log config 'colour'" in capsys.readouterr().err
    assert main(["configs", *bs, *topic, "--alter", "--delete-config", "segment.ms"]) == 1
    assert "not set on tuned" in capsys.readouterr().err
    with AdminClient(broker.endpoint) as admin:
        assert admin.describe_configs("tuned") == [
            ("cleanup.policy", "compact,delete", False),
            ("retention.ms", "86400000", False),
        ]
    missing = ["--entity-type", "topics", "--entity-name", "nope"]
    assert main(["configs", *bs, *missing, "--describe"]) == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err
    assert main(["configs", *bs, *topic, "--alter"]) == 2
    assert "needs --add-config or --delete-config" in capsys.readouterr().err
    assert main(["configs", *bs, *topic, "--describe", "--add-config", "a=b"]) == 2


@pytest.mark.parametrize(("text", "parsed"), ASSIGNMENTS)
def test_add_config_syntax(text: str, parsed: dict[str, str] | str) -> None:
    from annal.configscmd import parse_assignments

    if isinstance(parsed, str):
        with pytest.raises(ValueError, match=parsed):
            parse_assignments(text)
    else:
        assert parse_assignments(text) == parsed


@pytest.mark.timeout(120)
def test_concurrent_alters_lose_no_change(broker: BrokerProcess) -> None:
    """Alters of different keys at once all land: each write is conditioned on the
    config znode's version, and a writer that lost the race applies its change again."""
    from concurrent.futures import ThreadPoolExecutor

    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("contended", partitions=1)

        keys = [
            "retention.ms",
            "segment.ms",
            "max.message.bytes",
            "min.insync.replicas",
            "delete.retention.ms",
            "segment.bytes",
            "flush.ms",
            "min.compaction.lag.ms",
        ]
        values = {
            "retention.ms": "86400001",
            "segment.ms": "86400002",
            "max.message.bytes": "100003",
            "min.insync.replicas": "1",
            "delete.retention.ms": "86400005",
            "segment.bytes": "1048582",
            "flush.ms": "86400007",
            "min.compaction.lag.ms": "8",
        }

        def set_one(key: str) -> None:
            with AdminClient(broker.endpoint) as own:
                own.alter_configs("contended", {key: values[key]})

        for _ in range(3):
            with ThreadPoolExecutor(len(keys)) as pool:
                list(pool.map(set_one, keys))
            shown = {name: value for name, value, _ in admin.describe_configs("contended")}
            assert shown == values
            admin.alter_configs("contended", delete=keys)
            assert admin.describe_configs("contended") == []
