"""Kafka's admin clients (confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient) against three real brokers through the Kafka listener: topics,
partitions, configs (legacy and incremental), records, elections, reassignments
and the cluster's description — checked through annal's own admin client."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient, AdminError
from annal.deploy.runner import BrokerProcess, wait_until
from annal.storage.batch import iter_batches
from confluent_kafka import admin as ck_admin
from kafka import TopicPartition
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.timeout(240)

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i) for i in (1, 2, 3)]


def bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.kafka_endpoint for b in cluster)


def partitions_of(cluster: list[BrokerProcess], topic: str) -> int:
    with AdminClient(cluster[0].endpoint) as admin:
        try:
            found = [t for t in admin.describe_topics([topic]) if t.name == topic]
        except AdminError:
            return 0  # unknown topic
        return len(found[0].partitions) if found else 0


def replicas_of(cluster: list[BrokerProcess], topic: str) -> list[int]:
    with AdminClient(cluster[0].endpoint) as admin:
        return list(admin.describe_topics([topic])[0].partitions[0].replicas)


def overrides_of(cluster: list[BrokerProcess], topic: str) -> dict[str, str]:
    with AdminClient(cluster[0].endpoint) as admin:
        return {name: value for name, value, _ in admin.describe_configs(topic)}


def test_confluent_admin_topics_configs_and_records(cluster: list[BrokerProcess]) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap(cluster)})
    topic = f"ck-admin-{next(_names)}"
    futures = admin.create_topics(
        [ck_admin.NewTopic(topic, 3, 3, config={"retention.ms": "3600000"})]
    )
    futures[topic].result(60)
    assert partitions_of(cluster, topic) == 3
    assert overrides_of(cluster, topic) == {"retention.ms": "3600000"}
    metadata = admin.list_topics(timeout=30)
    assert topic in metadata.topics and len(metadata.topics[topic].partitions) == 3
    assert sorted(metadata.brokers) == [1, 2, 3]

    admin.create_partitions([ck_admin.NewPartitions(topic, 5)])[topic].result(60)
    wait_until(lambda: partitions_of(cluster, topic) == 5, 30, "5 partitions")

    resource = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "delete" and described["cleanup.policy"].is_default

    incremental = ck_admin.ConfigResource(
        ck_admin.ResourceType.TOPIC, topic,
        incremental_configs=[
            ck_admin.ConfigEntry("segment.ms", "600000",
                                 incremental_operation=ck_admin.AlterConfigOpType.SET),
            ck_admin.ConfigEntry("retention.ms", None,
                                 incremental_operation=ck_admin.AlterConfigOpType.DELETE),
        ],
    )  # fmt: skip
    admin.incremental_alter_configs([incremental])[incremental].result(30)
    assert overrides_of(cluster, topic) == {"segment.ms": "600000"}
    # the legacy AlterConfigs replaces a topic's overrides as a whole
    legacy = ck_admin.ConfigResource(
        ck_admin.ResourceType.TOPIC, topic, set_config={"retention.bytes": "1048576"}
    )
    with pytest.warns(DeprecationWarning):
        admin.alter_configs([legacy])[legacy].result(30)
    assert overrides_of(cluster, topic) == {"retention.bytes": "1048576"}

    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster)})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    deleted = admin.delete_records([ck.TopicPartition(topic, 0, 4)])
    assert next(iter(deleted.values())).result(30).low_watermark == 4
    consumer = ck.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "unused"})
    assert consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), 10) == (4, 10)
    consumer.close()

    described_cluster = admin.describe_cluster().result(30)
    assert sorted(n.id for n in described_cluster.nodes) == [1, 2, 3]
    assert described_cluster.controller.id in (1, 2, 3)

    admin.delete_topics([topic])[topic].result(60)
    wait_until(lambda: partitions_of(cluster, topic) == 0, 60, "the topic gone")


def test_kafka_python_admin_topics_configs_and_partitions(cluster: list[BrokerProcess]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    topic = f"kp-admin-{next(_names)}"
    try:
        admin.create_topics([NewTopic(topic, 2, 3, topic_configs={"cleanup.policy": "compact"})])
        assert partitions_of(cluster, topic) == 2
        # the broker asked may learn of the topic from the controller a moment later
        wait_until(lambda: topic in admin.list_topics(), 30, "the topic listed")
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        described = admin.describe_configs([resource], config_filter="All")["topic"][topic]
        assert described["cleanup.policy"]["value"] == "compact"
        assert described["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert described["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
        # IncrementalAlterConfigs (kafka-python's default) sets what it names
        change = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "60000"})
        admin.alter_configs([change])
        assert overrides_of(cluster, topic) == {"cleanup.policy": "compact", "segment.ms": "60000"}
        admin.create_partitions({topic: NewPartitions(4)})
        wait_until(lambda: partitions_of(cluster, topic) == 4, 30, "4 partitions")
        admin.delete_topics([topic])
        wait_until(lambda: partitions_of(cluster, topic) == 0, 60, "the topic gone")
    finally:
        admin.close()


def test_creating_a_topic_twice_and_bad_configs_are_refused(cluster: list[BrokerProcess]) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap(cluster)})
    topic = f"ck-twice-{next(_names)}"
    admin.create_topics([ck_admin.NewTopic(topic, 1, 1)])[topic].result(60)
    with pytest.raises(ck.KafkaException) as twice:
        admin.create_topics([ck_admin.NewTopic(topic, 1, 1)])[topic].result(60)
    assert twice.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    bad = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, topic, set_config={"x.y": "1"})
    with pytest.raises(ck.KafkaException), pytest.warns(DeprecationWarning):
        admin.alter_configs([bad])[bad].result(30)
    assert overrides_of(cluster, topic) == {}


def test_reassignment_listing_and_preferred_election(cluster: list[BrokerProcess]) -> None:
    topic = f"kp-move-{next(_names)}"
    with AdminClient(cluster[0].endpoint) as annal_admin:
        annal_admin.create_topic(topic, assignment={0: [1, 2]})
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap(cluster)})
    elected = admin.elect_leaders(
        ck.ElectionType.PREFERRED, [ck.TopicPartition(topic, 0)]
    ).result(30)
    outcome = elected[ck.TopicPartition(topic, 0)]
    assert outcome is None or outcome.code() == ck.KafkaError.ELECTION_NOT_NEEDED
    kp = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:
        tp = TopicPartition(topic, 0)
        kp.alter_partition_reassignments({tp: [2, 3]})
        listed = kp.list_partition_reassignments()  # running, or already done
        assert listed in ({}, {tp: listed.get(tp)}), listed
        wait_until(lambda: replicas_of(cluster, topic) == [2, 3], 90, "the partition moved")
        assert kp.list_partition_reassignments() == {}
        cluster_info = kp.describe_cluster()
        assert sorted(b["broker_id"] for b in cluster_info["brokers"]) == [1, 2, 3]
    finally:
        kp.close()


def test_describe_log_dirs_names_each_brokers_dirs_and_partitions(
    cluster: list[BrokerProcess],
) -> None:
    topic = f"dirs-{next(_names)}"
    with AdminClient(cluster[0].endpoint) as annal_admin:
        annal_admin.create_topic(topic, partitions=2, replication_factor=3)
    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster)})
    for p in (0, 1):
        producer.produce(topic, b"x" * 100, partition=p)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:

        def sizes() -> dict[int, dict[int, int]]:
            found = admin.describe_log_dirs(topic_partitions=[topic])
            by_broker: dict[int, dict[int, int]] = {}
            for broker in found:
                for log_dir in broker["log_dirs"]:
                    assert log_dir["error_code"] == 0 and log_dir["log_dir"].startswith("/")
                    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
                    for t in log_dir["topics"]:
                        assert t["name"] == topic  # asked for this topic only
                        for part in t["partitions"]:
                            sized = by_broker.setdefault(broker["broker"], {})
                            sized[part["partition_index"]] = part["partition_size"]
            return by_broker

        wait_until(
            lambda: len(found := sizes()) == 3
            and all(s > 0 for b in found.values() for s in b.values()),
            30,
            "every replica's size",
        )
        assert {b: sorted(ps) for b, ps in sizes().items()} == {1: [0, 1], 2: [0, 1], 3: [0, 1]}
        one = admin.describe_log_dirs(topic_partitions={topic: [1]}, brokers=[2])
        parts = [p["partition_index"] for d in one[0]["log_dirs"] for t in d["topics"]
                 for p in t["partitions"]]  # fmt: skip
        assert parts == [1]
    finally:
        admin.close()


def test_a_topics_compression_type_is_the_codec_its_batches_are_stored_in(
    cluster: list[BrokerProcess],
) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap(cluster)})
    topic = f"codec-{next(_names)}"
    created = admin.create_topics(
        [ck_admin.NewTopic(topic, 1, 3, config={"compression.type": "lz4"})]
    )
    created[topic].result(60)
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["compression.type"].value == "lz4"
    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster), "compression.type": "none"})
    for i in range(20):
        producer.produce(topic, b"record %d " % i * 30, partition=0)
    assert producer.flush(30) == 0
    wait_until(lambda: stored_codecs(cluster, topic) != [], 30, "batches stored")
    assert set(stored_codecs(cluster, topic)) == {3}  # lz4, whatever the producer sent


def stored_codecs(cluster: list[BrokerProcess], topic: str) -> list[int]:
    """The codec of every batch in the leader's log of ``topic``-0."""
    with AdminClient(cluster[0].endpoint) as admin:
        leader = admin.describe_topics([topic])[0].partitions[0].leader
    log = next(b for b in cluster if b.broker_id == leader).log_dir / f"{topic}-0"
    data = b"".join(p.read_bytes() for p in sorted(log.glob("*.log")))
    return [h.attributes & 0x07 for h in iter_batches(data)]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # as 0092 sends it
