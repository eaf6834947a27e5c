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
    groups.add_argument(
        "--all-groups", action="store_true", help="--describe every group (as --list finds them)"
    )
    view = groups.add_mutually_exclusive_group()
    view.add_argument(
        "--offsets", action="store_true",
        help="with --describe: each partition's offsets, lag and owner (the default)",
    )  # fmt: skip
    view.add_argument(
        "--members", action="store_true",
        help="with --describe: the group's members and how many partitions each has "
        "(--verbose: which)",
    )  # fmt: skip
    view.add_argument(
        "--state", nargs="?", const="", metavar="STATES",
        help="with --describe: the group's coordinator, assignment strategy, state and "
        "member count; with --list: each group's state, only those in STATES "
        "(comma-separated, e.g. Stable,Empty) when given",
    )  # fmt: skip
    groups.add_argument(
        "--verbose", action="store_true", help="with --describe --members: each member's partitions"
    )
    groups.add_argument("--json", action="store_true", help="one JSON object per partition")
    groupresetcmd.add_arguments(groups, action)
    groups.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.zk.client import ZkClient, ZkError

    if args.describe and not args.group and not args.all_groups:
        print("annal consumer-groups: --describe needs --group or --all-groups", file=sys.stderr)
        return 2
    if args.group and args.all_groups:
        print("annal consumer-groups: give --group or --all-groups, not both", file=sys.stderr)
        return 2
    if (args.all_groups or args.members or args.offsets) and not args.describe:
        print("annal consumer-groups: --all-groups, --members and --offsets go with --describe",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.verbose and not args.members:
        print("annal consumer-groups: --verbose goes with --describe --members", file=sys.stderr)
        return 2
    if args.state is not None and not (args.describe or args.list):
        print("annal consumer-groups: --state goes with --describe or --list", file=sys.stderr)
        return 2
    if args.reset_offsets or args.delete or args.delete_offsets:
        return _reset_or_delete(args)
    if args.members or args.state is not None or args.all_groups:
        return _views(args)
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
    _print_offsets(args, rows)
    if not rows:
        print(f"Consumer group {args.group} has no offsets and no members.")
    return 0


def _print_offsets(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The --describe (--offsets) table, or one JSON object per row with --json."""
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
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


def _views(args: argparse.Namespace) -> int:
    """--describe with --members, --state or --all-groups, and --list --state, as
    kafka-consumer-groups.sh prints them."""
    from annal.client.cluster import ClientError
    from annal.zk.client import ZkClient, ZkError

    try:
        if args.zookeeper is None:
            return _show(args, None, args.bootstrap_server)
        with ZkClient(
            args.zookeeper, session_timeout_ms=args.zookeeper_session_timeout_ms, timeout_s=30
        ) as zk:
            return _show(args, zk, _bootstrap(args.zookeeper))
    except (ZkError, ClientError, ValueError) as exc:
        return fail("annal consumer-groups", exc)


def _show(args: argparse.Namespace, zk: Any, bootstrap: str) -> int:
    listed = {g: state for g, _, state in _coordinator_groups(bootstrap)}
    if zk is not None:
        for group in zk.consumer_groups():
            listed.setdefault(group, "Empty")
    if args.list:  # --list --state [STATES]
        wanted = {s.strip().lower() for s in args.state.split(",") if s.strip()}
        shown = [(g, st or "Empty") for g, st in sorted(listed.items())
                 if not wanted or (st or "Empty").lower() in wanted]  # fmt: skip
        width = max([15, *(len(g) for g, _ in shown)])
        print(f"{'GROUP':<{width}} STATE")
        for group, state in shown:
            print(f"{group:<{width}} {state}")
        return 0
    if args.state:
        print("annal consumer-groups: --describe --state takes no value", file=sys.stderr)
        return 2
    names = sorted(listed) if args.all_groups else [args.group]
    if not args.members and args.state is None:  # --all-groups --offsets
        rows: list[dict[str, Any]] = []
        for group in names:
            rows.extend(describe(zk, bootstrap, args.zookeeper, group))
        _print_offsets(args, rows)
        return 0
    for group in names:
        status = group_status(bootstrap, zk, group)
        if args.members:
            _print_members(status, args.verbose)
        else:
            _print_state(status)
    return 0


def group_status(bootstrap: str, zk: Any, group: str) -> dict[str, Any]:
    """What the group's coordinator knows of it (and ZooKeeper, of the ZooKeeper-era
    consumers in it): state, strategy, members with their partitions."""
    from annal.admin.client import AdminClient
    from annal.consumer.group_offsets import GroupOffsets
    from annal.v1 import annal_pb2 as pb

    with GroupOffsets(bootstrap, group) as offsets:
        answer = offsets.describe()
        committed = offsets.committed()
        coordinator = offsets.coordinator()
    with AdminClient(bootstrap) as admin:
        brokers = admin.cluster.call_any("Metadata", pb.MetadataRequest(topics=[])).brokers
    ids = {f"{b.host}:{b.port}": b.id for b in brokers}
    members = [
        {
            "consumer_id": m.member_id, "instance_id": m.group_instance_id,
            "host": m.client_host, "client_id": m.client_id,
            "partitions": sorted(TopicPartition(a.topic, p) for a in m.assignment
                                 for p in a.partitions),
        }
        for m in answer.members
    ]  # fmt: skip
    state = answer.state or "Empty"
    if zk is not None:
        from annal.zk import layout

        owners = zk.partition_owners(group)
        for consumer_id in sorted(zk.children(layout.consumer_ids_path(group))):
            owned = sorted(tp for tp, t in owners.items() if t.startswith(f"{consumer_id}-"))
            members.append({"consumer_id": consumer_id, "instance_id": "", "host": "-",
                            "client_id": "-", "partitions": owned})  # fmt: skip
            state = "Stable" if state == "Empty" else state
    if state == "Empty" and not members and not committed:
        state = "Dead"  # nothing of it anywhere: Kafka's state for a group that is not
    return {
        "group": group, "state": state, "protocol": answer.protocol or "",
        "coordinator": f"{coordinator} ({ids.get(coordinator, '?')})", "members": members,
    }  # fmt: skip


def _worth_printing(status: dict[str, Any], rows: int) -> bool:
    """kafka-consumer-groups.sh's notes on a group's state (stderr); whether to print it."""
    group, state = status["group"], status["state"]
    if state == "Dead":
        print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
    elif state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return state != "Dead" and rows > 0


def _print_members(status: dict[str, Any], verbose: bool) -> None:
    members = status["members"]
    if not _worth_printing(status, len(members)):
        return
    group = status["group"]
    static = any(m["instance_id"] for m in members)
    widths = {
        "group": max([15, len(group)]),
        "consumer_id": max([15, *(len(m["consumer_id"]) for m in members)]),
        "instance_id": max([17, *(len(m["instance_id"]) for m in members)]),
        "host": max([15, *(len(m["host"]) for m in members)]),
        "client_id": max([15, *(len(m["client_id"]) for m in members)]),
    }
    columns = ["group", "consumer_id", *(["instance_id"] if static else []), "host", "client_id"]
    titles = {"group": "GROUP", "consumer_id": "CONSUMER-ID", "instance_id": "GROUP-INSTANCE-ID",
              "host": "HOST", "client_id": "CLIENT-ID"}  # fmt: skip
    head = "".join(f"{titles[c]:<{widths[c]}} " for c in columns) + f"{'#PARTITIONS':<15} "
    print("\n" + head + ("ASSIGNMENT" if verbose else ""))
    for m in members:
        cells = {**m, "group": group}
        line = "".join(f"{cells[c]:<{widths[c]}} " for c in columns)
        line += f"{len(m['partitions']):<15} "
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in m["partitions"]:
                by_topic.setdefault(topic, []).append(partition)
            line += ", ".join(
                f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items())
            ) or "-"
        print(line)


def _print_state(status: dict[str, Any]) -> None:
    if not _worth_printing(status, 1):
        return
    width = max(25, len(status["coordinator"]))  # Kafka sizes the first column so
    print(f"\n{'GROUP':<{width}} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} "
          f"{'STATE':<15} #MEMBERS")  # fmt: skip
    print(f"{status['group']:<{width}} {status['coordinator']:<25} {status['protocol']:<20} "
          f"{status['state']:<15} {len(status['members'])}")  # fmt: skip


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
