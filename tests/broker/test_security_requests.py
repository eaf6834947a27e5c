"""The checks of ACL and SCRAM admin requests (pure): each bad field refused with Kafka's
code and a message naming it; KIP-554 upsertions turned into the credential Kafka stores."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from annal.broker.requests import security_types as st
from annal.broker.security.security_requests import (
    binding_answer,
    binding_from_request,
    credential_from_salted_password,
    filter_from_request,
    named_patterns,
    plan_alterations,
)
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from annal.security.scram import make_credential, verify_password

from annal import errors

pytestmark = pytest.mark.timeout(30)

GOOD: dict[str, Any] = {
    "resource_type": 2,
    "resource_name": "orders",
    "pattern_type": 3,
    "principal": "User:alice",
    "host": "*",
    "operation": 3,
    "permission_type": 3,
}

ANY: dict[str, Any] = {
    "resource_type": 1,
    "resource_name": None,
    "pattern_type": 1,
    "principal": None,
    "host": None,
    "operation": 1,
    "permission_type": 1,
}


def test_a_good_acl_round_trips() -> None:
    binding = binding_from_request(st.AclBinding(**GOOD))
    assert binding == AclBinding(
        ResourcePattern.literal(ResourceType.TOPIC, "orders"),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    assert isinstance(binding, AclBinding) and binding_answer(binding) == st.AclBinding(**GOOD)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"resource_type": 1}, "resource type 1 cannot hold ACLs"),
        ({"resource_type": 9}, "resource type 9 cannot hold ACLs"),
        ({"pattern_type": 2}, r"pattern type 2 \(MATCH\) cannot be stored"),
        ({"pattern_type": 1}, r"pattern type 1 \(ANY\)"),
        ({"operation": 1}, r"operation 1 \(ANY\) cannot be stored"),
        ({"operation": 0}, r"operation 0 \(UNKNOWN\)"),
        ({"permission_type": 1}, r"permission type 1 \(ANY\)"),
        ({"resource_name": ""}, "non-empty name"),
        ({"resource_name": "a/b"}, "cannot be a znode name"),
        ({"resource_type": 4, "resource_name": "other"}, "named 'kafka-cluster', not 'other'"),
        ({"principal": "alice"}, "principal 'alice' is not of the form <type>:<name>"),
        ({"host": ""}, "host must be an address or"),
    ],
)
def test_bad_acls_are_invalid_requests_naming_the_value(
    change: dict[str, object], message: str
) -> None:
    refused = binding_from_request(st.AclBinding(**{**GOOD, **change}))
    assert not isinstance(refused, AclBinding)
    assert refused.error is errors.INVALID_REQUEST
    assert re.search(message, refused.message), refused.message


def test_filters() -> None:
    everything = filter_from_request(st.AclBindingFilter(**ANY))
    assert everything == AclBindingFilter.ANY
    exact = filter_from_request(
        st.AclBindingFilter(
            resource_type=2,
            resource_name="orders",
            pattern_type=2,
            principal="User:alice",
            host="*",
            operation=3,
            permission_type=3,
        )
    )
    assert isinstance(exact, AclBindingFilter)
    assert exact.pattern_filter == ResourcePatternFilter(
        ResourceType.TOPIC, "orders", PatternType.MATCH
    )
    assert exact.entry_filter.principal == "User:alice"
    for field in ("resource_type", "pattern_type", "operation", "permission_type"):
        refused = filter_from_request(st.AclBindingFilter(**{**ANY, field: 0}))
        assert not isinstance(refused, AclBindingFilter)
        assert refused.error is errors.INVALID_REQUEST
        assert f"{field.replace('_', ' ')} 0 is unknown" in refused.message
    bad = filter_from_request(st.AclBindingFilter(**{**ANY, "principal": "nobody"}))
    assert not isinstance(bad, AclBindingFilter) and "'nobody'" in bad.message


def test_a_filter_naming_one_resource_names_its_stored_patterns() -> None:
    def named(pattern_type: PatternType, name: str = "orders") -> list[ResourcePattern]:
        return named_patterns(ResourcePatternFilter(ResourceType.TOPIC, name, pattern_type))

    assert named(PatternType.ANY) == [
        ResourcePattern.literal(ResourceType.TOPIC, "orders"),
        ResourcePattern.prefixed(ResourceType.TOPIC, "orders"),
    ]
    assert named(PatternType.PREFIXED) == [ResourcePattern.prefixed(ResourceType.TOPIC, "orders")]
    assert named(PatternType.MATCH) == []
    assert named(PatternType.LITERAL, "a/b") == []
    assert named_patterns(ResourcePatternFilter()) == []


def upsert(
    user: str = "alice",
    mechanism: str = "SCRAM-SHA-512",
    iterations: int = 4096,
    salt: bytes = b"s" * 24,
    size: int = 64,
) -> st.ScramCredentialUpsertion:
    return st.ScramCredentialUpsertion(
        user=user,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=b"p" * size,
    )


def delete(user: str, mechanism: str = "SCRAM-SHA-512") -> st.ScramCredentialDeletion:
    return st.ScramCredentialDeletion(user=user, mechanism=mechanism)


def test_alterations_are_checked_per_user() -> None:
    request = st.AlterUserScramCredentialsRequest(
        deletions=[delete("dana", "SCRAM-SHA-256"), delete("erin"), delete("")],
        upsertions=[
            upsert("alice"),
            upsert("bob", mechanism="SCRAM-SHA-1"),
            upsert("carol", iterations=1000),
            upsert("dana"),
            upsert("erin"),  # erin deletes and sets SCRAM-SHA-512 at once: twice
            upsert("frank", iterations=20000),
            upsert("gail", salt=b""),
            upsert("hana", size=32),
            upsert("ivan", mechanism="SCRAM-SHA-256", size=32),
        ],
    )
    refused, plans = plan_alterations(request)
    codes = {user: refusal.error.name for user, refusal in refused.items()}
    assert codes == {
        "": "UNACCEPTABLE_CREDENTIAL",
        "bob": "UNSUPPORTED_SASL_MECHANISM",
        "carol": "UNACCEPTABLE_CREDENTIAL",
        "erin": "DUPLICATE_RESOURCE",
        "frank": "UNACCEPTABLE_CREDENTIAL",
        "gail": "UNACCEPTABLE_CREDENTIAL",
        "hana": "UNACCEPTABLE_CREDENTIAL",
    }
    assert "unknown SCRAM mechanism 'SCRAM-SHA-1' for user 'bob'" in refused["bob"].message
    assert "1000 iterations is outside 4096..16384" in refused["carol"].message
    assert "SCRAM-SHA-512 of user 'erin' is altered twice" in refused["erin"].message
    assert "salt is empty" in refused["gail"].message
    assert "salted password is 32 bytes, not 64" in refused["hana"].message
    assert refused[""].message == "the user name is empty"
    assert [(p.user, p.deletions, len(p.upsertions)) for p in plans] == [
        ("dana", ("SCRAM-SHA-256",), 1),
        ("alice", (), 1),
        ("ivan", (), 1),
    ]
    for refusal in refused.values():
        assert "p" * 32 not in refusal.message  # never the salted password


def test_the_broker_derives_what_kafka_stores_from_the_salted_password() -> None:
    salt = b"0123456789abcdef01234567"
    for mechanism, name in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
        salted = hashlib.pbkdf2_hmac(name, b"alice-secret", salt, 8192)
        derived = credential_from_salted_password(mechanism, salt, salted, 8192)
        assert derived == make_credential(mechanism, "alice-secret", 8192, salt)
        assert verify_password(mechanism, derived, "alice-secret")
        assert not verify_password(mechanism, derived, "wrong")
