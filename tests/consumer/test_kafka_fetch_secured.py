"""Raw fetches over a secured Kafka listener (consumer/kafka_fetch.py): a client
with SASL_SSL settings fetches from the leader's SASL_SSL listener, one with SSL
settings from its SSL listener, each with the same answers as over gRPC; a
wrong password and an untrusted broker certificate are refused with errors
that say so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.client.security import Security
from annal.consumer.kafka_fetch import KafkaFetchConnection
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.kafkaproto.client import AuthenticationFailed
from annal.producer.producer import Producer
from annal.security.scram import make_credential
from annal.zk.client import ZkClient
from tls_certs import issue, make_ca

pytestmark = pytest.mark.timeout(120)


class Secured:
    def __init__(self, broker: BrokerProcess, ca: str, client: str, sasl: str, ssl: str) -> None:
        self.broker, self.ca, self.client, self.sasl, self.ssl = broker, ca, client, sasl, ssl


@pytest.fixture
def secured(zk_connect: str, tmp_path: Path) -> Iterator[Secured]:
    """One broker on GRPCS:// with SASL_SSL:// and SSL:// Kafka listeners; user
    alice; a client certificate (CN reader)."""
    ca = make_ca("annal test CA")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem())
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.upsert_scram_credential(
            "alice", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "alice-secret")
        )
    broker = BrokerProcess(1, zk_connect, tmp_path)
    broker.settings.update(
        {
            "listeners": "GRPCS://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.location": issue(ca, "broker-1").write_keystore(tmp_path / "b.pem"),
            "ssl.truststore.location": str(ca_file),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        }
    )
    client = issue(ca, "reader").write_keystore(tmp_path / "reader.pem")
    broker.start()
    try:
        reader = Security("SSL", str(ca_file), client, client)
        wait_until(lambda: metadata_lists(broker.endpoint, [1], security=reader), 60, "serving")
        sasl, ssl = broker.listener_endpoint("SASL_SSL"), broker.listener_endpoint("SSL")
        yield Secured(broker, str(ca_file), client, sasl, ssl)
    finally:
        broker.kill()
        print(broker.tail_log())


def test_raw_fetches_over_sasl_ssl_and_ssl_listeners(secured: Secured) -> None:
    endpoint, ca = secured.broker.endpoint, secured.ca
    tls = {"security_protocol": "SSL", "ssl_cafile": ca,
           "ssl_certfile": secured.client, "ssl_keyfile": secured.client}  # fmt: skip
    with AdminClient(endpoint, **tls) as admin:
        admin.create_topic("sealed", partitions=1)
    with Producer(endpoint, linger_ms=5, **tls) as producer:
        for i in range(200):
            producer.send("sealed", value=b"value-%d" % i, partition=0)
    alice = {"security_protocol": "SASL_SSL", "ssl_cafile": ca, "sasl_mechanism": "SCRAM-SHA-256",
             "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}  # fmt: skip
    with SimpleConsumer(endpoint, max_wait_ms=10, **tls) as over_grpc:
        expected = over_grpc.fetch_raw("sealed", 0, 0)
        assert expected.records
    for settings, listener in ((alice, secured.sasl), (tls, secured.ssl)):
        with SimpleConsumer(endpoint, max_wait_ms=10, kafka_listener_fetch=True,
                            **settings) as consumer:  # fmt: skip
            assert consumer.fetch_raw("sealed", 0, 0) == expected
            leader = consumer.leader("sealed", 0)
            assert consumer.cluster.kafka_listeners[leader] == listener
            assert list(consumer._kafka) == [listener] and not consumer._unreachable

    wrong = Security("SASL_SSL", ca, sasl_username="alice", sasl_password="nope",
                     sasl_mechanism="SCRAM-SHA-256")  # fmt: skip
    connection = KafkaFetchConnection(secured.sasl, 10, security=wrong)
    with pytest.raises(AuthenticationFailed, match="SCRAM-SHA-256 login as alice refused"):
        connection.fetch("sealed", 0, 0, 1 << 20, 0, 1)
    untrusted = Path(ca).with_name("other-ca.pem")
    untrusted.write_bytes(make_ca("another CA").cert_pem())
    stranger = Security("SASL_SSL", str(untrusted), sasl_username="alice",
                        sasl_password="alice-secret", sasl_mechanism="SCRAM-SHA-256")  # fmt: skip
    connection = KafkaFetchConnection(secured.sasl, 10, security=stranger)
    with pytest.raises(AuthenticationFailed, match="its certificate is not trusted"):
        connection.fetch("sealed", 0, 0, 1 << 20, 0, 1)
    log = secured.broker.log_path.read_text()
    assert "nope" not in log and "alice-secret" not in log
