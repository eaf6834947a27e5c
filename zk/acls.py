"""Where Kafka (ZooKeeper mode) keeps ACLs in ZooKeeper, and how it encodes them.

Names and encodings only; the code that reads and watches the znodes lives beside it
in ``zk/``.

Resource znodes
---------------

Each resource pattern that has ACLs has one znode, holding all of that pattern's
entries.  Which tree it lives in depends on the pattern type; below the tree come the
resource type's display name and then the pattern's name, unescaped::

    /kafka-acl/<ResourceType>/<name>                           LITERAL patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>         PREFIXED patterns (KIP-290)

    /kafka-acl/Topic/orders
    /kafka-acl/Topic/*                                         the literal wildcard
    /kafka-acl/Cluster/kafka-cluster
    /kafka-acl-extended/prefixed/Group/billing-

Prefixed patterns got a tree of their own (KIP-290) so that brokers older than 2.0,
which only know ``/kafka-acl``, never see a prefix and mistake it for a literal name.
A resource type's display name is its enum name in Pascal case: ``Topic``, ``Group``,
``Cluster``, ``TransactionalId``, ``DelegationToken``.

The data of a resource znode is a JSON object: a version (always 1) and the list of
entries; each entry names its principal, ``Allow`` or ``Deny``, the operation's display
name (``Read``, ``IdempotentWrite``, ...) and the host, ``*`` for any::

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                          "operation":"Read","host":"*"}]}

A znode that is empty or holds JSON ``null`` has no ACLs; when the last entry of a
pattern goes, Kafka deletes the znode.  annal writes the entries sorted, so the bytes
for a given set are always the same.

Change notifications
--------------------

Whoever changes a resource znode then creates a sequential znode, which every broker
watches, naming the pattern whose ACLs must be re-read.  ZooKeeper appends a ten-digit,
zero-padded sequence number to the name ``acl_changes_``::

    /kafka-acl-changes/acl_changes_0000000042             data: Topic:orders
    /kafka-acl-extended-changes/acl_changes_0000000007    data: {"version":1,
        "resourceType":"Topic","name":"ord","patternType":"PREFIXED"}

Literal changes carry the plain text ``<ResourceType>:<name>`` (split at the first
``:``; the name may hold more), as before KIP-290; prefixed changes carry JSON in their
own tree, again so that old brokers never see them.  Kafka 2.0-2.4 write the type's
display name (``Topic``) in both; 2.5 and later write the enum name (``TOPIC``,
``TRANSACTIONAL_ID``).  annal writes the display name and reads either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, TypeVar

from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from annal.zk.layout import LayoutError

LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
PREFIXED_ACLS = EXTENDED_ACLS + "/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ACL_VERSION = 1
CHANGE_VERSION = 1

# The resource types that can carry ACLs, each with a znode under each tree.
RESOURCE_TYPES = tuple(t for t in ResourceType if t > ResourceType.ANY)

_ACL_ROOTS = {PatternType.LITERAL: LITERAL_ACLS, PatternType.PREFIXED: PREFIXED_ACLS}
_CHANGE_ROOTS = {PatternType.LITERAL: LITERAL_CHANGES, PatternType.PREFIXED: EXTENDED_CHANGES}

# Created at start-up, parents first, as Kafka's authorizer does.
PERSISTENT_PATHS: tuple[str, ...] = (
    LITERAL_ACLS,
    *(f"{LITERAL_ACLS}/{t.kafka_name}" for t in RESOURCE_TYPES),
    EXTENDED_ACLS,
    PREFIXED_ACLS,
    *(f"{PREFIXED_ACLS}/{t.kafka_name}" for t in RESOURCE_TYPES),
    LITERAL_CHANGES,
    EXTENDED_CHANGES,
)

_T = TypeVar("_T")

_SEQUENCE = re.compile(rf"^{CHANGE_PREFIX}(\d{{10}})$")


class AclLayoutError(LayoutError):
    """An ACL znode, path or change notification that is not in Kafka's format."""


# -- paths ----------------------------------------------------------------------------


