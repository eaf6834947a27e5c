"""``annal acls``: add, remove and list ACLs, as kafka-acls.sh does.

The options are kafka-acls.sh's, with its meaning:

* resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and
  ``--cluster``, matched as ``--resource-pattern-type`` says (``literal`` by default;
  ``prefixed``; and for ``--list``/``--remove`` also ``match``, the patterns that apply
  to a resource of that name, and ``any``);
* who: ``--allow-principal`` / ``--deny-principal`` (``User:alice``; repeatable), from
  ``--allow-host`` / ``--deny-host`` (``*``, any host, unless given);
* what: ``--operation`` (repeatable; ``All`` unless given), or the conveniences
  ``--producer`` (Write, Describe and Create on the topics, Write and Describe on the
  transactional ids, and IdempotentWrite on the cluster with ``--idempotent``) and
  ``--consumer`` (Read and Describe on the topics, Read on the groups).

``--add`` stores every combination and lists the resources' ACLs afterwards;
``--remove`` removes, for each resource, the ACLs of the principals, hosts and
operations given, or every ACL of the resource when no principal is given (it asks for
no confirmation; ``--force`` is accepted for kafka-acls.sh's scripts); ``--list``
prints each resource's ACLs the way kafka-acls.sh does (or, with ``--json``, a JSON
array), every ACL when no resource is given.  A combination kafka-acls.sh refuses is a
usage error (exit 2) saying why.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from annal.clierrors import fail
from annal.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

if TYPE_CHECKING:
    from annal.admin.client import AdminClient

Op = AclOperation
# The operations each resource type has, as kafka-acls.sh checks them on --add.
VALID_OPERATIONS = {
    ResourceType.TOPIC: {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL},
    ResourceType.GROUP: {Op.READ, Op.DESCRIBE, Op.DELETE, Op.ALL},
    ResourceType.CLUSTER: {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.ALL},
    ResourceType.TRANSACTIONAL_ID: {Op.DESCRIBE, Op.WRITE, Op.ALL},
}  # fmt: skip
PRODUCER_OPERATIONS = {
    ResourceType.TOPIC: (Op.WRITE, Op.DESCRIBE, Op.CREATE),
    ResourceType.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
}
CONSUMER_OPERATIONS = {
    ResourceType.TOPIC: (Op.READ, Op.DESCRIBE),
    ResourceType.GROUP: (Op.READ,),
}


class UsageError(ValueError):
    """A combination of options that cannot work; the message says which and why."""


EPILOG = """examples:
  annal acls --bootstrap-server B --add --allow-principal User:alice --operation Read \\
      --operation Describe --topic orders
  annal acls --bootstrap-server B --add --allow-principal User:app --producer --topic orders \\
      --idempotent
  annal acls --bootstrap-server B --add --allow-principal User:app --consumer --topic orders \\
      --group billing
  annal acls --bootstrap-server B --add --deny-principal User:eve --deny-host 10.0.0.9 \\
      --operation All --topic orders- --resource-pattern-type prefixed
  annal acls --bootstrap-server B --list [--topic orders] [--resource-pattern-type match]
  annal acls --bootstrap-server B --remove --allow-principal User:alice --operation Read \\
      --topic orders
  annal acls --bootstrap-server B --remove --topic orders      (every ACL of the topic)
