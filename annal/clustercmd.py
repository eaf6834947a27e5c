"""``annal cluster``: a local ZooKeeper and brokers as background processes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
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
    # --dir may also follow the action (``annal cluster up --dir D``): each action
    # takes it too, without a default of its own, so either spelling works.
    anywhere = argparse.ArgumentParser(add_help=False)
    anywhere.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help="cluster directory")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser(
        "up", parents=[anywhere], help="start ZooKeeper and the brokers, wait until ready"
    )
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument(
        "--security",
        choices=["plaintext", "ssl", "sasl_ssl"],
        default="plaintext",
        help="sasl_ssl: a CA and certificates made in DIR/security, Kafka's protocol on "
        "SASL_SSL:// (SCRAM), gRPC over TLS with client certificates, the ACL authorizer "
        "on (nothing allowed without an ACL) and a super user 'admin' whose client "
        "settings are printed (docs/security.md). ssl: the same, but Kafka's protocol on "
        "SSL:// with client certificates required (ssl.client.auth=required): a Kafka "
        "client proves who it is with a certificate the cluster's CA signed, as "
        "User:<CN>, and the admin's Kafka settings use admin.pem; no password. "
        "Default: plaintext, no authorizer",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a broker setting for every broker, e.g. --override num.partitions=4 "
        "(kafka-server-start.sh's spelling; repeat it for more; kept for restarts)",
    )
    up.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="ID:NAME=VALUE",
        help="a setting of one broker, on top of --override, e.g. --broker-override "
        "2:broker.rack=rack-b (repeat it for more; kept for restarts)",
    )
    status = actions.add_parser(
        "status", parents=[anywhere], help="show ZooKeeper, controller and brokers"
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    actions.add_parser("down", parents=[anywhere], help="stop every broker (SIGTERM) and ZooKeeper")
    for name, text in (
        ("kill", "SIGKILL one broker (a crash)"),
        ("stop", "SIGTERM one broker (a clean stop)"),
        ("start", "start a stopped broker again"),
    ):
        one = actions.add_parser(name, parents=[anywhere], help=text)
        one.add_argument("broker_id", type=int, metavar="ID")
        one.add_argument(
            "--timeout", type=float, default=300.0 if name != "kill" else 30.0, metavar="S",
            help="how long to wait for the broker to exit (or, for start, to serve) before "
            "giving up (default %(default)s s; a broker leading thousands of partitions "
            "hands them over before it exits)",
        )  # fmt: skip
    certificate = actions.add_parser(
        "certificate",
        parents=[anywhere],
        help="issue a client certificate under a secured cluster's CA",
        description="Issue NAME a certificate signed by the CA that 'cluster up --security' "
        "made, and write its client settings next to the admin's in DIR/security: NAME.pem "
        "(key and certificate), NAME.properties (annal's CLI: --command-config) and, with "
        "--security ssl, NAME-kafka.properties (Kafka's clients). Its principal is "
        "User:NAME, allowed nothing until ACLs allow it (annal acls --add "
        "--allow-principal User:NAME ..., as the admin).",
    )
    certificate.add_argument("name", metavar="NAME", help="the certificate's common name")
    drill = actions.add_parser(
        "drill",
        parents=[anywhere],
        help="crash leaders while records flow; check nothing acknowledged is lost",
        description="The failover drill, on the running local cluster: an acks=all producer "
        "sends at --rate records/s to a replicated topic (replication factor 3, or the live "
        "broker count; min.insync.replicas one less); each round SIGKILLs the leader of "
        "partition 0, waits for new leaders, restarts the broker, waits until it is back in "
        "every ISR and restores preferred leaders. Then every acknowledged record is looked "
        "up at its acknowledged offset. Exit 0 when none was lost and none was stored twice "
        "(the producer is idempotent).",
    )
    drill.add_argument("--topic", default="drill", help="topic to use (created if missing)")
    drill.add_argument("--partitions", type=int, default=3, help="partitions of a new topic")
    drill.add_argument("--rounds", type=int, default=2, help="leader crashes (default 2)")
    drill.add_argument("--rate", type=int, default=500, help="records per second (default 500)")
    drill.add_argument("--json", action="store_true", help="one JSON object per event")
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
            overrides = {}
            for item in args.override:
                name, sep, value = item.partition("=")
                if not sep or not name.strip():
                    print(f"annal cluster up: --override {item!r}: expected NAME=VALUE",
                          file=sys.stderr)  # fmt: skip
                    return 2
                overrides[name.strip()] = value.strip()
            per_broker: dict[int, dict[str, str]] = {}
            for item in args.broker_override:
                broker, colon, setting = item.partition(":")
                name, sep, value = setting.partition("=")
                if not colon or not broker.strip().isdigit() or not sep or not name.strip():
                    print(f"annal cluster up: --broker-override {item!r}: expected "
                          "ID:NAME=VALUE, e.g. 2:broker.rack=rack-b", file=sys.stderr)  # fmt: skip
                    return 2
                per_broker.setdefault(int(broker), {})[name.strip()] = value.strip()
            began = time.monotonic()

            def progress(line: str) -> None:
                print(f"[{time.monotonic() - began:4.1f} s] {line}", file=sys.stderr, flush=True)

            state = cluster.up(
                args.brokers,
                security=args.security,
                overrides=overrides,
                progress=progress,
                broker_overrides=per_broker,
            )
            endpoints = ",".join(f"127.0.0.1:{b.port}" for b in state.brokers)
            print(f"cluster up in {cluster.directory}")
            print(f"bootstrap servers: {endpoints}")
            kafka = ",".join(f"127.0.0.1:{b.kafka_port}" for b in state.brokers)
            print(f"Kafka bootstrap servers: {kafka}")
            print(f"zookeeper: {state.zookeeper_connect}")
            if args.security != "plaintext":
                files = cluster.secure_files
                print(f"security: {_security_line(args.security, str(files.ca))}")
                print(f"admin, annal's CLI: --command-config {files.admin_config}")
                print(f"admin, Kafka's clients: {files.kafka_admin_config}")
        elif args.action == "status":
            status = cluster.status()
            status["partitions"] = _partition_health(status, cluster)
            if args.json:
                print(json.dumps(status))
            else:
                print(f"zookeeper  {status['zookeeper']}  alive={status['zookeeper_alive']}")
                print(f"controller {status['controller']}")
                if status["security"] != "plaintext":
                    print(f"security   {_security_line(status['security'], status['ca'])}")
                for b in status["brokers"]:
                    metrics = f"  metrics={b['metrics_endpoint']}" if b["metrics_endpoint"] else ""
                    print(
                        f"broker {b['id']}  {b['endpoint']}  kafka={b['kafka_endpoint']}  "
                        f"pid={b['pid']}  alive={b['alive']}" + metrics
                    )
                print(_health_line(status["partitions"]))
        elif args.action == "down":
            cluster.down()
            print(f"cluster in {cluster.directory} is down")
        elif args.action == "kill":
            cluster.signal_broker(args.broker_id, signal.SIGKILL)
            print(f"broker {args.broker_id} killed (SIGKILL)")
        elif args.action == "stop":
            began = time.monotonic()
            print(f"broker {args.broker_id}: controlled shutdown (SIGTERM) ...", flush=True)
            cluster.signal_broker(args.broker_id, signal.SIGTERM, timeout_s=args.timeout)
            print(f"broker {args.broker_id} stopped in {time.monotonic() - began:.1f} s")
        elif args.action == "start":
            began = time.monotonic()
            cluster.start_broker(args.broker_id, timeout_s=args.timeout)
            print(
                f"broker {args.broker_id} started: registered and serving metadata in "
                f"{time.monotonic() - began:.1f} s"
            )
        elif args.action == "certificate":
            written = cluster.certificate(args.name)
            print(f"issued a certificate for User:{args.name}:")
            for path in written:
                print(f"  {path}")
            print(
                f"User:{args.name} may do nothing until ACLs allow it, e.g. as the admin: "
                f"annal acls --bootstrap-server HOST:PORT --command-config "
                f"{cluster.secure_files.admin_config} --add --allow-principal "
                f"User:{args.name} --producer --topic TOPIC"
            )
        elif args.action == "drill":
            return _drill(cluster, args)
    except (ClusterError, ZooKeeperError, TimeoutError) as exc:
        print(f"annal cluster {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _drill(cluster: Any, args: argparse.Namespace) -> int:
    from annal.deploy.drill import DrillSettings, run_drill

    if args.rounds < 1 or args.rate < 1 or args.partitions < 1:
        print(
            "annal cluster drill: --rounds, --rate and --partitions must be >= 1", file=sys.stderr
        )
        return 2

    def report(event: dict[str, Any]) -> None:
        print(json.dumps(event) if args.json else _describe(event), flush=True)

    settings = DrillSettings(args.topic, args.partitions, args.rounds, args.rate)
    return 0 if run_drill(cluster, settings, report) else 1


def _describe(event: dict[str, Any]) -> str:
    kind = event["event"]
    if kind == "topic_ready":
        return (
            f"topic {event['topic']}: {event['partitions']} partitions, replication factor "
            f"{event['replication_factor']}, min.insync.replicas {event['min_insync_replicas']}"
        )
    if kind == "kill":
        return (
            f"round {event['round']}: SIGKILL broker {event['broker']}, "
            f"leader of {event['leading']}"
        )
    if kind == "leaders_elected":
        return (
            f"round {event['round']}: new leaders {event['leaders']} after {event['after_ms']} ms"
        )
    if kind == "broker_restarted":
        return f"round {event['round']}: broker {event['broker']} restarted"
    if kind == "back_in_sync":
        return (
            f"round {event['round']}: broker {event['broker']} back in every ISR after "
            f"{event['after_ms']} ms"
        )
    if kind == "preferred_leaders_restored":
        return f"round {event['round']}: preferred leaders restored for {event['elected']}"
    lost = "no acknowledged record lost" if not event["lost"] else f"{event['lost']} LOST"
    return (
        f"{event['acked']} records acknowledged, {lost}, {event['duplicates']} stored twice "
        f"(expected 0: the producer is idempotent), longest pause between acknowledgements "
        f"{event['max_ack_gap_ms']} ms"
    )


# How Kafka's clients authenticate, by --security
_KAFKA_SECURITY = {
    "ssl": "SSL with client certificates",
    "sasl_ssl": "SASL_SSL",
}


def _security_line(security: str, ca: str) -> str:
    """What a secured cluster serves, for ``up`` and ``status``."""
    kafka = _KAFKA_SECURITY.get(security, security.upper())
    return f"{kafka} (Kafka), TLS (gRPC), ACLs on; CA {ca}"


def _partition_health(status: dict[str, Any], cluster: Any) -> dict[str, Any]:
    """Partition counts by condition (``admin.health``), asked of a live broker;
    ``{"error": why}`` when no broker can answer."""
    from annal.admin.client import AdminClient
    from annal.admin.health import summary
    from annal.errors import AnnalError

    live = [b["endpoint"] for b in status["brokers"] if b["alive"]]
    if not live:
        return {"error": "no broker is running"}
    secured = {}
    if status.get("security", "plaintext") != "plaintext":  # as the cluster's super user
        admin = str(cluster.secure_files.keystore("admin"))
        secured = {"security_protocol": "SSL", "ssl_cafile": status["ca"],
                   "ssl_certfile": admin, "ssl_keyfile": admin}  # fmt: skip
    try:
        with AdminClient(",".join(live), timeout_s=5, **secured) as client:
            return dict(summary(client))
    except (AnnalError, ValueError) as exc:
        return {"error": str(exc)}


def _health_line(health: dict[str, Any]) -> str:
    if "error" in health:
        return f"partitions unknown: {health['error']}"
    return (
        f"partitions {health['partitions']}  under-replicated={health['under-replicated']}  "
        f"unavailable={health['unavailable']}  under-min-isr={health['under-min-isr']}"
    )
