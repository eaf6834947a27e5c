"""Kafka's ZooKeeper layout for ACLs: paths, change notifications and JSON, byte for byte."""

from __future__ import annotations

import json

import pytest
from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from annal.zk import acls
from annal.zk.acls import AclLayoutError
from annal.zk.layout import LayoutError
from hypothesis import given
from hypothesis import strategies as st

TOPIC = ResourceType.TOPIC
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY


def ace(
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


# -- paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        (ResourcePattern.literal(TOPIC, "orders"), "/kafka-acl/Topic/orders"),
        (ResourcePattern.literal(TOPIC, "*"), "/kafka-acl/Topic/*"),
        (
            ResourcePattern.literal(ResourceType.CLUSTER, "kafka-cluster"),
            "/kafka-acl/Cluster/kafka-cluster",
        ),
        (ResourcePattern.literal(ResourceType.GROUP, "billing"), "/kafka-acl/Group/billing"),
        (
            ResourcePattern.literal(ResourceType.TRANSACTIONAL_ID, "tx-1"),
            "/kafka-acl/TransactionalId/tx-1",
        ),
        (
            ResourcePattern.literal(ResourceType.DELEGATION_TOKEN, "t"),
            "/kafka-acl/DelegationToken/t",
        ),
        (ResourcePattern.prefixed(TOPIC, "ord"), "/kafka-acl-extended/prefixed/Topic/ord"),
        (
            ResourcePattern.prefixed(ResourceType.GROUP, "billing-"),
            "/kafka-acl-extended/prefixed/Group/billing-",
        ),
    ],
)
def test_acl_paths(pattern: ResourcePattern, path: str) -> None:
    assert acls.acl_path(pattern) == path
    assert acls.pattern_from_path(path) == pattern


def test_roots() -> None:
    assert acls.acl_root(LITERAL) == "/kafka-acl"
    assert acls.acl_root(PREFIXED) == "/kafka-acl-extended/prefixed"
    assert acls.acl_type_path(PREFIXED, TOPIC) == "/kafka-acl-extended/prefixed/Topic"
    assert acls.change_root(LITERAL) == "/kafka-acl-changes"
    assert acls.change_root(PREFIXED) == "/kafka-acl-extended-changes"
    assert acls.CHANGE_PREFIX == "acl_changes_"
    assert acls.change_path_prefix(LITERAL) == "/kafka-acl-changes/acl_changes_"
    assert acls.change_path_prefix(PREFIXED) == "/kafka-acl-extended-changes/acl_changes_"
    for pattern_type in (PatternType.ANY, PatternType.MATCH, PatternType.UNKNOWN):
        with pytest.raises(AclLayoutError, match="LITERAL and PREFIXED patterns only"):
            acls.change_root(pattern_type)
        with pytest.raises(AclLayoutError, match="LITERAL and PREFIXED patterns only"):
            acls.acl_root(pattern_type)


def test_persistent_paths_parents_first() -> None:
    paths = acls.PERSISTENT_PATHS
    assert {
        "/kafka-acl",
        "/kafka-acl/Topic",
        "/kafka-acl/Cluster",
        "/kafka-acl/TransactionalId",
        "/kafka-acl-extended",
        "/kafka-acl-extended/prefixed",
        "/kafka-acl-extended/prefixed/Group",
        "/kafka-acl-changes",
        "/kafka-acl-extended-changes",
    } <= set(paths)
    for index, path in enumerate(paths):
        parent = path.rpartition("/")[0]
        assert parent == "" or parent in paths[:index], path


