"""docker-compose.yml, run for real: ZooKeeper, three brokers and the Spark job in
containers (podman's Docker API), a replicated topic, a broker SIGKILLed and back.

Every record goes through the brokers' advertised addresses (broker-N:909N,
from a container of the ``client`` service); the host reaches the published
ports.  Acknowledged records are checked value by value after the failover,
and the Spark job's mirror of ``events`` record by record."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from annal.deploy.runner import wait_until
from compose_on_podman import Compose

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


def test_compose_cluster_survives_a_killed_broker(compose: Compose) -> None:
    started = time.monotonic()
    compose.client(
        "topics", "create", "--bootstrap-server", BOOTSTRAP, "--topic", TOPIC,
        "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2",
    )  # fmt: skip

    def full_isrs(partitions: list[dict]) -> bool:  # type: ignore[type-arg]
        return all(len(p["isr"]) == 3 for p in partitions)

    wait_until(lambda: settled(compose, full_isrs), 60, "full ISRs", 1)

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
