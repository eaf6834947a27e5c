"""``annal cluster``: a local ZooKeeper and brokers as background processes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path(os.environ.get("ANNAL_CLUSTER_DIR", "/tmp/annal-cluster"))


def add_parser(commands: Any) -> None:
    cluster = commands.add_parser(
        "cluster",
        help="run a local cluster (ZooKeeper and brokers as processes)",
        description=(
            "Run a local cluster: ZooKeeper from this machine's installation and N brokers "
            f"as background processes, with data, logs and pids under --dir "
            f"(default {DEFAULT_DIR}, or $ANNAL_CLUSTER_DIR)."
        ),
    )
    cluster.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="cluster directory")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="start ZooKeeper and the brokers, wait until ready")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    status = actions.add_parser("status", help="show ZooKeeper, controller and brokers")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    actions.add_parser("down", help="stop every broker (SIGTERM) and ZooKeeper")
    for name, text in (
        ("kill", "SIGKILL one broker (a crash)"),
        ("stop", "SIGTERM one broker (a clean stop)"),
        ("start", "start a stopped broker again"),
    ):
        one = actions.add_parser(name, help=text)
        one.add_argument("broker_id", type=int, metavar="ID")
    cluster.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from annal.deploy.cluster import ClusterError, LocalCluster
    from annal.deploy.zookeeper import ZooKeeperError

    cluster = LocalCluster(args.dir)
    try:
        if args.action == "up":
            if args.brokers < 1:
                print("annal cluster up: --brokers must be at least 1", file=sys.stderr)
                return 2
            state = cluster.up(args.brokers)
            endpoints = ",".join(f"127.0.0.1:{b.port}" for b in state.brokers)
            print(f"cluster up in {cluster.directory}")
            print(f"bootstrap servers: {endpoints}")
            print(f"zookeeper: {state.zookeeper_connect}")
        elif args.action == "status":
            status = cluster.status()
            if args.json:
                print(json.dumps(status))
            else:
                print(f"zookeeper  {status['zookeeper']}  alive={status['zookeeper_alive']}")
                print(f"controller {status['controller']}")
                for b in status["brokers"]:
                    print(f"broker {b['id']}  {b['endpoint']}  pid={b['pid']}  alive={b['alive']}")
        elif args.action == "down":
            cluster.down()
            print(f"cluster in {cluster.directory} is down")
        elif args.action == "kill":
            cluster.signal_broker(args.broker_id, signal.SIGKILL)
        elif args.action == "stop":
            cluster.signal_broker(args.broker_id, signal.SIGTERM)
        elif args.action == "start":
            cluster.start_broker(args.broker_id)
    except (ClusterError, ZooKeeperError, TimeoutError) as exc:
        print(f"annal cluster {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
