"""``annal cluster up --security ssl``: Kafka's protocol on ``SSL://`` with client
certificates required.  The printed admin settings work with annal's CLI and
with confluent-kafka (the admin's certificate is its proof, no password); a
client without a certificate, or with one another CA signed, gets nothing."""

from __future__ import annotations

import json
import os
import socket
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


def test_a_certificate_issued_by_the_cluster_names_a_principal_acls_then_allow(
    cluster: dict[str, Any],
) -> None:
    """``cluster certificate alice``: a new identity under the cluster's CA, with its
    client settings; User:alice gets in and may do nothing until an ACL allows it."""
    d, grpc = cluster["dir"], cluster["brokers"][0]["endpoint"]
    admin = ["--bootstrap-server", grpc, "--command-config", cluster["admin_config"]]
    created = annal("topics", "create", *admin, "--topic", "alices", "--partitions", "1",
                    "--replication-factor", "1")  # fmt: skip
    assert created.returncode == 0, created.stderr
    issued = annal("cluster", "certificate", "alice", "--dir", d)
    assert issued.returncode == 0, issued.stderr
    security = Path(cluster["ca"]).parent
    files = [security / n for n in ("alice.pem", "alice.properties", "alice-kafka.properties")]
    assert [str(f) for f in files] == [line.strip() for line in issued.stdout.splitlines()[1:4]]
    assert "--allow-principal User:alice" in issued.stdout
    for path in [*files, security / "ca-key.pem"]:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    config = {**properties(str(files[2])), "bootstrap.servers": cluster["kafka"]}
    assert config["ssl.certificate.location"] == str(files[0])

    def produce() -> str | None:
        failures: list[str] = []
        producer = ck.Producer({**config, "message.timeout.ms": 10000})
        producer.produce("alices", b"v", on_delivery=lambda e, m: e and failures.append(e.name()))
        producer.flush(30)
        return failures[0] if failures else None

    assert produce() == "TOPIC_AUTHORIZATION_FAILED"  # in, but allowed nothing
    allowed = annal("acls", *admin, "--add", "--allow-principal", "User:alice", "--producer",
                    "--topic", "alices")  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    wait_until(lambda: produce() is None, 30, "alice allowed to produce")
    # annal's CLI as alice: what she may describe, over gRPC with her certificate
    listed = annal("topics", "list", "--bootstrap-server", grpc, "--command-config", str(files[1]))
    assert listed.returncode == 0 and listed.stdout.split() == ["alices"], listed.stderr


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("bob", "has a certificate already"),
        ("admin", "is the cluster's own identity"),
        ("broker-1", "is the cluster's own identity"),
        ("../etc/x", "is not a name for a certificate"),
        ("", "is not a name for a certificate"),
    ],
)
def test_a_certificate_that_cannot_be_issued_says_why(
    cluster: dict[str, Any], name: str, why: str
) -> None:
    if name == "bob":
        annal("cluster", "certificate", "bob", "--dir", cluster["dir"])  # there, if not yet
    refused = annal("cluster", "certificate", name, "--dir", cluster["dir"])
    assert refused.returncode == 1 and why in refused.stderr, refused.stderr
    assert refused.stderr.startswith("annal cluster certificate: ")


def test_a_plaintext_cluster_has_no_ca_to_issue_with(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(
        json.dumps({"zookeeper_port": 2181, "zookeeper_pid": None, "brokers": []})
    )
    refused = annal("cluster", "certificate", "alice", "--dir", str(tmp_path))
    assert refused.returncode == 1 and "is plaintext: it has no CA" in refused.stderr
    assert not (tmp_path / "security").exists()


def test_a_restarted_broker_whose_port_was_taken_binds_a_new_one(
    cluster: dict[str, Any],
) -> None:
    """Last in this module: it restarts the broker.  Another process takes the
    secured Kafka listener's port while the broker is down; ``cluster start``
    binds a new one, records it, and Kafka's clients reach it there."""
    d = cluster["dir"]
    before = json.loads(annal("cluster", "status", "--json", "--dir", d).stdout)["brokers"][0]
    assert annal("cluster", "kill", "1", "--dir", d).returncode == 0
    host, port = before["kafka_endpoint"].rsplit(":", 1)
    with socket.socket() as squatter:
        squatter.bind((host, int(port)))
        squatter.listen()
        started = annal("cluster", "start", "1", "--dir", d)
        assert started.returncode == 0, started.stderr
    after = json.loads(annal("cluster", "status", "--json", "--dir", d).stdout)["brokers"][0]
    assert after["endpoint"] == before["endpoint"]  # its gRPC port was free: kept
    assert after["kafka_endpoint"] != before["kafka_endpoint"]
    config = {**properties(cluster["kafka_admin_config"]),
              "bootstrap.servers": after["kafka_endpoint"]}  # fmt: skip
    assert ck.admin.AdminClient(config).list_topics(timeout=30).brokers
