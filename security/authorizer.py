"""Kafka's ACL authorizer decision (``AclAuthorizer``, ZooKeeper mode), over an in-memory
cache of the ACLs; loading that cache from ZooKeeper and keeping it current is the job of
``zk/``, which calls :meth:`AclCache.replace` for each pattern it hears has changed.

Deciding one request
--------------------

A principal connecting from a host asks to do an operation on a resource.  In order:

1. A **super user** (``super.users``) may do anything; no ACL is consulted.
2. The ACLs that **apply** to the resource are gathered: those on the literal pattern
   with the resource's name, those on the literal wildcard ``*`` of its type, and those
   on every prefixed pattern (KIP-290) whose name starts the resource's name.
3. If **no ACL applies at all**, for anyone, the answer is the broker's
   ``allow.everyone.if.no.acl.found`` setting.
4. Of those, an entry **concerns the request** if its principal is the requester or
   ``User:*``, and its host is the requester's address or ``*``.
5. A concerned **DENY** entry for the operation, or for ``ALL``, denies.  Deny always
   beats allow.
6. Otherwise a concerned **ALLOW** entry allows if its operation is ``ALL``, the
   operation itself, or one that implies it: whoever may read, write, delete or alter a
   resource may also describe it, and whoever may alter its configs may describe them.
   (Implication works for allowing only: denying ``READ`` does not deny ``DESCRIBE``.)
7. Otherwise the request is denied: ACLs exist, but none lets this principal in.

Deciding for a whole resource type (KIP-679)
-------------------------------------------

:meth:`Authorizer.authorize_any` answers "could this principal do the operation on at
least one resource of this type?", which a broker asks e.g. before granting an
idempotent producer its id.  It follows Kafka's ``AclAuthorizer``: only entries that
concern the request and name the operation itself or ``ALL`` count (nothing is implied).

* super users: yes;
* a concerned DENY on the literal ``*`` of the type: no;
* ``allow.everyone.if.no.acl.found``: yes (some resource without ACLs can be named);
* otherwise yes if some concerned ALLOW survives the denies: an ALLOW on the literal ``*``
  always does; an ALLOW on any other literal name does unless that name is denied
  literally or by a DENY prefix of it; an ALLOW prefix does unless a DENY prefix of it
  exists.

So with ``allow.everyone.if.no.acl.found=false`` and no ACLs of the type the answer is
no, and with it true, yes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from annal.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL_STR,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    Resource,
    ResourcePattern,
    ResourceType,
)

_ALLOW = AclPermissionType.ALLOW
_DENY = AclPermissionType.DENY
_ALL = AclOperation.ALL

# The ALLOW operations that grant each operation: itself, ALL, and what implies it.
_GRANTED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, _ALL}) for op in AclOperation if op > AclOperation.ANY
}
_GRANTED_BY[AclOperation.DESCRIBE] |= {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.DELETE,
    AclOperation.ALTER,
}
_GRANTED_BY[AclOperation.DESCRIBE_CONFIGS] |= {AclOperation.ALTER_CONFIGS}


def _check_operation(operation: AclOperation) -> None:
    if operation not in _GRANTED_BY:
        raise ValueError(f"cannot authorize the filter operation {operation!r}")


def super_users_from_config(value: str) -> frozenset[str]:
    """``super.users`` is a ``;``-separated list of principals: ``User:admin;User:ops``."""
    names = frozenset(part.strip() for part in value.split(";") if part.strip())
    for name in names:
        KafkaPrincipal.parse(name)
    return names


# -- the cache ----------------------------------------------------------------------


class AclCache:
    """Every ACL the broker knows, by resource pattern, indexed for authorization.

    Thread safety: ``_lock`` guards ``_acls`` (pattern → its entries) and ``_names``
    (resource type → pattern type → name → pattern, the index that finds the patterns
    applying to a resource).  :meth:`replace` changes both under the lock, and every
    reader holds it for the length of one lookup, so a reader sees each pattern's
    entries either wholly before or wholly after a replace.  Entry sets are frozensets,
    so what a reader is handed stays valid after the lock is released.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._names: dict[ResourceType, dict[PatternType, dict[str, ResourcePattern]]] = {}

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Make ``entries`` the pattern's whole ACL set; an empty set removes the pattern."""
        new = frozenset(entries)
        with self._lock:
            by_name = self._names.setdefault(pattern.resource_type, {}).setdefault(
                pattern.pattern_type, {}
            )
            if new:
                self._acls[pattern] = new
                by_name[pattern.name] = pattern
            else:
                self._acls.pop(pattern, None)
                by_name.pop(pattern.name, None)

    def clear(self) -> None:
        """Forget everything (before a full reload)."""
        with self._lock:
            self._acls.clear()
            self._names.clear()

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        with self._lock:
            return self._acls.get(pattern, frozenset())

    def patterns(self) -> frozenset[ResourcePattern]:
        with self._lock:
            return frozenset(self._acls)

    def acls(self, binding_filter: AclBindingFilter = AclBindingFilter.ANY) -> list[AclBinding]:
        """The bindings the filter selects, sorted (DescribeAcls)."""
        with self._lock:
            snapshot = list(self._acls.items())
        pattern_filter = binding_filter.pattern_filter
        found = [
            binding
            for pattern, entries in snapshot
            if pattern_filter.matches(pattern)
            for binding in (AclBinding(pattern, entry) for entry in entries)
            if binding_filter.entry_filter.matches(binding.entry)
        ]
        found.sort()
        return found

    def matching(self, resource: Resource) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """The patterns that apply to ``resource``, with their entries: the literal name,
        the literal ``*``, then the prefixes of the name, shortest first.  One dictionary
        lookup per prefix of the name, however many ACLs there are."""
        name = resource.name
        found: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        with self._lock:
            by_pattern_type = self._names.get(resource.resource_type)
            if not by_pattern_type:
                return found
            literal = by_pattern_type.get(PatternType.LITERAL)
            if literal:
                for candidate in (name, WILDCARD_RESOURCE):
                    pattern = literal.get(candidate)
                    if pattern is not None:
                        found[pattern] = self._acls[pattern]
            prefixed = by_pattern_type.get(PatternType.PREFIXED)
            if prefixed:
                for end in range(1, len(name) + 1):
                    pattern = prefixed.get(name[:end])
                    if pattern is not None:
                        found[pattern] = self._acls[pattern]
        return found

    def by_type(
        self, resource_type: ResourceType
    ) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern of one resource type, with its entries."""
        with self._lock:
            by_pattern_type = self._names.get(resource_type, {})
            return {
                pattern: self._acls[pattern]
                for names in by_pattern_type.values()
                for pattern in names.values()
            }


# -- the decision ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorization answer, with why, and the ACL that decided it if one did."""

    allowed: bool
    reason: str
    acl: AclBinding | None = None

    def log_line(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource: Resource
    ) -> str:
        """One line for an authorizer log."""
        verdict = "ALLOWED" if self.allowed else "DENIED"
        return (
            f"{verdict}: principal {principal} from host {host}, operation "
            f"{operation.kafka_name} on resource "
            f"{resource.resource_type.kafka_name}:{PatternType.LITERAL.name}:{resource.name} "
            f"({self.reason})"
        )


