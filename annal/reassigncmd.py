"""``annal reassign-partitions``: move partitions to other brokers, as
kafka-reassign-partitions.sh --execute / --verify does."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from annal import errors
from annal.clierrors import fail
from annal.planfiles import BROKER_LIST, read_partition_file
from annal.topic_partition import TopicPartition

EXAMPLE = '{"version": 1, "partitions": [{"topic": "events", "partition": 0, "replicas": [2, 3]}]}'


def add_parser(commands: Any) -> None:
    reassign = commands.add_parser(
        "reassign-partitions",
        help="move partitions to other brokers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Move partitions to the replicas a JSON file names, preferred leader first:

  {EXAMPLE}

--execute starts the moves and prints the current assignment (keep it to move
back). The new replicas copy the log and join the ISR; then the leader moves if
it must and the old replicas are dropped, their logs deleted. One
reassignment runs at a time. --verify tells, per partition, whether its move
is complete (exit 0 when all are, 1 otherwise).""",
    )
    reassign.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    reassign.add_argument(
        "--reassignment-json-file", required=True, type=Path, metavar="FILE",
        help="the partitions and their new replicas",
    )  # fmt: skip
    action = reassign.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the moves")
    action.add_argument("--verify", action="store_true", help="report whether they finished")
    reassign.add_argument(
        "--json", action="store_true",
        help="with --verify: one JSON object per partition {topic, partition, status}, "
        "status complete, in_progress or missing",
    )  # fmt: skip
    reassign.set_defaults(run=run)


def read_plan(path: Path) -> dict[TopicPartition, list[int]]:
    """The file's (topic, partition) → replicas; ValueError naming what is wrong."""
    return read_partition_file(
        path, EXAMPLE, "replicas", BROKER_LIST, lambda r: [int(b) for b in r]
    )


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    try:
        plan = read_plan(args.reassignment_json_file)
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal reassign-partitions: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            existing = set(client.list_topics())
            current = {
                TopicPartition(t.name, p.partition): list(p.replicas)
                for t in client.describe_topics(sorted({t for t, _ in plan} & existing))
                for p in t.partitions
            }
            if args.verify:
                return _verify(plan, current, args.json)
            outcomes = client.reassign_partitions(plan)
        except AdminError as exc:
            return fail("annal reassign-partitions", exc)
    print("Current partition replica assignment\n")
    print(_plan_json({k: current[k] for k in plan if k in current}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    started = [f"{o.topic}-{o.partition}" for o in outcomes if o.error is errors.NONE]
    if started:
        print(f"Successfully started partition reassignments for {','.join(started)}")
    failed = [o for o in outcomes if o.error is not errors.NONE]
    for o in failed:
        print(f"Failed to reassign {o.topic}-{o.partition}: {o.error} {o.message}")
    return 1 if failed else 0


Plan = dict[TopicPartition, list[int]]


def _verify(plan: Plan, current: Plan, as_json: bool = False) -> int:
    said = {
        "missing": "Partition {} does not exist.",
        "complete": "Reassignment of partition {} is complete.",
        "in_progress": "Reassignment of partition {} is still in progress.",
    }
    complete = True
    for (topic, partition), replicas in sorted(plan.items()):
        found = current.get(TopicPartition(topic, partition))
        status = "missing" if found is None else "complete" if found == replicas else "in_progress"
        complete = complete and status == "complete"
        if as_json:
            print(json.dumps({"topic": topic, "partition": partition, "status": status}))
        else:
            print(said[status].format(f"{topic}-{partition}"))
    return 0 if complete else 1


def _plan_json(plan: dict[TopicPartition, list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(plan.items())
            ],
        }
    )
