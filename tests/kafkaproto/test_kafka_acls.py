"""Kafka's ACL and SCRAM credential APIs through the Kafka listener of two real brokers:
kafka-python's KafkaAdminClient creates, describes and deletes ACLs and sets users'
credentials; the other broker follows within seconds; bad requests get Kafka's codes."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from annal.security.acl import AclBindingFilter, ResourcePatternFilter, ResourceType
from annal.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, verify_password
from annal.zk.client import ZkClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.admin import (
    ResourcePatternFilter as KpPatternFilter,
)
from kafka.admin import (
    ResourceType as KpResourceType,
)
from kafka.errors import InvalidRequestError

pytestmark = pytest.mark.timeout(240)

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    # the ACL APIs need an authorizer (without one they answer SECURITY_DISABLED);
    # the anonymous test client is a super user
    authorized = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    return [module_broker_factory(i, authorized) for i in (1, 2)]


def acl(
    principal: str,
    op: ACLOperation,
    kind: KpResourceType,
    name: str,
    pattern: ACLResourcePatternType = ACLResourcePatternType.LITERAL,
    permission: ACLPermissionType = ACLPermissionType.ALLOW,
) -> ACL:
    return ACL(principal, "*", op, permission, ResourcePattern(kind, name, pattern))


def raw_exchange(broker: BrokerProcess, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """One request as written, for what Kafka's clients refuse to send."""
    connection = KafkaConnection(broker.kafka_endpoint, 10)
    try:
        return connection.exchange(api_key, version, values)
    finally:
        connection.close()


def annal_view(broker: BrokerProcess, topic_prefix: str) -> set[tuple[str, str, str, str]]:
    """(pattern, name, principal, operation) of the ACLs on topics starting with the
    prefix, as ``broker`` (its own cache, over gRPC) describes them."""
    with AdminClient(broker.endpoint) as admin:
        found = admin.describe_acls(AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC)))
    return {
        (b.pattern.pattern_type.name, b.pattern.name, b.entry.principal, b.entry.operation.name)
        for b in found
        if b.pattern.name.startswith(topic_prefix)
    }


def test_kafka_python_creates_describes_and_deletes_acls(cluster: list[BrokerProcess]) -> None:
    first, second = cluster
    topic = f"orders-{next(_names)}"
    kp = KafkaAdminClient(bootstrap_servers=first.kafka_endpoint)
    try:
        wanted = [
            acl("User:alice", ACLOperation.READ, KpResourceType.TOPIC, topic),
            acl("User:alice", ACLOperation.DESCRIBE, KpResourceType.TOPIC, topic),
            acl(
                "User:bob",
                ACLOperation.WRITE,
                KpResourceType.TOPIC,
                f"{topic}-",
                ACLResourcePatternType.PREFIXED,
            ),
            acl("User:bob", ACLOperation.READ, KpResourceType.GROUP, f"{topic}-readers"),
            acl("User:bob", ACLOperation.IDEMPOTENT_WRITE, KpResourceType.CLUSTER, "kafka-cluster"),
        ]
        created = kp.create_acls(wanted)
        assert created["failed"] == [] and len(created["succeeded"]) == 5

        # Both brokers show them within seconds.  kafka-python sends CreateAcls to its
        # least loaded node, which may be either broker: the one that wrote shows them
        # at once, the other once it follows the change notification.
        expected = {
            ("LITERAL", topic, "User:alice", "READ"),
            ("LITERAL", topic, "User:alice", "DESCRIBE"),
            ("PREFIXED", f"{topic}-", "User:bob", "WRITE"),
        }
        for broker in (first, second):
            wait_until(lambda b=broker: annal_view(b, topic) == expected, 5, f"broker {broker}")
        with ZkClient(first.zookeeper_connect) as zk:
            assert zk.get(f"/kafka-acl/Topic/{topic}") is not None
            assert zk.get(f"/kafka-acl-extended/prefixed/Topic/{topic}-") is not None

        # DescribeAcls, with kafka-python's filters (either broker may answer).
        def described(pattern_filter: KpPatternFilter) -> set[tuple[str, str]]:
            found, _ = kp.describe_acls(
                ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, pattern_filter)
            )
            return {(a.resource_pattern.resource_name, a.operation.name) for a in found}

        match = KpPatternFilter(KpResourceType.TOPIC, f"{topic}-eu", ACLResourcePatternType.MATCH)
        wait_until(lambda: described(match) == {(f"{topic}-", "WRITE")}, 5, "prefix matches")
        exact = KpPatternFilter(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
        assert described(exact) == {(topic, "READ"), (topic, "DESCRIBE")}

        # DeleteAcls: each filter reports what it removed.
        results = kp.delete_acls(
            [
                ACLFilter("User:alice", None, ACLOperation.READ, ACLPermissionType.ANY, exact),
                ACLFilter(
                    None,
                    None,
                    ACLOperation.ANY,
                    ACLPermissionType.ANY,
                    KpPatternFilter(KpResourceType.TOPIC, f"{topic}-", ACLResourcePatternType.ANY),
                ),
            ]
        )
        removed = [{(a.principal, a.operation.name) for a in found} for _, found, _ in results]
        assert removed == [{("User:alice", "READ")}, {("User:bob", "WRITE")}]
        assert all(error.__name__ == "NoError" for _, _, error in results)
        left = {("LITERAL", topic, "User:alice", "DESCRIBE")}
        for broker in (first, second):
            wait_until(lambda b=broker: annal_view(b, topic) == left, 5, f"deletion on {broker}")
    finally:
        kp.close()


def test_bad_acl_requests_get_invalid_request(cluster: list[BrokerProcess]) -> None:
    kp = KafkaAdminClient(bootstrap_servers=cluster[0].kafka_endpoint)
    try:
        refused = kp.create_acls(
            [
                acl("alice", ACLOperation.READ, KpResourceType.TOPIC, "t"),  # no principal type
                acl("User:a", ACLOperation.READ, KpResourceType.CLUSTER, "not-the-cluster"),
            ]
        )
        assert [e.__name__ for e in refused["failed"]] == ["InvalidRequestError"] * 2
        unknown = KpPatternFilter(KpResourceType.TOPIC, "t", ACLResourcePatternType.UNKNOWN)
        with pytest.raises(InvalidRequestError, match="pattern type 0 is unknown"):
            kp.describe_acls(
                ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, unknown)
            )
    finally:
        kp.close()
    # What kafka-python will not send: an ACL for ANY operation, raw.
    answer = raw_exchange(
        cluster[0],
        30,
        1,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "resource_pattern_type": 3,
                    "principal": "User:a",
                    "host": "*",
                    "operation": 1,
                    "permission_type": 3,
                }
            ]
        },
    )
    (result,) = answer.results
    assert result.error_code.value == 42 and "operation 1 (ANY)" in result.error_message


