"""``annal verifiable-producer`` / ``verifiable-consumer``: one JSON event per line.

As Kafka's kafka-verifiable-*.sh, for drills that check what was acknowledged
against what was read: the producer sends consecutive integers as values and
reports each acknowledgement (``producer_send_success`` with topic,
partition, offset, key, value) or failure (``producer_send_error``); the
consumer reports what it read (``records_consumed`` with per-partition
offset ranges, and ``record_data`` per record with ``--verbose``) and, as it
shuts down, how many records repeated a value it had already read
(``duplicates``: a record stored twice, which an idempotent producer's
retries never cause).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from annal.topic_partition import TopicPartition

if TYPE_CHECKING:
    from annal.consumer.group_offsets import GroupOffsets


def emit(name: str, **fields: Any) -> None:
    print(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields}), flush=True)


def add_parsers(commands: Any) -> None:
    producer = commands.add_parser(
        "verifiable-producer",
        help="send consecutive integers, one JSON event per acknowledgement",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    producer.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    producer.add_argument("--topic", required=True)
    producer.add_argument("--max-messages", type=int, default=-1, help="-1: until interrupted")
    producer.add_argument("--throughput", type=int, default=-1, help="records/s; -1: no limit")
    producer.add_argument(
        "--acks",
        default="all",
        choices=["all", "-1", "0", "1"],
        help="all (-1): the whole ISR has each record; 1: the leader; 0: no answer (default all)",
    )
    producer.add_argument("--value-prefix", type=int, help="values become PREFIX.N")
    producer.add_argument("--keyed", action="store_true", help="key each record with its value")
    producer.set_defaults(run=run_producer)

    consumer = commands.add_parser(
        "verifiable-consumer",
        help="read a topic, one JSON event per batch of records",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    consumer.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    consumer.add_argument("--topic", required=True)
    consumer.add_argument(
        "--max-messages", type=int, default=-1, help="-1: until idle or interrupted"
    )
    consumer.add_argument("--timeout-ms", type=int, default=-1, help="stop after this long idle")
    consumer.add_argument("--reset-policy", choices=["earliest", "latest"], default="earliest")
    consumer.add_argument("--verbose", action="store_true", help="also one record_data per record")
    consumer.add_argument(
        "--group-id", metavar="GROUP",
        help="start at GROUP's committed offsets (--reset-policy where it has none) and "
        "commit after each batch, one offsets_committed event each, as Kafka's tool",
    )  # fmt: skip
    consumer.set_defaults(run=run_consumer)


def run_producer(args: argparse.Namespace) -> int:
    from annal.producer.producer import ProduceError, Producer

    emit("startup_complete")
    sent = acked = 0
    started = time.monotonic()
    try:
        with Producer(args.bootstrap_server, acks=args.acks, linger_ms=1) as producer:

            def report(future: Future[Any], *, key: str | None, value: str) -> None:
                nonlocal acked
                error = future.exception()
                if error is None:
                    meta = future.result()
                    acked += 1
                    emit(
                        "producer_send_success", topic=meta.topic, partition=meta.partition,
                        offset=meta.offset, key=key, value=value,
                    )  # fmt: skip
                else:
                    emit(
                        "producer_send_error", exception=type(error).__name__, message=str(error),
                        topic=args.topic, key=key, value=value,
                    )  # fmt: skip

            while args.max_messages < 0 or sent < args.max_messages:
                if args.throughput > 0:
                    ahead = sent / args.throughput - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
                value = (
                    f"{args.value_prefix}.{sent}" if args.value_prefix is not None else str(sent)
                )
                key = value if args.keyed else None
                future = producer.send(args.topic, value=value, key=key)
                future.add_done_callback(partial(report, key=key, value=value))
                sent += 1
            producer.flush()
    except ProduceError as exc:
        emit(
            "producer_send_error", exception=type(exc).__name__, message=str(exc), topic=args.topic
        )
        return 1
    except KeyboardInterrupt:
        pass
    elapsed = max(time.monotonic() - started, 1e-9)
    emit("shutdown_complete")
    emit(
        "tool_data", sent=sent, acked=acked, target_throughput=args.throughput,
        avg_throughput=round(sent / elapsed, 1),
    )  # fmt: skip
    return 0


def run_consumer(args: argparse.Namespace) -> int:
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import EARLIEST, LATEST, ConsumerError, SimpleConsumer

    emit("startup_complete")
    group = None if args.group_id is None else GroupOffsets(args.bootstrap_server, args.group_id)
    consumed = duplicates = 0
    seen: set[bytes | None] = set()  # values read: the producer's are unique
    idle_since = time.monotonic()
    try:
        with SimpleConsumer(args.bootstrap_server, max_wait_ms=200) as consumer:
            partitions = consumer.partitions_for(args.topic)
            emit(
                "partitions_assigned",
                partitions=[{"topic": args.topic, "partition": p} for p in partitions],
            )
            start = EARLIEST if args.reset_policy == "earliest" else LATEST
            committed = {} if group is None else group.committed()
            positions = {}
            for p in partitions:
                at = committed.get(TopicPartition(args.topic, p))
                positions[p] = at if at is not None and at >= 0 else consumer.offsets_before(
                    args.topic, p, start
                )
            while args.max_messages < 0 or consumed < args.max_messages:
                results = consumer.multi_fetch(
                    {TopicPartition(args.topic, p): o for p, o in positions.items()}
                )
                summary = []
                for (_, p), result in sorted(results.items()):
                    positions[p] = result.next_offset
                    records = result.records
                    if args.max_messages >= 0:
                        records = records[: args.max_messages - consumed]
                    if not records:
                        continue
                    consumed += len(records)
                    for r in records:
                        if r.value in seen:
                            duplicates += 1
                        seen.add(r.value)
                    summary.append(
                        {
                            "topic": args.topic, "partition": p, "count": len(records),
                            "minOffset": records[0].offset, "maxOffset": records[-1].offset,
                        }
                    )  # fmt: skip
                    if args.verbose:
                        for r in records:
                            emit(
                                "record_data", topic=args.topic, partition=p, offset=r.offset,
                                key=_text(r.key), value=_text(r.value),
                            )  # fmt: skip
                if summary:
                    emit(
                        "records_consumed",
                        count=sum(s["count"] for s in summary),
                        partitions=summary,
                    )
                    if group is not None:
                        _commit(group, {
                            TopicPartition(args.topic, s["partition"]): s["maxOffset"] + 1
                            for s in summary
                        })  # fmt: skip
                    idle_since = time.monotonic()
                elif (
                    args.timeout_ms >= 0
                    and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms
                ):
                    break
    except ConsumerError as exc:
        emit("consumer_error", error=exc.error, message=str(exc))
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        if group is not None:
            group.close()
    emit("shutdown_complete", total=consumed, duplicates=duplicates)
    return 0


def _commit(group: GroupOffsets, offsets: dict[TopicPartition, int]) -> None:
    """Commit the next offsets to read and report it as Kafka's tool does."""
    from annal.consumer.simple import ConsumerError

    listed = [
        {"topic": tp.topic, "partition": tp.partition, "offset": offset}
        for tp, offset in sorted(offsets.items())
    ]
    try:
        group.commit(offsets)
    except ConsumerError as exc:
        emit("offsets_committed", offsets=listed, success=False, error=str(exc))
        return
    emit("offsets_committed", offsets=listed, success=True)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")
