"""gRPC over TLS with client certificates required (``listeners=GRPCS://``,
``ssl.client.auth=required``): between brokers, for clients and for the CLI,
with certificates made at test time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.client.security import SecurityConfigError
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.zk.client import ZkClient
from runcli import annal
from tls_certs import issue, make_ca

from annal.errors import AnnalError


@pytest.fixture
def tls_cluster(
    zk_connect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[list[BrokerProcess], dict[str, str]]]:
    """Two brokers serving GRPCS:// only, client certificates required; yields them
    and the PEM files (ca, client keystore, rogue keystore)."""
    ca = make_ca("annal test CA")
    rogue_ca = make_ca("somebody else")
    files = {
        "ca": str(tmp_path / "ca.pem"),
        "client": issue(ca, "client").write_keystore(tmp_path / "client.pem"),
        "rogue": issue(rogue_ca, "client").write_keystore(tmp_path / "rogue.pem"),
    }
    Path(files["ca"]).write_bytes(ca.cert_pem())
    brokers = []
    for broker_id in (1, 2):
        keystore = issue(ca, f"broker-{broker_id}").write_keystore(tmp_path / f"b{broker_id}.pem")
        broker = BrokerProcess(broker_id, zk_connect, tmp_path)
        broker.settings.update(
            {
                "listeners": "GRPCS://127.0.0.1:0",
                "ssl.keystore.location": keystore,
                "ssl.truststore.location": files["ca"],
                "ssl.client.auth": "required",
                "zookeeper.session.timeout.ms": "6000",
            }
        )
        brokers.append(broker)
        broker.start()
    try:
        with ZkClient(zk_connect) as zk:
            wait_until(lambda: len(zk.get_brokers()) == 2, 60, "both brokers registered")
            wait_until(lambda: zk.get_controller() is not None, 60, "a controller")
        yield brokers, files
    finally:
        report = getattr(request.node, "rep_call", None)
        for broker in brokers:
            broker.kill()
            if report is not None and report.failed:
                print(f"\n--- broker {broker.broker_id} ---\n{broker.tail_log()}")


@pytest.mark.timeout(180)
def test_mutual_tls_serves_certified_clients_and_refuses_the_rest(
    tls_cluster: tuple[list[BrokerProcess], dict[str, str]], zk_connect: str, tmp_path: Path
) -> None:
    brokers, files = tls_cluster
    bootstrap = ",".join(b.endpoint for b in brokers)
    certified = {
        "security_protocol": "SSL",
        "ssl_cafile": files["ca"],
        "ssl_certfile": files["client"],
        "ssl_keyfile": files["client"],
    }
    with AdminClient(bootstrap, **certified) as admin:
        wait_until(
            lambda: len(admin.cluster.refresh([]).brokers) == 2, 60, "both brokers in metadata"
        )
        admin.create_topic("secret", assignment={0: [1, 2], 1: [2, 1]},
                           config={"min.insync.replicas": "2"})  # fmt: skip
        wait_until(
            lambda: all(len(p.isr) == 2 for p in admin.describe_topics(["secret"])[0].partitions),
            60,
            "replicas in sync over TLS",
        )
    # acks=all with min.insync.replicas=2: the followers fetch from the leaders over TLS
    with Producer(bootstrap, acks="all", **certified) as producer:
        futures = [producer.send("secret", value=b"v%d" % i, partition=i % 2) for i in range(20)]
        assert all(f.result(60).offset >= 0 for f in futures)
    with SimpleConsumer(bootstrap, **certified) as consumer:
        values = [r.value for p in (0, 1) for r in consumer.fetch("secret", p, 0).records]
        assert sorted(values) == sorted(b"v%d" % i for i in range(20))
    with ZkClient(zk_connect) as zk:
        raw = zk.get("/brokers/ids/1")
        assert raw is not None
        registered = json.loads(raw[0])
        assert registered["endpoints"][0].startswith("GRPCS://")
        assert registered["listener_security_protocol_map"]["GRPCS"] == "SSL"

    refused = {
        "plaintext": {},
        "no client certificate": {"security_protocol": "SSL", "ssl_cafile": files["ca"]},
        "a certificate from another CA": {
            **certified, "ssl_certfile": files["rogue"], "ssl_keyfile": files["rogue"],
        },
    }  # fmt: skip
    for why, settings in refused.items():
        with pytest.raises(AnnalError), AdminClient(bootstrap, 3, **settings) as admin:  # type: ignore[arg-type]
            admin.list_topics()
            pytest.fail(f"served a client with {why}")

    # the command line, through --command-config
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SSL\n"
        f"ssl.truststore.location={files['ca']}\n"
        f"ssl.keystore.location={files['client']}\n"
    )
    listed = annal("topics", "--list", "--bootstrap-server", bootstrap, "--command-config",
                   str(config))  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["secret"]
    plain = annal("topics", "--list", "--bootstrap-server", bootstrap, timeout_s=120)
    assert plain.returncode == 1 and "BROKER_NOT_AVAILABLE" in plain.stderr
    config.write_text("security.protocol=SSL\nssl.truststore.location=/nowhere.pem\n")
    missing = annal("topics", "--list", "--bootstrap-server", bootstrap, "--command-config",
                    str(config))  # fmt: skip
    assert missing.returncode == 2, missing.stderr
    assert "ssl_cafile /nowhere.pem: no such file" in missing.stderr


def test_security_settings_are_checked_before_any_connection(tmp_path: Path) -> None:
    pem = tmp_path / "some.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    with pytest.raises(SecurityConfigError, match="set security_protocol='SSL'"):
        AdminClient("127.0.0.1:1", ssl_cafile=str(pem))
    with pytest.raises(SecurityConfigError, match="needs both ssl_certfile and ssl_keyfile"):
        Producer("127.0.0.1:1", security_protocol="SSL", ssl_certfile=str(pem))
    with pytest.raises(SecurityConfigError, match="ssl_cafile /nowhere.pem: no such file"):
        AdminClient("127.0.0.1:1", security_protocol="SSL", ssl_cafile="/nowhere.pem")
    with pytest.raises(SecurityConfigError, match="expected PLAINTEXT, SSL or SASL_SSL"):
        SimpleConsumer("127.0.0.1:1", security_protocol="SASL_PLAINTEXT")
    with pytest.raises(SecurityConfigError, match="SASL_SSL needs sasl_plain_username"):
        SimpleConsumer("127.0.0.1:1", security_protocol="SASL_SSL")
    with pytest.raises(SecurityConfigError, match="set security_protocol='SASL_SSL'"):
        Producer("127.0.0.1:1", sasl_plain_username="alice", sasl_plain_password="x")
    config = tmp_path / "bad.properties"
    config.write_text("security.protocol=SSL\nssl.keystore.password=x\n")
    run = annal("topics", "--list", "--bootstrap-server", "127.0.0.1:1", "--command-config",
                str(config))  # fmt: skip
    assert run.returncode == 2 and "unknown security settings ['ssl.keystore.password']" in (
        run.stderr
    )