@pytest.mark.parametrize("name", ["a/b", ".", "..", "nul\x00"])
def test_names_that_cannot_be_znodes(name: str) -> None:
    with pytest.raises(AclLayoutError, match="cannot be a znode name"):
        acls.acl_path(ResourcePattern.literal(ResourceType.GROUP, name))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/kafka-acl", "lies under neither /kafka-acl/ nor"),
        ("/brokers/topics/orders", "lies under neither"),
        ("/kafka-acl-extended/literal/Topic/x", "lies under neither"),
        ("/kafka-acl/Topic", r"expected /kafka-acl/<ResourceType>/<name>"),
        ("/kafka-acl/Topic/", r"expected /kafka-acl/<ResourceType>/<name>"),
        ("/kafka-acl/Topic/a/b", r"expected /kafka-acl/<ResourceType>/<name>"),
        ("/kafka-acl-extended/prefixed/Topic", "expected /kafka-acl-extended/prefixed/<Res"),
        ("/kafka-acl/Topics/orders", r"ACL znode /kafka-acl/Topics/orders: unknown ResourceType"),
        ("/kafka-acl/Any/orders", "'Any' is not a resource type that can carry ACLs"),
        ("/kafka-acl/Cluster/c1", "cluster resource is named 'kafka-cluster', not 'c1'"),
    ],
)
def test_bad_acl_paths(path: str, message: str) -> None:
    with pytest.raises(AclLayoutError, match=message):
        acls.pattern_from_path(path)


# -- change notifications -----------------------------------------------------------------


def test_change_sequence() -> None:
    assert acls.change_sequence("acl_changes_0000000042") == 42
    assert acls.change_sequence("/kafka-acl-changes/acl_changes_0000000000") == 0
    for bad in ("acl_changes_42", "config_change_0000000001", "acl_changes_00000000012"):
        with pytest.raises(AclLayoutError, match="not an ACL change znode"):
            acls.change_sequence(bad)


def test_literal_change_bytes() -> None:
    assert acls.encode_change(ResourcePattern.literal(TOPIC, "orders")) == b"Topic:orders"
    cluster = ResourcePattern.literal(ResourceType.CLUSTER, "kafka-cluster")
    assert acls.encode_change(cluster) == b"Cluster:kafka-cluster"
    tx = ResourcePattern.literal(ResourceType.TRANSACTIONAL_ID, "tx")
    assert acls.encode_change(tx) == b"TransactionalId:tx"


def test_prefixed_change_bytes() -> None:
    assert acls.encode_change(ResourcePattern.prefixed(TOPIC, "ord")) == (
        b'{"version":1,"resourceType":"Topic","name":"ord","patternType":"PREFIXED"}'
    )


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (b"Topic:orders", ResourcePattern.literal(TOPIC, "orders")),
        (b"TOPIC:orders", ResourcePattern.literal(TOPIC, "orders")),  # Kafka 2.5+
        (b"Group:a:b", ResourcePattern.literal(ResourceType.GROUP, "a:b")),  # first ':' only
        (b"Topic:*", ResourcePattern.literal(TOPIC, "*")),
        (b"TransactionalId:tx", ResourcePattern.literal(ResourceType.TRANSACTIONAL_ID, "tx")),
        (b"TRANSACTIONAL_ID:tx", ResourcePattern.literal(ResourceType.TRANSACTIONAL_ID, "tx")),
    ],
)
def test_decode_literal_change(data: bytes, pattern: ResourcePattern) -> None:
    assert acls.decode_change("/kafka-acl-changes", data) == pattern
    assert acls.decode_change("/kafka-acl-changes/acl_changes_0000000001", data) == pattern


def test_decode_prefixed_change() -> None:
    root = "/kafka-acl-extended-changes"
    prefixed = ResourcePattern.prefixed(TOPIC, "ord")
    data = b'{"version":1,"resourceType":"Topic","name":"ord","patternType":"PREFIXED"}'
    assert acls.decode_change(root, data) == prefixed
    # What Kafka 2.5+ writes, spaced out and reordered.
    data = b'{ "patternType": "PREFIXED", "name": "ord", "resourceType": "TOPIC", "version": 1 }'
    assert acls.decode_change(root, data) == prefixed


