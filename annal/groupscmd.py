"""``annal consumer-groups``: list groups and show their positions and lag, as
kafka-consumer-groups.sh does: the ZooKeeper-era consumer's groups (with
``--zookeeper``) and the groups Kafka's clients form through the group
coordinator (with ``--bootstrap-server``, or the brokers ZooKeeper lists)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from annal import errors, groupresetcmd
from annal.clierrors import fail
from annal.topic_partition import TopicPartition


def add_parser(commands: Any) -> None:
    groups = commands.add_parser(
        "consumer-groups",
        help="list consumer groups, show their offsets, lag and owners",
        description="Groups of annal's ZooKeeper-era consumer are found in ZooKeeper "
        "(/consumers), groups of Kafka's clients at their group coordinator; committed "
        "offsets through the coordinator, log end offsets on the partition leaders. LAG is "
        "the log end offset minus the committed offset; OWNER the consumer thread (or the "
        "Kafka client's member id) holding the partition now.",
    )
    where = groups.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--zookeeper", metavar="HOST:PORT[/CHROOT]",
        help="the cluster's ZooKeeper, with its chroot (both kinds of group)",
    )  # fmt: skip
    where.add_argument(
        "--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
        help="brokers' gRPC endpoints (the groups coordinators know)",
    )  # fmt: skip
    groups.add_argument(
        "--zookeeper-session-timeout-ms", type=_session_timeout, default=18000, metavar="MS",
        help="zookeeper.session.timeout.ms: how long ZooKeeper keeps this tool's session "
        "while it cannot reach it (default: %(default)s)",
    )  # fmt: skip
    action = groups.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="the groups")
    action.add_argument("--describe", action="store_true", help="one group's partitions")
    groups.add_argument("--group", help="the group to describe, reset or delete")
    groups.add_argument("--json", action="store_true", help="one JSON object per partition")
    groupresetcmd.add_arguments(groups, action)
    groups.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.zk.client import ZkClient, ZkError

    if args.describe and not args.group:
        print("annal consumer-groups: --describe needs --group", file=sys.stderr)
        return 2
    if args.reset_offsets or args.delete:
        return _reset_or_delete(args)
    try:
        if args.zookeeper is None:
            if args.list:
                for group, _, _ in _coordinator_groups(args.bootstrap_server):
                    print(group)
                return 0
            rows = describe(None, args.bootstrap_server, None, args.group)
        else:
            with ZkClient(
                args.zookeeper, session_timeout_ms=args.zookeeper_session_timeout_ms,
                timeout_s=30,
            ) as zk:  # fmt: skip
                bootstrap = _bootstrap_or_none(args.zookeeper)
                if args.list:
                    names = set(zk.consumer_groups())
                    if bootstrap is not None:
                        names |= {g for g, _, _ in _coordinator_groups(bootstrap)}
                    for group in sorted(names):
                        print(group)
                    return 0
                rows = describe(zk, bootstrap or _bootstrap(args.zookeeper), args.zookeeper,
                                args.group)  # fmt: skip
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
        + ((f"({row['note']})",) if "note" in row else ())
        for row in rows
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:  # a partition with no leader has a note after its columns
        cells = [cell.ljust(w) for cell, w in zip(r, widths, strict=False)] + list(r[len(widths) :])
        print("  ".join(cells).rstrip())
    if not rows:
        print(f"Consumer group {args.group} has no offsets and no members.")
    return 0


def _reset_or_delete(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.zk.client import ZkClient, ZkError

    if (problem := groupresetcmd.usage_problem(args)) is not None:
        print(f"annal consumer-groups: {problem}", file=sys.stderr)
        return 2
    try:
        if args.zookeeper is None:
            return groupresetcmd.run(args, args.bootstrap_server, None)
        with ZkClient(
            args.zookeeper, session_timeout_ms=args.zookeeper_session_timeout_ms, timeout_s=30
        ) as zk:
            return groupresetcmd.run(args, _bootstrap(args.zookeeper), zk)
    except (ZkError, ClientError, ValueError) as exc:
        return fail("annal consumer-groups", exc)


def _session_timeout(text: str) -> int:
    """A session timeout in ms: ZooKeeper takes 2 to 20 ticks; at least 1000 here."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if value < 1000:
        raise argparse.ArgumentTypeError(f"{value} ms is too short (at least 1000)")
    return value


def describe(zk: Any, bootstrap: str, zookeeper: str | None, group: str) -> list[dict[str, Any]]:
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import LATEST, ConsumerError, SimpleConsumer

    owners: dict[TopicPartition, str] = {} if zk is None else zk.partition_owners(group)
    with GroupOffsets(bootstrap, group) as offsets:
        committed = offsets.committed()
        try:
            members = offsets.describe().members
        except ConsumerError:
            members = []  # a coordinator of an older annal: ZooKeeper's owners only
    for member in members:
        for assigned in member.assignment:
            for partition in assigned.partitions:
                owners[TopicPartition(assigned.topic, partition)] = member.member_id
    partitions = sorted(set(owners) | set(committed))
    rows = []
    with SimpleConsumer(bootstrap) as consumer:
        consumer.refresh_metadata(sorted({t for t, _ in partitions}))
        leaderless = {TopicPartition(t, p) for t in {t for t, _ in partitions}
                      for p in consumer.leaderless(t)}  # fmt: skip
        for topic, partition in partitions:
            current = committed.get(TopicPartition(topic, partition), -1)
            if TopicPartition(topic, partition) in leaderless:
                # shown, and marked: its log end cannot be read until it has a leader
                rows.append(
                    {
                        "group": group, "topic": topic, "partition": partition,
                        "current_offset": current if current >= 0 else "-",
                        "log_end_offset": "-", "lag": "-", "owner": owners.get(
                            TopicPartition(topic, partition), "-"),
                        "note": "no leader",
                    }
                )  # fmt: skip
                continue
            end = consumer.offsets_before(topic, partition, LATEST)
            rows.append(
                {
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "current_offset": current if current >= 0 else "-",
                    "log_end_offset": end,
                    "lag": end - current if current >= 0 else "-",
                    "owner": owners.get(TopicPartition(topic, partition), "-"),
                }
            )
    return rows


def _coordinator_groups(bootstrap: str) -> list[tuple[str, str, str]]:
    from annal.admin.client import AdminClient

    with AdminClient(bootstrap) as admin:
        return admin.list_groups()


def _bootstrap_or_none(zookeeper: str) -> str | None:
    """The brokers ZooKeeper lists, None when there are none."""
    from annal.client.cluster import ClientError

    try:
        return _bootstrap(zookeeper)
    except ClientError as exc:
        if exc.code is not errors.BROKER_NOT_AVAILABLE:
            raise
        return None  # no broker registered: ZooKeeper's groups only


def _bootstrap(zookeeper: str) -> str:
    from annal.client.bootstrap import resolve_bootstrap

    return resolve_bootstrap(None, zookeeper)
