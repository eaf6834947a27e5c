"""Kafka's clients (confluent-kafka) against the secured compose cluster, from the host.

``python kafka_clients.py SPEC`` (SPEC: JSON, see ``main``) produces records
as the admin over SASL_SSL, reads them back in a consumer group, tries the
clients that must be refused, and prints one JSON object with what happened.
The brokers advertise their service names (broker-1:19092, ...), so the test
runs this in a mount namespace of its own whose /etc/hosts maps those names to
127.0.0.1, where their ports are published (``in_namespace_with_hosts``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin

THIS = Path(__file__).resolve()


def in_namespace_with_hosts(
    names: list[str], spec: dict[str, Any], directory: Path, timeout_s: float = 180
) -> dict[str, Any]:
    """Run this script with ``spec`` where ``names`` resolve to 127.0.0.1 (the host's
    /etc/hosts plus one line, bind-mounted over it in a private mount namespace:
    nothing changes for other processes); its report."""
    hosts = directory / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {' '.join(names)}\n")
    script = 'mount --bind "$1" /etc/hosts && shift && exec "$@"'
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(hosts),
         sys.executable, str(THIS), json.dumps(spec)],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{THIS.name} exited {result.returncode}:\n{result.stderr[-4000:]}")
    report: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return report


def produce(config: dict[str, str], topic: str, values: list[str], timeout_s: float) -> list[str]:
    """The delivery errors (names); empty when every value was acknowledged."""
    errors: list[str] = []

    def delivered(err: ck.KafkaError | None, _message: ck.Message) -> None:
        if err is not None:
            errors.append(err.name())

    producer = ck.Producer({**config, "message.timeout.ms": int(timeout_s * 1000)})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value.encode(), on_delivery=delivered)
    left = producer.flush(timeout_s + 5)
    return errors + ["NOT_FLUSHED"] * left


def consume(config: dict[str, str], topic: str, expected: int, timeout_s: float) -> list[str]:
    """The values a new consumer group reads from the beginning (until ``expected``)."""
    consumer = ck.Consumer(
        {**config, "group.id": f"{topic}-check", "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                raise RuntimeError(f"consumer: {message.error()}")
            values.append(message.value().decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def refusal(config: dict[str, str]) -> str | None:
    """Why a client with ``config`` cannot even list the topics; None if it can."""
    try:
        ck.admin.AdminClient(config).list_topics(timeout=8)
    except ck.KafkaException as exc:
        return str(exc)
    return None


def main() -> int:
    """SPEC: ``bootstrap`` (Kafka's bootstrap servers), ``admin`` (the admin's
    librdkafka settings), ``topic``, ``records``, ``refused`` (name -> settings
    of a client that must not get in) and ``unauthorized`` (settings of a
    user with no ACL, who gets in but may not write)."""
    spec = json.loads(sys.argv[1])
    bootstrap = {"bootstrap.servers": spec["bootstrap"]}
    admin = {**spec["admin"], **bootstrap}
    topic = spec["topic"]
    values = [f"secured-{i}" for i in range(spec["records"])]
    report: dict[str, Any] = {
        "produce_errors": produce({**admin, "acks": "all"}, topic, values, 60),
        "consumed": consume(admin, topic, len(values), 60),
        "refused": {
            name: refusal({**config, **bootstrap}) for name, config in spec["refused"].items()
        },
        "unauthorized_errors": produce({**spec["unauthorized"], **bootstrap}, topic, ["x"], 15),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
