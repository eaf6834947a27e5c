"""The checks and conversions of ACL and SCRAM admin requests, as pure functions.

``SecurityAdmin`` (``security_admin.py``) serves both protocols from its own request
types (``broker/requests/security_types.py``); what arrives there is turned into
``annal.security`` values here, each bad field answered with Kafka's code and a message
naming the value:

* an ACL to store needs a resource type that can hold ACLs, a LITERAL or PREFIXED
  pattern with a non-empty name that can be a znode name (no ``/``), the cluster named
  ``kafka-cluster``, a principal ``<type>:<name>``, a host, and an operation and
  permission that are neither UNKNOWN nor ANY: INVALID_REQUEST otherwise;
* a filter may leave fields open (ANY, unset), but not hold a code annal does not know
  (UNKNOWN), nor a malformed principal: INVALID_REQUEST;
* a SCRAM upsertion needs a user name (UNACCEPTABLE_CREDENTIAL), a mechanism annal
  supports (UNSUPPORTED_SASL_MECHANISM), 4096..16384 iterations, a salt and a salted
  password of the mechanism's digest size (UNACCEPTABLE_CREDENTIAL); a deletion needs
  the first two.

A KIP-554 upsertion carries the salted password, never the password: the broker
derives the two keys it stores from it (RFC 5802: StoredKey = H(HMAC(SaltedPassword,
"Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")) with scramp's
primitives, in ``credential_from_salted_password``.
"""

from __future__ import annotations

from dataclasses import dataclass

