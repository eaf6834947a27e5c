"""The ACL model: Kafka's codes and names, validation, and the filters' matching rules."""

from __future__ import annotations

import pytest
from annal.security.acl import (
    ANONYMOUS,
    CLUSTER_NAME,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    Resource,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from hypothesis import given
from hypothesis import strategies as st

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY


def entry(
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


# -- enumerations -------------------------------------------------------------------


def test_wire_codes_are_kafkas() -> None:
    assert {t.name: t.value for t in ResourceType} == {
        "UNKNOWN": 0,
        "ANY": 1,
        "TOPIC": 2,
        "GROUP": 3,
        "CLUSTER": 4,
        "TRANSACTIONAL_ID": 5,
        "DELEGATION_TOKEN": 6,
    }
    assert {o.name: o.value for o in AclOperation} == {
        "UNKNOWN": 0,
        "ANY": 1,
        "ALL": 2,
        "READ": 3,
        "WRITE": 4,
        "CREATE": 5,
        "DELETE": 6,
        "ALTER": 7,
        "DESCRIBE": 8,
        "CLUSTER_ACTION": 9,
        "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11,
        "IDEMPOTENT_WRITE": 12,
    }
    assert {p.name: p.value for p in AclPermissionType} == {
        "UNKNOWN": 0,
        "ANY": 1,
        "DENY": 2,
        "ALLOW": 3,
    }
    assert {p.name: p.value for p in PatternType} == {
        "UNKNOWN": 0,
        "ANY": 1,
        "MATCH": 2,
        "LITERAL": 3,
        "PREFIXED": 4,
    }


def test_kafka_names() -> None:
    assert [t.kafka_name for t in ResourceType if t > ResourceType.ANY] == [
        "Topic",
        "Group",
        "Cluster",
        "TransactionalId",
        "DelegationToken",
    ]
    assert [o.kafka_name for o in AclOperation if o > AclOperation.ANY] == [
        "All",
        "Read",
        "Write",
        "Create",
        "Delete",
        "Alter",
        "Describe",
        "ClusterAction",
        "DescribeConfigs",
        "AlterConfigs",
        "IdempotentWrite",
    ]
    assert (ALLOW.kafka_name, DENY.kafka_name) == ("Allow", "Deny")
    assert (LITERAL.kafka_name, PREFIXED.kafka_name) == ("LITERAL", "PREFIXED")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read", AclOperation.READ),
        ("READ", AclOperation.READ),
        ("Read", AclOperation.READ),
        ("ClusterAction", AclOperation.CLUSTER_ACTION),
        ("cluster_action", AclOperation.CLUSTER_ACTION),
        ("CLUSTER_ACTION", AclOperation.CLUSTER_ACTION),
        ("describe-configs", AclOperation.DESCRIBE_CONFIGS),
        ("Describe Configs", AclOperation.DESCRIBE_CONFIGS),
        ("IdempotentWrite", AclOperation.IDEMPOTENT_WRITE),
        ("all", AclOperation.ALL),
        ("any", AclOperation.ANY),
    ],
)
def test_operation_spellings(text: str, expected: AclOperation) -> None:
    assert AclOperation.parse(text) is expected


def test_other_spellings() -> None:
    assert ResourceType.parse("topic") is TOPIC
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.parse("TRANSACTIONAL_ID") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.parse("delegation-token") is ResourceType.DELEGATION_TOKEN
    assert AclPermissionType.parse("allow") is ALLOW
    assert AclPermissionType.parse("Deny") is DENY
    assert PatternType.parse("prefixed") is PREFIXED
    assert PatternType.parse("Match") is PatternType.MATCH
    for enum in (ResourceType, AclOperation, AclPermissionType, PatternType):
        for member in enum:
            if member.name != "UNKNOWN":
                assert enum.parse(member.kafka_name) is member
                assert enum.parse(member.name) is member


def test_bad_names_are_named_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown AclOperation 'reed': expected one of .*Read"):
        AclOperation.parse("reed")
    with pytest.raises(ValueError, match=r"unknown ResourceType 'Topics'.*TransactionalId"):
        ResourceType.parse("Topics")
    with pytest.raises(ValueError, match=r"unknown AclPermissionType 'unknown'"):
        AclPermissionType.parse("unknown")
    with pytest.raises(ValueError, match=r"unknown PatternType ''"):
        PatternType.parse("")


