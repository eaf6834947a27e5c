"""Cluster benchmark: one producer and one consumer against a one-broker local cluster.

    .venv/bin/python bench/cluster.py [--quick] [--records N]

Measures, in one run: end-to-end latency percentiles at a fixed moderate
rate (first, on a quiet broker; the consumer is another process and the send
time rides in each value), produce throughput of 100-byte records at acks=1
(uncompressed and lz4), consume throughput of the simple consumer, and the
ceiling of a bare grpcio call carrying the same batch bytes between two
processes.  Throughputs are the best of three runs.  The last line printed is
one JSON object.

The throughput topics have six partitions and the records no keys, as in
Kafka's published single-producer benchmark; the consumer fetches all six in
one request per round, the next round on its way while it reads this one
(``SimpleConsumer.stream``).  For scale, the run also measures the client's own floors in
this interpreter, with no network: ``send()`` into open batches
(``send_floor_records_per_s``), decoding fetched batches into records
(``decode_floor_records_per_s``: each record dropped as soon as it is made),
and the simple consumer's own work on fetched answers, as ``consume`` holds
them, a round of six 1 MiB partitions at a time
(``consumer_floor_records_per_s``).  Last, on three fresh brokers, produce
throughput into a replicated topic (3 replicas, min.insync.replicas 2) at
acks=all, ``produce_rf3_acks_all_records_per_s``, and its ratio to the
single-broker acks=1 figure.

The price of idempotence is measured on the same broker: acks=all produce
runs with and without an idempotent producer, interleaved
(``produce_acks_all_records_per_s``, ``produce_idempotent_records_per_s`` and
``idempotent_vs_acks_all``).

The price of the leader's record validation is measured in the same run: a
second one-broker cluster, started with ``ANNAL_BENCH_NO_RECORD_WALK=1`` (its
leaders check batches whole but do not walk their records), takes the same
produce runs interleaved with the first; ``produce_unvalidated_records_per_s``
and ``validated_vs_unvalidated`` report it (lz4 likewise).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from annal.admin.client import AdminClient
from annal.consumer.simple import FetchResult, SimpleConsumer
from annal.deploy.cluster import LocalCluster
from annal.deploy.zookeeper import free_port
from annal.producer.producer import Producer
from annal.storage.records import BatchBuilder, iter_records
from annal.v1 import annal_pb2 as pb

from annal.topic_partition import TopicPartition

RECORD_SIZE = 100
PARTITIONS = 6

ECHO_SERVER = """
import sys, time, grpc
from concurrent import futures
def handle(request, context):
    return b"ok"
handler = grpc.method_handlers_generic_handler(
    "bench.Sink", {"Put": grpc.unary_unary_rpc_method_handler(handle)}
)
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                     options=[("grpc.max_receive_message_length", 64 << 20)])
server.add_generic_rpc_handlers((handler,))
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
server.wait_for_termination()
"""


def grpc_ceiling(batch: bytes, seconds: float) -> float:
    """MB/s of unary calls carrying ``batch`` to a bare grpcio server in another process."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)])
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        put = channel.unary_unary("/bench.Sink/Put")
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            put(batch, timeout=10)
            sent += len(batch)
        elapsed = time.perf_counter() - started
        channel.close()
        return sent / 1e6 / elapsed
    finally:
        server.kill()
        server.wait()


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    compression: str,
    acks: int | str = 1,
    idempotent: bool = False,
) -> float:
    value = b"v" * RECORD_SIZE
    with Producer(
        bootstrap,
        acks=acks,
        batch_size=64 * 1024,
        linger_ms=5,
        compression=compression,
        enable_idempotence=idempotent,
    ) as p:
        started = time.perf_counter()
        for _ in range(records):
            p.send(topic, value=value)
        p.flush(300)
        return records / (time.perf_counter() - started)


def consume(bootstrap: str, topic: str, records: int) -> float:
    with SimpleConsumer(bootstrap) as consumer:
        started = time.perf_counter()
        offsets = {(topic, p): 0 for p in range(PARTITIONS)}
        count = 0
        rounds = consumer.stream(offsets, max_bytes=1 << 20)
        for results in rounds:
            count += sum(len(result.records) for result in results.values())
            if count >= records:
                break
        rounds.close()
        return count / (time.perf_counter() - started)


def send_floor(records: int) -> float:
    """send() calls per second into open batches, nothing sent (no broker needed)."""
    value = b"v" * RECORD_SIZE
    producer = Producer("127.0.0.1:1", batch_size=1 << 40, linger_ms=10**9)
    producer.cluster.partition_counts["floor"] = PARTITIONS
    started = time.perf_counter()
    for _ in range(records):
        producer.send("floor", value=value)
    elapsed = time.perf_counter() - started
    producer._open.clear()  # nothing to deliver
    producer._unacknowledged.clear()
    producer.close(1)
    return records / elapsed


