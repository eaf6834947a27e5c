"""``annal cluster up --security sasl_ssl``: one flag gives a cluster where nothing
is allowed without an ACL, the printed admin settings work with annal's CLI and
with Kafka's clients, a user given its password and ACLs by the admin can write,
and an anonymous client gets nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin
import pytest
from runcli import annal


def properties(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.mark.timeout(300)
def test_a_cluster_secured_by_one_flag(tmp_path: Path) -> None:
    d = str(tmp_path / "cluster")
    up = annal("cluster", "up", "--brokers", "2", "--security", "sasl_ssl", "--dir", d)
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(annal("cluster", "status", "--json", "--dir", d).stdout)
        assert status["security"] == "sasl_ssl"
        for key in ("admin_config", "kafka_admin_config", "ca"):
            mode = stat.S_IMODE(os.stat(status[key]).st_mode)
            assert mode == 0o600, (key, oct(mode))
        assert f"--command-config {status['admin_config']}" in up.stdout
        grpc = ",".join(b["endpoint"] for b in status["brokers"])
        kafka = ",".join(b["kafka_endpoint"] for b in status["brokers"])
        admin = ["--bootstrap-server", grpc, "--command-config", status["admin_config"]]
        created = annal("topics", "create", *admin, "--topic", "orders", "--partitions", "2",
                        "--replication-factor", "2")  # fmt: skip
        assert created.returncode == 0, created.stderr
        anonymous = annal("topics", "list", "--bootstrap-server", grpc, timeout_s=60)
        assert anonymous.returncode != 0
        scram = "SCRAM-SHA-512=[password=alice-secret]"
        user = annal("configs", *admin, "--entity-type", "users", "--entity-name", "alice",
                     "--alter", "--add-config", scram)  # fmt: skip
        assert user.returncode == 0, user.stderr
        kafka_admin = {**properties(status["kafka_admin_config"]), "bootstrap.servers": kafka}
        assert "alice-secret" not in Path(status["kafka_admin_config"]).read_text()
        alice = {**kafka_admin, "sasl.username": "alice", "sasl.password": "alice-secret"}

        def delivered(config: dict[str, str]) -> bool:
            found: list[object] = []
            producer = ck.Producer({**config, "message.timeout.ms": 10000})
            producer.produce("orders", b"v", on_delivery=lambda err, _m: found.append(err))
            producer.flush(20)
            return len(found) == 1 and found[0] is None

        assert delivered(kafka_admin)  # the super user
        assert not delivered(alice)  # no ACL yet: nothing is allowed
        acl = annal("acls", *admin, "--add", "--allow-principal", "User:alice", "--producer",
                    "--topic", "orders")  # fmt: skip
        assert acl.returncode == 0, acl.stderr
        assert delivered(alice)
        # her certificate, for annal's CLI over gRPC (Kafka's clients log in with SCRAM)
        issued = annal("cluster", "certificate", "alice", "--dir", d)
        assert issued.returncode == 0, issued.stderr
        security = Path(status["ca"]).parent
        assert (security / "alice.properties").exists()
        assert not (security / "alice-kafka.properties").exists()
        as_alice = ["--bootstrap-server", grpc, "--command-config",
                    str(security / "alice.properties")]  # fmt: skip
        described = annal("topics", "list", *as_alice)  # --producer lets her describe it
        assert described.returncode == 0 and described.stdout.split() == ["orders"], (
            described.stderr
        )
        anonymous_kafka = {"bootstrap.servers": kafka, "security.protocol": "SSL",
                           "ssl.ca.location": status["ca"]}  # fmt: skip
        with pytest.raises(ck.KafkaException):
            ck.admin.AdminClient(anonymous_kafka).list_topics(timeout=5)
        restarted = annal("cluster", "kill", "2", "--dir", d)
        assert restarted.returncode == 0
        assert annal("cluster", "start", "2", "--dir", d).returncode == 0  # secured again
    finally:
        annal("cluster", "down", "--dir", d)