SUPER_USER = Decision(True, "super user")
NO_MATCHING_ALLOW = Decision(False, "no matching allow ACL")


def _no_acl_found(allowed: bool) -> Decision:
    return Decision(allowed, f"no ACL found, allow.everyone.if.no.acl.found={str(allowed).lower()}")


class Authorizer:
    """Kafka's ``AclAuthorizer`` decision (rules in the module docstring)."""

    __slots__ = ("_no_acl", "allow_everyone_if_no_acl_found", "cache", "super_users")

    def __init__(
        self,
        cache: AclCache,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        parsed = set()
        for text in super_users:
            try:
                parsed.add(KafkaPrincipal.parse(text))
            except ValueError as exc:
                raise ValueError(f"super.users: {exc}") from None
        self.cache = cache
        self.super_users: frozenset[KafkaPrincipal] = frozenset(parsed)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._no_acl = _no_acl_found(allow_everyone_if_no_acl_found)

    def authorize(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource: Resource
    ) -> Decision:
        _check_operation(operation)
        if principal in self.super_users:
            return SUPER_USER
        applying = self.cache.matching(resource)
        if not applying:
            return self._no_acl
        who = str(principal)
        granting = _GRANTED_BY[operation]
        allow: AclBinding | None = None
        for pattern, entries in applying.items():
            denies: list[AccessControlEntry] = []
            allows: list[AccessControlEntry] = []
            for entry in entries:
                if entry.principal != who and entry.principal != WILDCARD_PRINCIPAL_STR:
                    continue
                if entry.host != host and entry.host != WILDCARD_HOST:
                    continue
                if entry.permission_type is _DENY:
                    if entry.operation is operation or entry.operation is _ALL:
                        denies.append(entry)
                elif entry.operation in granting:
                    allows.append(entry)
            if denies:  # the smallest, so that the reason does not vary from run to run
                deny = AclBinding(pattern, min(denies))
                return Decision(False, f"denied by ACL: {deny}", deny)
            if allow is None and allows:
                allow = AclBinding(pattern, min(allows))
        if allow is not None:
            return Decision(True, f"allowed by ACL: {allow}", allow)
        return NO_MATCHING_ALLOW

    def authorize_any(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """KIP-679: could ``principal`` do ``operation`` on some resource of the type?"""
        _check_operation(operation)
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"cannot authorize the filter resource type {resource_type!r}")
        if principal in self.super_users:
            return True
        who = str(principal)
        allow_literal: set[str] = set()
        allow_prefix: set[str] = set()
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        for pattern, entries in self.cache.by_type(resource_type).items():
            for entry in entries:
                if entry.principal != who and entry.principal != WILDCARD_PRINCIPAL_STR:
                    continue
                if entry.host != host and entry.host != WILDCARD_HOST:
                    continue
                if entry.operation is not operation and entry.operation is not _ALL:
                    continue
                literal = pattern.pattern_type is PatternType.LITERAL
                if entry.permission_type is _DENY:
                    (deny_literal if literal else deny_prefix).add(pattern.name)
                else:
                    (allow_literal if literal else allow_prefix).add(pattern.name)
        if WILDCARD_RESOURCE in deny_literal:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True

        def denied_by_prefix(name: str) -> bool:
            return any(name[:end] in deny_prefix for end in range(1, len(name) + 1))

        if WILDCARD_RESOURCE in allow_literal:
            return True
        if any(not denied_by_prefix(prefix) for prefix in allow_prefix):
            return True
        return any(
            name not in deny_literal and not denied_by_prefix(name) for name in allow_literal
        )
