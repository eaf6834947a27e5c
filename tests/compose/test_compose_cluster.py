"""docker-compose.yml, run for real: ZooKeeper, three brokers and the Spark job in
containers (podman's Docker API), a replicated topic, a broker SIGKILLed and back;
then the same images secured by docker-compose.secure.yml.

Every record goes through the brokers' advertised addresses (broker-N:909N,
from a container of the ``client`` service); the host reaches the published
ports.  Acknowledged records are checked value by value after the failover,
and the Spark job's mirror of ``events`` record by record.  The secured
cluster is driven by the admin's files from the ``security`` volume: annal's
CLI in a container and on the host, Kafka's clients (confluent-kafka, SASL_SSL)
on the host; anonymous clients, a wrong password and a user without ACLs are
refused.  Both run in this one module, one after the other: they publish the
same host ports and share the images built once (conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from annal.deploy.runner import wait_until
from compose_on_podman import Compose
from kafka_clients import in_namespace_with_hosts

pytestmark = [pytest.mark.compose, pytest.mark.slow, pytest.mark.timeout(480)]

BOOTSTRAP = "broker-1:9092,broker-2:9093,broker-3:9094"
TOPIC = "compose-drill"
RECORDS = 10_000


def events(output: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def describe(compose: Compose) -> list[dict]:  # type: ignore[type-arg]
    partitions: list[dict] = json.loads(  # type: ignore[type-arg]
        compose.client(
            "topics", "describe", "--bootstrap-server", BOOTSTRAP, "--topic", TOPIC, "--json"
        )
    )["partitions"]
    return partitions


def settled(compose: Compose, condition: Callable[[list[dict]], bool]) -> bool:  # type: ignore[type-arg]
    """``condition`` on the partitions described now; False (printing why) while the
    cluster cannot describe them, as for a moment during a controller's failover."""
    try:
        return condition(describe(compose))
    except RuntimeError as e:
        print(f"describe failed, retrying: {str(e).splitlines()[-3:]}")
        return False


def produce(compose: Compose, count: int, prefix: int, topic: str = TOPIC) -> set[str]:
    """``count`` records with acks=all, valued ``prefix.N``; the values acknowledged."""
    out = compose.client(
        "verifiable-producer", "--bootstrap-server", BOOTSTRAP, "--topic", topic,
        "--max-messages", str(count), "--acks", "all", "--value-prefix", str(prefix),
    )  # fmt: skip
    acked = {e["value"] for e in events(out) if e["name"] == "producer_send_success"}
    summary = [e for e in events(out) if e["name"] == "tool_data"]
    assert summary and summary[0]["acked"] == len(acked), out[-2000:]
    return acked


def consume_all(
    compose: Compose, expected: int, topic: str = TOPIC, idle_ms: int = 30000
) -> list[str]:
    out = compose.client(
        "verifiable-consumer", "--bootstrap-server", BOOTSTRAP, "--topic", topic,
        "--reset-policy", "earliest", "--max-messages", str(expected),
        "--timeout-ms", str(idle_ms), "--verbose",
    )  # fmt: skip
    return [e["value"] for e in events(out) if e["name"] == "record_data"]


def scraped() -> dict[int, float]:
    """broker id → Prometheus' ``up`` for it (1: its metrics were scraped), from the
    published port; empty while Prometheus does not answer."""
    query = "http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22annal-brokers%22%7D"
    try:
        with urllib.request.urlopen(query, timeout=5) as answer:
            found = json.loads(answer.read())["data"]["result"]
    except (OSError, ValueError, KeyError):
        return {}
    return {
        int(r["metric"]["instance"].split(":")[0].split("-")[1]): float(r["value"][1])
        for r in found
    }


