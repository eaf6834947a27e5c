"""Kafka's own client through annal's Kafka listener, beside annal's clients over gRPC.

    .venv/bin/python bench/kafka_clients.py [--quick] [--records N]

On a one-broker local cluster (both listeners), each side writes N 100-byte
records to a topic of 4 partitions of its own and reads them back:

* confluent-kafka (librdkafka): a Producer (acks=1, lz4 off, linger 5 ms,
  batches of 64 KiB) through the ``PLAINTEXT://`` listener, handed 5,000
  records a call (``produce_batch``), then a Consumer in assign mode from the
  earliest offsets, counting messages until N;
* annal's Producer (``send_many``, 5,000 records a call) and SimpleConsumer
  over gRPC, with the same settings.

The two sides alternate, best of ``--rounds`` each, on the same broker, so
the ratio compares the listeners and not the machine's mood.  Records go to
the producers in bulk, so that no Python call per record sets the pace:
librdkafka's figures then measure the broker.  The last line printed is
one JSON object: ``kafka_produce_records_per_s``,
``kafka_consume_records_per_s``, ``grpc_produce_records_per_s``,
``grpc_consume_records_per_s``, and the record count and rounds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.cluster import LocalCluster
from annal.producer.producer import Producer

from annal.topic_partition import TopicPartition

PARTITIONS = 4
RECORD_SIZE = 100
CHUNK = 5_000  # records handed to a producer per call


def kafka_produce(
    servers: str,
    topic: str,
    records: int,
    extra: dict[str, str] | None = None,
    batch_bytes: int = 64 * 1024,
) -> float:
    """confluent-kafka's records/s; ``extra``: more settings (security)."""
    from confluent_kafka import Producer as KafkaProducer

    producer = KafkaProducer(
        {
            **(extra or {}),
            "bootstrap.servers": servers,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    # produce_batch: librdkafka's per-message work without a Python call per
    # record (with produce() the interpreter, not the broker, sets the pace)
    chunk = [{"value": b"v" * RECORD_SIZE} for _ in range(CHUNK)]
    started = time.perf_counter()
    sent = 0
    while sent < records:
        messages = chunk[: min(CHUNK, records - sent)]
        partition = (sent // CHUNK) % PARTITIONS
        queued = producer.produce_batch(topic, messages, partition=partition)
        while queued < len(messages):  # the local queue was full: wait, then the rest
            producer.poll(0.01)
            messages = [m for m in messages if "_error" in m]
            for m in messages:
                del m["_error"]
            queued = producer.produce_batch(topic, messages, partition=partition)
        producer.poll(0)
        sent += CHUNK
    left = producer.flush(300)
    elapsed = time.perf_counter() - started
    if left:
        raise RuntimeError(f"confluent-kafka left {left} records undelivered")
    return records / elapsed


def kafka_consume(
    servers: str, topic: str, records: int, extra: dict[str, str] | None = None
) -> float:
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        {
            **(extra or {}),
            "bootstrap.servers": servers,
            "group.id": f"bench-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            # a deep local queue, and no second's pause when it is full: the reader
            # here, not the broker, should set the pace
            "queued.max.messages.kbytes": 1024 * 1024,
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 1,
        }
    )
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count = 0
    started = time.perf_counter()
    deadline = started + 300
    while count < records and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                count += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return count / elapsed


def grpc_produce(bootstrap: str, topic: str, records: int, **security: str) -> float:
    """annal's Producer's records/s; ``security``: its TLS settings (ssl_cafile...)."""
    value = b"v" * RECORD_SIZE
    with Producer(bootstrap, acks=1, batch_size=64 * 1024, linger_ms=5, **security) as producer:
        values = [value] * CHUNK
        started = time.perf_counter()
        for sent in range(0, records, CHUNK):
            partition = (sent // CHUNK) % PARTITIONS
            producer.send_many(topic, values[: records - sent], partition=partition)
        producer.flush(300)
        return records / (time.perf_counter() - started)


def grpc_consume(bootstrap: str, topic: str, records: int, **security: str) -> float:
    with SimpleConsumer(bootstrap, **security) as consumer:
        offsets = {TopicPartition(topic, p): 0 for p in range(PARTITIONS)}
        count = 0
        started = time.perf_counter()
        rounds = consumer.stream(offsets, max_bytes=1 << 20)
        for results in rounds:
            count += sum(len(r.records) for r in results.values())
            if count >= records:
                break
        rounds.close()
        return count / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--records", type=int, help="records per run (default 1M; --quick 300k)")
    parser.add_argument("--rounds", type=int, help="runs per side (default 3; --quick 2)")
    args = parser.parse_args()
    records = args.records or (300_000 if args.quick else 1_000_000)
    rounds = args.rounds or (2 if args.quick else 3)
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print("confluent-kafka is not installed (make setup installs it)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="annal-bench-kafka-"))
    cluster = LocalCluster(root)
    best = {"kafka_produce": 0.0, "kafka_consume": 0.0, "grpc_produce": 0.0, "grpc_consume": 0.0}
    try:
        state = cluster.up(1)
        broker = state.brokers[0]
        bootstrap, servers = f"127.0.0.1:{broker.port}", f"127.0.0.1:{broker.kafka_port}"
        with AdminClient(bootstrap) as admin:
            for r in range(rounds):
                for side in ("kafka", "grpc"):
                    admin.create_topic(f"{side}-{r}", PARTITIONS, 1)
        for r in range(rounds):
            figures = {
                "kafka_produce": kafka_produce(servers, f"kafka-{r}", records),
                "grpc_produce": grpc_produce(bootstrap, f"grpc-{r}", records),
                "kafka_consume": kafka_consume(servers, f"kafka-{r}", records),
                "grpc_consume": grpc_consume(bootstrap, f"grpc-{r}", records),
            }
            print(
                f"round {r + 1}/{rounds}: "
                + ", ".join(f"{k} {v:,.0f}/s" for k, v in figures.items()),
                flush=True,
            )
            for key, figure in figures.items():
                best[key] = max(best[key], figure)
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    result = {f"{k}_records_per_s": round(v) for k, v in best.items()}
    print(json.dumps({**result, "records": records, "rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