def decode_floor(batch: bytes, repeat: int) -> float:
    """Records per second decoded from fetched bytes into consumer records."""
    data = batch * repeat
    started = time.perf_counter()
    count = sum(1 for _ in iter_records(data))
    return count / (time.perf_counter() - started)


def consumer_floor(batch: bytes, rounds: int) -> float:
    """Records per second the simple consumer makes of fetched answers with no
    network: its own decoding of six partitions' 1 MiB answers into consumer
    records, a round's worth held at once, as ``consume`` gets them."""
    data = batch * ((1 << 20) // len(batch))
    answers = [pb.PartitionFetchResponse(partition=p, records=data) for p in range(PARTITIONS)]
    topic = pb.TopicFetchResponse(name="floor", partitions=answers)
    response = pb.FetchResponse(topics=[topic])
    wanted = {("floor", p): 0 for p in range(PARTITIONS)}
    count = 0
    with SimpleConsumer("127.0.0.1:1") as consumer:
        started = time.perf_counter()
        for _ in range(rounds):
            results: dict[TopicPartition, FetchResult] = {}
            consumer._read_response(response, wanted, results)
            count += sum(len(result.records) for result in results.values())
            del results
        return count / (time.perf_counter() - started)


READER = """
import json, struct, sys, time
from annal.consumer.simple import LATEST, SimpleConsumer
bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
samples = []
with SimpleConsumer(bootstrap, max_wait_ms=500) as consumer:
    offset = consumer.offsets_before(topic, 0, LATEST)
    print("ready", flush=True)
    deadline = time.monotonic() + 120
    while len(samples) < expected and time.monotonic() < deadline:
        result = consumer.fetch(topic, 0, offset)
        now = time.time_ns()
        samples.extend((now - struct.unpack_from(">q", r.value)[0]) / 1e6 for r in result.records)
        offset = result.next_offset
print(json.dumps(samples), flush=True)
"""


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    """End-to-end milliseconds from ``send()`` to the record in a consumer in
    another process (the send time, in nanoseconds, rides in the value), at
    ``rate`` records/s."""
    expected = int(rate * seconds)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, bootstrap, topic, str(expected)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the latency reader did not start")
        padding = b"x" * (RECORD_SIZE - 8)
        with Producer(bootstrap, acks=1, linger_ms=0) as producer:
            started = time.monotonic()
            for sent in range(expected):
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
                producer.send(topic, value=struct.pack(">q", time.time_ns()) + padding, partition=0)
            producer.flush(60)
        out, _ = reader.communicate(timeout=180)
        samples: list[float] = json.loads(out.strip().splitlines()[-1])
        return samples
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def replicated_produce(records: int, runs: int) -> float:
    """Records/s into three local brokers: 6 partitions of 3 replicas,
    min.insync.replicas 2, acks=all (every record on the whole ISR)."""
    root = Path(tempfile.mkdtemp(prefix="annal-bench-replicated-"))
    cluster = LocalCluster(root)
    try:
        state = cluster.up(3)
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in state.brokers)
        with AdminClient(bootstrap) as admin:
            admin.create_topic("replicated", PARTITIONS, 3, config={"min.insync.replicas": "2"})
        return max(
            produce(bootstrap, "replicated", records, "none", acks="all") for _ in range(runs)
        )
    finally:
        try:
            cluster.down()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def unvalidated_cluster(root: Path) -> tuple[LocalCluster, str]:
    """A one-broker cluster whose leaders skip the record walk: the baseline."""
    cluster = LocalCluster(root)
    os.environ["ANNAL_BENCH_NO_RECORD_WALK"] = "1"  # inherited by the broker process
    try:
        state = cluster.up(1)
    finally:
        del os.environ["ANNAL_BENCH_NO_RECORD_WALK"]
    bootstrap = f"127.0.0.1:{state.brokers[0].port}"
    with AdminClient(bootstrap) as admin:
        for topic in ("plain", "lz4"):
            admin.create_topic(topic, partitions=PARTITIONS)
    return cluster, bootstrap


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, under two minutes")
    parser.add_argument("--records", type=int, help="records per throughput run")
    args = parser.parse_args()
    records = args.records or (200_000 if args.quick else 1_000_000)
    root = Path(tempfile.mkdtemp(prefix="annal-bench-cluster-"))
    cluster = LocalCluster(root / "validated")
    baseline: LocalCluster | None = None
    try:
        state = cluster.up(1)
        bootstrap = f"127.0.0.1:{state.brokers[0].port}"
        with AdminClient(bootstrap) as admin:
            for topic in ("plain", "lz4"):
                admin.create_topic(topic, partitions=PARTITIONS)
            admin.create_topic("latency", partitions=1)
        # The CreateTopics answers came once leaders were known.  Latency first,
        # on a quiet broker: after the throughput runs the kernel is still
        # writing back their hundreds of megabytes.
        print("end-to-end latency ...", flush=True)
        samples = latency(bootstrap, "latency", rate=1000, seconds=5 if args.quick else 15)
        print(f"producing {records:,} records ...", flush=True)
        # Throughputs are the best of ``runs`` interleaved runs, as in
        # bench/storage.py: the machine's weather changes from second to second.
        runs = 3
        baseline, unvalidated = unvalidated_cluster(root / "unvalidated")
        plain = compressed = plain_base = compressed_base = 0.0
        for _ in range(runs):
            plain = max(plain, produce(bootstrap, "plain", records, "none"))
            plain_base = max(plain_base, produce(unvalidated, "plain", records, "none"))
            compressed = max(compressed, produce(bootstrap, "lz4", records, "lz4"))
            compressed_base = max(compressed_base, produce(unvalidated, "lz4", records, "lz4"))
        baseline.down()
        baseline = None
        print("idempotence: acks=all with and without ...", flush=True)
        acks_all = idempotent = 0.0
        for _ in range(runs):
            acks_all = max(acks_all, produce(bootstrap, "plain", records, "none", "all"))
            idempotent = max(
                idempotent, produce(bootstrap, "plain", records, "none", "all", idempotent=True)
            )
        print("consuming ...", flush=True)
        consumed = max(consume(bootstrap, "plain", records) for _ in range(runs))
        builder = BatchBuilder()
        builder.extend([b"v" * RECORD_SIZE] * 600, None, 0)
        batch = builder.build()  # ~64 KiB, as the producer sends
        print("bare gRPC ceiling ...", flush=True)
        ceiling = grpc_ceiling(batch, 3 if args.quick else 10)
        print("client floors ...", flush=True)
        floor_send = max(send_floor(min(records, 300_000)) for _ in range(runs))
        floor_decode = max(decode_floor(batch, 200) for _ in range(runs))
        floor_consumer = max(consumer_floor(batch, 3) for _ in range(runs))
    finally:
        try:
            cluster.down()
            if baseline is not None:
                baseline.down()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"replicated: 3 brokers, acks=all, {records // 2:,} records ...", flush=True)
    replicated = replicated_produce(records // 2, runs=3)
    record_bytes = len(batch) / 600
    produce_mb_s = plain * record_bytes / 1e6
    result = {
        "records": records,
        "produce_records_per_s": round(plain),
        "produce_lz4_records_per_s": round(compressed),
        "produce_unvalidated_records_per_s": round(plain_base),
        "produce_lz4_unvalidated_records_per_s": round(compressed_base),
        "validated_vs_unvalidated": round(plain / plain_base, 3),
        "validated_vs_unvalidated_lz4": round(compressed / compressed_base, 3),
        "produce_acks_all_records_per_s": round(acks_all),
        "produce_idempotent_records_per_s": round(idempotent),
        "idempotent_vs_acks_all": round(idempotent / acks_all, 3),
        "consume_records_per_s": round(consumed),
        "e2e_p50_ms": round(percentile(samples, 0.50), 2),
        "e2e_p99_ms": round(percentile(samples, 0.99), 2),
        "e2e_mean_ms": round(statistics.fmean(samples), 2) if samples else None,
        "e2e_samples": len(samples),
        "produce_mb_s": round(produce_mb_s, 1),
        "grpc_ceiling_mb_s": round(ceiling, 1),
        "produce_vs_grpc": round(produce_mb_s / ceiling, 3),
        "send_floor_records_per_s": round(floor_send),
        "decode_floor_records_per_s": round(floor_decode),
        "produce_vs_send_floor": round(plain / floor_send, 3),
        "produce_rf3_acks_all_records_per_s": round(replicated),
        "replicated_vs_single": round(replicated / plain, 3),
        "consume_vs_decode_floor": round(consumed / floor_decode, 3),
        "consumer_floor_records_per_s": round(floor_consumer),
        "consume_vs_consumer_floor": round(consumed / floor_consumer, 3),
        "cpus": os.cpu_count(),
    }
    for key, value in result.items():
        print(f"  {key:28} {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
