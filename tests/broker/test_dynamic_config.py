"""Dynamic broker configs (KIP-226) without brokers: the precedence of the levels,
which settings may change and how a refusal reads, what DescribeConfigs shows
(sources, synonyms, read-only, sensitive), the order in which stored levels are
taken, the ZooKeeper layout, and a real ZooKeeper's notifications reaching the
config-change listener."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from annal.broker.config import BrokerConfig
from annal.broker.config_changes import ConfigChangeListener
from annal.broker.dynamic_config import (
    DYNAMIC,
    ConfigSource,
    DynamicBrokerConfig,
    DynamicConfigError,
    Synonym,
    apply_log_defaults,
    check_changes,
)
from annal.broker.dynamic_config_admin import APPEND, DELETE, SET, _check_operations
from annal.deploy.runner import wait_until
from annal.storage.config import LogConfig
from annal.zk import broker_configs
from annal.zk.client import StaleVersionError, ZkClient

pytestmark = pytest.mark.timeout(60)

DEFAULT, OWN = "<default>", "1"
S = ConfigSource


def static(**settings: str) -> BrokerConfig:
    props = {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/tmp/annal-unit"}
    return BrokerConfig.from_properties(
        {**props, **{k.replace("_", "."): v for k, v in settings.items()}}
    )


def retention_ms(config: BrokerConfig) -> int:
    return config.log_config().retention_ms


# -- precedence --------------------------------------------------------------------------


def test_per_broker_over_cluster_default_over_static_over_default() -> None:
    dynamic = DynamicBrokerConfig(static(log_retention_hours="2"))
    assert retention_ms(dynamic.current()) == 2 * 3600_000  # static
    dynamic.update(DEFAULT, {"log.retention.ms": "5000"}, 0)
    assert retention_ms(dynamic.current()) == 5000  # the cluster default over static hours
    dynamic.update(OWN, {"log.retention.ms": "7000"}, 0)
    assert retention_ms(dynamic.current()) == 7000  # this broker's own over the default
    dynamic.update(OWN, {}, 1)
    assert retention_ms(dynamic.current()) == 5000
    dynamic.update(DEFAULT, {}, 1)
    assert retention_ms(dynamic.current()) == 2 * 3600_000
    assert retention_ms(DynamicBrokerConfig(static()).current()) == 168 * 3600_000  # default


def test_unclean_and_min_isr_reach_the_config_fields_too() -> None:
    dynamic = DynamicBrokerConfig(static())
    dynamic.update(
        DEFAULT, {"unclean.leader.election.enable": "true", "min.insync.replicas": "2"}, 0
    )
    current = dynamic.current()
    assert current.unclean_leader_election_enable and current.min_insync_replicas == 2
    assert current.log_config().min_insync_replicas == 2
    assert not dynamic.static.unclean_leader_election_enable  # static unchanged


def test_another_brokers_level_and_older_reads_are_ignored() -> None:
    dynamic = DynamicBrokerConfig(static())
    seen: list[int] = []
    dynamic.add_listener(lambda old, new: seen.append(retention_ms(new)))
    dynamic.update("2", {"log.retention.ms": "1"}, 0)  # broker 2's: not ours
    assert not dynamic.concerns("2") and seen == []
    dynamic.update(DEFAULT, {"log.retention.ms": "3000"}, 4)
    dynamic.update(DEFAULT, {"log.retention.ms": "2000"}, 3)  # read before version 4: stale
    dynamic.update(DEFAULT, {"log.retention.ms": "3000"}, 4)  # the same again: no change
    assert seen == [3000]
    assert dynamic.level(DEFAULT) == {"log.retention.ms": "3000"}


def test_stored_entries_annal_cannot_apply_are_skipped_the_rest_taken() -> None:
    dynamic = DynamicBrokerConfig(static())
    dynamic.update(
        DEFAULT,
        {"log.retention.ms": "4000", "num.io.threads": "8", "log.segment.bytes": "tiny",
         "listener.name.x.ssl.keystore.password": "secret"},
        0,
    )  # fmt: skip
    assert dynamic.level(DEFAULT) == {"log.retention.ms": "4000"}
    assert retention_ms(dynamic.current()) == 4000


def test_load_reads_both_levels_and_survives_a_bad_znode() -> None:
    stored = {DEFAULT: ({"log.segment.bytes": "4096"}, 2), OWN: ({"log.roll.ms": "60000"}, 0)}

    def read(entity: str) -> tuple[dict[str, str], int]:
        if entity == "bad":
            raise broker_configs.BrokerConfigLayoutError("not JSON")
        config, version = stored[entity]
        return dict(config), version

    dynamic = DynamicBrokerConfig(static())
    dynamic.load(read)
    logs = dynamic.current().log_config()
    assert (logs.segment_bytes, logs.segment_ms) == (4096, 60000)
    dynamic.reload("bad", read)  # not a level of this broker: not even read


# -- what may change ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "said"),
    [
        ({"log.dirs": "/x"}, "Cannot update these configs dynamically: [log.dirs]"),
        ({"broker.id": "3", "listeners": "GRPC://:1"}, "dynamically: [broker.id, listeners]"),
        ({"num.io.threads": "8"}, "Cannot update these configs dynamically: [num.io.threads]"),
        ({"log.retention.hours": "1"}, "Cannot update these configs dynamically"),
        ({"auto.create.topics.enable": "false"}, "[auto.create.topics.enable]"),
        ({"frobnicate": "1"}, "unknown broker config 'frobnicate'"),
        ({"log.retention.mss": "1"}, "(did you mean 'log.retention.ms'?)"),
        ({"log.retention.ms": "1h"}, "invalid value log.retention.ms='1h': expected an integer"),
        ({"log.retention.ms": "-2"}, "log.retention.ms='-2': must be at least -1"),
        ({"log.segment.bytes": "3000000000"}, "'log.segment.bytes': an int32"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas='0': must be at least 1"),
        ({"compression.type": "brotli"}, "compression.type='brotli'"),
        ({"log.message.timestamp.type": "Now"}, "expected CreateTime or LogAppendTime"),
        ({"log.cleaner.min.cleanable.ratio": "2"}, "a ratio between 0 and 1"),
        ({"unclean.leader.election.enable": "yes"}, "expected true or false"),
    ],
)
def test_refusals_name_the_settings(props: Mapping[str, str], said: str) -> None:
    with pytest.raises(DynamicConfigError) as refused:
        check_changes(props)
    assert said in str(refused.value)


def test_kafkas_dynamic_settings_annal_has_no_use_for_are_kept_and_change_nothing() -> None:
    """librdkafka's 0081 sets sasl.kerberos.min.time.before.relogin on a broker: Kafka
    takes it at run time; annal (no Kerberos) keeps it and uses nothing of it."""
    check_changes({"sasl.kerberos.min.time.before.relogin": "58000"})
    dynamic = DynamicBrokerConfig(static())
    before = dynamic.current()
    dynamic.update(DEFAULT, {"sasl.kerberos.min.time.before.relogin": "58000"}, 0)
    assert dynamic.level(DEFAULT) == {"sasl.kerberos.min.time.before.relogin": "58000"}
    assert dynamic.current().log_config() == before.log_config()


def test_passwords_are_refused_without_showing_them() -> None:
    for name in ("sasl.jaas.config", "listener.name.sasl_ssl.ssl.keystore.password"):
        with pytest.raises(DynamicConfigError) as refused:
            check_changes({name: "hunter2"})
        assert f"[{name}]" in str(refused.value) and "hunter2" not in str(refused.value)


def test_every_dynamic_setting_takes_its_default_value_and_reaches_the_log_config() -> None:
    from annal.broker.config import SETTINGS

    for name in sorted(DYNAMIC):
        value = SETTINGS[name][1] or "1000"
        check_changes({name: value})
        dynamic = DynamicBrokerConfig(static())
        dynamic.update(DEFAULT, {name: value}, 0)
        assert dynamic.level(DEFAULT) == {name: value}


def test_check_judges_the_level_as_it_would_become() -> None:
    dynamic = DynamicBrokerConfig(static())
    dynamic.check(DEFAULT, {"log.retention.ms": "1000", "stale.name": "x"}, ["log.retention.ms"])
    with pytest.raises(DynamicConfigError, match="log.dirs"):
        dynamic.check(OWN, {"log.dirs": "/x"}, ["log.dirs"])


def test_incremental_operations_checked_as_kafka_checks_them() -> None:
    refusal = _check_operations(
        [("log.retention.ms", SET, "1"), ("log.retention.ms", DELETE, None)]
    )
    assert refusal is not None
    assert refusal.message == "Error due to duplicate config keys : log.retention.ms"
    refusal = _check_operations([("log.retention.ms", SET, None)])
    assert (
        refusal is not None
        and refusal.message == "Null value not supported for : SET:log.retention.ms"
    )
    refusal = _check_operations([("log.segment.bytes", APPEND, "1")])
    assert refusal is not None and "append is not allowed for config key: log.segment.bytes" in (
        refusal.message
    )
    assert _check_operations([("log.cleanup.policy", APPEND, "compact")]) is None
    assert _check_operations([("log.retention.ms", DELETE, None)]) is None


# -- DescribeConfigs -----------------------------------------------------------------------


def test_describe_shows_sources_synonyms_and_read_only() -> None:
    dynamic = DynamicBrokerConfig(static(log_retention_hours="5", sasl_jaas_config="secret line"))
    dynamic.update(DEFAULT, {"log.retention.ms": "5000", "log.segment.bytes": "2048"}, 0)
    dynamic.update(OWN, {"log.retention.ms": "7000"}, 0)
    found = {d.name: d for d in dynamic.describe(per_broker=True)}
    retention = found["log.retention.ms"]
    assert (retention.value, retention.source, retention.read_only) == (
        "7000",
        S.DYNAMIC_BROKER_CONFIG,
        False,
    )
    assert retention.synonyms == (
        Synonym("log.retention.ms", "7000", S.DYNAMIC_BROKER_CONFIG),
        Synonym("log.retention.ms", "5000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        Synonym("log.retention.hours", "5", S.STATIC_BROKER_CONFIG),
        Synonym("log.retention.hours", "168", S.DEFAULT_CONFIG),
    )
    hours = found["log.retention.hours"]  # a lower synonym: its own value and source
    assert (hours.value, hours.source, hours.read_only) == ("5", S.STATIC_BROKER_CONFIG, True)
    assert hours.synonyms[0] == Synonym("log.retention.hours", "5", S.STATIC_BROKER_CONFIG)
    assert found["log.segment.bytes"].source is S.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert found["log.cleanup.policy"].source is S.DEFAULT_CONFIG
    assert found["log.dirs"].read_only and found["log.dirs"].source is S.STATIC_BROKER_CONFIG
    assert found["log.roll.ms"].value is None  # no value at any level (log.roll.hours rules)
    jaas = found["sasl.jaas.config"]
    assert jaas.sensitive and jaas.value is None and all(s.value is None for s in jaas.synonyms)

    default = {d.name: d for d in dynamic.describe(per_broker=False)}
    assert sorted(default) == ["log.retention.ms", "log.segment.bytes"]
    assert default["log.retention.ms"].synonyms == (
        Synonym("log.retention.ms", "5000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )


def test_unset_advertised_listeners_are_described_as_served() -> None:
    """Listeners of port 0: a tool that reads advertised.listeners (annal's CLI finding
    a broker's gRPC listener through its Kafka one) sees the ports bound, never 0."""
    dynamic = DynamicBrokerConfig(
        static(listeners="GRPC://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    )
    served = "GRPC://127.0.0.1:40001,PLAINTEXT://127.0.0.1:40003"
    dynamic.served["advertised.listeners"] = served
    found = {d.name: d for d in dynamic.describe(per_broker=True)}
    assert (found["advertised.listeners"].value, found["advertised.listeners"].source) == (
        served,
        S.DEFAULT_CONFIG,
    )
    assert found["listeners"].value == "GRPC://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"
    assert "advertised.listeners" not in {d.name for d in dynamic.describe(per_broker=False)}
    # set at start-up, it is described as set
    kept = DynamicBrokerConfig(static(advertised_listeners="GRPC://b1:9092"))
    kept.served["advertised.listeners"] = served
    described = {d.name: d for d in kept.describe(per_broker=True)}["advertised.listeners"]
    assert (described.value, described.source) == ("GRPC://b1:9092", S.STATIC_BROKER_CONFIG)


def test_a_topic_configs_default_source_is_its_broker_synonyms_level() -> None:
    dynamic = DynamicBrokerConfig(static(log_segment_bytes="4096"))
    assert dynamic.topic_default_source("segment.bytes") is S.STATIC_BROKER_CONFIG
    assert dynamic.topic_default_source("retention.ms") is S.DEFAULT_CONFIG
    dynamic.update(DEFAULT, {"log.retention.ms": "1"}, 0)
    assert dynamic.topic_default_source("retention.ms") is S.DYNAMIC_DEFAULT_BROKER_CONFIG
    dynamic.update(OWN, {"log.retention.ms": "2"}, 0)
    assert dynamic.topic_default_source("retention.ms") is S.DYNAMIC_BROKER_CONFIG
    assert dynamic.topic_default_source("message.format.version") is S.DEFAULT_CONFIG


# -- applying ------------------------------------------------------------------------------


class FakeLogs:
    def __init__(self) -> None:
        from annal.topic_partition import TopicPartition

        self.default_config = LogConfig()
        self.logs = {
            TopicPartition("a", 0): None,
            TopicPartition("a", 1): None,
            TopicPartition("b", 0): None,
        }

    def all_logs(self) -> dict[object, None]:
        return dict(self.logs)


def test_apply_log_defaults_reconfigures_every_topic_through_its_overrides() -> None:
    logs = FakeLogs()
    applied: list[tuple[str, dict[str, str]]] = []
    asked: list[list[str]] = []

    def topic_configs(topics: list[str]) -> dict[str, dict[str, str]]:
        asked.append(topics)
        return {"b": {"retention.ms": "9"}}

    new = LogConfig(retention_ms=1000)
    apply_log_defaults(logs, new, topic_configs, lambda t, o: applied.append((t, dict(o))))  # type: ignore[arg-type]
    assert logs.default_config == new
    assert asked == [["a", "b"]]  # one batched read
    assert applied == [("a", {}), ("b", {"retention.ms": "9"})]


# -- ZooKeeper -----------------------------------------------------------------------------


def test_layout_is_kafkas() -> None:
    assert broker_configs.broker_config_path("<default>") == "/config/brokers/<default>"
    assert broker_configs.broker_config_path("3") == "/config/brokers/3"
    assert broker_configs.broker_entity_path("3") == "brokers/3"
    assert broker_configs.entity_name(None) == "<default>" and broker_configs.entity_name(4) == "4"
    assert broker_configs.entity_of_change("brokers/<default>") == "<default>"
    assert broker_configs.entity_of_change("brokers/12") == "12"
    for other in ("topics/brokers", "brokers/", "brokers/x", "brokers", "users/1"):
        assert broker_configs.entity_of_change(other) is None
    raw = broker_configs.encode_broker_config({"b": "2", "a": "1"})
    assert raw == b'{"version":1,"config":{"a":"1","b":"2"}}'
    assert broker_configs.decode_broker_config("1", raw) == {"a": "1", "b": "2"}
    assert broker_configs.decode_broker_config("1", b'{"version":1,"config":{"n":5}}') == {"n": "5"}
    assert broker_configs.decode_broker_config("1", None) == {}
    for bad in (b"[1]", b"{", b'{"config":[]}'):
        with pytest.raises(broker_configs.BrokerConfigLayoutError):
            broker_configs.decode_broker_config("1", bad)
    for bad_entity in ("../x", "-1", "", "default"):
        with pytest.raises(broker_configs.BrokerConfigLayoutError):
            broker_configs.broker_config_path(bad_entity)


def test_znodes_versions_and_notifications_reach_the_listener(zk_connect: str) -> None:
    changed: list[str] = []
    with ZkClient(zk_connect) as writer, ZkClient(zk_connect) as zk:
        writer.ensure_persistent_paths()
        assert writer.get_broker_config_versioned("1") == ({}, -1)
        listener = ConfigChangeListener(zk, None, None, broker_changed=changed.append)
        listener.start()
        try:
            assert writer.set_broker_config("<default>", {"log.retention.ms": "1"}, -1) == 0
            assert writer.set_broker_config("1", {"log.segment.bytes": "2048"}, -1) == 0
            with pytest.raises(StaleVersionError):
                writer.set_broker_config("1", {}, -1)  # created meanwhile
            assert writer.set_broker_config("1", {}, 0) == 1
            with pytest.raises(StaleVersionError):
                writer.set_broker_config("1", {"x": "y"}, 0)
            wait_until(lambda: len(changed) == 3, 10, "three notifications")
            assert changed == ["<default>", "1", "1"]
            assert writer.get_broker_config_versioned("1") == ({}, 1)
            assert writer.get("/config/brokers/1") == (b'{"version":1,"config":{}}', 1)
        finally:
            listener.stop()
