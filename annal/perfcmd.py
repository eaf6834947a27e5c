"""``annal perf produce`` / ``annal perf consume``, as kafka-*-perf-test.sh."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from annal.clierrors import fail
from annal.topic_partition import TopicPartition


def add_parser(commands: Any) -> None:
    perf = commands.add_parser(
        "perf", help="producer and consumer throughput tests", description=__doc__
    )
    actions = perf.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    produce = actions.add_parser("produce", help="send --num-records records and report")
    produce.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=100, help="bytes per value")
    produce.add_argument("--throughput", type=int, default=-1, help="records/s; -1: unthrottled")
    produce.add_argument(
        "--producer-props",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="acks, batch.size, linger.ms, compression.type, retries",
    )
    produce.add_argument("--json", action="store_true", help="print one JSON object")
    consume = actions.add_parser(
        "consume", help="read --messages records and report",
        description="Read --messages records from the start of every partition of --topic "
        "and report as kafka-consumer-perf-test.sh does: a CSV header and line (start.time, "
        "end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec), with "
        "--show-detailed-stats one line per --reporting-interval too. Stopping short "
        "(no record for --timeout ms) says so and exits 1.",
    )  # fmt: skip
    consume.add_argument(
        "--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
        metavar="HOST:PORT[,...]",
    )  # fmt: skip
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True)
    consume.add_argument("--fetch-size", type=int, default=1 << 20, help="bytes per fetch")
    consume.add_argument(
        "--timeout", type=int, default=10_000, metavar="MS",
        help="give up when no record arrives for this long (default %(default)s)",
    )  # fmt: skip
    consume.add_argument(
        "--show-detailed-stats", action="store_true",
        help="a CSV line every --reporting-interval as well",
    )  # fmt: skip
    consume.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")
    consume.add_argument("--hide-header", action="store_true", help="no CSV header line")
    consume.add_argument("--json", action="store_true", help="print one JSON object")
    perf.set_defaults(run=run)


def _flag(text: str) -> bool:
    return text.strip().lower() == "true"


PRODUCER_PROPS: dict[str, tuple[str, Callable[[str], object]]] = {
    "acks": ("acks", str),  # all, -1, 0 or 1
    "batch.size": ("batch_size", int),
    "linger.ms": ("linger_ms", int),
    "compression.type": ("compression", str),
    "retries": ("retries", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "max.block.ms": ("max_block_ms", int),
    "enable.idempotence": ("enable_idempotence", _flag),
}


def run(args: argparse.Namespace) -> int:
    if args.action == "produce":
        return run_produce(args)
    return run_consume(args)


def _record_latency(latencies: list[float], sent_at: float, future: object) -> None:
    latencies.append((time.monotonic() - sent_at) * 1000)


PROGRESS_S = 5.0  # a progress line this often, as kafka-producer-perf-test.sh


@dataclass(frozen=True, slots=True)
class _Window:
    started: float
    records: int  # sent before the window
    latencies: int  # latency samples before the window


def _progress(
    window: _Window, sent: int, record_size: int, latencies: list[float], to_stderr: bool
) -> _Window:
    """Print the window's line (on stderr under --json, which keeps stdout one
    JSON object) and start the next window."""
    now = time.monotonic()
    records = sent - window.records
    rate = records / (now - window.started)
    samples = latencies[window.latencies :]
    average = sum(samples) / len(samples) if samples else 0.0
    print(
        f"{records} records sent, {rate:.1f} records/sec ({rate * record_size / 1e6:.2f} "
        f"MB/sec), {average:.1f} ms avg latency, {max(samples, default=0.0):.1f} ms max latency.",
        file=sys.stderr if to_stderr else sys.stdout,
        flush=True,
    )
    return _Window(now, sent, len(latencies))


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run_produce(args: argparse.Namespace) -> int:
    from annal.producer.producer import ProduceError, Producer

    options: dict[str, Any] = {}
    for pair in args.producer_props:
        key, sep, value = pair.partition("=")
        if not sep or key not in PRODUCER_PROPS:
            print(
                f"annal perf produce: unsupported producer property {pair!r} "
                f"(known: {', '.join(PRODUCER_PROPS)})",
                file=sys.stderr,
            )
            return 2
        name, kind = PRODUCER_PROPS[key]
        options[name] = kind(value)
    value = b"x" * args.record_size
    latencies: list[float] = []
    try:
        with Producer(args.bootstrap_server, **options) as producer:
            started = time.monotonic()
            window = _Window(started, 0, 0)
            for i in range(args.num_records):
                if i and i % 1000 == 0 and time.monotonic() - window.started >= PROGRESS_S:
                    window = _progress(window, i, args.record_size, latencies, args.json)
                if args.throughput > 0:
                    ahead = i / args.throughput - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
                sent_at = time.monotonic()
                future = producer.send(args.topic, value=value)
                if i % 100 == 0:  # sample latencies, as the Java tool samples too
                    future.add_done_callback(partial(_record_latency, latencies, sent_at))
            producer.flush()
            elapsed = time.monotonic() - started
    except ProduceError as exc:
        return fail("annal perf produce", exc)
    ordered = sorted(latencies)
    report = {
        "records": args.num_records,
        "records_per_s": round(args.num_records / elapsed, 1),
        "mb_per_s": round(args.num_records * args.record_size / 1e6 / elapsed, 2),
        "avg_latency_ms": round(sum(ordered) / len(ordered), 2) if ordered else 0.0,
        "max_latency_ms": round(ordered[-1], 2) if ordered else 0.0,
        "p50_ms": round(_percentile(ordered, 0.50), 2),
        "p95_ms": round(_percentile(ordered, 0.95), 2),
        "p99_ms": round(_percentile(ordered, 0.99), 2),
        "p999_ms": round(_percentile(ordered, 0.999), 2),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"{report['records']} records sent, {report['records_per_s']} records/sec "
            f"({report['mb_per_s']} MB/sec), {report['avg_latency_ms']} ms avg latency, "
            f"{report['max_latency_ms']} ms max latency, {report['p50_ms']} ms 50th, "
            f"{report['p95_ms']} ms 95th, {report['p99_ms']} ms 99th, "
            f"{report['p999_ms']} ms 99.9th."
        )
    return 0


CSV_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def _when(wall: float) -> str:
    """Kafka's default --date-format, yyyy-MM-dd HH:mm:ss:SSS."""
    moment = time.localtime(wall)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment) + f":{int(wall * 1000) % 1000:03d}"


