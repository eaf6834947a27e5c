"""``annal log-dirs --describe``: each broker's log directories and the size of
every partition in them, as kafka-log-dirs.sh prints them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from annal.clierrors import fail

if TYPE_CHECKING:
    from annal.admin.client import LogDirInfo


def add_parser(commands: Any) -> None:
    dirs = commands.add_parser(
        "log-dirs",
        help="brokers' log directories and partition sizes",
        description="Ask each broker (--broker-list, default every live broker) for its "
        "log directories (log.dirs) and the partitions stored in each: their size in "
        "bytes and how far the replica's log end is behind its high watermark "
        "(offsetLag), as kafka-log-dirs.sh --describe. With --json, Kafka's JSON "
        "(version 1) with each directory's file system size and free bytes added.",
    )
    dirs.add_argument("--describe", action="store_true", required=True, help="describe the dirs")
    dirs.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    dirs.add_argument("--broker-list", metavar="ID[,ID]", help="only these brokers")
    dirs.add_argument("--topic-list", metavar="TOPIC[,TOPIC]", help="only these topics")
    dirs.add_argument("--json", action="store_true", help="Kafka's JSON, on one line")
    dirs.set_defaults(run=run)


def _ids(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"--broker-list {text!r} is not a comma-separated list of ids") from None


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient
    from annal.errors import AnnalError

    try:
        brokers = _ids(args.broker_list)
        topics = [t for t in (args.topic_list or "").split(",") if t.strip()]
        with AdminClient(args.bootstrap_server) as client:
            found = client.describe_log_dirs(brokers, topics)
    except ValueError as exc:
        print(f"annal log-dirs: {exc}", file=sys.stderr)
        return 2
    except AnnalError as exc:
        return fail("annal log-dirs", exc)
    if args.json:
        print(json.dumps(kafka_json(found)))
        return 0
    print(f"{'BROKER':>6}  {'PARTITION':<30} {'SIZE':>14} {'OFFSET-LAG':>10}  LOG-DIR")
    for d in found:
        if d.error.number:
            print(f"{d.broker:>6}  {'(' + d.error.name + ')':<30} {'':>14} {'':>10}  {d.path}")
        for p in d.partitions:
            name = f"{p.topic}-{p.partition}"
            print(f"{d.broker:>6}  {name:<30} {p.size:>14} {p.offset_lag:>10}  {d.path}")
    return 0


def kafka_json(found: list[LogDirInfo]) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON: brokers → logDirs → partitions."""
    brokers: dict[int, list[dict[str, Any]]] = {}
    for d in found:
        brokers.setdefault(d.broker, []).append(
            {
                "logDir": d.path,
                "error": None if d.error.number == 0 else d.error.name,
                "totalBytes": d.total_bytes,
                "usableBytes": d.usable_bytes,
                "partitions": [
                    {
                        "partition": f"{p.topic}-{p.partition}",
                        "size": p.size,
                        "offsetLag": p.offset_lag,
                        "isFuture": p.is_future,
                    }
                    for p in d.partitions
                ],
            }
        )
    return {
        "version": 1,
        "brokers": [{"broker": b, "logDirs": dirs} for b, dirs in sorted(brokers.items())],
    }
