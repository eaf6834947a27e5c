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
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from annal.topic_partition import TopicPartition

if TYPE_CHECKING:
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import SimpleConsumer
    from annal.zk.client import ZkClient

SCOPES = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by", "to_current",
          "by_duration", "from_file")


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
    action.add_argument(
        "--delete-offsets", action="store_true",
        help="delete the group's committed offsets of --topic (all its partitions, or "
        "those listed), as Kafka's OffsetDelete: only while no member of the group "
        "reads that topic",
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
    to.add_argument(
        "--to-current", action="store_true",
        help="the committed offsets (the log end where the group committed none)",
    )  # fmt: skip
    to.add_argument(
        "--by-duration", type=parse_duration, metavar="PnDTnHnMnS",
        help="the first offset at or after this long ago (an ISO 8601 duration, as Java's "
        "Duration: PT30M, P1DT12H); the log end where there is none",
    )  # fmt: skip
    to.add_argument(
        "--from-file", type=Path, metavar="CSV",
        help="the offsets a CSV file lists, one TOPIC,PARTITION,OFFSET a line (or "
        "GROUP,TOPIC,PARTITION,OFFSET: the lines of --group), as --export writes them",
    )  # fmt: skip
    mode = groups.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    groups.add_argument(
        "--export", action="store_true",
        help="print the new offsets as CSV (TOPIC,PARTITION,OFFSET lines) instead of a "
        "table, for --from-file",
    )  # fmt: skip


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is missing from a --reset-offsets or --delete command line."""
    if not args.group:
        what = "reset-offsets" if args.reset_offsets else (
            "delete-offsets" if args.delete_offsets else "delete"
        )
        return f"--{what} needs --group"
    if args.delete_offsets:
        return None if args.topic else "--delete-offsets needs --topic"
    if args.delete:
        return None
    if not args.topic and not args.all_topics and args.from_file is None:
        return "--reset-offsets needs --topic or --all-topics (or --from-file)"
    if args.topic and args.all_topics:
        return "give --topic or --all-topics, not both"
    if not any(getattr(args, s) not in (None, False) for s in SCOPES):
        return (
            "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
            "--to-datetime, --by-duration, --to-current, --shift-by, --from-file"
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


DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO 8601 duration as Java's ``Duration.parse`` reads it
    (``PnDTnHnMn.nS``: days of 24 hours, no years or months)."""
    found = DURATION.fullmatch(text.strip())
    if found is None or text.strip().upper().endswith("T") or not any(found.groups()[1:]):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration like PnDTnHnMnS (PT30M, P1DT12H, PT0.5S)"
        )
    sign, days, hours, minutes, seconds, fraction = found.groups()
    total = (
        int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
        + int(seconds or 0) * 1000
    )  # fmt: skip
    if fraction:
        milli = int(fraction.ljust(3, "0")[:3])
        total += -milli if (seconds or "").startswith("-") else milli
    return -total if sign == "-" else total