@pytest.mark.parametrize(
    ("root", "data", "message"),
    [
        ("/kafka-acl-changes", b"orders", r"holds 'orders', not <ResourceType>:<name>"),
        ("/kafka-acl-changes", b"", r"holds '', not <ResourceType>:<name>"),
        ("/kafka-acl-changes", b"Topics:orders", r"\('Topics:orders'\): unknown ResourceType"),
        ("/kafka-acl-changes", b"Topic:", "non-empty name"),
        ("/kafka-acl-changes", b"\xff", "is not UTF-8"),
        ("/kafka-acl-extended-changes", b"", "is empty: expected a JSON object"),
        ("/kafka-acl-extended-changes", b"{", "does not hold JSON"),
        ("/kafka-acl-extended-changes", b"[]", "holds an array, not a JSON object"),
        ("/kafka-acl-extended-changes", b'{"resourceType":"Topic"}', "no 'version' field"),
        (
            "/kafka-acl-extended-changes",
            b'{"version":2,"resourceType":"Topic","name":"o","patternType":"PREFIXED"}',
            "has version 2",
        ),
        (
            "/kafka-acl-extended-changes",
            b'{"version":1,"resourceType":"Topic","name":"o","patternType":"LITERAL"}',
            "pattern type LITERAL has no place",
        ),
        (
            "/kafka-acl-extended-changes",
            b'{"version":1,"resourceType":"Topic","name":5,"patternType":"PREFIXED"}',
            "field 'name' is a number \\(5\\), not a string",
        ),
        (
            "/kafka-acl-extended-changes",
            b'{"version":1,"resourceType":"Tpic","name":"o","patternType":"PREFIXED"}',
            "unknown ResourceType 'Tpic'",
        ),
        ("/config/changes", b"Topic:orders", "'/config/changes' is not an ACL change tree"),
    ],
)
def test_bad_changes(root: str, data: bytes, message: str) -> None:
    with pytest.raises(AclLayoutError, match=message) as caught:
        acls.decode_change(root, data)
    assert root in str(caught.value)


# -- the ACL JSON ----------------------------------------------------------------------

KAFKA_EXAMPLE = (
    b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
    b'"operation":"Read","host":"*"}]}'
)


def test_acl_json_bytes() -> None:
    assert acls.encode_acls([ace()]) == KAFKA_EXAMPLE
    assert acls.decode_acls(KAFKA_EXAMPLE, "/kafka-acl/Topic/orders") == {ace()}
    assert acls.encode_acls([]) == b'{"version":1,"acls":[]}'


def test_acl_json_is_sorted_and_deterministic() -> None:
    entries = [
        ace("User:bob", AclOperation.WRITE, DENY, "10.0.0.1"),
        ace(),
        ace("User:alice", AclOperation.IDEMPOTENT_WRITE),
        ace("User:alice", AclOperation.CLUSTER_ACTION),
        ace(),  # duplicates collapse
    ]
    encoded = acls.encode_acls(entries)
    assert encoded == acls.encode_acls(reversed(entries))
    assert json.loads(encoded)["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {
            "principal": "User:alice",
            "permissionType": "Allow",
            "operation": "ClusterAction",
            "host": "*",
        },
        {
            "principal": "User:alice",
            "permissionType": "Allow",
            "operation": "IdempotentWrite",
            "host": "*",
        },
        {
            "principal": "User:bob",
            "permissionType": "Deny",
            "operation": "Write",
            "host": "10.0.0.1",
        },
    ]


def test_decode_accepts_kafkas_variations() -> None:
    data = json.dumps(
        {
            "acls": [
                {
                    "host": "*",
                    "operation": "DescribeConfigs",
                    "permissionType": "Deny",
                    "principal": "User:*",
                },
                {
                    "principal": "User:CN=x:y",
                    "permissionType": "ALLOW",
                    "operation": "ALL",
                    "host": "::1",
                },
            ],
            "version": 1,
        },
        indent=2,
    ).encode()
    assert acls.decode_acls(data, "/kafka-acl/Topic/t") == {
        ace("User:*", AclOperation.DESCRIBE_CONFIGS, DENY),
        ace("User:CN=x:y", AclOperation.ALL, ALLOW, "::1"),
    }


@pytest.mark.parametrize("data", [b"", b"null", b"  null\n", None])
def test_no_data_means_no_acls(data: bytes | None) -> None:
    assert acls.decode_acls(data, "/kafka-acl/Topic/t") == frozenset()