def _csv_line(began: float, ended: float, size: int, records: int) -> str:
    """One CSV line from ``began`` to ``ended`` (wall-clock seconds); annal's
    consumer has no group rebalance, so fetching is all of the time."""
    seconds = max(ended - began, 1e-9)
    mb = size / (1024 * 1024)
    return (
        f"{_when(began)}, {_when(ended)}, {mb:.4f}, {mb / seconds:.4f}, {records}, "
        f"{records / seconds:.4f}, 0, {int(seconds * 1000)}, {mb / seconds:.4f}, "
        f"{records / seconds:.4f}"
    )


def run_consume(args: argparse.Namespace) -> int:
    from annal.consumer.simple import EARLIEST, ConsumerError, SimpleConsumer

    consumed = size = 0
    if not args.json and not args.hide_header:
        print(CSV_HEADER, flush=True)
    try:
        with SimpleConsumer(args.bootstrap_server) as consumer:
            partitions = consumer.partitions_for(args.topic)
            positions = {p: consumer.offsets_before(args.topic, p, EARLIEST) for p in partitions}
            started, began = time.monotonic(), time.time()
            last_record = started
            window = (began, 0, 0)  # wall time, records and bytes at the window's start
            rounds = consumer.stream(
                {TopicPartition(args.topic, p): o for p, o in positions.items()}, args.fetch_size
            )
            for results in rounds:  # the next fetch is on its way while this one is read
                got = 0
                for result in results.values():
                    got += len(result.records)
                    size += sum(len(r.value or b"") for r in result.records)
                consumed += got
                now = time.monotonic()
                if got:
                    last_record = now
                if args.show_detailed_stats and not args.json:
                    wall = time.time()
                    if (wall - window[0]) * 1000 >= args.reporting_interval:
                        print(_csv_line(window[0], wall, size - window[2], consumed - window[1]),
                              flush=True)  # fmt: skip
                        window = (wall, consumed, size)
                if consumed >= args.messages or (now - last_record) * 1000 >= args.timeout:
                    break
            rounds.close()
            elapsed = max(time.monotonic() - started, 1e-9)
            ended = time.time()
    except ConsumerError as exc:
        return fail("annal perf consume", exc)
    if consumed < args.messages:
        print(
            f"annal perf consume: WARNING: stopped after {consumed} of {args.messages} records: "
            f"none arrived for {args.timeout} ms (--timeout); the topic may hold fewer",
            file=sys.stderr,
        )
    report = {
        "records": consumed,
        "records_per_s": round(consumed / elapsed, 1),
        "mb_per_s": round(size / 1e6 / elapsed, 2),
        "seconds": round(elapsed, 3),
    }
    if args.json:
        print(json.dumps(report))
    elif not args.show_detailed_stats:
        print(_csv_line(began, ended, size, consumed))
    return 0 if consumed >= args.messages else 1