def test_unknown_codes_decode_as_unknown() -> None:
    assert ResourceType.from_code(7) is ResourceType.UNKNOWN
    assert AclOperation.from_code(99) is AclOperation.UNKNOWN
    assert AclOperation.from_code(3) is AclOperation.READ
    assert PatternType.from_code(4) is PREFIXED


# -- principals -------------------------------------------------------------------


def test_principals() -> None:
    alice = KafkaPrincipal.parse("User:alice")
    assert alice == KafkaPrincipal("User", "alice")
    assert str(alice) == "User:alice"
    # Only the first ':' separates: a TLS distinguished name can hold more.
    dn = KafkaPrincipal.parse("User:CN=a:b,O=c")
    assert (dn.principal_type, dn.name) == ("User", "CN=a:b,O=c")
    assert str(dn) == "User:CN=a:b,O=c"
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert KafkaPrincipal.ANONYMOUS == ANONYMOUS
    assert str(WILDCARD_PRINCIPAL) == "User:*"
    assert KafkaPrincipal.WILDCARD == WILDCARD_PRINCIPAL
    assert KafkaPrincipal.parse("Group:ops").principal_type == "Group"


@pytest.mark.parametrize("text", ["alice", ":alice", "", "User"])
def test_bad_principals(text: str) -> None:
    with pytest.raises(ValueError, match=rf"principal {text!r} is not of the form <type>:<name>"):
        KafkaPrincipal.parse(text)


@given(st.text(min_size=1).filter(lambda s: ":" not in s), st.text())
def test_principal_round_trip(principal_type: str, name: str) -> None:
    principal = KafkaPrincipal(principal_type, name)
    assert KafkaPrincipal.parse(str(principal)) == principal


# -- patterns, resources, entries -------------------------------------------------


def test_pattern_validation() -> None:
    assert ResourcePattern(TOPIC, "orders").pattern_type is LITERAL
    assert ResourcePattern.prefixed(TOPIC, "*").name == "*"  # just the prefix '*'
    assert not ResourcePattern.prefixed(TOPIC, "*").is_wildcard
    assert ResourcePattern.literal(TOPIC, "*").is_wildcard
    assert ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME).name == "kafka-cluster"
    with pytest.raises(ValueError, match="non-empty name"):
        ResourcePattern(TOPIC, "")
    with pytest.raises(ValueError, match="concrete resource type.*ANY"):
        ResourcePattern(ResourceType.ANY, "orders")
    with pytest.raises(ValueError, match="concrete resource type.*UNKNOWN"):
        ResourcePattern(ResourceType.UNKNOWN, "orders")
    for pattern_type in (PatternType.ANY, PatternType.MATCH, PatternType.UNKNOWN):
        with pytest.raises(ValueError, match="LITERAL or PREFIXED"):
            ResourcePattern(TOPIC, "orders", pattern_type)
    with pytest.raises(ValueError, match="cluster resource is named 'kafka-cluster', not 'c1'"):
        ResourcePattern(ResourceType.CLUSTER, "c1")
    assert str(ResourcePattern.prefixed(GROUP, "bill")) == "Group:PREFIXED:bill"


def test_resources() -> None:
    assert str(Resource(TOPIC, "orders")) == "Topic:orders"
    assert Resource.cluster() == Resource(ResourceType.CLUSTER, "kafka-cluster")
    with pytest.raises(ValueError, match="concrete resource type"):
        Resource(ResourceType.ANY, "orders")


def test_applies_to() -> None:
    orders = Resource(TOPIC, "orders")
    assert ResourcePattern.literal(TOPIC, "orders").applies_to(orders)
    assert ResourcePattern.literal(TOPIC, "*").applies_to(orders)
    assert ResourcePattern.prefixed(TOPIC, "ord").applies_to(orders)
    assert ResourcePattern.prefixed(TOPIC, "orders").applies_to(orders)
    assert not ResourcePattern.prefixed(TOPIC, "orders-").applies_to(orders)
    assert not ResourcePattern.prefixed(TOPIC, "*").applies_to(orders)
    assert not ResourcePattern.literal(TOPIC, "order").applies_to(orders)
    assert not ResourcePattern.literal(GROUP, "orders").applies_to(orders)