PATH = "/kafka-acl/Topic/orders"


def item(**changes: object) -> bytes:
    fields: dict[str, object] = {
        "principal": "User:alice",
        "permissionType": "Allow",
        "operation": "Read",
        "host": "*",
    }
    fields.update(changes)
    for name in [n for n, v in fields.items() if v is None]:
        del fields[name]
    return json.dumps({"version": 1, "acls": [fields]}).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "does not hold JSON"),
        (b"\xfe\xff", "is not UTF-8"),
        (b'"text"', "holds a string, not a JSON object"),
        (b"[1]", "holds an array, not a JSON object"),
        (b'{"acls":[]}', "has no 'version' field"),
        (b'{"version":"1","acls":[]}', "field 'version' is a string \\('1'\\), not an integer"),
        (b'{"version":true,"acls":[]}', "field 'version' is a boolean"),
        (b'{"version":2,"acls":[]}', "has version 2; only version 1 exists"),
        (b'{"version":1}', "has no 'acls' field"),
        (b'{"version":1,"acls":{}}', "field 'acls' is an object \\({}\\), not an array"),
        (b'{"version":1,"acls":[7]}', r"acls\[0\] is a number, not a JSON object"),
        (item(principal=None), r"acls\[0\] has no 'principal' field"),
        (item(host=None), r"acls\[0\] has no 'host' field"),
        (item(operation=None), r"acls\[0\] has no 'operation' field"),
        (item(permissionType=None), r"acls\[0\] has no 'permissionType' field"),
        (item(principal="alice"), r"acls\[0\]: principal 'alice' is not of the form"),
        (item(principal=3), r"acls\[0\] field 'principal' is a number \(3\), not a string"),
        (item(operation="Reed"), r"acls\[0\]: unknown AclOperation 'Reed'"),
        (item(operation="Any"), r"acls\[0\]: an ACL needs a concrete operation"),
        (item(permissionType="Maybe"), r"acls\[0\]: unknown AclPermissionType 'Maybe'"),
        (item(permissionType="Any"), r"acls\[0\]: an ACL allows or denies"),
        (item(host=""), r"acls\[0\]: an ACL's host must be an address or"),
    ],
)
def test_malformed_acl_json(data: bytes, message: str) -> None:
    with pytest.raises(AclLayoutError, match=message) as caught:
        acls.decode_acls(data, PATH)
    assert str(caught.value).startswith(f"ACL znode {PATH}")
    assert isinstance(caught.value, LayoutError)
    assert isinstance(caught.value, ValueError)


# -- round trips ------------------------------------------------------------------------

concrete_types = st.sampled_from(
    [t for t in ResourceType if t > ResourceType.ANY and t is not ResourceType.CLUSTER]
)
znode_names = st.text(min_size=1).filter(lambda s: "/" not in s and "\x00" not in s)
znode_names = znode_names.filter(lambda s: s not in (".", ".."))
patterns = st.builds(
    ResourcePattern, concrete_types, znode_names, st.sampled_from([LITERAL, PREFIXED])
)
entries = st.builds(
    AccessControlEntry,
    st.builds(lambda t, n: f"{t}:{n}", st.sampled_from(["User", "Group"]), st.text()),
    st.text(min_size=1),
    st.sampled_from([o for o in AclOperation if o > AclOperation.ANY]),
    st.sampled_from([ALLOW, DENY]),
)


@given(st.frozensets(entries, max_size=8))
def test_acl_json_round_trip(acl_set: frozenset[AccessControlEntry]) -> None:
    encoded = acls.encode_acls(acl_set)
    assert acls.decode_acls(encoded, PATH) == acl_set
    assert acls.encode_acls(list(acl_set)[::-1]) == encoded


@given(patterns)
def test_path_and_change_round_trip(pattern: ResourcePattern) -> None:
    assert acls.pattern_from_path(acls.acl_path(pattern)) == pattern
    root = acls.change_root(pattern.pattern_type)
    assert acls.decode_change(root, acls.encode_change(pattern)) == pattern
