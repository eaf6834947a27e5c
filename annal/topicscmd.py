"""``annal topics``: create, list, describe, alter and delete topics, as kafka-topics.sh does.

As there, ``--topic`` is a regular expression for list, describe, alter and
delete: a topic is chosen when its whole name matches (``orders-.*``, ``.*``;
a comma separates alternatives, as Kafka's topic filter reads it).  A name
nothing matches is an error unless ``--if-exists`` is given (then nothing is
done); create takes the name as it is.  ``describe`` prints each topic's
overrides on its line (``Configs: name=value,...``), as Kafka 2.x does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from annal import errors
from annal.clierrors import fail

if TYPE_CHECKING:
    from annal.admin.client import AdminClient, PartitionInfo, TopicInfo

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

    def common(p: argparse.ArgumentParser, topic: str | None) -> None:
        p.add_argument(
            "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
            help="brokers to contact",
        )  # fmt: skip
        if topic == "name":
            p.add_argument("--topic", required=True, help="topic name")
        elif topic is not None:
            p.add_argument(
                "--topic", required=topic == "required", metavar="REGEX",
                help="the topics whose whole name matches this regular expression "
                "(a plain name is one topic; 'orders-.*', '.*' select several)"
                + ("" if topic == "required" else "; default: all"),
            )  # fmt: skip

    def if_exists(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--if-exists", action="store_true",
            help="when no topic matches --topic, do nothing and exit 0",
        )  # fmt: skip

    def exclude_internal(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--exclude-internal", action="store_true",
            help="leave out internal topics (__consumer_offsets)",
        )  # fmt: skip

    def replica_assignment(p: argparse.ArgumentParser, text: str) -> None:
        p.add_argument(
            "--replica-assignment", type=parse_replica_assignment,
            metavar="B:B,B:B,...", help=text,
        )  # fmt: skip

    create = actions.add_parser("create", help="create a topic")
    common(create, topic="name")
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="default: default.replication.factor"
    )
    replica_assignment(
        create,
        "each partition's brokers, partitions separated by commas and replicas by colons, "
        "the preferred leader first (1:2,2:3: two partitions); instead of --partitions "
        "and --replication-factor",
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config"
    )
    create.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    listing = actions.add_parser("list", help="list topic names")
    common(listing, topic="optional")
    exclude_internal(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    describe = actions.add_parser(
        "describe", help="partitions, leaders, replicas, ISR and config overrides"
    )
    common(describe, topic="optional")
    exclude_internal(describe)
    if_exists(describe)
    describe.add_argument("--json", action="store_true", help="one JSON object per topic")
    health = describe.add_mutually_exclusive_group()
    for condition, text in (
        ("under-replicated-partitions", "only partitions whose ISR is smaller than their replicas"),
        ("unavailable-partitions", "only partitions with no live leader"),
        ("under-min-isr-partitions", "only partitions whose ISR is below min.insync.replicas"),
        ("at-min-isr-partitions", "only partitions whose ISR is exactly min.insync.replicas"),
    ):
        health.add_argument(f"--{condition}", action="store_true", help=text)
    health.add_argument(
        "--topics-with-overrides", action="store_true",
        help="only the topics with config overrides, and only their summary lines",
    )  # fmt: skip
    alter = actions.add_parser(
        "alter",
        help="add partitions to a topic",
        description="Grow a topic to more partitions (the count can only grow). Keyed "
        "records may map to different partitions afterwards, as in Kafka.",
    )
    common(alter, topic="required")
    alter.add_argument(
        "--partitions", type=int, required=True, help="the new total partition count"
    )
    replica_assignment(
        alter,
        "the brokers of every partition, existing ones first, as on create (the "
        "existing partitions' entries are skipped: they do not move); the new "
        "partitions are placed on the rest",
    )
    if_exists(alter)
    delete = actions.add_parser("delete", help="delete a topic")
    common(delete, topic="required")
    if_exists(delete)
    topics.set_defaults(run=run)


def parse_replica_assignment(text: str) -> list[list[int]]:
    """``1:2,2:3`` → [[1, 2], [2, 3]], as kafka-topics.sh reads --replica-assignment:
    no broker twice in a partition, the same replication factor in every one."""
    out: list[list[int]] = []
    for index, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in replicas.split(":")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"partition {index}: {replicas!r} is not broker ids separated by ':'"
            ) from None
        twice = sorted({b for b in brokers if brokers.count(b) > 1})
        if twice:
            raise argparse.ArgumentTypeError(
                "partition replica lists may not contain duplicate entries: "
                + ",".join(map(str, twice))
            )
        if out and len(brokers) != len(out[0]):
            raise argparse.ArgumentTypeError(
                f"partition {index} has different replication factor: {brokers}"
            )
        out.append(brokers)
    return out


def topic_filter(text: str) -> re.Pattern[str]:
    """kafka-topics.sh's reading of a --topic regex: surrounding quotes and all
    spaces dropped, commas as alternatives; ValueError when it does not compile."""
    regex = re.sub(r"""^["']+|["']+$""", "", text.strip().replace(",", "|").replace(" ", ""))
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ValueError(f"--topic {text!r} is an invalid regex ({exc})") from None


LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    if args.action == "describe" and args.if_exists and args.topic is None:
        print("annal topics describe: --if-exists needs --topic", file=sys.stderr)
        return 2
    if args.action == "create" and args.replica_assignment is not None and (
        args.partitions != -1 or args.replication_factor != -1
    ):
        print(
            "annal topics create: --replica-assignment replaces --partitions and "
            "--replication-factor; give it alone",
            file=sys.stderr,
        )
        return 2
    try:
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal topics {args.action}: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            return _run(args, client)
        except ValueError as exc:  # a --topic regex that does not compile
            print(f"annal topics {args.action}: {exc}", file=sys.stderr)
            return 2
        except AdminError as exc:
            if (
                args.action == "create"
                and args.if_not_exists
                and exc.code is errors.TOPIC_ALREADY_EXISTS
            ):
                return 0
            return fail(f"annal topics {args.action}", exc)


def matching_topics(client: AdminClient, args: argparse.Namespace) -> list[TopicInfo]:
    """The topics ``--topic`` selects (every topic without it), as kafka-topics.sh
    chooses them; AdminError when it names one and none matches, unless
    ``--if-exists``.  A plain name that matches nothing is asked for by name,
    so the error is the broker's own (unknown, or not authorized)."""
    from annal.admin.client import AdminError

    exclude = getattr(args, "exclude_internal", False)
    everything = client.describe_topics()
    if args.topic is None:
        return [t for t in everything if not (exclude and t.internal)]
    wanted = topic_filter(args.topic)
    found = [t for t in everything if wanted.fullmatch(t.name) and not (exclude and t.internal)]
    if found or getattr(args, "if_exists", False):
        return found
    if LEGAL_NAME.fullmatch(args.topic) and args.topic not in {t.name for t in everything}:
        return client.describe_topics([args.topic])  # raises the broker's refusal
    raise AdminError(
        errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{args.topic}' does not exist as expected"
    )


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
            config[key.strip()] = value.strip()
        assignment = args.replica_assignment
        client.create_topic(
            args.topic,
            args.partitions,
            args.replication_factor,
            config,
            assignment=dict(enumerate(assignment)) if assignment else None,
        )
        print(f"Created topic {args.topic}.")
    elif args.action == "list":
        names = [t.name for t in matching_topics(client, args)]
        print(json.dumps(names) if args.json else "\n".join(names))
    elif args.action == "describe":
        return _describe(client, args)
    elif args.action == "alter":
        for topic in matching_topics(client, args):
            _alter(client, topic, args.partitions, args.replica_assignment)
            print(f"Topic {topic.name} now has {args.partitions} partitions.")
    elif args.action == "delete":
        for topic in matching_topics(client, args):
            client.delete_topic(topic.name)
            print(f"Deleted topic {topic.name}.")
    return 0


def _alter(
    client: Any, topic: TopicInfo, count: int, assignment: list[list[int]] | None
) -> None:
    """Grow ``topic`` to ``count`` partitions; an assignment lists every partition's
    replicas, the existing ones' entries skipped, as kafka-topics.sh --alter does."""
    from annal.admin.client import AdminError

    if assignment is None:
        client.create_partitions(topic.name, count)
        return
    existing = len(topic.partitions)
    if len(assignment) != count:
        raise AdminError(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"--replica-assignment lists {len(assignment)} partitions for {count}: it lists "
            f"every partition of {topic.name}, its {existing} existing ones first (whose "
            "entries are skipped)",
        )
    client.create_partitions(topic.name, count, assignment[existing:])


def _describe(client: Any, args: argparse.Namespace) -> int:
    condition = _condition(args)
    topics = matching_topics(client, args)
    if condition is not None:
        return _describe_unhealthy(client, args, topics, condition)
    overrides = client.topic_overrides([t.name for t in topics])
    for topic in topics:
        configs = overrides.get(topic.name, {})
        if args.topics_with_overrides and not configs:
            continue
        if args.json:
            print(
                json.dumps(
                    {
                        **asdict(topic),
                        "replication_factor": topic.replication_factor,
                        "configs": configs,
                    }
                )
            )
            continue
        print(
            f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
            f"ReplicationFactor: {topic.replication_factor}\t"
            f"Configs: {','.join(f'{k}={v}' for k, v in sorted(configs.items()))}"
        )
        if not args.topics_with_overrides:
            for p in topic.partitions:
                print(_partition_line(topic.name, p))
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


def _describe_unhealthy(
    client: Any, args: argparse.Namespace, topics: list[TopicInfo], wanted: str
) -> int:
    """Only the partitions in condition ``wanted``, as kafka-topics.sh prints them
    (no topic summary lines); nothing at all when every partition is healthy."""
    from annal.admin import health

    condition = health.Condition(wanted)
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