def test_entry_validation() -> None:
    assert str(entry()) == "Allow User:alice Read from host *"
    with pytest.raises(ValueError, match="principal 'alice' is not of the form"):
        entry(principal="alice")
    with pytest.raises(ValueError, match="host must be an address or '\\*', not ''"):
        entry(host="")
    for operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        with pytest.raises(ValueError, match="concrete operation"):
            entry(operation=operation)
    for permission in (AclPermissionType.ANY, AclPermissionType.UNKNOWN):
        with pytest.raises(ValueError, match="allows or denies"):
            entry(permission=permission)
    assert entry().kafka_principal == KafkaPrincipal("User", "alice")


def test_binding_text() -> None:
    binding = AclBinding(ResourcePattern.prefixed(TOPIC, "ord"), entry(permission=DENY))
    assert str(binding) == "Deny User:alice Read from host * on Topic:PREFIXED:ord"


# -- filters --------------------------------------------------------------------------

LIT_ORDERS = ResourcePattern.literal(TOPIC, "orders")
LIT_STAR = ResourcePattern.literal(TOPIC, "*")
PRE_ORD = ResourcePattern.prefixed(TOPIC, "ord")
PRE_ORDERS = ResourcePattern.prefixed(TOPIC, "orders")
PRE_ORDERS_DASH = ResourcePattern.prefixed(TOPIC, "orders-")
LIT_OTHER = ResourcePattern.literal(TOPIC, "other")
PRE_STAR = ResourcePattern.prefixed(TOPIC, "*")
GROUP_ORDERS = ResourcePattern.literal(GROUP, "orders")
STORED = [LIT_ORDERS, LIT_STAR, PRE_ORD, PRE_ORDERS, PRE_ORDERS_DASH, LIT_OTHER, PRE_STAR]
STORED += [GROUP_ORDERS]


def selected(pattern_filter: ResourcePatternFilter) -> set[ResourcePattern]:
    return {p for p in STORED if pattern_filter.matches(p)}


@pytest.mark.parametrize(
    ("pattern_filter", "expected"),
    [
        (ResourcePatternFilter(), set(STORED)),
        (ResourcePatternFilter(TOPIC), set(STORED) - {GROUP_ORDERS}),
        (ResourcePatternFilter(GROUP), {GROUP_ORDERS}),
        # ANY: every pattern type, but the name compared as it is.
        (ResourcePatternFilter(TOPIC, "orders", PatternType.ANY), {LIT_ORDERS, PRE_ORDERS}),
        (ResourcePatternFilter(name="orders"), {LIT_ORDERS, PRE_ORDERS, GROUP_ORDERS}),
        (ResourcePatternFilter(TOPIC, "*", PatternType.ANY), {LIT_STAR, PRE_STAR}),
        # LITERAL / PREFIXED: that pattern type only, the same name.
        (ResourcePatternFilter(TOPIC, "orders", LITERAL), {LIT_ORDERS}),
        (ResourcePatternFilter(TOPIC, "*", LITERAL), {LIT_STAR}),
        (ResourcePatternFilter(TOPIC, "ord", PREFIXED), {PRE_ORD}),
        (ResourcePatternFilter(TOPIC, "orders", PREFIXED), {PRE_ORDERS}),
        (ResourcePatternFilter(TOPIC, None, LITERAL), {LIT_ORDERS, LIT_STAR, LIT_OTHER}),
        (
            ResourcePatternFilter(TOPIC, None, PREFIXED),
            {PRE_ORD, PRE_ORDERS, PRE_ORDERS_DASH, PRE_STAR},
        ),
        # MATCH: whatever would apply to a topic of that name.
        (
            ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH),
            {LIT_ORDERS, LIT_STAR, PRE_ORD, PRE_ORDERS},
        ),
        (
            ResourcePatternFilter(TOPIC, "orders-eu", PatternType.MATCH),
            {LIT_STAR, PRE_ORD, PRE_ORDERS, PRE_ORDERS_DASH},
        ),
        (ResourcePatternFilter(TOPIC, "x", PatternType.MATCH), {LIT_STAR}),
        (ResourcePatternFilter(TOPIC, "*", PatternType.MATCH), {LIT_STAR, PRE_STAR}),
        (ResourcePatternFilter(GROUP, "orders", PatternType.MATCH), {GROUP_ORDERS}),
        (ResourcePatternFilter(TOPIC, None, PatternType.MATCH), set(STORED) - {GROUP_ORDERS}),
        # UNKNOWN selects nothing.
        (ResourcePatternFilter(ResourceType.UNKNOWN), set()),
        (ResourcePatternFilter(TOPIC, "orders", PatternType.UNKNOWN), set()),
    ],
)
def test_pattern_filter(
    pattern_filter: ResourcePatternFilter, expected: set[ResourcePattern]
) -> None:
    assert selected(pattern_filter) == expected


