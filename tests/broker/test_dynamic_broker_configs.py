"""Dynamic broker configs (KIP-226) against two real brokers, judged by Kafka's own
clients (kafka-python's KafkaAdminClient, confluent-kafka's AdminClient):

* a cluster default and a per-broker value land in ZooKeeper as Kafka keeps them
  (``/config/brokers/<default>`` and ``/config/brokers/1``, notifications naming
  ``brokers/<default>`` and ``brokers/1``), and DescribeConfigs shows each broker's
  value with its source and synonyms (the other broker follows the notification);
* a topic without overrides takes a dynamic ``log.segment.bytes`` and
  ``log.retention.ms`` live: its segments roll at the new size and retention
  deletes them, without a restart; its own DescribeConfigs names the source;
* a per-broker value outlives the broker's restart (read from ZooKeeper);
* static, unknown, password and malformed settings are refused with the setting
  named, nothing is written; validate_only writes nothing; another broker's id is
  refused as Kafka refuses it; APPEND works on list settings only;
* with an ACL authorizer, DescribeConfigs and AlterConfigs of a broker need
  DescribeConfigs / AlterConfigs on the cluster."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.kafkaproto.client import KafkaConnection
from annal.producer.producer import Producer
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.security.scram import make_credential
from annal.zk.client import ZkClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from annal import errors

pytestmark = pytest.mark.timeout(240)

BROKER = ConfigResourceType.BROKER
SET, DELETE, APPEND = 0, 1, 2
NONE = errors.NONE.number
INVALID_REQUEST = errors.INVALID_REQUEST.number
CLUSTER_DENIED = errors.CLUSTER_AUTHORIZATION_FAILED.number

STATIC = {
    "log.retention.hours": "168",  # named in server.properties: STATIC_BROKER_CONFIG
    "log.retention.check.interval.ms": "300",
    "log.segment.delete.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
}


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i, STATIC) for i in (1, 2)]


@pytest.fixture
def kafka_admin(cluster: list[BrokerProcess]) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(
        bootstrap_servers=[b.kafka_endpoint for b in cluster], request_timeout_ms=30_000
    )
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture(autouse=True)
def no_dynamic_configs(cluster: list[BrokerProcess]) -> Iterator[None]:
    """Each test starts and ends with no dynamic broker config anywhere."""
    yield
    with ZkClient(cluster[0].zookeeper_connect) as zk:
        for entity in ("<default>", "1", "2"):
            stored, version = zk.get_broker_config_versioned(entity)
            if stored:
                zk.set_broker_config(entity, {}, version)
    for broker in cluster:
        wait_until(
            lambda b=broker: not dynamic_entries(b, str(b.broker_id)),
            30,
            f"broker {broker.broker_id} back on its static settings",
        )


def describe(broker: BrokerProcess, name: str, synonyms: bool = True) -> dict[str, Any]:
    """DescribeConfigs v3 of BROKER resource ``name`` sent to ``broker``: the result."""
    connection = KafkaConnection(broker.kafka_endpoint, 30)
    try:
        return connection.exchange(32, 3, {
            "resources": [{"resource_type": 4, "resource_name": name,
                           "configuration_keys": None}],
            "include_synonyms": synonyms, "include_documentation": False,
        }).results[0]  # fmt: skip
    finally:
        connection.close()


def dynamic_entries(broker: BrokerProcess, name: str) -> dict[str, tuple[str | None, int]]:
    """name → (value, source) of the settings of ``broker`` from a dynamic level."""
    found = describe(broker, name, synonyms=False)
    assert found.error_code == NONE, found.error_message
    return {c.name: (c.value, c.config_source) for c in found.configs if c.config_source in (2, 3)}


def incremental(
    broker: BrokerProcess, name: str, configs: list[tuple[str, int, str | None]], only: bool = False
) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v1 of BROKER resource ``name`` sent to ``broker``."""
    connection = KafkaConnection(broker.kafka_endpoint, 30)
    try:
        answer = connection.exchange(44, 1, {
            "resources": [{"resource_type": 4, "resource_name": name, "configs": [
                {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
            "validate_only": only,
        }).responses[0]  # fmt: skip
        return int(answer.error_code), answer.error_message
    finally:
        connection.close()


def config_changes(zk: ZkClient) -> list[str]:
    return [entity for _, entity in zk.config_changes(-1)]


# -- levels, sources and synonyms --------------------------------------------------------


def test_a_cluster_default_and_a_per_broker_value_with_their_sources(
    cluster: list[BrokerProcess], kafka_admin: KafkaAdminClient
) -> None:
    one, two = cluster
    # the cluster default is the resource named "" (Kafka's Java admin and
    # kafka-configs.sh --entity-default send it; librdkafka and kafka-python
    # cannot name it): sent as they would send it
    assert incremental(one, "", [("log.retention.ms", SET, "3600000")]) == (NONE, None)
    answer = kafka_admin.alter_configs(
        [ConfigResource(BROKER, "1", {"log.retention.ms": "7200000"})]
    )
    assert answer == {"broker": {"1": "OK"}}

    # deleting the per-broker value falls back to the cluster default
    assert incremental(one, "1", [("log.retention.ms", DELETE, None)]) == (NONE, None)
    assert dynamic_entries(one, "1")["log.retention.ms"] == ("3600000", 3)
    assert kafka_admin.alter_configs(
        [ConfigResource(BROKER, "1", {"log.retention.ms": "7200000"})]
    ) == {"broker": {"1": "OK"}}

    with ZkClient(one.zookeeper_connect) as zk:
        assert zk.get_broker_config("<default>") == {"log.retention.ms": "3600000"}
        assert zk.get_broker_config("1") == {"log.retention.ms": "7200000"}
        assert zk.get_broker_config("2") == {}
        raw = zk.get("/config/brokers/1")
        assert raw is not None
        assert json.loads(raw[0]) == {"version": 1, "config": {"log.retention.ms": "7200000"}}
        assert {"brokers/<default>", "brokers/1"} <= set(config_changes(zk))

    # broker 1: its own value first, then the cluster default, the static hours, the default
    found = kafka_admin.describe_configs(
        [ConfigResource(BROKER, "1", ["log.retention.ms", "log.dirs"])], include_synonyms=True
    )["broker"]["1"]
    retention = found["log.retention.ms"]
    assert retention["value"] == "7200000"
    assert retention["config_source"] == "DYNAMIC_BROKER_CONFIG"
    assert not retention["read_only"]
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("log.retention.ms", "7200000", "DYNAMIC_BROKER_CONFIG"),
        ("log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.retention.hours", "168", "STATIC_BROKER_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]
    assert kafka_admin.describe_configs(
        [ConfigResource(BROKER, "1", ["log.dirs"])], config_filter="all"
    )["broker"]["1"]["log.dirs"]["read_only"]

    # broker 2 follows the notification: the cluster default applies there
    wait_until(
        lambda: dynamic_entries(two, "2").get("log.retention.ms") == ("3600000", 3),
        30,
        "broker 2 on the cluster default",
    )
    # the default resource lists the cluster-wide dynamic settings only
    assert dynamic_entries(two, "") == {"log.retention.ms": ("3600000", 3)}
    assert len(describe(two, "").configs) == 1
    # confluent-kafka (librdkafka) sees broker 1's sources too
    confluent = ck_admin.AdminClient({"bootstrap.servers": one.kafka_endpoint})
    resource = ck_admin.ConfigResource("BROKER", "1")
    entries = confluent.describe_configs([resource])[resource].result(30)
    assert entries["log.retention.ms"].value == "7200000"
    assert entries["log.retention.ms"].source == ck_admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert entries["log.retention.hours"].source == ck_admin.ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["log.dirs"].is_read_only and not entries["log.retention.ms"].is_read_only


def test_a_topic_without_overrides_takes_dynamic_segment_and_retention_live(
    cluster: list[BrokerProcess], kafka_admin: KafkaAdminClient
) -> None:
    one = cluster[0]
    with AdminClient(one.endpoint) as admin:
        admin.create_topic("live", assignment={0: [1]})
    segments_dir = one.log_dir / "live-0"

    def produce(count: int) -> None:  # one batch of 10 records (> 2 KiB) at a time
        with Producer(one.endpoint, acks="1") as producer:
            for i in range(count):
                producer.send("live", b"x" * 200, key=str(i).encode(), partition=0)
                if i % 10 == 9:
                    producer.flush()

    produce(40)
    assert len(list(segments_dir.glob("*.log"))) == 1  # 1 GiB segments: one
    assert incremental(one, "", [("log.segment.bytes", SET, "2048")]) == (NONE, None)
    produce(40)
    assert len(list(segments_dir.glob("*.log"))) > 3  # rolled at 2 KiB, no restart

    def segment_bytes() -> tuple[str, str]:  # either broker may answer; both follow
        topic = kafka_admin.describe_configs(
            [ConfigResource("TOPIC", "live", ["segment.bytes"])], config_filter="all"
        )
        found = topic["topic"]["live"]["segment.bytes"]
        return found["value"], found["config_source"]

    wait_until(
        lambda: segment_bytes() == ("2048", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        30,
        "the topic's segment.bytes from the cluster default",
    )

    consumer = KafkaConsumer(bootstrap_servers=one.kafka_endpoint)
    try:
        tp = KafkaTopicPartition("live", 0)
        assert consumer.beginning_offsets([tp])[tp] == 0
        assert incremental(one, "", [("log.retention.ms", SET, "1000")]) == (NONE, None)
        wait_until(
            lambda: consumer.beginning_offsets([tp])[tp] > 40,
            30,
            "retention deleting old segments",
        )
    finally:
        consumer.close()


def test_a_per_broker_value_outlives_a_restart(
    cluster: list[BrokerProcess], kafka_admin: KafkaAdminClient
) -> None:
    two = cluster[1]
    assert incremental(two, "2", [("message.max.bytes", SET, "500000")]) == (NONE, None)
    assert dynamic_entries(two, "2") == {"message.max.bytes": ("500000", 2)}
    two.stop()
    two.start()
    with ZkClient(two.zookeeper_connect) as zk:
        wait_until(lambda: zk.get_broker(2) is not None, 60, "broker 2 registered again")
    wait_until(lambda: metadata_lists(two.endpoint, [1, 2]), 60, "broker 2 serving")
    assert dynamic_entries(two, "2") == {"message.max.bytes": ("500000", 2)}
    assert "dynamic configs of brokers/2 now {'message.max.bytes': '500000'}" in (
        two.log_path.read_text()
    )


# -- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("log.dirs", "/elsewhere", "Cannot update these configs dynamically: [log.dirs]"),
        ("num.io.threads", "16", "Cannot update these configs dynamically: [num.io.threads]"),
        ("log.retention.hours", "1", "Cannot update these configs dynamically"),
        ("no.such.setting", "1", "unknown broker config 'no.such.setting'"),
        ("log.retention.msec", "1", "did you mean 'log.retention.ms'?"),
        ("log.retention.ms", "soon", "log.retention.ms='soon': expected an integer"),
        ("log.segment.bytes", "10", "log.segment.bytes='10': must be at least 14"),
        ("log.cleanup.policy", "keep", "log.cleanup.policy='keep'"),
        ("sasl.jaas.config", "a-secret-line", "[sasl.jaas.config]"),
    ],
)
def test_a_setting_annal_cannot_change_live_is_refused_and_nothing_written(
    cluster: list[BrokerProcess], setting: str, value: str, said: str
) -> None:
    one = cluster[0]
    for name in ("1", ""):
        error, message = incremental(one, name, [(setting, SET, value)])
        assert error == INVALID_REQUEST
        assert message is not None and said in message
        assert "a-secret-line" not in message
    confluent = ck_admin.AdminClient({"bootstrap.servers": one.kafka_endpoint})
    entry = ck_admin.ConfigEntry(
        setting, value, incremental_operation=ck_admin.AlterConfigOpType.SET
    )
    resource = ck_admin.ConfigResource("BROKER", "1", incremental_configs=[entry])
    with pytest.raises(ck.KafkaException) as refused:
        confluent.incremental_alter_configs([resource])[resource].result(30)
    assert refused.value.args[0].code() == ck.KafkaError.INVALID_REQUEST
    with ZkClient(one.zookeeper_connect) as zk:
        assert zk.get_broker_config("1") == {} and zk.get_broker_config("<default>") == {}
    assert "a-secret-line" not in one.log_path.read_text()


def test_validate_only_other_brokers_and_list_operations(cluster: list[BrokerProcess]) -> None:
    one = cluster[0]
    with ZkClient(one.zookeeper_connect) as zk:
        before = len(config_changes(zk))
        assert incremental(one, "1", [("log.retention.ms", SET, "1000")], only=True) == (NONE, None)
        assert zk.get_broker_config("1") == {} and len(config_changes(zk)) == before
    # a broker answers for its own id (and ""): Kafka's clients route a broker's resource
    error, message = incremental(one, "2", [("log.retention.ms", SET, "1000")])
    assert error == INVALID_REQUEST
    assert message is not None and "Unexpected broker id, expected 1, but received 2" in message
    found = describe(one, "2")
    assert found.error_code == INVALID_REQUEST
    assert "expected 1 or empty string, but received 2" in (found.error_message or "")
    assert incremental(one, "one", [])[0] == INVALID_REQUEST
    # APPEND and SUBTRACT on a list setting, on top of its static/default value
    assert incremental(one, "1", [("log.cleanup.policy", APPEND, "compact")]) == (NONE, None)
    assert dynamic_entries(one, "1")["log.cleanup.policy"] == ("delete,compact", 2)
    error, message = incremental(one, "1", [("log.retention.ms", APPEND, "5")])
    assert error == INVALID_REQUEST
    assert "Config value append is not allowed for config key: log.retention.ms" in (message or "")
    error, message = incremental(
        one, "1", [("log.retention.ms", SET, "5"), ("log.retention.ms", DELETE, None)]
    )
    assert (error, message) == (
        INVALID_REQUEST,
        "Error due to duplicate config keys : log.retention.ms",
    )


# -- authorization ----------------------------------------------------------------------


def test_broker_configs_need_describe_configs_and_alter_configs_on_the_cluster(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        1,
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
        },
        extra_listeners="SASL_PLAINTEXT://127.0.0.1:0",
    )
    port = broker.listener_port("SASL_PLAINTEXT")
    with ZkClient(broker.zookeeper_connect) as zk:
        zk.upsert_scram_credential("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "pw"))

    def alice() -> KafkaConnection:
        connection = KafkaConnection(f"127.0.0.1:{port}", 30)
        assert connection.exchange(17, 1, {"mechanism": "PLAIN"}).error_code == NONE
        assert connection.exchange(36, 0, {"auth_bytes": b"\0alice\0pw"}).error_code == NONE
        return connection

    def as_alice() -> tuple[int, int]:
        connection = alice()
        try:
            described = connection.exchange(32, 3, {
                "resources": [{"resource_type": 4, "resource_name": "1",
                               "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False,
            }).results[0]  # fmt: skip
            altered = connection.exchange(44, 1, {
                "resources": [{"resource_type": 4, "resource_name": "", "configs": [
                    {"name": "log.retention.ms", "config_operation": 0, "value": "60000"}]}],
                "validate_only": False,
            }).responses[0]  # fmt: skip
            return int(described.error_code), int(altered.error_code)
        finally:
            connection.close()

    def allow(operation: AclOperation) -> AclBinding:
        return AclBinding(
            ResourcePattern.literal(ResourceType.CLUSTER, "kafka-cluster"),
            AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW),
        )

    assert as_alice() == (CLUSTER_DENIED, CLUSTER_DENIED)
    with ZkClient(broker.zookeeper_connect) as zk:
        assert zk.get_broker_config("<default>") == {}
    with AdminClient(broker.endpoint) as admin:
        admin.create_acls([allow(AclOperation.DESCRIBE_CONFIGS)])
    assert as_alice() == (NONE, CLUSTER_DENIED)
    with AdminClient(broker.endpoint) as admin:
        admin.create_acls([allow(AclOperation.ALTER_CONFIGS)])
    assert as_alice() == (NONE, NONE)
    with ZkClient(broker.zookeeper_connect) as zk:
        assert zk.get_broker_config("<default>") == {"log.retention.ms": "60000"}


# -- unclean.leader.election.enable reaches the controller ------------------------------


def test_a_dynamic_unclean_leader_election_reaches_the_controller(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    settings = {"replica.lag.time.max.ms": "2000", "controlled.shutdown.enable": "false"}
    one, two, three = (broker_factory(i, settings) for i in (1, 2, 3))  # 1: the controller
    with AdminClient(one.endpoint) as admin:
        admin.create_topic("unclean", assignment={0: [2, 3]})
    with ZkClient(one.zookeeper_connect) as zk:

        def state() -> tuple[int, list[int]]:
            found = zk.get_partition_state("unclean", 0)
            return (-2, []) if found is None else (found[0].leader, sorted(found[0].isr))

        wait_until(lambda: state() == (2, [2, 3]), 30, "leader 2 with 3 in sync")
        three.freeze()  # out of the ISR, still registered
        try:
            wait_until(lambda: state() == (2, [2]), 30, "3 out of the ISR")
            assert incremental(one, "", [("unclean.leader.election.enable", SET, "true")]) == (
                NONE,
                None,
            )
            two.stop()  # the last in-sync replica: only an unclean election elects 3
            wait_until(lambda: state()[0] == 3, 30, "3 elected uncleanly")
        finally:
            three.thaw()
    assert "unclean election of unclean-0" in one.log_path.read_text()
