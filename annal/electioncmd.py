"""``annal leader-election``: hand leaderships back to preferred replicas, as
kafka-leader-election.sh --election-type preferred does."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from annal import errors
from annal.clierrors import fail
from annal.errors import ErrorCode


def add_parser(commands: Any) -> None:
    election = commands.add_parser(
        "leader-election",
        help="move leaderships back to preferred replicas",
        description="Elect each partition's preferred replica (the first of its assignment) "
        "as its leader, where that replica is alive and in the ISR. After a failover the "
        "survivors lead everything; this spreads leadership back out (the controller also "
        "does it by itself every leader.imbalance.check.interval.seconds when "
        "auto.leader.rebalance.enable is true).",
    )
    election.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    election.add_argument(
        "--election-type",
        default="preferred",
        choices=["preferred"],
        help="only preferred elections are offered",
    )
    which = election.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="one topic (with --partition: one partition)")
    which.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of every topic"
    )
    election.add_argument("--partition", type=int, help="one partition of --topic")
    election.add_argument(
        "--timeout-ms", type=int, default=30_000, help="how long to wait for the elections"
    )
    election.add_argument("--json", action="store_true", help="one JSON object per partition")
    election.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    if args.partition is not None and args.topic is None:
        print("annal leader-election: --partition needs --topic", file=sys.stderr)
        return 2
    wanted = None
    if args.topic is not None:
        wanted = {args.topic: [] if args.partition is None else [args.partition]}
    try:
        client = AdminClient(args.bootstrap_server, timeout_s=args.timeout_ms / 1000)
    except ValueError as exc:
        print(f"annal leader-election: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            outcomes = client.elect_preferred_leaders(wanted)
        except AdminError as exc:
            return fail("annal leader-election", exc)
    if args.json:
        for outcome in outcomes:
            print(json.dumps({**asdict(outcome), "error": outcome.error.name}))
    else:
        _report(outcomes)
    return 0 if all(o.error in _DONE for o in outcomes) else 1


_DONE = (errors.NONE, errors.ELECTION_NOT_NEEDED)


def _report(outcomes: list[Any]) -> None:
    def names(error: ErrorCode) -> str:
        return ", ".join(f"{o.topic}-{o.partition}" for o in outcomes if o.error is error)

    if elected := names(errors.NONE):
        print(f"Successfully completed leader election (PREFERRED) for partitions {elected}")
    if already := names(errors.ELECTION_NOT_NEEDED):
        print(f"Valid replica already elected for partitions {already}")
    failed = [o for o in outcomes if o.error not in _DONE]
    if failed:
        print("Failed to elect leaders for partitions:")
        for o in failed:
            where = o.topic if o.partition < 0 else f"{o.topic}-{o.partition}"
            print(f"  {where}: {o.error} {o.message}".rstrip())
    if not outcomes:
        print("No partitions to elect for.")
