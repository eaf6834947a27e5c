"""What transactions cost: transactional produce against idempotent produce, and
read_committed against read_uncommitted consumption, with Kafka's own client.

    .venv/bin/python bench/transactions.py [--quick] [--records N] [--rounds R]

On a three-broker local cluster (``annal cluster up``'s, replication factor 3),
confluent-kafka (librdkafka) writes N 100-byte records to a topic of 6
partitions:

* idempotent: ``enable.idempotence``, acks=all, one ``flush`` at the end;
* transactional: the same producer settings with a ``transactional.id``,
  in transactions of 1,000 records spread over the 6 partitions, each
  committed before the next begins (``commit_transaction`` flushes); the
  time of each commit is kept for its p50 and p99;
* flushed: the idempotent producer again, with a ``flush`` after every 1,000
  records, as ``commit_transaction`` does, and nothing else of a transaction.
  No transactional producer of this shape can go faster than this one, so
  ``flush_bound_ratio`` (flushed / idempotent) is the ceiling of
  ``transactional_ratio``, and ``transactional_vs_flushed_ratio`` is what the
  transaction protocol itself costs (AddPartitionsToTxn, EndTxn, the markers).

Then a consumer in assign mode reads the transactional topic from the start
with ``isolation.level=read_uncommitted`` and again with ``read_committed``
(control records and the last stable offset on every fetch), counting N
records.  The sides alternate, best of ``--rounds`` each, so that the ratios
compare the modes and not the machine's mood.

The last line is one JSON object: ``idempotent_records_per_s``,
``transactional_records_per_s``, ``transactional_ratio`` (target >= 0.8),
``flushed_records_per_s``, ``flush_bound_ratio``,
``transactional_vs_flushed_ratio``, ``commit_p50_ms``, ``commit_p99_ms``,
``read_uncommitted_records_per_s``,
``read_committed_records_per_s``, ``read_committed_ratio`` (target >= 0.9),
and the record count and rounds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from annal.admin.client import AdminClient
from annal.deploy.cluster import LocalCluster

PARTITIONS = 6
RECORD_SIZE = 100
PER_TRANSACTION = 1_000
_ids = itertools.count()


def producer(servers: str, **more: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 64 * 1024,
            "queue.buffering.max.messages": 1_000_000,
            **more,
        }
    )


def _produce(p: Any, topic: str, first: int, count: int, value: bytes) -> None:
    for i in range(first, first + count):
        while True:
            try:
                p.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)


def idempotent(servers: str, topic: str, records: int) -> float:
    p = producer(servers)
    value = b"v" * RECORD_SIZE
    started = time.perf_counter()
    _produce(p, topic, 0, records, value)
    assert p.flush(120) == 0, "records left unsent"
    return records / (time.perf_counter() - started)


def flushed(servers: str, topic: str, records: int) -> float:
    p = producer(servers)
    value = b"v" * RECORD_SIZE
    started = time.perf_counter()
    for first in range(0, records, PER_TRANSACTION):
        _produce(p, topic, first, min(PER_TRANSACTION, records - first), value)
        assert p.flush(60) == 0, "records left unsent"
    return records / (time.perf_counter() - started)


def transactional(servers: str, topic: str, records: int) -> tuple[float, list[float]]:
    p = producer(servers, **{"transactional.id": f"bench-{next(_ids)}"})
    p.init_transactions(60)
    value = b"v" * RECORD_SIZE
    commits: list[float] = []
    started = time.perf_counter()
    for first in range(0, records, PER_TRANSACTION):
        p.begin_transaction()
        _produce(p, topic, first, min(PER_TRANSACTION, records - first), value)
        before = time.perf_counter()
        p.commit_transaction(60)
        commits.append((time.perf_counter() - before) * 1000)
    return records / (time.perf_counter() - started), commits


def consume(servers: str, topic: str, records: int, isolation: str) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 8 * 1024 * 1024,
        }
    )
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    count = 0
    started = time.perf_counter()
    deadline = started + 300
    try:
        while count < records and time.perf_counter() < deadline:
            count += sum(1 for m in c.consume(10_000, 0.5) if m.error() is None)
    finally:
        c.close()
    if count < records:
        raise RuntimeError(f"{isolation}: read {count} of {records} records")
    return records / (time.perf_counter() - started)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--records", type=int, help="records per run (default 200k; --quick 30k)")
    parser.add_argument("--rounds", type=int, help="runs per side (default 3; --quick 1)")
    args = parser.parse_args()
    records = args.records or (30_000 if args.quick else 200_000)
    rounds = args.rounds or (1 if args.quick else 3)
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print("confluent-kafka is not installed (make setup installs it)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="annal-bench-txn-"))
    cluster = LocalCluster(root)
    best = dict.fromkeys(
        ("idempotent", "transactional", "flushed", "uncommitted", "committed"), 0.0
    )
    commits: list[float] = []
    try:
        state = cluster.up(3)
        servers = ",".join(f"127.0.0.1:{b.kafka_port}" for b in state.brokers)
        with AdminClient(f"127.0.0.1:{state.brokers[0].port}") as admin:
            for r in range(rounds):
                for side in ("idem", "txn", "flushed"):
                    admin.create_topic(f"{side}-{r}", PARTITIONS, 3)
        for r in range(rounds):
            txn_rate, txn_commits = transactional(servers, f"txn-{r}", records)
            commits.extend(txn_commits)
            figures = {
                "idempotent": idempotent(servers, f"idem-{r}", records),
                "transactional": txn_rate,
                "flushed": flushed(servers, f"flushed-{r}", records),
                "uncommitted": consume(servers, f"txn-{r}", records, "read_uncommitted"),
                "committed": consume(servers, f"txn-{r}", records, "read_committed"),
            }
            print(
                f"round {r + 1}/{rounds}: "
                + ", ".join(f"{k} {v:,.0f} records/s" for k, v in figures.items())
                + f", commit p50 {statistics.median(txn_commits):.1f} ms",
                flush=True,
            )
            for key, figure in figures.items():
                best[key] = max(best[key], figure)
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "idempotent_records_per_s": round(best["idempotent"]),
        "transactional_records_per_s": round(best["transactional"]),
        "transactional_ratio": round(best["transactional"] / best["idempotent"], 3),
        "flushed_records_per_s": round(best["flushed"]),
        "flush_bound_ratio": round(best["flushed"] / best["idempotent"], 3),
        "transactional_vs_flushed_ratio": round(best["transactional"] / best["flushed"], 3),
        "commit_p50_ms": round(percentile(commits, 0.5), 1),
        "commit_p99_ms": round(percentile(commits, 0.99), 1),
        "read_uncommitted_records_per_s": round(best["uncommitted"]),
        "read_committed_records_per_s": round(best["committed"]),
        "read_committed_ratio": round(best["committed"] / best["uncommitted"], 3),
        "records": records,
        "rounds": rounds,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
