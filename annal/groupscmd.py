"""``annal consumer-groups``: list groups and show their positions and lag, as
kafka-consumer-groups.sh --zookeeper did for the ZooKeeper-era consumer."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from annal.clierrors import fail
from annal.topic_partition import TopicPartition


def add_parser(commands: Any) -> None:
    groups = commands.add_parser(
        "consumer-groups",
        help="list consumer groups, show their offsets, lag and owners",
        description="Groups are found in ZooKeeper (/consumers), their committed offsets "
        "through the group coordinator, log end offsets on the partition leaders. LAG is "
        "the log end offset minus the committed offset; OWNER the consumer thread holding "
        "the partition now.",
    )
    groups.add_argument(
        "--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]",
        help="the cluster's ZooKeeper, with its chroot",
    )  # fmt: skip
    groups.add_argument(
        "--zookeeper-session-timeout-ms", type=_session_timeout, default=18000, metavar="MS",
        help="zookeeper.session.timeout.ms: how long ZooKeeper keeps this tool's session "
        "while it cannot reach it (default: %(default)s)",
    )  # fmt: skip
    action = groups.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="the groups")
    action.add_argument("--describe", action="store_true", help="one group's partitions")
    groups.add_argument("--group", help="the group to describe")
    groups.add_argument("--json", action="store_true", help="one JSON object per partition")
    groups.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.zk.client import ZkClient, ZkError

    if args.describe and not args.group:
        print("annal consumer-groups: --describe needs --group", file=sys.stderr)
        return 2
    try:
        with ZkClient(
            args.zookeeper, session_timeout_ms=args.zookeeper_session_timeout_ms, timeout_s=30
        ) as zk:
            if args.list:
                for group in zk.consumer_groups():
                    print(group)
                return 0
            rows = describe(zk, args.zookeeper, args.group)
    except (ZkError, ClientError, ValueError) as exc:
        return fail("annal consumer-groups", exc)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER")
    table = [header] + [
        tuple(str(row[k]) for k in ("group", "topic", "partition", "current_offset",
                                    "log_end_offset", "lag", "owner"))
        for row in rows
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    if not rows:
        print(f"Consumer group {args.group} has no offsets and no members.")
    return 0


def _session_timeout(text: str) -> int:
    """A session timeout in ms: ZooKeeper takes 2 to 20 ticks; at least 1000 here."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if value < 1000:
        raise argparse.ArgumentTypeError(f"{value} ms is too short (at least 1000)")
    return value


def describe(zk: Any, zookeeper: str, group: str) -> list[dict[str, Any]]:
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import LATEST, SimpleConsumer

    owners = zk.partition_owners(group)
    with GroupOffsets(_bootstrap(zookeeper), group) as offsets:
        committed = offsets.committed()
    partitions = sorted(set(owners) | set(committed))
    rows = []
    with SimpleConsumer(zookeeper_connect=zookeeper) as consumer:
        for topic, partition in partitions:
            end = consumer.offsets_before(topic, partition, LATEST)
            current = committed.get(TopicPartition(topic, partition), -1)
            rows.append(
                {
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "current_offset": current if current >= 0 else "-",
                    "log_end_offset": end,
                    "lag": end - current if current >= 0 else "-",
                    "owner": owners.get((topic, partition), "-"),
                }
            )
    return rows


def _bootstrap(zookeeper: str) -> str:
    from annal.client.bootstrap import resolve_bootstrap

    return resolve_bootstrap(None, zookeeper)
