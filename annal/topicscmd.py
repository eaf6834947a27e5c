"""``annal topics``: create, list, describe, alter and delete topics, as kafka-topics.sh does."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from annal import errors
from annal.clierrors import fail

if TYPE_CHECKING:
    from annal.admin.client import PartitionInfo

ACTIONS = ("create", "list", "describe", "alter", "delete")


def kafka_spelling(args: list[str]) -> list[str]:
    """``topics --create --topic t ...`` (kafka-topics.sh's spelling) as
    ``topics create --topic t ...``; anything else unchanged.  Two action
    flags are a usage error naming both."""
    if not args or args[0] != "topics" or (len(args) > 1 and args[1] in ACTIONS):
        return args
    flags = [a for a in args[1:] if a.startswith("--") and a[2:] in ACTIONS]
    if len(flags) > 1:
        print(f"annal topics: give one action, not {' and '.join(flags)}", file=sys.stderr)
        raise SystemExit(2)
    if not flags:
        return args
    rest = list(args[1:])
    rest.remove(flags[0])
    return ["topics", flags[0][2:], *rest]


def add_parser(commands: Any) -> None:
    topics = commands.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics",
        description="Topic administration through any broker (like kafka-topics.sh, whose "
        "spelling works too: annal topics --create --topic T --bootstrap-server B).",
    )
    actions = topics.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    def common(p: argparse.ArgumentParser, topic: bool) -> None:
        p.add_argument(
            "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
            help="brokers to contact",
        )  # fmt: skip
        if topic:
            p.add_argument("--topic", required=True, help="topic name")

    create = actions.add_parser("create", help="create a topic")
    common(create, topic=True)
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="default: default.replication.factor"
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config"
    )
    create.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    listing = actions.add_parser("list", help="list topic names")
    common(listing, topic=False)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    describe = actions.add_parser("describe", help="partitions, leaders, replicas, ISR")
    common(describe, topic=False)
    describe.add_argument("--topic", help="one topic (default: all)")
    describe.add_argument("--json", action="store_true", help="one JSON object per topic")
    health = describe.add_mutually_exclusive_group()
    for condition, text in (
        ("under-replicated-partitions", "only partitions whose ISR is smaller than their replicas"),
        ("unavailable-partitions", "only partitions with no live leader"),
        ("under-min-isr-partitions", "only partitions whose ISR is below min.insync.replicas"),
        ("at-min-isr-partitions", "only partitions whose ISR is exactly min.insync.replicas"),
    ):
        health.add_argument(f"--{condition}", action="store_true", help=text)
    alter = actions.add_parser(
        "alter",
        help="add partitions to a topic",
        description="Grow a topic to more partitions (the count can only grow). Keyed "
        "records may map to different partitions afterwards, as in Kafka.",
    )
    common(alter, topic=True)
    alter.add_argument(
        "--partitions", type=int, required=True, help="the new total partition count"
    )
    delete = actions.add_parser("delete", help="delete a topic")
    common(delete, topic=True)
    topics.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    try:
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal topics {args.action}: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            return _run(args, client)
        except AdminError as exc:
            if (
                args.action == "create"
                and args.if_not_exists
                and exc.code is errors.TOPIC_ALREADY_EXISTS
            ):
                return 0
            return fail(f"annal topics {args.action}", exc)


def _run(args: argparse.Namespace, client: Any) -> int:
    if args.action == "create":
        config = {}
        for pair in args.config:
            key, sep, value = pair.partition("=")
            if not sep:
                print(
                    f"annal topics create: --config expects KEY=VALUE, got {pair!r}",
                    file=sys.stderr,
                )
                return 2
            config[key] = value
        client.create_topic(args.topic, args.partitions, args.replication_factor, config)
        print(f"Created topic {args.topic}.")
    elif args.action == "list":
        names = client.list_topics()
        print(json.dumps(names) if args.json else "\n".join(names))
    elif args.action == "describe":
        condition = _condition(args)
        if condition is not None:
            return _describe_unhealthy(client, args, condition)
        for topic in client.describe_topics([args.topic] if args.topic else []):
            if args.json:
                print(json.dumps({**asdict(topic), "replication_factor": topic.replication_factor}))
                continue
            print(
                f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
                f"ReplicationFactor: {topic.replication_factor}"
            )
            for p in topic.partitions:
                print(_partition_line(topic.name, p))
    elif args.action == "alter":
        client.create_partitions(args.topic, args.partitions)
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    elif args.action == "delete":
        client.delete_topic(args.topic)
        print(f"Deleted topic {args.topic}.")
    return 0


HEALTH_FILTERS = ("under-replicated", "unavailable", "under-min-isr", "at-min-isr")


def _condition(args: argparse.Namespace) -> str | None:
    """The partition-health filter asked for (``health.Condition``'s value), if any."""
    for condition in HEALTH_FILTERS:
        if getattr(args, f"{condition.replace('-', '_')}_partitions", False):
            return condition
    return None


def _partition_line(topic: str, p: PartitionInfo) -> str:
    leader = "none" if p.leader < 0 else str(p.leader)
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}\t"
        f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
    )
    if p.offline_replicas:
        line += f"\tOffline: {','.join(map(str, p.offline_replicas))}"
    return line


def _describe_unhealthy(client: Any, args: argparse.Namespace, wanted: str) -> int:
    """Only the partitions in condition ``wanted``, as kafka-topics.sh prints them
    (no topic summary lines); nothing at all when every partition is healthy."""
    from annal.admin import health

    condition = health.Condition(wanted)
    topics = client.describe_topics([args.topic] if args.topic else [])
    found = health.select(client, topics, condition)
    if args.json:
        print(
            json.dumps(
                [{"topic": t.name, **asdict(p), "condition": condition.value} for t, p in found]
            )
        )
        return 0
    for topic, p in found:
        print(_partition_line(topic.name, p))
    return 0