def test_kafka_python_sets_and_describes_scram_credentials(cluster: list[BrokerProcess]) -> None:
    user = f"app-{next(_names)}"
    kp = KafkaAdminClient(bootstrap_servers=cluster[1].kafka_endpoint)
    try:
        assert kp.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(user, SCRAM_SHA_512, "app-secret", iterations=8192),
                UserScramCredentialUpsertion(user, SCRAM_SHA_256, "app-secret"),
            ]
        ) == {user: None}
        described = kp.describe_user_scram_credentials([user])[user]
        assert described["error"] is None
        infos = described["credential_infos"]
        assert sorted((c["mechanism"].name, c["iterations"]) for c in infos) == [
            ("SCRAM_SHA_256", 4096),
            ("SCRAM_SHA_512", 8192),
        ]
        assert user in kp.describe_user_scram_credentials()  # every user
        with ZkClient(cluster[0].zookeeper_connect) as zk:
            stored = zk.get_user_scram_credentials(user)
        assert verify_password(SCRAM_SHA_512, stored[SCRAM_SHA_512], "app-secret")
        assert verify_password(SCRAM_SHA_256, stored[SCRAM_SHA_256], "app-secret")

        errors = kp.alter_user_scram_credentials(
            [
                UserScramCredentialDeletion(user, SCRAM_SHA_256),
                UserScramCredentialDeletion("nobody", SCRAM_SHA_256),
                UserScramCredentialUpsertion("twice", SCRAM_SHA_256, "x"),
                UserScramCredentialDeletion("twice", SCRAM_SHA_256),
                UserScramCredentialUpsertion("few", SCRAM_SHA_256, "x", iterations=1000),
            ]
        )
        assert errors[user] is None
        assert "'nobody' has no SCRAM-SHA-256 credential" in errors["nobody"]
        assert "altered twice" in errors["twice"]
        assert "1000 iterations is outside 4096..16384" in errors["few"]
        missing = kp.describe_user_scram_credentials(["nobody"])["nobody"]
        assert missing["error"] == "user 'nobody' has no SCRAM credential"
    finally:
        kp.close()
    # Codes, and a mechanism type kafka-python will not send, raw.
    answer = raw_exchange(
        cluster[0],
        51,
        0,
        {
            "deletions": [
                {"name": "nobody", "mechanism": 1},
                {"name": "odd", "mechanism": 7},
            ],
            "upsertions": [],
        },
    )
    codes = {r.user: (r.error_code.value, r.error_message) for r in answer.results}
    assert codes["nobody"][0] == 91  # RESOURCE_NOT_FOUND
    assert codes["odd"] == (
        33,  # UNSUPPORTED_SASL_MECHANISM
        "unknown SCRAM mechanism 'SCRAM mechanism type 7' for user 'odd': "
        "expected SCRAM-SHA-256 or SCRAM-SHA-512",
    )
