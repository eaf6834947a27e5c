"""``annal get-offsets``: partitions' offsets by time, as kafka-get-offsets.sh prints them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from annal.clierrors import fail

if TYPE_CHECKING:
    from annal.admin.client import TopicInfo

TIMES = {"latest": -1, "earliest": -2}


def add_parser(commands: Any) -> None:
    offsets = commands.add_parser(
        "get-offsets",
        help="partitions' offsets: latest, earliest or by time",
        description="Print topic:partition:offset for each partition of the topics: the "
        "latest offset (the high watermark; the default), the earliest (the log start "
        "offset), or the first offset whose timestamp is at or after a time in "
        "milliseconds (an empty offset when there is none), as kafka-get-offsets.sh.",
    )
    offsets.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    offsets.add_argument("--topic", metavar="TOPIC[,TOPIC]", help="topics (default: every topic)")
    offsets.add_argument(
        "--partitions", metavar="P[,P]", help="only these partitions (default: all)"
    )
    offsets.add_argument(
        "--time", default="latest", metavar="latest|earliest|-1|-2|MS",
        help="which offset (default latest)",
    )  # fmt: skip
    offsets.add_argument("--json", action="store_true", help="one JSON object per partition")
    offsets.set_defaults(run=run)


def parse_time(text: str) -> int:
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"--time {text!r} is not latest, earliest, -1, -2 or milliseconds"
        ) from None
    if value < -2:
        raise ValueError(f"--time {value} is below -2")
    return value


def parse_partitions(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise ValueError(
            f"--partitions {text!r} is not a comma-separated list of numbers"
        ) from None


def missing_partitions(topics: Sequence[TopicInfo], wanted: set[int]) -> str | None:
    """As kafka-get-offsets.sh: each requested partition a topic lacks is an
    ``Error:`` line (stderr) and the others are printed; when a topic has none
    of them, the whole is an error (exit 1), the text returned."""
    for topic in topics:
        have = {p.partition for p in topic.partitions}
        if not have & wanted:
            listed = ",".join(map(str, sorted(wanted)))
            return (
                f"Topic {topic.name} does not have any of the requested partitions {listed} "
                f"(it has {len(have)}: 0..{len(have) - 1})"
            )
        for partition in sorted(wanted - have):
            where = "" if len(topics) == 1 else f" of topic {topic.name}"
            print(f"Error: partition {partition}{where} does not exist", file=sys.stderr)
    return None


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient
    from annal.client.cluster import ClientError
    from annal.consumer.simple import SimpleConsumer

    try:
        timestamp = parse_time(args.time)
        only = parse_partitions(args.partitions)
        admin = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal get-offsets: {exc}", file=sys.stderr)
        return 2
    try:
        with admin, SimpleConsumer(args.bootstrap_server) as consumer:
            names = args.topic.split(",") if args.topic else admin.list_topics()
            topics = admin.describe_topics(sorted(set(names)))
            if args.topic and only is not None and (problem := missing_partitions(topics, only)):
                print(problem, file=sys.stderr)
                return 1
            for topic in topics:
                for p in topic.partitions:
                    if only is not None and p.partition not in only:
                        continue
                    found = consumer.offsets_before(topic.name, p.partition, timestamp)
                    offset = found if found >= 0 or timestamp < 0 else None
                    if args.json:
                        row = {"topic": topic.name, "partition": p.partition, "offset": offset}
                        print(json.dumps(row))
                    else:
                        print(f"{topic.name}:{p.partition}:{'' if offset is None else offset}")
    except ClientError as exc:
        return fail("annal get-offsets", exc)
    return 0