"""


def add_parser(commands: Any) -> None:
    acls = commands.add_parser(
        "acls",
        help="add, remove and list ACLs",
        description="Add, remove and list ACLs (who may do what to which resources), as "
        "kafka-acls.sh does. Brokers store them in ZooKeeper and apply them within seconds.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    acls.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    action = acls.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs (all, or the resources')")
    who = acls.add_argument_group("who")
    for kind in ("allow", "deny"):
        who.add_argument(
            f"--{kind}-principal", action="append", default=[], metavar="TYPE:NAME",
            help=f"principal to {kind}, e.g. User:alice (User:* for everyone); repeatable",
        )  # fmt: skip
        who.add_argument(
            f"--{kind}-host", action="append", default=[], metavar="HOST",
            help=f"host the {kind}ed principals connect from (default * : any); repeatable",
        )  # fmt: skip
    what = acls.add_argument_group("what")
    what.add_argument(
        "--operation", action="append", default=[], metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite or All (the default); repeatable",
    )  # fmt: skip
    what.add_argument(
        "--producer", action="store_true",
        help="Write, Describe, Create on the topics (Write, Describe on transactional ids)",
    )  # fmt: skip
    what.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster"
    )
    what.add_argument(
        "--consumer", action="store_true",
        help="Read, Describe on the topics and Read on the groups (needs --topic and --group)",
    )  # fmt: skip
    which = acls.add_argument_group("which resources")
    which.add_argument("--topic", action="append", default=[], help="a topic; repeatable")
    which.add_argument("--group", action="append", default=[], help="a group; repeatable")
    which.add_argument("--cluster", action="store_true", help="the cluster")
    which.add_argument(
        "--transactional-id", action="append", default=[], metavar="ID",
        help="a transactional id; repeatable",
    )  # fmt: skip
    which.add_argument(
        "--resource-pattern-type", default="literal", type=str.lower,
        choices=["literal", "prefixed", "match", "any"],
        help="how resource names match: literal (default), prefixed; for --list and "
        "--remove also match (the patterns applying to that name) and any",
    )  # fmt: skip
    acls.add_argument(
        "--force", action="store_true", help="accepted for kafka-acls.sh's scripts: never asks"
    )
    acls.add_argument("--json", action="store_true", help="with --list: a JSON array of ACLs")
    acls.set_defaults(run=run)


# -- from options to ACLs and filters (pure) ---------------------------------------------


def _principals(option: str, values: Sequence[str]) -> list[str]:
    for value in values:
        try:
            KafkaPrincipal.parse(value)
        except ValueError as exc:
            raise UsageError(f"--{option} {value!r}: {exc}") from None
    return list(dict.fromkeys(values))


def _operations(values: Sequence[str]) -> list[AclOperation]:
    out = []
    for value in values or ["All"]:
        try:
            operation = AclOperation.parse(value)
        except ValueError as exc:
            raise UsageError(f"--operation: {exc}") from None
        if operation is AclOperation.ANY:
            raise UsageError("--operation Any only selects, it cannot be stored: give one")
        out.append(operation)
    return list(dict.fromkeys(out))


def resource_filters(args: argparse.Namespace) -> list[ResourcePatternFilter]:
    """The resources named, each with the pattern type asked for."""
    pattern_type = PatternType.parse(args.resource_pattern_type)
    named = [
        *((ResourceType.TOPIC, t) for t in args.topic),
        *((ResourceType.GROUP, g) for g in args.group),
        *((ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id),
        *([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else []),
    ]
    for resource_type, name in named:
        if not name:
            raise UsageError(f"an empty {resource_type.kafka_name} name")
    return [ResourcePatternFilter(t, name, pattern_type) for t, name in dict.fromkeys(named)]


def check_options(args: argparse.Namespace) -> None:
    """kafka-acls.sh's rules for combining options; UsageError naming what is wrong."""
    convenience = args.producer or args.consumer
    if args.list and (convenience or args.allow_principal or args.deny_principal):
        raise UsageError("--list takes resources only, not principals, --producer or --consumer")
    if args.json and not args.list:
        raise UsageError("--json goes with --list")
    if args.allow_host and not args.allow_principal:
        raise UsageError("--allow-host goes with --allow-principal")
    if args.deny_host and not args.deny_principal:
        raise UsageError("--deny-host goes with --deny-principal")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent goes with --producer")
    if convenience and (args.operation or args.deny_principal):
        raise UsageError(
            "--producer and --consumer set the operations and allow only: "
            "no --operation, --deny-principal or --deny-host with them"
        )
    if args.producer and not args.topic:
        raise UsageError("--producer needs --topic")
    if args.consumer and not (args.topic and args.group):
        raise UsageError("--consumer needs --topic and --group")
    if args.consumer and not args.producer and (args.cluster or args.transactional_id):
        raise UsageError("--consumer takes no --cluster or --transactional-id")
    if args.add and args.resource_pattern_type in ("match", "any"):
        raise UsageError(
            f"--resource-pattern-type {args.resource_pattern_type} selects ACLs; "
            "--add stores literal or prefixed ones"
        )
    if (args.add or args.remove) and not resource_filters(args):
        raise UsageError(
            "give a resource: --topic, --group, --transactional-id or --cluster "
            "(--remove with a resource and no principal removes all of its ACLs)"
        )
    if args.add and not (args.allow_principal or args.deny_principal):
        raise UsageError("--add needs --allow-principal or --deny-principal")


def _entries(
    args: argparse.Namespace, operations: Iterable[AclOperation]
) -> list[AccessControlEntry]:
    allowed = _principals("allow-principal", args.allow_principal)
    denied = _principals("deny-principal", args.deny_principal)
    out: list[AccessControlEntry] = []
    for principals, hosts, permission in (
        (allowed, args.allow_host or [WILDCARD_HOST], AclPermissionType.ALLOW),
        (denied, args.deny_host or [WILDCARD_HOST], AclPermissionType.DENY),
    ):
        for principal in principals:
            for host in dict.fromkeys(hosts):
                out.extend(AccessControlEntry(principal, host, op, permission) for op in operations)
    return out