def console_health() -> dict[str, object]:
    """The web console's /api/health from the published port ({} while it does not answer)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:8080/api/health", timeout=5) as answer:
            found = json.loads(answer.read())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def console_scraped() -> float | None:
    query = "http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22annal-console%22%7D"
    try:
        with urllib.request.urlopen(query, timeout=5) as answer:
            found = json.loads(answer.read())["data"]["result"]
    except (OSError, ValueError, KeyError):
        return None
    return float(found[0]["value"][1]) if found else None


def test_compose_cluster_survives_a_killed_broker(compose: Compose) -> None:
    started = time.monotonic()
    compose.client(
        "topics", "create", "--bootstrap-server", BOOTSTRAP, "--topic", TOPIC,
        "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2",
    )  # fmt: skip

    def full_isrs(partitions: list[dict]) -> bool:  # type: ignore[type-arg]
        return all(len(p["isr"]) == 3 for p in partitions)

    wait_until(lambda: settled(compose, full_isrs), 60, "full ISRs", 1)
    # Prometheus (published on 9090) scrapes every broker's metrics.port
    wait_until(lambda: scraped() == {1: 1.0, 2: 1.0, 3: 1.0}, 90, "Prometheus scraping", 1)
    # the web console (published on 8080) sees the cluster; Prometheus scrapes its lag
    wait_until(lambda: console_health().get("ok") is True, 90, "the console's health", 1)
    wait_until(lambda: console_scraped() == 1.0, 90, "Prometheus scraping the console", 1)

    # The Spark job (restarting until its topics exist) mirrors events into events-mirror.
    for topic in ("events-mirror", "events"):
        compose.client("topics", "create", "--bootstrap-server", BOOTSTRAP, "--topic", topic)
    mirrored = produce(compose, 100, prefix=9, topic="events")

    # The host reaches the cluster through the published ports.
    listing = subprocess.run(
        [sys.executable, "-m", "annal", "topics", "list", "--bootstrap-server", "127.0.0.1:9093"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listing.returncode == 0 and TOPIC in listing.stdout.split(), listing.stderr

    acked = produce(compose, RECORDS, prefix=1)
    assert len(acked) == RECORDS
    read = consume_all(compose, RECORDS)
    assert len(read) == RECORDS and set(read) == acked

    # SIGKILL the leader of partition 0: the controller elects another from the ISR.
    victim = describe(compose)[0]["leader"]
    compose("kill", "-s", "SIGKILL", f"broker-{victim}")

    def led_elsewhere(partitions: list[dict]) -> bool:  # type: ignore[type-arg]
        return all(p["leader"] not in (victim, -1) and victim not in p["isr"] for p in partitions)

    wait_until(
        lambda: settled(compose, led_elsewhere), 90, f"partitions led by others than {victim}", 1
    )
    wait_until(lambda: scraped().get(victim) == 0.0, 60, "Prometheus seeing the broker down", 1)
    acked |= produce(compose, 1000, prefix=2)  # min.insync.replicas=2 of the 2 alive
    read = consume_all(compose, len(acked))
    lost = acked - set(read)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    assert len(read) == len(acked), "records read twice"

    # Back on its volume, the broker catches up and rejoins every ISR.
    compose("start", f"broker-{victim}")
    wait_until(lambda: compose.health(f"broker-{victim}") == "healthy", 120, "broker healthy", 1)

    def back_in_sync(partitions: list[dict]) -> bool:  # type: ignore[type-arg]
        return all(victim in p["isr"] for p in partitions)

    wait_until(lambda: settled(compose, back_in_sync), 120, f"{victim} in every ISR", 1)
    wait_until(
        lambda: set(consume_all(compose, 100, "events-mirror", idle_ms=5000)) == mirrored,
        180,
        "the Spark job's copy of events in events-mirror",
        1,
    )
    print(f"drill done in {time.monotonic() - started:.0f} s")


SECURITY = "/etc/annal/security"  # the volume `security`, as docker-compose.secure.yml mounts it
KAFKA_BOOTSTRAP = "broker-1:19092,broker-2:19093,broker-3:19094"
SECURED_TOPIC = "secured"


def properties(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if "=" in line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_secured_compose_cluster(secure_compose: Compose, tmp_path: Path) -> None:
    compose = secure_compose
    started = time.monotonic()
    init = compose("logs", "--no-color", "security-init")
    assert "a new CA" in init and "credential stored in zookeeper:2181/annal" in init, init
    admin = ["--bootstrap-server", BOOTSTRAP, "--command-config", f"{SECURITY}/admin.properties"]
    compose.client(
        "topics", "create", *admin, "--topic", SECURED_TOPIC, "--partitions", "3",
        "--replication-factor", "3",
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="BROKER_NOT_AVAILABLE"):  # no client certificate
        compose.client("topics", "list", "--bootstrap-server", BOOTSTRAP)
    compose.client(
        "configs", *admin, "--entity-type", "users", "--entity-name", "alice", "--alter",
        "--add-config", "SCRAM-SHA-512=[password=alice-secret]",
    )  # fmt: skip

    # The admin's files, copied out of the volume, serve from the host too.
    def volume_file(name: str) -> str:
        return compose("run", "--rm", "--no-deps", "-T", "--entrypoint", "cat", "client",
                       f"{SECURITY}/{name}")  # fmt: skip

    copies = tmp_path / "security"
    copies.mkdir(mode=0o700)
    for name in ("ca.pem", "admin.pem"):
        (copies / name).write_text(volume_file(name))
    kafka_admin_text = volume_file("admin-kafka.properties")
    (copies / "admin.properties").write_text(
        f"security.protocol=SSL\nssl.truststore.location={copies / 'ca.pem'}\n"
        f"ssl.keystore.location={copies / 'admin.pem'}\n"
    )
    listing = subprocess.run(
        [sys.executable, "-m", "annal", "topics", "list", "--bootstrap-server", "127.0.0.1:9093",
         "--command-config", str(copies / "admin.properties")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listing.returncode == 0 and SECURED_TOPIC in listing.stdout.split(), listing.stderr

    ca = str(copies / "ca.pem")
    kafka_admin = {**properties(kafka_admin_text), "ssl.ca.location": ca}
    assert kafka_admin["security.protocol"] == "SASL_SSL"
    assert kafka_admin["sasl.mechanism"] == "SCRAM-SHA-512"
    spec = {
        "bootstrap": KAFKA_BOOTSTRAP,
        "admin": kafka_admin,
        "topic": SECURED_TOPIC,
        "records": 1000,
        "refused": {
            "anonymous over TLS": {"security.protocol": "SSL", "ssl.ca.location": ca},
            "anonymous over plaintext": {"security.protocol": "PLAINTEXT"},
            "a wrong password": {**kafka_admin, "sasl.password": "not-the-password"},
        },
        "unauthorized": {**kafka_admin, "sasl.username": "alice", "sasl.password": "alice-secret"},
    }
    report = in_namespace_with_hosts(["broker-1", "broker-2", "broker-3"], spec, tmp_path)
    assert report["produce_errors"] == []
    assert sorted(report["consumed"]) == sorted(f"secured-{i}" for i in range(1000))
    let_in = [name for name, why in report["refused"].items() if why is None]
    assert not let_in, f"not refused: {let_in}"
    assert report["unauthorized_errors"] == ["TOPIC_AUTHORIZATION_FAILED"]

    # the web console reaches the secured brokers with the admin's certificate
    wait_until(lambda: console_health().get("ok") is True, 90, "the console's health", 1)

    # security-init again (as on every `up`): everything is kept, the password too.
    again = compose("run", "--rm", "--no-deps", "-T", "security-init", timeout_s=120)
    kept = [line for line in again.splitlines() if line.startswith(SECURITY)]
    assert len(kept) == 6 and all(": kept" in line for line in kept), again
    assert volume_file("admin-kafka.properties") == kafka_admin_text
    assert volume_file("ca.pem") == (copies / "ca.pem").read_text()
    print(f"secured checks done in {time.monotonic() - started:.0f} s")
