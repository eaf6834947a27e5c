"""Security administration's own request and answer types: CreateAcls, DescribeAcls,
DeleteAcls, DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) as
``SecurityAdmin`` (``broker/security/security_admin.py``) takes and gives them.

Both protocol edges adapt to these, each once: the gRPC service from and to its
protobuf messages (``grpc_security.py``), the Kafka listener from and to Kafka's
(``broker/kafka/security_admin.py``).

The field names are those of annal.proto, which follows Kafka's messages (Kafka's
``resource_pattern_type`` of a creation is ``pattern_type`` here, as in its other ACL
messages); every enumeration is Kafka's wire code, left unchecked (``SecurityAdmin``
answers a bad one per item); errors are Kafka's error numbers.  A filter's unset
name, principal or host (matching every value) is ``None``, as Kafka's null.
SCRAM mechanisms are their SASL names ("SCRAM-SHA-256", "SCRAM-SHA-512").
"""

from __future__ import annotations

from dataclasses import dataclass, field

# -- ACLs ------------------------------------------------------------------------------


@dataclass(slots=True)
class AclBinding:
    """One ACL: a principal, from a host, allowed or denied an operation on the
    resources a pattern names (docs/security.md)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(slots=True)
class AclBindingFilter:
    """Selects ACLs: ANY (1) codes and ``None`` strings match every value; the pattern
    type may also be MATCH (2)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


@dataclass(slots=True)
class CreateAclsRequest:
    creations: list[AclBinding] = field(default_factory=list)


@dataclass(slots=True)
class AclResult:
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class CreateAclsResponse:
    results: list[AclResult] = field(default_factory=list)  # one per creation, in order


@dataclass(slots=True)
class DescribeAclsRequest:
    filter: AclBindingFilter


@dataclass(slots=True)
class DescribeAclsResponse:
    error: int = 0
    error_message: str = ""
    acls: list[AclBinding] = field(default_factory=list)  # by resource pattern, then entry


@dataclass(slots=True)
class DeleteAclsRequest:
    filters: list[AclBindingFilter] = field(default_factory=list)


@dataclass(slots=True)
class DeletedAcl:
    acl: AclBinding
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class DeleteAclsResult:
    error: int = 0
    error_message: str = ""
    deleted: list[DeletedAcl] = field(default_factory=list)


@dataclass(slots=True)
class DeleteAclsResponse:
    results: list[DeleteAclsResult] = field(default_factory=list)  # one per filter, in order


# -- SCRAM credentials (KIP-554) -----------------------------------------------------------


@dataclass(slots=True)
class DescribeUserScramCredentialsRequest:
    users: list[str] = field(default_factory=list)  # empty: every user with a credential


@dataclass(slots=True)
class ScramCredentialInfo:
    mechanism: str
    iterations: int


@dataclass(slots=True)
class UserScramCredentials:
    user: str
    error: int = 0
    error_message: str = ""
    credentials: list[ScramCredentialInfo] = field(default_factory=list)


@dataclass(slots=True)
class DescribeUserScramCredentialsResponse:
    error: int = 0
    error_message: str = ""
    results: list[UserScramCredentials] = field(default_factory=list)


@dataclass(slots=True)
class ScramCredentialDeletion:
    user: str
    mechanism: str


@dataclass(slots=True)
class ScramCredentialUpsertion:
    """A credential to set: the client's salt and salted password, never the password."""

    user: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(slots=True)
class AlterUserScramCredentialsRequest:
    deletions: list[ScramCredentialDeletion] = field(default_factory=list)
    upsertions: list[ScramCredentialUpsertion] = field(default_factory=list)


@dataclass(slots=True)
class AlterUserScramResult:
    user: str
    error: int = 0
    error_message: str = ""


@dataclass(slots=True)
class AlterUserScramCredentialsResponse:
    results: list[AlterUserScramResult] = field(default_factory=list)  # one per user named
