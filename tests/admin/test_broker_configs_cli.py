"""``annal configs --entity-type brokers`` (kafka-configs.sh's flags) against two real
brokers: a broker's own dynamic settings (--entity-name) and the cluster default
(--entity-default) set, shown as kafka-configs.sh shows them (with synonyms; --all,
--json, every broker without a name) and deleted; refusals and misuse are clear
errors."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from annal.deploy.runner import BrokerProcess
from annal.zk.client import ZkClient
from runcli import annal

pytestmark = pytest.mark.timeout(180)


def configs(broker: BrokerProcess, *args: str) -> tuple[int, str, str]:
    done = annal(
        "configs", "--bootstrap-server", broker.endpoint, "--entity-type", "brokers", *args
    )
    return done.returncode, done.stdout, done.stderr


def test_set_show_and_delete_broker_and_default_settings(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    one = broker_factory(1, {"log.retention.hours": "100"})
    two = broker_factory(2)
    code, out, err = configs(
        one, "--entity-name", "1", "--alter", "--add-config", "log.retention.ms=1000"
    )
    assert (code, out, err) == (0, "Completed updating config for broker 1.\n", "")
    code, out, err = configs(
        two, "--entity-default", "--alter",
        "--add-config", "log.segment.bytes=2048,log.cleanup.policy=[compact,delete]",
    )  # fmt: skip
    assert (code, out) == (0, "Completed updating default config for brokers in the cluster.\n")
    with ZkClient(one.zookeeper_connect) as zk:
        assert zk.get_broker_config("1") == {"log.retention.ms": "1000"}
        assert zk.get_broker_config("<default>") == {
            "log.cleanup.policy": "compact,delete",
            "log.segment.bytes": "2048",
        }

    # sent through broker 2, answered by broker 1 (the request goes to the broker named)
    code, out, _ = configs(two, "--entity-name", "1", "--describe")
    assert code == 0
    assert out.splitlines() == [
        "Dynamic configs for broker 1 are:",
        "  log.retention.ms=1000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.retention.ms=1000, STATIC_BROKER_CONFIG:log.retention.hours=100, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
    ]
    code, out, _ = configs(one, "--entity-default", "--describe")
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleanup.policy=compact,delete}",
        "  log.segment.bytes=2048 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=2048}",
    ]
    # kafka-configs.sh's shorthands
    shorthand = annal("configs", "--bootstrap-server", one.endpoint, "--broker", "1", "--describe")
    assert shorthand.returncode == 0 and "log.retention.ms=1000 " in shorthand.stdout
    shorthand = annal(
        "configs", "--bootstrap-server", one.endpoint, "--broker-defaults", "--describe"
    )
    assert shorthand.stdout.startswith("Default configs for brokers in the cluster are:")
    # every broker, when none is named; broker 2 has no setting of its own
    code, out, _ = configs(one, "--describe")
    assert "Dynamic configs for broker 1 are:" in out
    assert "Dynamic configs for broker 2 are:\n" in out
    # --all: every setting, with the cluster default's applied on broker 2
    code, out, _ = configs(one, "--entity-name", "2", "--describe", "--all", "--json")
    shown = {c["name"]: c for c in json.loads(out)["configs"]}
    assert shown["log.segment.bytes"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert shown["log.segment.bytes"]["value"] == "2048"
    assert shown["log.dirs"]["read_only"] and shown["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    assert not shown["log.retention.ms"]["read_only"]

    code, out, _ = configs(
        one, "--entity-name", "1", "--alter", "--delete-config", "log.retention.ms"
    )
    assert code == 0
    code, out, _ = configs(one, "--entity-name", "1", "--describe")
    assert out == "Dynamic configs for broker 1 are:\n"

    # a Kafka listener works as --bootstrap-server too
    done = annal(
        "configs", "--bootstrap-server", one.kafka_endpoint, "--entity-type", "brokers",
        "--entity-default", "--describe",
    )  # fmt: skip
    assert done.returncode == 0 and "log.segment.bytes=2048" in done.stdout


def test_refusals_and_misuse_are_clear_errors(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    one = broker_factory(1)
    code, out, err = configs(
        one, "--entity-name", "1", "--alter", "--add-config", "log.dirs=/elsewhere"
    )
    assert code == 1 and out == ""
    assert "INVALID_REQUEST" in err
    assert "Cannot update these configs dynamically: [log.dirs]" in err
    code, _, err = configs(
        one, "--entity-default", "--alter", "--add-config", "log.retention.ms=soon"
    )
    assert code == 1 and "log.retention.ms='soon': expected an integer" in err
    code, _, err = configs(one, "--entity-name", "7", "--describe")
    assert code == 1 and "no broker 7 in the cluster (brokers: [1])" in err
    with ZkClient(one.zookeeper_connect) as zk:
        assert zk.get_broker_config("1") == {} and zk.get_broker_config("<default>") == {}

    for args, said in [
        (["--entity-name", "one", "--describe"], "must be a valid integer broker id"),
        (["--entity-name", "1", "--entity-default", "--describe"], "not both"),
        (["--alter", "--add-config", "log.retention.ms=1"], "--entity-name ID or --entity-default"),
        (["--entity-name", "1", "--alter"], "--add-config or --delete-config"),
        (["--entity-default", "--describe", "--all"], "--all goes with --entity-name"),
    ]:
        code, _, err = configs(one, *args)
        assert code == 2, args
        assert said in err, (args, err)
    done = annal("configs", "--bootstrap-server", one.endpoint, "--entity-default", "--describe")
    assert (
        done.returncode == 2 and "--entity-default goes with --entity-type brokers" in done.stderr
    )