def wanted_entries(
    args: argparse.Namespace,
) -> list[tuple[ResourcePatternFilter, list[AccessControlEntry]]]:
    """For --add and --remove: each resource with the entries named for it (none for
    --remove without principals: every ACL of the resource)."""
    resources = resource_filters(args)
    out: list[tuple[ResourcePatternFilter, list[AccessControlEntry]]] = []
    for resource in resources:
        if args.producer or args.consumer:
            ops: list[AclOperation] = []
            if args.producer:
                ops += PRODUCER_OPERATIONS.get(resource.resource_type, ())
            if args.consumer:
                ops += CONSUMER_OPERATIONS.get(resource.resource_type, ())
            if not ops:
                continue
        else:
            ops = _operations(args.operation)
        out.append((resource, _entries(args, dict.fromkeys(ops))))
    if args.producer and args.idempotent:
        cluster = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
        out.append((cluster, _entries(args, [AclOperation.IDEMPOTENT_WRITE])))
    return out


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    """For --add: every ACL to store, operations checked against the resource types."""
    out = []
    for resource, entries in wanted_entries(args):
        assert resource.name is not None
        try:
            pattern = ResourcePattern(resource.resource_type, resource.name, resource.pattern_type)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        allowed = VALID_OPERATIONS[resource.resource_type]
        for entry in entries:
            if entry.operation not in allowed:
                raise UsageError(
                    f"a {resource.resource_type.kafka_name} has no operation "
                    f"{entry.operation.kafka_name}: it has "
                    + ", ".join(sorted(op.kafka_name for op in allowed))
                )
            out.append(AclBinding(pattern, entry))
    return out


def filters_to_remove(args: argparse.Namespace) -> list[AclBindingFilter]:
    out: list[AclBindingFilter] = []
    for resource, entries in wanted_entries(args):
        if entries:
            out.extend(AclBindingFilter(resource, e.to_filter()) for e in entries)
        else:
            out.append(AclBindingFilter(resource, AccessControlEntryFilter.ANY))
    return out


# -- output ---------------------------------------------------------------------------------


def _pattern_text(pattern: ResourcePattern) -> str:
    return (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
        f"patternType={pattern.pattern_type.name})"
    )


def _entry_text(entry: AccessControlEntry) -> str:
    return (
        f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
        f"permissionType={entry.permission_type.name})"
    )


def print_grouped(heading: str, bindings: Iterable[AclBinding]) -> None:
    """kafka-acls.sh's listing: a heading per resource pattern, then its entries."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in sorted(bindings):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    for pattern, entries in by_pattern.items():
        print(f"{heading} `{_pattern_text(pattern)}`:")
        for entry in entries:
            print(f" \t{_entry_text(entry)}")
        print()


def acl_json(binding: AclBinding) -> dict[str, str]:
    pattern, entry = binding.pattern, binding.entry
    return {
        "resource_type": pattern.resource_type.kafka_name,
        "name": pattern.name,
        "pattern_type": pattern.pattern_type.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.kafka_name,
        "permission_type": entry.permission_type.kafka_name,
    }


# -- the command ---------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    try:
        check_options(args)
        if args.add:
            bindings = bindings_to_add(args)
        elif args.remove:
            filters = filters_to_remove(args)
        else:
            listed = resource_filters(args) or [ResourcePatternFilter.ANY]
            filters = [AclBindingFilter(f, AccessControlEntryFilter.ANY) for f in listed]
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal acls: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            if args.add:
                print_grouped("Adding ACLs for resource", bindings)
                client.create_acls(bindings)
                patterns = {b.pattern for b in bindings}
                print_grouped("Current ACLs for resource", _current(client, patterns))
            elif args.remove:
                removed = client.delete_acls(filters)
                print_grouped("Removed ACLs from resource", removed)
                if not removed:
                    print("No ACL matched: nothing removed.")
            else:
                found = sorted({b for f in filters for b in client.describe_acls(f)})
                if args.json:
                    print(json.dumps([acl_json(b) for b in found]))
                else:
                    print_grouped("Current ACLs for resource", found)
        except AdminError as exc:
            return fail("annal acls", exc)
    return 0


def _current(client: AdminClient, patterns: Iterable[ResourcePattern]) -> list[AclBinding]:
    found: set[AclBinding] = set()
    for pattern in patterns:
        found.update(client.describe_acls(AclBindingFilter(pattern.to_filter())))
    return sorted(found)
