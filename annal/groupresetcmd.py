"""``annal consumer-groups --reset-offsets`` and ``--delete``, as
kafka-consumer-groups.sh does them: only for a group with no live member.

A group's live members are the Kafka clients in it (its coordinator knows
them) and, with ``--zookeeper``, the ZooKeeper-era consumers registered under
``/consumers/<group>/ids``.  ``--reset-offsets`` only prints the plan unless
``--execute`` is given (``--dry-run`` says so explicitly).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from annal.topic_partition import TopicPartition

if TYPE_CHECKING:
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import SimpleConsumer
    from annal.zk.client import ZkClient

SCOPES = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by")


def add_arguments(groups: argparse.ArgumentParser, action: Any) -> None:
    action.add_argument(
        "--reset-offsets", action="store_true",
        help="move the group's committed offsets (with --group, --topic or --all-topics, "
        "one --to-... or --shift-by; a plan unless --execute)",
    )  # fmt: skip
    action.add_argument(
        "--delete", action="store_true",
        help="delete the group: its committed offsets (and, with --zookeeper, /consumers/GROUP)",
    )  # fmt: skip
    groups.add_argument(
        "--topic", action="append", default=[], metavar="TOPIC[:P,P]",
        help="reset this topic (all its partitions, or those listed); repeatable",
    )  # fmt: skip
    groups.add_argument(
        "--all-topics", action="store_true", help="reset every topic the group committed"
    )
    to = groups.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="the log start offsets")
    to.add_argument("--to-latest", action="store_true", help="the log end offsets")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept in range)")
    to.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset at or after this time (UTC unless it has an offset, e.g. "
        "+02:00); the log end where there is none",
    )  # fmt: skip
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (kept in range)"
    )
    mode = groups.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only show them (the default)")


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is missing from a --reset-offsets or --delete command line."""
    if not args.group:
        return f"--{'reset-offsets' if args.reset_offsets else 'delete'} needs --group"
    if args.delete:
        return None
    if not args.topic and not args.all_topics:
        return "--reset-offsets needs --topic or --all-topics"
    if args.topic and args.all_topics:
        return "give --topic or --all-topics, not both"
    if not any(getattr(args, s) not in (None, False) for s in SCOPES):
        return (
            "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
            "--to-datetime, --shift-by"
        )
    return None


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 time (UTC unless it says otherwise)."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--to-datetime {text!r} is not a time like 2026-11-23T08:00:00.000"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def parse_topics(specs: list[str]) -> dict[str, list[int] | None]:
    """``orders`` (every partition) or ``orders:0,2`` → topic → partitions."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, _, listed = spec.partition(":")
        if not topic:
            raise ValueError(f"--topic {spec!r} names no topic")
        try:
            out[topic] = [int(p) for p in listed.split(",")] if listed else None
        except ValueError:
            raise ValueError(f"--topic {spec!r}: partitions must be numbers") from None
    return out


@dataclass(frozen=True, slots=True)
class Reset:
    tp: TopicPartition
    current: int  # -1: nothing committed
    new: int


def live_members(offsets: GroupOffsets, zk: ZkClient | None) -> list[str]:
    """The group's live members: Kafka clients, and ZooKeeper-era consumers."""
    from annal.consumer.simple import ConsumerError
    from annal.zk import layout

    try:
        members = [m.member_id for m in offsets.describe().members]
    except ConsumerError:
        members = []
    if zk is not None:
        members += zk.children(layout.consumer_ids_path(offsets.group))
    return members


def plan(args: argparse.Namespace, offsets: GroupOffsets, consumer: SimpleConsumer) -> list[Reset]:
    from annal.consumer.simple import EARLIEST, LATEST

    committed = offsets.committed()
    if args.all_topics:
        wanted = sorted(committed)
    else:
        wanted = []
        for topic, partitions in parse_topics(args.topic).items():
            consumer.refresh_metadata([topic])
            count = consumer.cluster.partition_counts.get(topic)
            if count is None:
                raise ValueError(f"topic {topic!r} does not exist")
            for p in partitions if partitions is not None else range(count):
                if not 0 <= p < count:
                    raise ValueError(f"{topic} has no partition {p} (it has {count})")
                wanted.append(TopicPartition(topic, p))
    moment = parse_datetime(args.to_datetime) if args.to_datetime is not None else None
    out = []
    for tp in wanted:
        earliest = consumer.offsets_before(tp.topic, tp.partition, EARLIEST)
        latest = consumer.offsets_before(tp.topic, tp.partition, LATEST)
        current = committed.get(tp, -1)
        if args.to_earliest:
            new = earliest
        elif args.to_latest:
            new = latest
        elif args.to_offset is not None:
            new = args.to_offset
        elif moment is not None:
            found = consumer.offsets_before(tp.topic, tp.partition, moment)
            new = latest if found < 0 else found
        else:
            new = (current if current >= 0 else latest) + args.shift_by
        out.append(Reset(tp, current, min(max(new, earliest), latest)))
    return out


def run(args: argparse.Namespace, bootstrap: str, zk: ZkClient | None) -> int:
    """--reset-offsets or --delete (the caller checked ``usage_problem``)."""
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import SimpleConsumer

    with GroupOffsets(bootstrap, args.group) as offsets:
        members = live_members(offsets, zk)
        if members:
            what = (
                "Assignments can only be reset" if args.reset_offsets else "It can only be deleted"
            )
            print(
                f"annal consumer-groups: group {args.group!r} has {len(members)} live "
                f"member(s) ({', '.join(sorted(members)[:5])}). {what} while it is inactive: "
                "stop its consumers first.",
                file=sys.stderr,
            )
            return 1
        if args.delete:
            offsets.delete()
            if zk is not None:
                from annal.zk import layout

                zk.delete_recursive(f"{layout.CONSUMERS}/{args.group}")
            print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
            return 0
        with SimpleConsumer(bootstrap) as consumer:
            resets = plan(args, offsets, consumer)
        if args.execute:
            offsets.commit({r.tp: r.new for r in resets})
        header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
        rows = [header] + [
            (args.group, r.tp.topic, str(r.tp.partition),
             str(r.current) if r.current >= 0 else "-", str(r.new))
            for r in resets
        ]  # fmt: skip
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if not args.execute:
            print("(a dry run: nothing was committed; add --execute to commit these offsets)")
        return 0