def _root(roots: dict[PatternType, str], pattern_type: PatternType) -> str:
    try:
        return roots[pattern_type]
    except KeyError:
        raise AclLayoutError(
            f"ACLs are stored for LITERAL and PREFIXED patterns only, not {pattern_type!r}"
        ) from None


def acl_root(pattern_type: PatternType) -> str:
    """``/kafka-acl`` or ``/kafka-acl-extended/prefixed``."""
    return _root(_ACL_ROOTS, pattern_type)


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    """The parent of one resource type's znodes: ``/kafka-acl/Topic``."""
    return f"{acl_root(pattern_type)}/{resource_type.kafka_name}"


def acl_path(pattern: ResourcePattern) -> str:
    """The znode holding the pattern's ACLs: ``/kafka-acl/Topic/orders``."""
    name = pattern.name
    if "/" in name or name in (".", "..") or "\x00" in name:
        raise AclLayoutError(
            f"resource name {name!r} cannot be a znode name: no '/', NUL, '.' or '..'"
        )
    return f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/{name}"


def pattern_from_path(path: str) -> ResourcePattern:
    """The pattern whose ACLs the znode at ``path`` holds (the inverse of ``acl_path``)."""
    if path.startswith(PREFIXED_ACLS + "/"):
        pattern_type, root = PatternType.PREFIXED, PREFIXED_ACLS
    elif path.startswith(LITERAL_ACLS + "/"):
        pattern_type, root = PatternType.LITERAL, LITERAL_ACLS
    else:
        raise AclLayoutError(
            f"{path!r} is not an ACL znode: it lies under neither {LITERAL_ACLS}/ "
            f"nor {PREFIXED_ACLS}/"
        )
    type_name, slash, name = path[len(root) + 1 :].partition("/")
    if not slash or not name or "/" in name:
        raise AclLayoutError(f"{path!r} is not an ACL znode: expected {root}/<ResourceType>/<name>")
    try:
        return ResourcePattern(_resource_type(type_name), name, pattern_type)
    except ValueError as exc:
        raise AclLayoutError(f"ACL znode {path}: {exc}") from None


def _resource_type(text: str) -> ResourceType:
    resource_type = ResourceType.parse(text)
    if resource_type not in RESOURCE_TYPES:
        raise ValueError(f"{text!r} is not a resource type that can carry ACLs")
    return resource_type


# -- change notifications -----------------------------------------------------------


def change_root(pattern_type: PatternType) -> str:
    """``/kafka-acl-changes`` (LITERAL) or ``/kafka-acl-extended-changes`` (PREFIXED)."""
    return _root(_CHANGE_ROOTS, pattern_type)


def change_path_prefix(pattern_type: PatternType) -> str:
    """The path to create a sequential change znode at: ``/kafka-acl-changes/acl_changes_``."""
    return f"{change_root(pattern_type)}/{CHANGE_PREFIX}"


def change_sequence(node: str) -> int:
    """The sequence number of a change znode, from its name (or its path)."""
    match = _SEQUENCE.match(node.rpartition("/")[2])
    if match is None:
        raise AclLayoutError(
            f"{node!r} is not an ACL change znode: expected {CHANGE_PREFIX}<10 digits>"
        )
    return int(match.group(1))