def test_message_format_version_is_accepted_and_records_stay_in_format_v2(
    cluster: list[BrokerProcess],
) -> None:
    """librdkafka's 0092: the setting changes halfway through producing, every record
    reads back; a value that names no Kafka version is refused."""
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap(cluster)})
    topic = f"format-{next(_names)}"
    admin.create_topics([ck_admin.NewTopic(topic, 1, 3)])[topic].result(60)
    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster)})
    resource = ck_admin.ConfigResource(
        ck_admin.ResourceType.TOPIC, topic, set_config={"message.format.version": "0.10.0.0"}
    )
    for i in range(20):
        producer.produce(topic, b"record %d" % i, partition=0)
        assert producer.flush(30) == 0
        if i == 10:
            admin.alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["message.format.version"].value == "0.10.0.0"
    assert set(stored_magics(cluster, topic)) == {2}

    consumer = ck.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": topic,
                            "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 20 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert values == [b"record %d" % i for i in range(20)]
    finally:
        consumer.close()

    bad = ck_admin.ConfigResource(
        ck_admin.ResourceType.TOPIC, topic, set_config={"message.format.version": "banana"}
    )
    with pytest.raises(ck.KafkaException, match="message.format.version"):
        admin.alter_configs([bad])[bad].result(30)


def stored_magics(cluster: list[BrokerProcess], topic: str) -> list[int]:
    """The format version (magic) of every batch in the leader's log of ``topic``-0."""
    with AdminClient(cluster[0].endpoint) as admin:
        leader = admin.describe_topics([topic])[0].partitions[0].leader
    log = next(b for b in cluster if b.broker_id == leader).log_dir / f"{topic}-0"
    data = b"".join(p.read_bytes() for p in sorted(log.glob("*.log")))
    return [h.magic for h in iter_batches(data)]