def test_pattern_filter_definiteness() -> None:
    assert ResourcePatternFilter(TOPIC, "orders", LITERAL).matches_at_most_one()
    assert ResourcePatternFilter(TOPIC, "orders", PREFIXED).matches_at_most_one()
    assert ResourcePatternFilter(TOPIC, "orders", PatternType.ANY).matches_at_most_one()  # Kafka's
    for indefinite, why in [
        (ResourcePatternFilter(ResourceType.ANY, "orders", LITERAL), "resource type is ANY"),
        (ResourcePatternFilter(ResourceType.UNKNOWN, "o", LITERAL), "resource type is UNKNOWN"),
        (ResourcePatternFilter(TOPIC, None, LITERAL), "resource name is not given"),
        (ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH), "pattern type is MATCH"),
        (ResourcePatternFilter(TOPIC, "o", PatternType.UNKNOWN), "pattern type is UNKNOWN"),
    ]:
        assert not indefinite.matches_at_most_one()
        assert indefinite.find_indefinite_field() == why


def test_entry_filter() -> None:
    alice_read = entry()
    bob_deny = entry("User:bob", AclOperation.WRITE, DENY, "10.0.0.1")
    both = [alice_read, bob_deny]

    def chosen(entry_filter: AccessControlEntryFilter) -> list[AccessControlEntry]:
        return [e for e in both if entry_filter.matches(e)]

    assert chosen(AccessControlEntryFilter()) == both
    assert chosen(AccessControlEntryFilter.ANY) == both
    assert chosen(AccessControlEntryFilter(principal="User:bob")) == [bob_deny]
    assert chosen(AccessControlEntryFilter(host="*")) == [alice_read]
    assert chosen(AccessControlEntryFilter(host="10.0.0.1")) == [bob_deny]
    assert chosen(AccessControlEntryFilter(operation=AclOperation.READ)) == [alice_read]
    assert chosen(AccessControlEntryFilter(permission_type=DENY)) == [bob_deny]
    # A filter compares exactly: a wildcard in the filter is not a wildcard search.
    assert chosen(AccessControlEntryFilter(principal="User:*")) == []
    assert chosen(AccessControlEntryFilter(operation=AclOperation.ALL)) == []
    assert AccessControlEntryFilter(
        "User:alice", "*", AclOperation.READ, ALLOW
    ).matches_at_most_one()
    assert AccessControlEntryFilter().find_indefinite_field() == "principal is not given"
    assert AccessControlEntryFilter("User:a").find_indefinite_field() == "host is not given"
    assert AccessControlEntryFilter("User:a", "*").find_indefinite_field() == "operation is ANY"
    assert (
        AccessControlEntryFilter("User:a", "*", AclOperation.READ).find_indefinite_field()
        == "permission type is ANY"
    )


def test_binding_filter() -> None:
    binding = AclBinding(PRE_ORD, entry())
    assert AclBindingFilter.ANY.matches(binding)
    assert AclBindingFilter().matches(binding)
    assert binding.to_filter().matches(binding)
    assert binding.to_filter().matches_at_most_one()
    assert AclBindingFilter(
        ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH),
        AccessControlEntryFilter(principal="User:alice"),
    ).matches(binding)
    assert not AclBindingFilter(
        ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH),
        AccessControlEntryFilter(principal="User:bob"),
    ).matches(binding)
    assert not AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", LITERAL)).matches(binding)
    assert AclBindingFilter().find_indefinite_field() == "resource type is ANY"
    assert not AclBindingFilter().matches_at_most_one()


names = st.text(alphabet="ab*-", min_size=1, max_size=5)


@given(
    st.sampled_from([TOPIC, GROUP]),
    names,
    st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from([TOPIC, GROUP]),
    names,
)
def test_match_filter_selects_what_applies(
    pattern_type_of: ResourceType,
    pattern_name: str,
    pattern_type: PatternType,
    resource_type: ResourceType,
    resource_name: str,
) -> None:
    """A MATCH filter for a resource selects exactly the patterns that govern it."""
    pattern = ResourcePattern(pattern_type_of, pattern_name, pattern_type)
    match = ResourcePatternFilter(resource_type, resource_name, PatternType.MATCH)
    assert match.matches(pattern) == pattern.applies_to(Resource(resource_type, resource_name))
