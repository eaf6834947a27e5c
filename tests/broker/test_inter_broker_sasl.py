"""Followers fetching over a SASL_SSL Kafka listener (docs/security.md, "Replication
over a secured listener"): the follower runs TLS, trusting the brokers' CA and
checking the leader's name against its certificate, logs in with SCRAM as the
user of its JAAS line, and copies the leader's records; a follower whose
password is wrong is refused, says so once in its log, and never joins the ISR."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import confluent_kafka.admin as ck_admin
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.security.scram import SCRAM_SHA_512, make_credential
from annal.zk.client import ZkClient
from tls_certs import issue, make_ca

pytestmark = pytest.mark.timeout(180)

PASSWORD = "replicator-secret"


def start(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path, broker_id: int, password: str
) -> BrokerProcess:
    ca_file = tmp_path / "ca.pem"
    keystore = tmp_path / f"broker-{broker_id}.pem"
    issue(CA, f"broker-{broker_id}").write_keystore(keystore)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="replicator" password="{password}";'
    )
    settings = {
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(ca_file),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "replica.lag.time.max.ms": "3000",
    }
    return broker_factory(broker_id, settings, "SASL_SSL://127.0.0.1:0")


CA = make_ca("annal-test-ca")


def in_sync(zk_connect: str, topic: str) -> list[int]:
    with ZkClient(zk_connect) as zk:
        found = zk.get_partition_state(topic, 0)
        return [] if found is None else sorted(found[0].isr)


def test_a_follower_logs_in_over_sasl_ssl_and_a_wrong_password_never_joins(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path
) -> None:
    (tmp_path / "ca.pem").write_bytes(CA.cert_pem())
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.upsert_scram_credential(
            "replicator", SCRAM_SHA_512, make_credential(SCRAM_SHA_512, PASSWORD)
        )
    one = start(broker_factory, tmp_path, 1, PASSWORD)
    two = start(broker_factory, tmp_path, 2, PASSWORD)
    with AdminClient(one.endpoint) as admin:
        admin.create_topic("copied", assignment={0: [1, 2]})
    with Producer(one.endpoint, acks="all") as producer:
        for i in range(50):
            producer.send("copied", f"v{i}".encode(), partition=0)
        producer.flush()
    wait_until(lambda: in_sync(zk_connect, "copied") == [1, 2], 60, "broker 2 in sync")
    copies = sorted((two.log_dir / "copied-0").glob("*.log"))
    assert copies and sum(p.stat().st_size for p in copies) > 50 * 10
    # the JAAS line is a secret: DescribeConfigs marks it sensitive and leaves it out
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.BROKER, "1")
    kafka_admin = ck_admin.AdminClient({"bootstrap.servers": one.kafka_endpoint})
    described = kafka_admin.describe_configs([resource])[resource].result(30)
    jaas = described["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert described["inter.broker.listener.name"].value == "SASL_SSL"

    three = start(broker_factory, tmp_path, 3, "not-the-password")
    with AdminClient(one.endpoint) as admin:
        admin.create_topic("refused", assignment={0: [1, 3]})
    wait_until(
        lambda: "SASL SCRAM-SHA-512 login as replicator refused" in three.log_path.read_text(),
        60,
        "the refused login logged",
    )
    with Producer(one.endpoint, acks="1") as producer:
        producer.send("refused", b"x", partition=0)
        producer.flush()
    wait_until(lambda: in_sync(zk_connect, "refused") == [1], 60, "broker 3 out of the ISR")
    assert three.log_path.read_text().count("login as replicator refused") == 1
    assert "not-the-password" not in three.log_path.read_text()
    assert not any((three.log_dir / "refused-0").glob("*.log")) or all(
        p.stat().st_size == 0 for p in (three.log_dir / "refused-0").glob("*.log")
    )
