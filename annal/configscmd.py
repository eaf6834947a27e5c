"""``annal configs``: show and change topic configs, dynamic broker configs and users'
SCRAM credentials, as kafka-configs.sh does.

``--entity-type brokers`` takes ``--entity-name ID`` (one broker's own dynamic
settings) or ``--entity-default`` (the cluster-wide defaults), KIP-226: ``--alter
--add-config log.retention.ms=1000`` and ``--delete-config log.retention.ms`` keep
them in ZooKeeper and every broker concerned applies them at once; ``--describe``
shows the dynamic settings of that level (``--all``: every setting of the broker)
with their synonyms, as kafka-configs.sh prints them; without a name it describes
every broker.  docs/operations.md lists the settings that change at run time.

``--entity-type users`` takes kafka-configs.sh's spelling for credentials:
``--add-config 'SCRAM-SHA-512=[iterations=8192,password=secret]'`` (iterations
optional), ``--delete-config SCRAM-SHA-512`` and ``--describe``, which shows each
mechanism with its iterations and never a secret.  The password is salted on this
side; only the salted password goes to the broker (KIP-554).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from annal import errors
from annal.clierrors import fail
from annal.v1 import annal_pb2 as pb


def add_parser(commands: Any) -> None:
    configs = commands.add_parser(
        "configs",
        help="show and change topic configs, dynamic broker configs and users' SCRAM credentials",
        description="Show a topic's config overrides (--describe; --all for every setting "
        "with its effective value) or change them (--alter): the brokers hosting the "
        "topic apply the change at once, as Kafka's dynamic topic configs do. With "
        "--entity-type users, show (--describe) or set and delete (--alter) a user's SCRAM "
        "credentials: --add-config 'SCRAM-SHA-512=[iterations=8192,password=SECRET]' "
        "(iterations optional, 4096 by default), --delete-config SCRAM-SHA-512. With "
        "--entity-type brokers, a broker's dynamic settings (--entity-name ID) or the "
        "cluster-wide defaults (--entity-default): --add-config log.retention.ms=1000.",
    )
    configs.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    configs.add_argument("--entity-type", choices=["topics", "users", "brokers"], default="topics")
    configs.add_argument("--entity-name", metavar="TOPIC|USER|BROKER-ID")
    configs.add_argument(
        "--entity-default", action="store_true",
        help="with --entity-type brokers: the cluster-wide default of every broker",
    )  # fmt: skip
    configs.add_argument(
        "--broker", metavar="BROKER-ID",
        help="as --entity-type brokers --entity-name BROKER-ID (kafka-configs.sh's shorthand)",
    )  # fmt: skip
    configs.add_argument(
        "--broker-defaults", action="store_true",
        help="as --entity-type brokers --entity-default",
    )  # fmt: skip
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the config")
    action.add_argument("--alter", action="store_true", help="change it")
    configs.add_argument("--all", action="store_true", help="with --describe: every setting")
    configs.add_argument(
        "--add-config", default="", metavar="K=V[,K=V]",
        help="settings to set; a value holding commas goes in brackets: "
        "cleanup.policy=[compact,delete]; for users MECHANISM=[iterations=N,password=P]",
    )  # fmt: skip
    configs.add_argument(
        "--delete-config", default="", metavar="K[,K]",
        help="overrides (for users: SCRAM mechanisms) to remove",
    )  # fmt: skip
    configs.add_argument(
        "--json", action="store_true",
        help="with --describe: one JSON object {topic, configs: [{name, value, is_default}]} "
        "(users: {user, credentials: [{mechanism, iterations}]})",
    )  # fmt: skip
    configs.set_defaults(run=run)


def parse_assignments(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` → {"k1": "v1", "k2": "a,b"}; ValueError naming the bad part."""
    out: dict[str, str] = {}
    depth, start = 0, 0
    parts: list[str] = []
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in (p.strip() for p in parts):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--add-config expects KEY=VALUE pairs, got {part!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    if args.broker is not None or args.broker_defaults:
        if args.entity_name is not None or args.entity_default or args.entity_type != "topics":
            print(
                "annal configs: --broker and --broker-defaults replace --entity-type and "
                "--entity-name/--entity-default",
                file=sys.stderr,
            )
            return 2
        args.entity_type, args.entity_name = "brokers", args.broker
        args.entity_default = args.broker_defaults
    if args.entity_type == "brokers":
        return run_brokers(args)
    try:
        if args.entity_default:
            raise ValueError("--entity-default goes with --entity-type brokers")
        if args.entity_name is None:
            raise ValueError(f"--entity-name is required with --entity-type {args.entity_type}")
    except ValueError as exc:
        print(f"annal configs: {exc}", file=sys.stderr)
        return 2
    if args.entity_type == "users":
        return run_users(args)
    try:
        settings, deletions = _changes(args)
        if args.json and args.alter:
            raise ValueError("--json goes with --describe")
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal configs: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            if args.alter:
                client.alter_configs(args.entity_name, settings, deletions)
                print(f"Completed updating config for topic {args.entity_name}.")
                return 0
            entries = client.describe_configs(args.entity_name, args.all)
        except AdminError as exc:
            return fail("annal configs", exc)
    if args.json:
        configs = [{"name": n, "value": v, "is_default": d} for n, v, d in entries]
        print(json.dumps({"topic": args.entity_name, "configs": configs}))
        return 0
    kind = "All" if args.all else "Dynamic"
    print(f"{kind} configs for topic {args.entity_name} are:")
    for name, value, is_default in entries:
        print(f"  {name}={value}" + ("  (default)" if is_default else ""))
    return 0


def _changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """An ``--alter``'s ``--add-config`` settings and ``--delete-config`` names;
    ValueError when it has neither, or when they come without ``--alter``."""
    if not args.alter:
        if args.add_config or args.delete_config:
            raise ValueError("--add-config and --delete-config go with --alter")
        return {}, []
    settings = parse_assignments(args.add_config)
    deletions = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not settings and not deletions:
        raise ValueError("--alter needs --add-config or --delete-config")
    return settings, deletions


def run_users(args: argparse.Namespace) -> int:
    """``--entity-type users``: a user's SCRAM credentials."""
    from annal.admin.client import AdminClient, AdminError
    from annal.security.scram import ScramConfigError, parse_add_config, parse_delete_config

    user = args.entity_name
    try:
        if not user:
            raise ValueError("--entity-name must name a user")
        if args.all:
            raise ValueError("--all goes with --entity-type topics")
        if args.json and args.alter:
            raise ValueError("--json goes with --describe")
        upsertions = parse_add_config(args.add_config) if args.add_config else []
        deletions = parse_delete_config(args.delete_config) if args.delete_config else []
        if args.alter and not (upsertions or deletions):
            raise ValueError("--alter needs --add-config or --delete-config")
        if args.describe and (upsertions or deletions):
            raise ValueError("--add-config and --delete-config go with --alter")
        client = AdminClient(args.bootstrap_server)
    except (ValueError, ScramConfigError) as exc:  # never holds the password
        print(f"annal configs: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            if args.alter:
                client.alter_user_scram_credentials(user, upsertions, deletions)
                print(f"Completed updating config for user {user}.")
                return 0
            (found,) = client.describe_user_scram_credentials([user])
        except AdminError as exc:
            return fail("annal configs", exc)
    if found.error is errors.RESOURCE_NOT_FOUND:
        credentials = []
    elif found.error is not errors.NONE:
        return fail("annal configs", AdminError(found.error, found.message))
    else:
        credentials = list(found.credentials)
    if args.json:
        shown = [{"mechanism": c.mechanism, "iterations": c.iterations} for c in credentials]
        print(json.dumps({"user": user, "credentials": shown}))
    elif credentials:
        text = ", ".join(f"{c.mechanism}=iterations={c.iterations}" for c in credentials)
        print(f"SCRAM credential configs for user-principal '{user}' are {text}")
    else:
        print(f"User-principal '{user}' has no SCRAM credential.")
    return 0


def run_brokers(args: argparse.Namespace) -> int:
    """``--entity-type brokers``: dynamic broker configs (admin/broker_configs.py)."""
    from annal.admin.broker_configs import (
        alter_broker_configs,
        broker_ids,
        describe_broker_configs,
    )
    from annal.admin.client import AdminClient, AdminError

    try:
        if args.entity_default and args.entity_name is not None:
            raise ValueError("give --entity-name or --entity-default, not both")
        name = "" if args.entity_default else args.entity_name
        if name and not (name.isascii() and name.isdigit()):
            raise ValueError(
                f"the entity name for brokers must be a valid integer broker id, but it is: {name}"
            )
        if args.alter and name is None:
            raise ValueError("--alter needs --entity-name ID or --entity-default")
        settings, deletions = _changes(args)
        if args.alter and (args.json or args.all):
            raise ValueError("--json and --all go with --describe")
        if args.entity_default and args.all:
            raise ValueError("--all goes with --entity-name: the default has dynamic ones only")
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal configs: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            if args.alter:
                alter_broker_configs(client, name, settings, deletions)
                what = f"broker {name}" if name else "brokers in the cluster"
                print(f"Completed updating {'' if name else 'default '}config for {what}.")
                return 0
            # no name: every broker, as kafka-configs.sh describes them
            names = [str(b) for b in broker_ids(client)] if name is None else [name]
            described = {n: describe_broker_configs(client, n) for n in names}
        except AdminError as exc:
            return fail("annal configs", exc)
    for broker, entries in described.items():
        wanted = pb.DYNAMIC_BROKER_CONFIG if broker else pb.DYNAMIC_DEFAULT_BROKER_CONFIG
        shown = [e for e in entries if args.all or e.source == wanted]
        if args.json:
            print(json.dumps({"broker": broker, "configs": [_broker_entry(e) for e in shown]}))
            continue
        if not broker:
            print("Default configs for brokers in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for broker {broker} are:")
        for e in shown:
            synonyms = ", ".join(
                f"{pb.ConfigSource.Name(s.source)}:{s.name}={_shown(e, s.value)}"
                for s in e.synonyms
            )
            value = _shown(e, e.value) if e.has_value else "null"
            sensitive = str(e.sensitive).lower()
            print(f"  {e.name}={value} sensitive={sensitive} synonyms={{{synonyms}}}")
    return 0


def _shown(entry: pb.BrokerConfigEntry, value: str) -> str:
    return "null" if entry.sensitive else value


def _broker_entry(entry: pb.BrokerConfigEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "value": entry.value if entry.has_value and not entry.sensitive else None,
        "source": pb.ConfigSource.Name(entry.source),
        "read_only": entry.read_only,
        "sensitive": entry.sensitive,
        "synonyms": [
            {"name": s.name, "value": None if entry.sensitive else s.value,
             "source": pb.ConfigSource.Name(s.source)}
            for s in entry.synonyms
        ],
    }  # fmt: skip