from annal.broker.requests import security_types as st
from annal.broker.requests.request_checks import Refusal
from annal.security.acl import (
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
from annal.security.scram import (
    KEY_SIZES,
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
)
from annal.zk import acls
from scramp import ScramMechanism  # type: ignore[import-untyped]
from scramp.utils import h as scramp_h  # type: ignore[import-untyped]
from scramp.utils import hmac as scramp_hmac

from annal import errors

_STORED_PATTERNS = (PatternType.LITERAL, PatternType.PREFIXED)


def _invalid(message: str) -> Refusal:
    return Refusal(errors.INVALID_REQUEST, message)


def _names(kind: type[ResourceType | AclOperation | AclPermissionType | PatternType]) -> str:
    return ", ".join(f"{m.value} {m.kafka_name}" for m in kind if m.value > 1)


# -- ACLs ---------------------------------------------------------------------------


def binding_from_request(message: st.AclBinding) -> AclBinding | Refusal:
    """The ACL to store, or why it cannot be stored (INVALID_REQUEST)."""
    resource_type = ResourceType.from_code(message.resource_type)
    if resource_type.value <= ResourceType.ANY:
        return _invalid(
            f"resource type {message.resource_type} cannot hold ACLs: "
            f"expected {_names(ResourceType)}"
        )
    pattern_type = PatternType.from_code(message.pattern_type)
    if pattern_type not in _STORED_PATTERNS:
        return _invalid(
            f"pattern type {message.pattern_type} ({pattern_type.name}) cannot be stored: "
            "an ACL's pattern is 3 LITERAL or 4 PREFIXED"
        )
    operation = AclOperation.from_code(message.operation)
    if operation.value <= AclOperation.ANY:
        return _invalid(
            f"operation {message.operation} ({operation.name}) cannot be stored: "
            f"expected {_names(AclOperation)}"
        )
    permission = AclPermissionType.from_code(message.permission_type)
    if permission.value <= AclPermissionType.ANY:
        return _invalid(
            f"permission type {message.permission_type} ({permission.name}) cannot be "
            "stored: expected 2 Deny or 3 Allow"
        )
    try:
        pattern = ResourcePattern(resource_type, message.resource_name, pattern_type)
        acls.acl_path(pattern)  # a name that cannot be a znode (holding '/') is refused
        entry = AccessControlEntry(message.principal, message.host, operation, permission)
    except ValueError as exc:
        return _invalid(str(exc))
    return AclBinding(pattern, entry)


def binding_answer(binding: AclBinding) -> st.AclBinding:
    """A stored ACL as an answer carries it (Kafka's codes)."""
    pattern, entry = binding.pattern, binding.entry
    return st.AclBinding(
        pattern.resource_type.value,
        pattern.name,
        pattern.pattern_type.value,
        entry.principal,
        entry.host,
        entry.operation.value,
        entry.permission_type.value,
    )


def filter_from_request(message: st.AclBindingFilter) -> AclBindingFilter | Refusal:
    """The filter, or why it is not one (INVALID_REQUEST): a code annal does not know
    (UNKNOWN, 0 or a newer one) or a principal not of the form ``<type>:<name>``."""
    resource_type = ResourceType.from_code(message.resource_type)
    pattern_type = PatternType.from_code(message.pattern_type)
    operation = AclOperation.from_code(message.operation)
    permission = AclPermissionType.from_code(message.permission_type)
    for field, code, member in (
        ("resource type", message.resource_type, resource_type),
        ("pattern type", message.pattern_type, pattern_type),
        ("operation", message.operation, operation),
        ("permission type", message.permission_type, permission),
    ):
        if member.value == 0:
            return _invalid(f"the filter's {field} {code} is unknown")
    principal = message.principal
    if principal is not None:
        try:
            KafkaPrincipal.parse(principal)
        except ValueError as exc:
            return _invalid(f"the filter's {exc}")
    return AclBindingFilter(
        ResourcePatternFilter(
            resource_type,
            message.resource_name,
            pattern_type,
        ),
        AccessControlEntryFilter(
            principal,
            message.host,
            operation,
            permission,
        ),
    )


def named_patterns(pattern_filter: ResourcePatternFilter) -> list[ResourcePattern]:
    """The stored patterns a filter that names one resource could select (both pattern
    types for ANY): a delete looks at them even before the cache knows them."""
    if not pattern_filter.matches_at_most_one() or pattern_filter.name is None:
        return []
    if pattern_filter.pattern_type is PatternType.ANY:
        kinds = list(_STORED_PATTERNS)
    else:
        kinds = [pattern_filter.pattern_type]
    out = []
    for kind in kinds:
        try:
            pattern = ResourcePattern(pattern_filter.resource_type, pattern_filter.name, kind)
            acls.acl_path(pattern)
        except ValueError:
            continue  # no such pattern can be stored
        out.append(pattern)
    return out


# -- SCRAM credentials -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserAlterations:
    """What one user's alteration asks, once checked: mechanisms to delete, and the
    credentials to set by mechanism."""

    user: str
    deletions: tuple[str, ...]
    upsertions: tuple[st.ScramCredentialUpsertion, ...]


def _unacceptable(message: str) -> Refusal:
    return Refusal(errors.UNACCEPTABLE_CREDENTIAL, message)


def check_mechanism(user: str, mechanism: str) -> Refusal | None:
    if not user:
        return _unacceptable("the user name is empty")
    if mechanism not in MECHANISMS:
        shown = repr(mechanism) if len(mechanism) <= 40 else "(a long name)"
        return Refusal(
            errors.UNSUPPORTED_SASL_MECHANISM,
            f"unknown SCRAM mechanism {shown} for user {user!r}: "
            f"expected {' or '.join(MECHANISMS)}",
        )
    return None


def check_upsertion(upsertion: st.ScramCredentialUpsertion) -> Refusal | None:
    user, mechanism = upsertion.user, upsertion.mechanism
    if refusal := check_mechanism(user, mechanism):
        return refusal
    if not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
        return _unacceptable(
            f"{mechanism} of user {user!r}: {upsertion.iterations} iterations is outside "
            f"{MIN_ITERATIONS}..{MAX_ITERATIONS}"
        )
    if not upsertion.salt:
        return _unacceptable(f"{mechanism} of user {user!r}: the salt is empty")
    size = KEY_SIZES[mechanism]
    if len(upsertion.salted_password) != size:
        return _unacceptable(
            f"{mechanism} of user {user!r}: the salted password is "
            f"{len(upsertion.salted_password)} bytes, not {size}"
        )
    return None


Alteration = st.ScramCredentialDeletion | st.ScramCredentialUpsertion


def alteration_items(request: st.AlterUserScramCredentialsRequest) -> list[Alteration]:
    """The deletions, then the upsertions, of a request."""
    return [*request.deletions, *request.upsertions]


def plan_alterations(
    request: st.AlterUserScramCredentialsRequest,
) -> tuple[dict[str, Refusal], list[UserAlterations]]:
    """Each user's refusal (its first bad item; DUPLICATE_RESOURCE when one mechanism
    of the user is named twice), and the alterations of the users left, in the order
    users first appear in the request."""
    items = alteration_items(request)
    refused: dict[str, Refusal] = {}
    order: list[str] = []
    for item in items:
        if item.user not in order:
            order.append(item.user)
        if item.user in refused:
            continue
        if isinstance(item, st.ScramCredentialUpsertion):
            refusal = check_upsertion(item)
        else:
            refusal = check_mechanism(item.user, item.mechanism)
        if refusal is not None:
            refused[item.user] = refusal
    named: dict[str, list[str]] = {}
    for item in items:
        if item.user in refused:
            continue
        mechanisms = named.setdefault(item.user, [])
        if item.mechanism in mechanisms:
            refused[item.user] = Refusal(
                errors.DUPLICATE_RESOURCE,
                f"{item.mechanism} of user {item.user!r} is altered twice in one request",
            )
        mechanisms.append(item.mechanism)
    plans = [
        UserAlterations(
            user,
            tuple(d.mechanism for d in request.deletions if d.user == user),
            tuple(u for u in request.upsertions if u.user == user),
        )
        for user in order
        if user not in refused
    ]
    return refused, plans


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential to store for a KIP-554 upsertion (RFC 5802's two keys)."""
    hash_function = ScramMechanism(mechanism).hf
    client_key: bytes = scramp_hmac(hash_function, salted_password, b"Client Key")
    stored_key: bytes = scramp_h(hash_function, client_key)
    server_key: bytes = scramp_hmac(hash_function, salted_password, b"Server Key")
    return ScramCredential(bytes(salt), stored_key, server_key, iterations)
