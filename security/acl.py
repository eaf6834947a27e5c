"""Kafka's ACL model: who (a principal, from a host) may do what (an operation) to which
resources (a pattern), with the same wire codes and names as Kafka, so that what annal
stores in ZooKeeper and sends in DescribeAcls/CreateAcls is what a Kafka broker would.

The pieces
----------

* An **enumeration** each for resource types, operations, permission types and pattern
  types.  Their integer values are Kafka's wire codes.  ``UNKNOWN`` (0) stands for a code
  this version does not know, ``ANY`` (1) is only meaningful in a filter.  Each has a
  ``kafka_name``, the spelling Kafka writes in ZooKeeper's JSON and in its logs
  (``Topic``, ``TransactionalId``, ``Read``, ``ClusterAction``, ``Allow``; pattern types
  keep their upper-case names, ``PREFIXED``), and ``parse`` reads any reasonable
  spelling of a name: case is ignored and so are ``_``, ``-`` and spaces, so ``read``,
  ``ClusterAction``, ``cluster_action`` and ``describe-configs`` all work.

* A **principal** is ``<type>:<name>``, e.g. ``User:alice``; only the first ``:``
  separates, so a name may itself hold colons.  ``User:*`` in an ACL stands for every
  principal; ``User:ANONYMOUS`` is who an unauthenticated connection is.

* A **resource pattern** is what an ACL is attached to: a resource type, a name and how
  the name is matched.  ``LITERAL`` matches the resource of exactly that name, except
  that the literal name ``*`` matches every resource of the type.  ``PREFIXED``
  (KIP-290) matches every resource whose name starts with the pattern's name; a prefix
  of ``*`` is just the one-character prefix ``*``.  The cluster has a single resource,
  named ``kafka-cluster``.

* An **access control entry** says that a principal (or ``User:*``), connecting from a
  host (or from anywhere, ``*``), is allowed or denied an operation.  An **ACL binding**
  is an entry attached to a pattern: one row of ``kafka-acls.sh --list``.

* **Filters** select bindings for DescribeAcls and DeleteAcls.  A field left as ``None``
  (names, principals, hosts) or ``ANY`` (enumerations) matches everything.  A pattern
  filter's pattern type decides how its name is compared:

  - ``LITERAL`` or ``PREFIXED``: only stored patterns of that type, with the same name;
  - ``ANY``: stored patterns of any type, with the same name;
  - ``MATCH``: the stored patterns that would apply to a resource of that name, i.e. the
    literal pattern with that name, the literal ``*``, and each prefixed pattern whose
    name starts the filter's name.

  ``matches_at_most_one()`` says whether a filter pins down a single binding: no field
  left open, no ``MATCH``.  As in Kafka, a pattern type of ``ANY`` does not count as
  open, although a literal and a prefixed pattern of the same name both match it.

* A **resource** is the concrete thing a request touches (topic ``orders``, group
  ``billing``, the cluster): what the authorizer is asked about.

Everything here is immutable and pure; :mod:`annal.security.authorizer` decides, and
:mod:`annal.zk.acls` stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
USER_TYPE = "User"


def _squash(text: str) -> str:
    """A name with case, ``_``, ``-`` and spaces ignored: how names are compared."""
    return "".join(ch for ch in text if ch not in "_- \t").upper()


class _KafkaEnum(IntEnum):
    """Kafka's enumerations: the value is the wire code, ``kafka_name`` the JSON name."""

    @property
    def kafka_name(self) -> str:
        """Kafka's display and JSON spelling: ``TRANSACTIONAL_ID`` → ``TransactionalId``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> Self:
        """The member named ``text``, ignoring case, ``_``, ``-`` and spaces.

        ``UNKNOWN`` is not a name one can ask for; it only stands for unknown codes."""
        if isinstance(text, str):
            key = _squash(text)
            for member in cls:
                if member.name != "UNKNOWN" and _squash(member.name) == key:
                    return member
        allowed = ", ".join(m.kafka_name for m in cls if m.name != "UNKNOWN")
        raise ValueError(f"unknown {cls.__name__} {text!r}: expected one of {allowed}")

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member with wire code ``code``; ``UNKNOWN`` for a code this version lacks,
        as Kafka decodes codes from newer peers."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_KafkaEnum):
    """What kind of thing a resource is."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class AclOperation(_KafkaEnum):
    """What a request does to a resource; ``ALL`` in an ACL covers every operation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_KafkaEnum):
    """Whether an entry allows or denies."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(_KafkaEnum):
    """How a pattern's name is matched against resource names (KIP-290)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def kafka_name(self) -> str:
        """Pattern types keep their upper-case names in Kafka's JSON (``PREFIXED``)."""
        return self.name


_UNSPECIFIC = frozenset({0, 1})  # UNKNOWN and ANY, in every enumeration