def read_plan(path: Path, group: str) -> dict[TopicPartition, int]:
    """The offsets of ``group`` in a reset plan file: ``topic,partition,offset``
    lines, or ``group,topic,partition,offset`` (those of other groups skipped)."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ValueError(f"--from-file {path}: {exc.strerror or exc}") from None
    plan: dict[TopicPartition, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = [f.strip() for f in line.split(",")]
        if fields == [""]:
            continue
        if len(fields) == 4:
            if fields[0] != group:
                continue
            fields = fields[1:]
        try:
            topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
            if len(fields) != 3 or not topic:
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError(
                f"--from-file {path} line {number}: {line!r} is not TOPIC,PARTITION,OFFSET "
                "(or GROUP,TOPIC,PARTITION,OFFSET)"
            ) from None
        plan[TopicPartition(topic, partition)] = offset
    if not plan:
        raise ValueError(f"--from-file {path}: no reset plan for group {group}")
    return plan


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
    planned = read_plan(args.from_file, args.group) if args.from_file is not None else {}
    if args.from_file is not None:
        wanted = sorted(planned)
        for topic in sorted({tp.topic for tp in wanted}):
            consumer.refresh_metadata([topic])
            count = consumer.cluster.partition_counts.get(topic)
            for tp in wanted:
                if tp.topic == topic and (count is None or not 0 <= tp.partition < count):
                    raise ValueError(f"--from-file: {tp.topic}-{tp.partition} does not exist")
    elif args.all_topics:
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
    if args.by_duration is not None:
        moment = int(time.time() * 1000) - args.by_duration
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
        elif args.to_current:
            new = current if current >= 0 else latest
        elif args.from_file is not None:
            new = planned[tp]
        else:
            new = (current if current >= 0 else latest) + args.shift_by
        out.append(Reset(tp, current, min(max(new, earliest), latest)))
    return out


OFFSET_DELETE = 47  # Kafka's api key; served on the brokers' Kafka listeners

GROUP_REFUSALS = {
    "INVALID_GROUP_ID": "'{}' is not valid.",
    "GROUP_ID_NOT_FOUND": "'{}' does not exist.",
    "GROUP_AUTHORIZATION_FAILED": "Access to '{}' is not authorized.",
    "NON_EMPTY_GROUP": "Deleting offsets of a consumer group '{}' is forbidden if the group "
    "is not empty.",
}
PARTITION_REFUSALS = {
    "GROUP_SUBSCRIBED_TO_TOPIC": "the consumer group is actively subscribed to the topic",
    "TOPIC_AUTHORIZATION_FAILED": "not authorized to read the topic",
    "UNKNOWN_TOPIC_OR_PARTITION": "this server does not host this topic-partition",
}


def delete_offsets(args: argparse.Namespace, bootstrap: str) -> int:
    """--delete-offsets: Kafka's OffsetDelete to the group's coordinator, over its
    Kafka listener (the only place brokers serve it), printed as Kafka's tool
    prints it; exit 1 when anything was refused."""
    from annal import errors
    from annal.admin.client import AdminClient, AdminError
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.kafka_fetch import connection_security
    from annal.kafkaproto.client import ConnectionFailed, KafkaConnection, ListenerUnreachable
    from annal.v1 import annal_pb2 as pb

    outcome: dict[TopicPartition, str | None] = {}
    wanted: dict[str, list[int]] = {}
    with AdminClient(bootstrap) as admin, GroupOffsets(bootstrap, args.group) as offsets:
        for topic, listed in parse_topics(args.topic).items():
            if listed is not None:
                wanted[topic] = listed
                continue
            try:
                (info,) = admin.describe_topics([topic])
            except AdminError as exc:
                outcome[TopicPartition(topic, -1)] = str(exc)
                continue
            wanted[topic] = [p.partition for p in info.partitions]
        coordinator = offsets.coordinator()
        brokers = admin.cluster.call_any("Metadata", pb.MetadataRequest(topics=[])).brokers
        broker = next((b for b in brokers if f"{b.host}:{b.port}" == coordinator), None)
        security = admin.cluster.security
        listener = None if broker is None else next(
            (f"{e.host}:{e.port}" for e in broker.kafka_endpoints
             if e.security_protocol == security.protocol), None,
        ) or (f"{broker.kafka_host}:{broker.kafka_port}"
              if broker.kafka_port and security.protocol == "PLAINTEXT" else None)  # fmt: skip
    if listener is None:
        print(
            f"annal consumer-groups: --delete-offsets: the coordinator of {args.group!r} "
            f"({coordinator}) has no Kafka listener for {security.protocol}, where brokers "
            "serve OffsetDelete; nothing was deleted",
            file=sys.stderr,
        )
        return 1
    top = errors.NONE
    if wanted:
        connection = KafkaConnection(listener, 30.0, security=connection_security(security))
        try:
            answer = connection.exchange(OFFSET_DELETE, 0, {
                "group_id": args.group,
                "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                           for t, ps in wanted.items()],
            })  # fmt: skip
        except (ConnectionFailed, ListenerUnreachable) as exc:
            print(f"annal consumer-groups: --delete-offsets: the coordinator's Kafka listener "
                  f"{listener}: {exc}", file=sys.stderr)  # fmt: skip
            return 1
        finally:
            connection.close()
        top = errors.from_wire(answer.error_code)
        for t in answer.topics or ():
            for p in t.partitions or ():
                error = errors.from_wire(p.error_code)
                if error is not errors.NONE and top is errors.NONE:
                    top = error  # as Kafka's admin client: the first partition's error
                outcome[TopicPartition(t.name, p.partition_index)] = (
                    None if error is errors.NONE
                    else f"{error.name}: {PARTITION_REFUSALS.get(error.name, error.name)}"
                )  # fmt: skip
    if top is errors.NONE and all(e is None for e in outcome.values()):
        print(f"Request succeed for deleting offsets with topic {', '.join(args.topic)} "
              f"group {args.group}")  # fmt: skip
    elif top.name in GROUP_REFUSALS:
        print(f"\nError: {GROUP_REFUSALS[top.name].format(args.group)}")
    elif top is errors.NONE or top.name in PARTITION_REFUSALS:
        print("\nError: Encounter some partition level error, see the follow-up details:")
    else:
        print(f"\nError: Encounter some unknown error: {top.name}")
    print(f"\n{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}")
    for tp, problem in sorted(outcome.items(), key=lambda i: i[0].topic + str(i[0].partition)):
        partition = str(tp.partition) if tp.partition >= 0 else "Not Provided"
        status = "Successful" if problem is None else f"Error: {problem}"
        print(f"{tp.topic:<30} {partition:<15} {status:<15}")
    return 0 if top is errors.NONE and all(e is None for e in outcome.values()) else 1


def run(args: argparse.Namespace, bootstrap: str, zk: ZkClient | None) -> int:
    """--reset-offsets or --delete (the caller checked ``usage_problem``)."""
    from annal.consumer.group_offsets import GroupOffsets
    from annal.consumer.simple import SimpleConsumer

    if args.delete_offsets:
        return delete_offsets(args, bootstrap)
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
        if args.export:  # Kafka's CSV, and the blank line its println adds
            print("".join(f"{r.tp.topic},{r.tp.partition},{r.new}\n" for r in resets))
            return 0
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
