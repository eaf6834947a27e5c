"""Security's cost: the same work on a plaintext and on a secured cluster, in one run.

    .venv/bin/python bench/security.py [--quick] [--records N] [--rounds R]

Two one-broker local clusters run side by side: ``annal cluster up`` as it
is, and ``annal cluster up --security sasl_ssl`` (docs/security.md).  On each,
every round:

* confluent-kafka writes N 100-byte records to a topic of 4 partitions and
  reads them back (bench/kafka_clients.py's settings, with librdkafka's
  default ``batch.size`` of 1 MB): plaintext through ``PLAINTEXT://``;
  secured through ``SASL_SSL://`` as a SCRAM-SHA-512 user that is not a
  super user, with prefixed ACLs granting Write, Read and Describe, so every
  request is authorized against the ACL cache.  The writes are measured
  again with 64 KiB batches (``kafka_produce_64k_*``): librdkafka then sends
  each produce request as dozens of small TLS records (one per buffer
  segment), whose encryption on its side and decryption on the broker's
  cost per record, not per byte;
* annal's Producer and SimpleConsumer do the same over gRPC: plaintext, and
  TLS with the admin's client certificate.

Both clusters run the same rounds alternately, best of R each.  Also
reported: how long a new Kafka client takes from nothing to its first
Metadata answer (median of 20), plaintext and with SCRAM-SHA-512 (4,096
iterations) over TLS; and, for confluent-kafka's produce, the CPU each side
spends per record (``*_cpu_us_per_record``, lowest of the rounds): this
process's (librdkafka's threads) and the broker's.  On a machine where the
client and the broker share the cores, throughput is their sum's inverse, so
these say which side TLS costs.

The last line printed is one JSON object: each figure, and the ratios
``*_secured_vs_plaintext`` (the target is at least 0.7).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from annal.admin.client import AdminClient
from annal.deploy.cluster import LocalCluster
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.security.scram import ScramCredentialUpsertion
from kafka_clients import PARTITIONS, grpc_consume, grpc_produce, kafka_consume, kafka_produce

USER, PASSWORD = "bench", "bench-secret-password"
LIBRDKAFKA_BATCH = 1_000_000  # librdkafka's default batch.size


def properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def first_metadata_ms(config: dict[str, Any], times: int = 20) -> float:
    """Median time for a new client to get its first Metadata answer."""
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    spent = []
    for _ in range(times):
        started = time.perf_counter()
        KafkaAdmin(config).list_topics(timeout=30)
        spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(spent)


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_with_cpu(
    servers: str,
    topic: str,
    records: int,
    broker_pid: int,
    extra: dict[str, str] | None,
    batch_bytes: int,
) -> tuple[float, float, float]:
    """confluent-kafka's records/s, and the client's and the broker's CPU µs per record."""
    mine, broker = os.times(), process_cpu_s(broker_pid)
    rate = kafka_produce(servers, topic, records, extra, batch_bytes)
    after = os.times()
    client_s = after.user + after.system - mine.user - mine.system
    broker_s = process_cpu_s(broker_pid) - broker
    return rate, client_s / records * 1e6, broker_s / records * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--records", type=int, help="records per run (default 500k; --quick 200k)")
    parser.add_argument("--rounds", type=int, help="runs per side (default 3; --quick 2)")
    args = parser.parse_args()
    records = args.records or (200_000 if args.quick else 500_000)
    rounds = args.rounds or (2 if args.quick else 3)
    roots = [Path(tempfile.mkdtemp(prefix=f"annal-bench-security-{n}-")) for n in ("p", "s")]
    plain, secured = LocalCluster(roots[0]), LocalCluster(roots[1])
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}  # kafka produce: CPU µs per record, lowest of the rounds
    try:
        p_state = plain.up(1)
        s_state = secured.up(1, security="sasl_ssl")
        files = secured.secure_files
        admin_tls = {"security_protocol": "SSL", "ssl_cafile": str(files.ca),
                     "ssl_certfile": str(files.keystore("admin")),
                     "ssl_keyfile": str(files.keystore("admin"))}  # fmt: skip
        p_grpc, s_grpc = (f"127.0.0.1:{s.brokers[0].port}" for s in (p_state, s_state))
        p_kafka, s_kafka = (f"127.0.0.1:{s.brokers[0].kafka_port}" for s in (p_state, s_state))
        p_pid, s_pid = (s.brokers[0].pid for s in (p_state, s_state))
        assert p_pid is not None and s_pid is not None
        with AdminClient(p_grpc) as admin:
            for r in range(rounds):
                for side in ("kafka", "grpc"):
                    admin.create_topic(f"bench-{side}-{r}", PARTITIONS, 1)
        with AdminClient(s_grpc, **admin_tls) as admin:
            for r in range(rounds):
                for side in ("kafka", "grpc"):
                    admin.create_topic(f"bench-{side}-{r}", PARTITIONS, 1)
            admin.alter_user_scram_credentials(
                USER, [ScramCredentialUpsertion("SCRAM-SHA-512", PASSWORD)]
            )
            topics = ResourcePattern.prefixed(ResourceType.TOPIC, "bench-")
            groups = ResourcePattern.prefixed(ResourceType.GROUP, "bench-")
            admin.create_acls([
                AclBinding(pattern, AccessControlEntry(f"User:{USER}", "*", op,
                                                       AclPermissionType.ALLOW))
                for pattern, op in [(topics, AclOperation.WRITE), (topics, AclOperation.READ),
                                    (topics, AclOperation.DESCRIBE), (groups, AclOperation.READ)]
            ])  # fmt: skip
        sasl = {**properties(files.kafka_admin_config), "sasl.username": USER,
                "sasl.password": PASSWORD}  # fmt: skip
        time.sleep(2)  # the ACLs and the user reach the broker's cache (within a second)
        for r in range(rounds):
            figures: dict[str, float] = {}
            for name, batch in (("kafka_produce", LIBRDKAFKA_BATCH), ("kafka_produce_64k", 65536)):
                for side, servers, pid, extra in (("plaintext", p_kafka, p_pid, None),
                                                  ("secured", s_kafka, s_pid, sasl)):  # fmt: skip
                    rate, client_us, broker_us = produce_with_cpu(
                        servers, f"bench-kafka-{r}", records, pid, extra, batch
                    )
                    figures[f"{name}_{side}"] = rate
                    for key, value in ((f"{name}_client_cpu_us_per_record_{side}", client_us),
                                       (f"{name}_broker_cpu_us_per_record_{side}", broker_us)):
                        cpu[key] = min(cpu.get(key, value), value)  # fmt: skip
            figures.update({
                "grpc_produce_plaintext": grpc_produce(p_grpc, f"bench-grpc-{r}", records),
                "grpc_produce_secured": grpc_produce(
                    s_grpc, f"bench-grpc-{r}", records, **admin_tls
                ),
                "kafka_consume_plaintext": kafka_consume(p_kafka, f"bench-kafka-{r}", records),
                "kafka_consume_secured": kafka_consume(
                    s_kafka, f"bench-kafka-{r}", records, sasl
                ),
                "grpc_consume_plaintext": grpc_consume(p_grpc, f"bench-grpc-{r}", records),
                "grpc_consume_secured": grpc_consume(
                    s_grpc, f"bench-grpc-{r}", records, **admin_tls
                ),
            })  # fmt: skip
            print(
                f"round {r + 1}/{rounds}: "
                + ", ".join(f"{k} {v:,.0f}/s" for k, v in figures.items()),
                flush=True,
            )
            for key, figure in figures.items():
                best[key] = max(best.get(key, 0.0), figure)
        connect = {
            "connect_plaintext_ms": first_metadata_ms({"bootstrap.servers": p_kafka}),
            "connect_sasl_scram_ms": first_metadata_ms({**sasl, "bootstrap.servers": s_kafka}),
        }
    finally:
        for cluster in (plain, secured):
            try:
                cluster.down()
            except Exception as exc:  # report the figures' failure, not the clean-up's
                print(f"clean-up: {exc}", file=sys.stderr)
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {f"{k}_records_per_s": round(v) for k, v in best.items()}
    for side in ("kafka_produce", "kafka_produce_64k", "kafka_consume", "grpc_produce",
                 "grpc_consume"):  # fmt: skip
        ratio = best[f"{side}_secured"] / best[f"{side}_plaintext"]
        result[f"{side}_secured_vs_plaintext"] = round(ratio, 3)
    result.update({k: round(v, 1) for k, v in connect.items()})
    result.update({k: round(v, 2) for k, v in sorted(cpu.items())})
    print(json.dumps({**result, "records": records, "rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