def encode_change(pattern: ResourcePattern) -> bytes:
    """The data of the change znode telling brokers to re-read the pattern's ACLs."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.kafka_name}:{pattern.name}".encode()
    return _dump(
        {
            "version": CHANGE_VERSION,
            "resourceType": pattern.resource_type.kafka_name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.kafka_name,
        }
    )


def decode_change(root: str, data: bytes) -> ResourcePattern:
    """The pattern named by a change znode under ``root`` (a change tree, or a path in it)."""
    if root == LITERAL_CHANGES or root.startswith(LITERAL_CHANGES + "/"):
        return _decode_literal_change(root, data)
    if root == EXTENDED_CHANGES or root.startswith(EXTENDED_CHANGES + "/"):
        return _decode_extended_change(root, data)
    raise AclLayoutError(
        f"{root!r} is not an ACL change tree: expected {LITERAL_CHANGES} or {EXTENDED_CHANGES}"
    )


def _decode_literal_change(where: str, data: bytes) -> ResourcePattern:
    text = _text(where, data)
    type_name, colon, name = text.partition(":")
    if not colon:
        raise AclLayoutError(
            f"ACL change {where} holds {text!r}, not <ResourceType>:<name> (e.g. Topic:orders)"
        )
    try:
        return ResourcePattern(_resource_type(type_name), name, PatternType.LITERAL)
    except ValueError as exc:
        raise AclLayoutError(f"ACL change {where} ({text!r}): {exc}") from None


def _decode_extended_change(where: str, data: bytes) -> ResourcePattern:
    obj = _load(f"ACL change {where}", data)
    if obj is None:
        raise AclLayoutError(f"ACL change {where} is empty: expected a JSON object")
    what = f"ACL change {where}"
    version = _field(what, obj, "version", int)
    if version > CHANGE_VERSION:
        raise AclLayoutError(f"{what} has version {version}; this reader knows up to 1")
    try:
        pattern_type = PatternType.parse(_field(what, obj, "patternType", str))
        if pattern_type is not PatternType.PREFIXED:
            raise ValueError(f"pattern type {pattern_type.name} has no place in {where}")
        resource_type = _resource_type(_field(what, obj, "resourceType", str))
        return ResourcePattern(resource_type, _field(what, obj, "name", str), pattern_type)
    except AclLayoutError:
        raise
    except ValueError as exc:
        raise AclLayoutError(f"{what}: {exc}") from None


# -- the ACLs of one resource znode -------------------------------------------------


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """The JSON of a resource znode, entries sorted so equal sets give equal bytes."""
    return _dump(
        {
            "version": ACL_VERSION,
            "acls": [
                {
                    "principal": entry.principal,
                    "permissionType": entry.permission_type.kafka_name,
                    "operation": entry.operation.kafka_name,
                    "host": entry.host,
                }
                for entry in sorted(set(entries))
            ],
        }
    )


def decode_acls(data: bytes | None, path: str) -> frozenset[AccessControlEntry]:
    """The entries a resource znode at ``path`` holds; none for empty data or ``null``."""
    where = f"ACL znode {path}"
    obj = _load(where, data)
    if obj is None:
        return frozenset()
    version = _field(where, obj, "version", int)
    if version != ACL_VERSION:
        raise AclLayoutError(f"{where} has version {version}; only version 1 exists")
    items = _field(where, obj, "acls", list)
    entries = set()
    for index, item in enumerate(items):
        here = f"{where}, acls[{index}]"
        if not isinstance(item, dict):
            raise AclLayoutError(f"{here} is {_json_type(item)}, not a JSON object")
        try:
            permission = AclPermissionType.parse(_field(here, item, "permissionType", str))
            operation = AclOperation.parse(_field(here, item, "operation", str))
            entries.add(
                AccessControlEntry(
                    _field(here, item, "principal", str),
                    _field(here, item, "host", str),
                    operation,
                    permission,
                )
            )
        except AclLayoutError:
            raise
        except ValueError as exc:
            raise AclLayoutError(f"{here}: {exc}") from None
    return frozenset(entries)


# -- JSON helpers --------------------------------------------------------------------


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _text(where: str, data: bytes | None) -> str:
    try:
        return (data or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AclLayoutError(f"{where} is not UTF-8: {exc}") from None


def _load(where: str, data: bytes | None) -> dict[str, Any] | None:
    """The JSON object in ``data``; None for no data or ``null``."""
    text = _text(where, data)
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AclLayoutError(f"{where} does not hold JSON: {exc}: {text[:200]!r}") from None
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise AclLayoutError(f"{where} holds {_json_type(obj)}, not a JSON object")
    return obj


_JSON_TYPES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _field(where: str, obj: dict[str, Any], name: str, kind: type[_T]) -> _T:
    try:
        value = obj[name]
    except KeyError:
        raise AclLayoutError(f"{where} has no {name!r} field") from None
    # JSON true/false are Python bools, which are ints too: keep them apart.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {int: "an integer", str: "a string", list: "an array"}.get(kind, kind.__name__)
        raise AclLayoutError(
            f"{where} field {name!r} is {_json_type(value)} ({value!r}), not {expected}"
        )
    return value
