"""Connections benchmark: produce latency while many idle consumers long-poll.

    .venv/bin/python bench/connections.py [--quick] [--counts 0,16,100,1000]

On a one-broker local cluster, N idle consumers each hold their own gRPC
channel and long-poll an empty partition without pause (Fetch with
``max_wait_ms`` 1000 and ``min_bytes`` 1, asked again as soon as answered),
from helper processes, each starting at a random moment within the first second
(independent consumers are not in step).  Meanwhile this process sends 200 one-record Produce
requests (acks=1) to another topic, one at a time, and times each.  For
every N it reports ``produce_p50_ms``, ``produce_p99_ms``, the broker's
thread count and resident memory, and errors (failed produces plus failed
polls).  Last, on three brokers, the same at N=100 with acks=all into a
topic of three replicas.  N runs 0, 16, 100 and 1000 (``--quick``: 0, 16,
100).  The last line printed is one JSON object.

What a broker should show: the same produce latency and thread count
whatever N is, since a waiting poll costs a watch in the purgatory, not a
thread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from annal.admin.client import AdminClient
from annal.deploy.cluster import LocalCluster
from annal.storage.records import BatchBuilder
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

POLLERS_PER_PROCESS = 250

# A helper process: ``count`` channels, each looping an idle long poll until
# stdin closes; prints how many polls failed when it ends.
POLLER = """
import asyncio, random, sys
import grpc
from annal.v1 import annal_pb2 as pb, annal_pb2_grpc

endpoint, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
request = pb.FetchRequest(replica_id=-1, max_wait_ms=1000, min_bytes=1, max_bytes=1 << 20,
    topics=[pb.TopicFetchData(name=topic, partitions=[
        pb.PartitionFetchData(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])

async def poll(stop, errors, started):
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)
        await channel.channel_ready()
        await asyncio.sleep(random.random())  # independent consumers: not in step
        first = True
        while not stop.is_set():
            try:
                await stub.Fetch(request, timeout=30)
            except grpc.aio.AioRpcError:
                errors[0] += 1
                await asyncio.sleep(0.1)
            if first:
                started[0] += 1
                first = False
                if started[0] == count:
                    print("ready", flush=True)

async def main():
    stop, errors, started = asyncio.Event(), [0], [0]
    tasks = [asyncio.create_task(poll(stop, errors, started)) for _ in range(count)]
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stop.set()
    await asyncio.wait(tasks, timeout=5)
    print(errors[0], flush=True)

asyncio.run(main())
"""


class Pollers:
    """``count`` idle long-polling consumers spread over helper processes."""

    def __init__(self, endpoint: str, topic: str, count: int) -> None:
        self.processes: list[subprocess.Popen[str]] = []
        remaining = count
        while remaining > 0:
            share = min(remaining, POLLERS_PER_PROCESS)
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-c", POLLER, endpoint, topic, str(share)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            remaining -= share
        for process in self.processes:  # every poll answered once: all connected
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a poller process failed to start")
        time.sleep(1.0)  # let the pollers settle into waiting

    def stop(self) -> int:
        """Stop them; how many polls failed."""
        errors = 0
        for process in self.processes:
            out, _ = process.communicate("", timeout=60)
            errors += int(out.split()[-1]) if out.split() else 1
        return errors


def broker_usage(pid: int) -> tuple[int, float]:
    """(threads, resident MB) of a process, from /proc."""
    threads = rss_kb = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    return threads, rss_kb / 1024


def produce_latencies(
    endpoint: str, topic: str, acks: int, requests: int
) -> tuple[list[float], int]:
    builder = BatchBuilder()
    builder.append(None, b"x" * 100)
    request = pb.ProduceRequest(
        acks=acks,
        timeout_ms=30_000,
        topics=[
            pb.TopicProduceData(
                name=topic,
                partitions=[pb.PartitionProduceData(partition=0, records=builder.build())],
            )
        ],
    )
    samples: list[float] = []
    errors = 0
    with grpc.insecure_channel(endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)
        stub.Produce(request, timeout=30)  # connected and warm
        for _ in range(requests):
            started = time.perf_counter()
            try:
                response = stub.Produce(request, timeout=30)
                if response.topics[0].partitions[0].error != pb.NONE:
                    errors += 1
            except grpc.RpcError:
                errors += 1
            samples.append((time.perf_counter() - started) * 1000)
    return samples, errors


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure(
    cluster_root: Path, brokers: int, counts: list[int], acks: int
) -> list[dict[str, object]]:
    cluster = LocalCluster(cluster_root)
    rows: list[dict[str, object]] = []
    try:
        state = cluster.up(brokers)
        leader_entry = state.brokers[0]
        endpoint = f"127.0.0.1:{leader_entry.port}"
        with AdminClient(endpoint) as admin:
            admin.create_topic(
                "idle", 1, brokers, config={"min.insync.replicas": str(min(brokers, 2))}
            )
            admin.create_topic(
                "busy", 1, brokers, config={"min.insync.replicas": str(min(brokers, 2))}
            )
            leaders = {
                t.name: t.partitions[0].leader for t in admin.describe_topics(["idle", "busy"])
            }
        by_id = {b.id: b for b in state.brokers}
        idle_at = f"127.0.0.1:{by_id[leaders['idle']].port}"
        busy = by_id[leaders["busy"]]
        busy_at = f"127.0.0.1:{busy.port}"
        for count in counts:
            print(f"{brokers} broker(s), acks={acks}: {count} idle long polls ...", flush=True)
            pollers = Pollers(idle_at, "idle", count)
            try:
                samples, errors = produce_latencies(busy_at, "busy", acks, 200)
                assert busy.pid is not None
                threads, rss = broker_usage(busy.pid)
            finally:
                errors += pollers.stop()
            rows.append(
                {
                    "brokers": brokers,
                    "acks": acks,
                    "idle_consumers": count,
                    "produce_p50_ms": round(percentile(samples, 0.5), 2),
                    "produce_p99_ms": round(percentile(samples, 0.99), 2),
                    "broker_threads": threads,
                    "broker_rss_mb": round(rss, 1),
                    "errors": errors,
                }
            )
            print("  " + json.dumps(rows[-1]), flush=True)
    finally:
        cluster.down()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="N = 0, 16, 100: under two minutes")
    parser.add_argument("--counts", help="comma-separated N (default 0,16,100,1000)")
    args = parser.parse_args()
    counts = [
        int(n) for n in (args.counts or ("0,16,100" if args.quick else "0,16,100,1000")).split(",")
    ]
    root = Path(tempfile.mkdtemp(prefix="annal-bench-connections-"))
    try:
        single = measure(root / "one", 1, counts, acks=1)
        replicated = measure(root / "three", 3, [100], acks=-1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    top = single[-1]
    base = single[0]
    result = {
        "single_broker": single,
        "three_brokers_acks_all": replicated,
        "max_idle_consumers": top["idle_consumers"],
        "produce_p99_ms_at_max": top["produce_p99_ms"],
        "broker_threads_at_0": base["broker_threads"],
        "broker_threads_at_max": top["broker_threads"],
        "broker_rss_mb_at_max": top["broker_rss_mb"],
        "errors": sum(int(str(row["errors"])) for row in single + replicated),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
