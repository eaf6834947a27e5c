"""``annal cluster up --security ssl``: Kafka's protocol on ``SSL://`` with client
certificates required.  The printed admin settings work with annal's CLI and
with confluent-kafka (the admin's certificate is its proof, no password); a
client without a certificate, or with one another CA signed, gets nothing."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin
import pytest
from annal.deploy.runner import wait_until
from runcli import annal
from tls_certs import issue, make_ca

pytestmark = pytest.mark.timeout(180)

# librdkafka retries a refused connection without end; a short wait shows it gets nothing
REFUSED_WITHIN_S = 5


def logged(cluster: dict[str, Any], why: str) -> None:
    """Wait until the broker logged a refused TLS handshake for ``why`` (OpenSSL's reason)."""
    log = Path(cluster["dir"]) / "broker-1" / "broker.log"
    wait_until(lambda: f"TLS handshake failed: {why}" in log.read_text(), 30, f"{why} logged")


def properties(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The cluster's ``status --json``, with ``up`` (what ``up`` printed) and
    ``kafka`` (its Kafka bootstrap servers)."""
    d = str(tmp_path_factory.mktemp("ssl") / "cluster")
    up = annal("cluster", "up", "--brokers", "1", "--security", "ssl", "--dir", d)
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(annal("cluster", "status", "--json", "--dir", d).stdout)
        kafka = ",".join(b["kafka_endpoint"] for b in status["brokers"])
        yield {**status, "up": up.stdout, "kafka": kafka, "dir": d}
    finally:
        annal("cluster", "down", "--dir", d)


def test_help_explains_the_choice() -> None:
    shown = annal("cluster", "up", "--help")
    assert shown.returncode == 0
    assert "{plaintext,ssl,sasl_ssl}" in shown.stdout
    assert "ssl.client.auth=required" in " ".join(shown.stdout.split())


def test_up_and_status_say_ssl_and_the_admin_files_are_private(cluster: dict[str, Any]) -> None:
    assert cluster["security"] == "ssl"
    assert "security: SSL with client certificates (Kafka)" in cluster["up"]
    assert f"--command-config {cluster['admin_config']}" in cluster["up"]
    status = annal("cluster", "status", "--dir", cluster["dir"])
    assert "security   SSL with client certificates (Kafka)" in status.stdout
    admin = str(Path(cluster["ca"]).with_name("admin.pem"))
    for path in (cluster["admin_config"], cluster["kafka_admin_config"], cluster["ca"], admin):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert properties(cluster["kafka_admin_config"]) == {
        "security.protocol": "SSL",
        "ssl.ca.location": cluster["ca"],
        "ssl.certificate.location": admin,
        "ssl.key.location": admin,
    }


def test_the_admin_certificate_produces_and_consumes(cluster: dict[str, Any]) -> None:
    grpc = cluster["brokers"][0]["endpoint"]
    admin = ["--bootstrap-server", grpc, "--command-config", cluster["admin_config"]]
    created = annal("topics", "create", *admin, "--topic", "orders", "--partitions", "1",
                    "--replication-factor", "1")  # fmt: skip
    assert created.returncode == 0, created.stderr
    config = {**properties(cluster["kafka_admin_config"]), "bootstrap.servers": cluster["kafka"]}
    producer = ck.Producer(config)
    for i in range(10):
        producer.produce("orders", f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**config, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition("orders", 0, 0)])
    seen: list[bytes | None] = []
    while len(seen) < 10:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        seen.append(message.value())
    consumer.close()
    assert seen == [f"v{i}".encode() for i in range(10)]


def test_a_client_without_a_certificate_gets_no_metadata(cluster: dict[str, Any]) -> None:
    anonymous = {"bootstrap.servers": cluster["kafka"], "security.protocol": "SSL",
                 "ssl.ca.location": cluster["ca"]}  # fmt: skip
    with pytest.raises(ck.KafkaException):
        ck.admin.AdminClient(anonymous).list_topics(timeout=REFUSED_WITHIN_S)
    logged(cluster, "PEER_DID_NOT_RETURN_A_CERTIFICATE")


def test_a_certificate_another_ca_signed_is_refused(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    stranger = issue(make_ca("another CA"), "admin")  # the admin's name, not its CA
    keystore = stranger.write_keystore(tmp_path / "stranger.pem")
    config = {"bootstrap.servers": cluster["kafka"], "security.protocol": "SSL",
              "ssl.ca.location": cluster["ca"], "ssl.certificate.location": keystore,
              "ssl.key.location": keystore}  # fmt: skip
    with pytest.raises(ck.KafkaException):
        ck.admin.AdminClient(config).list_topics(timeout=REFUSED_WITHIN_S)
    logged(cluster, "CERTIFICATE_VERIFY_FAILED")