# -- principals ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class KafkaPrincipal:
    """An authenticated identity, ``<type>:<name>`` (``User:alice``)."""

    principal_type: str
    name: str

    ANONYMOUS: ClassVar[KafkaPrincipal]
    WILDCARD: ClassVar[KafkaPrincipal]

    def __post_init__(self) -> None:
        if not self.principal_type or ":" in self.principal_type:
            raise ValueError(
                f"illegal principal type {self.principal_type!r}: it must be non-empty "
                "and hold no ':'"
            )

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` → ``KafkaPrincipal("User", "alice")``; the first ``:`` splits."""
        principal_type, colon, name = text.partition(":")
        if not colon or not principal_type:
            raise ValueError(
                f"principal {text!r} is not of the form <type>:<name>, e.g. User:alice"
            )
        return cls(principal_type, name)

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")
WILDCARD_PRINCIPAL_STR = str(WILDCARD_PRINCIPAL)
KafkaPrincipal.ANONYMOUS = ANONYMOUS
KafkaPrincipal.WILDCARD = WILDCARD_PRINCIPAL


# -- resources and patterns -------------------------------------------------------


def _check_concrete_type(resource_type: ResourceType, what: str) -> None:
    if not isinstance(resource_type, ResourceType) or resource_type in _UNSPECIFIC:
        raise ValueError(
            f"{what} needs a concrete resource type, not {resource_type!r}: one of "
            + ", ".join(t.kafka_name for t in ResourceType if t not in _UNSPECIFIC)
        )


@dataclass(frozen=True, slots=True, order=True)
class Resource:
    """A concrete resource that a request touches: topic ``orders``, the cluster, …"""

    resource_type: ResourceType
    name: str

    def __post_init__(self) -> None:
        _check_concrete_type(self.resource_type, "a resource")

    @classmethod
    def cluster(cls) -> Resource:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """The resources an ACL applies to: a type, a name and LITERAL or PREFIXED matching."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        _check_concrete_type(self.resource_type, "a resource pattern")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(
                f"a stored resource pattern is LITERAL or PREFIXED, not {self.pattern_type!r}"
            )
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a resource pattern needs a non-empty name, not {self.name!r}")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise ValueError(f"the cluster resource is named {CLUSTER_NAME!r}, not {self.name!r}")

    @classmethod
    def literal(cls, resource_type: ResourceType, name: str) -> ResourcePattern:
        return cls(resource_type, name, PatternType.LITERAL)

    @classmethod
    def prefixed(cls, resource_type: ResourceType, name: str) -> ResourcePattern:
        return cls(resource_type, name, PatternType.PREFIXED)

    @property
    def is_wildcard(self) -> bool:
        """The literal ``*``: every resource of the type."""
        return self.pattern_type is PatternType.LITERAL and self.name == WILDCARD_RESOURCE

    def applies_to(self, resource: Resource) -> bool:
        """Whether an ACL on this pattern governs ``resource``."""
        if resource.resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return resource.name.startswith(self.name)
        return self.name in (resource.name, WILDCARD_RESOURCE)

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.name}:{self.name}"


# -- entries and bindings -------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """A principal (or ``User:*``) from a host (or ``*``) is allowed/denied an operation."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        KafkaPrincipal.parse(self.principal)
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"an ACL's host must be an address or '*', not {self.host!r}")
        if not isinstance(self.operation, AclOperation) or self.operation in _UNSPECIFIC:
            raise ValueError(f"an ACL needs a concrete operation, not {self.operation!r}")
        if (
            not isinstance(self.permission_type, AclPermissionType)
            or self.permission_type in _UNSPECIFIC
        ):
            raise ValueError(f"an ACL allows or denies, it cannot be {self.permission_type!r}")

    @property
    def kafka_principal(self) -> KafkaPrincipal:
        return KafkaPrincipal.parse(self.principal)

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(
            self.principal, self.host, self.operation, self.permission_type
        )

    def __str__(self) -> str:
        return (
            f"{self.permission_type.kafka_name} {self.principal} "
            f"{self.operation.kafka_name} from host {self.host}"
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: an entry attached to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def __str__(self) -> str:
        return f"{self.entry} on {self.pattern}"


# -- filters --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Selects stored patterns; ``ANY`` types and a ``None`` name match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    ANY: ClassVar[ResourcePatternFilter]

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != (
            pattern.resource_type
        ):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type != pattern.pattern_type
        ):
            return False
        if self.name is None:
            return True
        if self.pattern_type is not PatternType.MATCH:
            return self.name == pattern.name
        # MATCH: the stored patterns that apply to a resource with the filter's name.
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return pattern.name in (self.name, WILDCARD_RESOURCE)

    def find_indefinite_field(self) -> str | None:
        """Why this filter could match more than one pattern, or None if it cannot."""
        if self.resource_type in _UNSPECIFIC:
            return f"resource type is {self.resource_type.name}"
        if self.name is None:
            return "resource name is not given"
        if self.pattern_type in (PatternType.UNKNOWN, PatternType.MATCH):
            return f"pattern type is {self.pattern_type.name}"
        return None

    def matches_at_most_one(self) -> bool:
        """True if no field is left open (pattern type ANY does not count, as in Kafka)."""
        return self.find_indefinite_field() is None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Selects entries; ``None`` principal/host and ``ANY`` enumerations match everything."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    ANY: ClassVar[AccessControlEntryFilter]

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or (
            self.permission_type == entry.permission_type
        )

    def find_indefinite_field(self) -> str | None:
        """Why this filter could match more than one entry, or None if it cannot."""
        if self.principal is None:
            return "principal is not given"
        if self.host is None:
            return "host is not given"
        if self.operation in _UNSPECIFIC:
            return f"operation is {self.operation.name}"
        if self.permission_type in _UNSPECIFIC:
            return f"permission type is {self.permission_type.name}"
        return None

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None


_ANY_PATTERN = ResourcePatternFilter()
_ANY_ENTRY = AccessControlEntryFilter()


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings: both the pattern and the entry must match."""

    pattern_filter: ResourcePatternFilter = _ANY_PATTERN
    entry_filter: AccessControlEntryFilter = _ANY_ENTRY

    ANY: ClassVar[AclBindingFilter]

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(
            binding.entry
        )

    def find_indefinite_field(self) -> str | None:
        return (
            self.pattern_filter.find_indefinite_field() or self.entry_filter.find_indefinite_field()
        )

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None


ResourcePatternFilter.ANY = _ANY_PATTERN
AccessControlEntryFilter.ANY = _ANY_ENTRY
AclBindingFilter.ANY = AclBindingFilter()
