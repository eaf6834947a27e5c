"""SecurityAdmin in-process against a real ZooKeeper: per-item answers of CreateAcls,
DeleteAcls attributing each removed ACL to its first filter (and finding patterns the
cache does not know yet), SECURITY_DISABLED without an authorizer, SCRAM alterations
written per user, and INFO logs without secrets."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from annal.broker.requests import security_types as st
from annal.broker.security.authorization import RequestAuthorizer
from annal.broker.security.security_admin import REQUIRED_ACCESS, SecurityAdmin
from annal.broker.security.security_requests import binding_from_request
from annal.broker.security.security_store import SecurityStore
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
)
from annal.security.authorizer import AclCache, Authorizer
from annal.security.session import Session
from annal.zk.client import ZkClient

from annal import errors

pytestmark = pytest.mark.timeout(60)

ANY: dict[str, Any] = {
    "resource_type": 1,
    "resource_name": None,
    "pattern_type": 1,
    "principal": None,
    "host": None,
    "operation": 1,
    "permission_type": 1,
}


def error_name(number: int) -> str:
    return errors.from_wire(number).name


def binding(
    name: str,
    principal: str = "User:alice",
    operation: int = 3,
    pattern_type: int = 3,
    resource_type: int = 2,
) -> st.AclBinding:
    return st.AclBinding(
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern_type,
        principal=principal,
        host="*",
        operation=operation,
        permission_type=3,
    )


async def _in_thread(fn: Callable[[], Any]) -> Any:
    return await asyncio.to_thread(fn)


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    with ZkClient(zk_connect) as client:
        client.ensure_persistent_paths()
        yield client


def admin_for(zk: ZkClient, enabled: bool = True) -> SecurityAdmin:
    """An admin over a store that is never started: its cache holds only what this
    admin wrote (another session's writes are not followed)."""
    return SecurityAdmin(zk, SecurityStore(zk), _in_thread, acls_enabled=enabled)


def test_create_answers_each_acl_and_logs_it(
    zk: ZkClient, caplog: pytest.LogCaptureFixture
) -> None:
    admin = admin_for(zk)
    caplog.set_level(logging.INFO, "annal.broker.security.security_admin")
    request = st.CreateAclsRequest(
        creations=[
            binding("orders"),
            binding("orders", operation=1),
            binding("x", "nobody"),
            binding("orders", operation=8),
            binding("orders"),
        ]
    )
    answer = asyncio.run(admin.create_acls(request))
    assert [error_name(r.error) for r in answer.results] == [
        "NONE",
        "INVALID_REQUEST",
        "INVALID_REQUEST",
        "NONE",
        "NONE",
    ]
    assert "principal 'nobody' is not of the form" in answer.results[2].error_message
    assert zk.acls_of(_orders())[1] == 0  # one write for the pattern's three creations
    assert caplog.messages == [
        "ACL added: Allow User:alice Read from host * on Topic:LITERAL:orders",
        "ACL added: Allow User:alice Describe from host * on Topic:LITERAL:orders",
    ]
    described = asyncio.run(
        admin.describe_acls(
            st.DescribeAclsRequest(
                filter=st.AclBindingFilter(**{**ANY, "resource_type": 2, "resource_name": "orders"})
            )
        )
    )
    assert [(a.resource_name, a.operation) for a in described.acls] == [
        ("orders", 3),
        ("orders", 8),
    ]


def _orders() -> ResourcePattern:
    return ResourcePattern.literal(ResourceType.TOPIC, "orders")


def test_delete_reports_each_acl_under_its_first_filter(zk: ZkClient) -> None:
    admin = admin_for(zk)
    asyncio.run(
        admin.create_acls(
            st.CreateAclsRequest(
                creations=[
                    binding("orders"),
                    binding("orders", "User:bob"),
                    binding("ord", pattern_type=4),
                ]
            )
        )
    )
    # Written by another broker, unknown to this one's cache: an exact filter finds it.
    other = st.AclBinding(
        resource_type=3,
        resource_name="billing",
        pattern_type=3,
        principal="User:carol",
        host="*",
        operation=3,
        permission_type=3,
    )
    parsed = binding_from_request(other)
    assert isinstance(parsed, AclBinding)
    zk.add_acls(parsed.pattern, [parsed.entry])

    answer = asyncio.run(
        admin.delete_acls(
            st.DeleteAclsRequest(
                filters=[
                    st.AclBindingFilter(**{**ANY, "resource_type": 2, "principal": "User:bob"}),
                    st.AclBindingFilter(
                        **{**ANY, "resource_type": 2}
                    ),  # also matches bob's: reported above
                    st.AclBindingFilter(
                        **{**ANY, "resource_type": 3, "pattern_type": 3, "resource_name": "billing"}
                    ),
                    st.AclBindingFilter(**{**ANY, "operation": 0}),
                ]
            )
        )
    )
    deleted = [
        sorted((d.acl.resource_name, d.acl.principal, d.error) for d in r.deleted)
        for r in answer.results
    ]
    assert deleted == [
        [("orders", "User:bob", 0)],
        [("ord", "User:alice", 0), ("orders", "User:alice", 0)],
        [("billing", "User:carol", 0)],
        [],
    ]
    assert error_name(answer.results[3].error) == "INVALID_REQUEST"
    assert "operation 0 is unknown" in answer.results[3].error_message
    assert zk.all_acls() == {}


def test_without_an_authorizer_acl_apis_answer_security_disabled(zk: ZkClient) -> None:
    admin = admin_for(zk, enabled=False)
    created = asyncio.run(admin.create_acls(st.CreateAclsRequest(creations=[binding("t")])))
    assert error_name(created.results[0].error) == "SECURITY_DISABLED"
    described = asyncio.run(
        admin.describe_acls(st.DescribeAclsRequest(filter=st.AclBindingFilter(**ANY)))
    )
    assert error_name(described.error) == "SECURITY_DISABLED"
    deleted = asyncio.run(
        admin.delete_acls(st.DeleteAclsRequest(filters=[st.AclBindingFilter(**ANY)]))
    )
    assert error_name(deleted.results[0].error) == "SECURITY_DISABLED"
    assert zk.all_acls() == {}


def test_scram_alterations_per_user(zk: ZkClient, caplog: pytest.LogCaptureFixture) -> None:
    admin = admin_for(zk)
    caplog.set_level(logging.INFO, "annal.broker.security.security_admin")
    salt = b"s" * 24
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", salt, 4096)
    upsert = st.ScramCredentialUpsertion(
        user="alice",
        mechanism="SCRAM-SHA-256",
        iterations=4096,
        salt=salt,
        salted_password=salted,
    )
    answer = asyncio.run(
        admin.alter_user_scram_credentials(
            st.AlterUserScramCredentialsRequest(
                upsertions=[upsert],
                deletions=[st.ScramCredentialDeletion(user="bob", mechanism="SCRAM-SHA-256")],
            )
        )
    )
    assert [(r.user, error_name(r.error)) for r in answer.results] == [
        ("bob", "RESOURCE_NOT_FOUND"),
        ("alice", "NONE"),
    ]
    assert admin._store.credentials("alice").keys() == {"SCRAM-SHA-256"}  # refreshed at once
    described = asyncio.run(
        admin.describe_user_scram_credentials(
            st.DescribeUserScramCredentialsRequest(users=["alice", "bob", "", "alice"])
        )
    )
    assert [
        (r.user, error_name(r.error), [(c.mechanism, c.iterations) for c in r.credentials])
        for r in described.results
    ] == [
        ("alice", "DUPLICATE_RESOURCE", []),
        ("bob", "RESOURCE_NOT_FOUND", []),
        ("", "RESOURCE_NOT_FOUND", []),
    ]
    everyone = asyncio.run(
        admin.describe_user_scram_credentials(st.DescribeUserScramCredentialsRequest())
    )
    assert [(r.user, r.error, len(r.credentials)) for r in everyone.results] == [("alice", 0, 1)]
    assert caplog.messages == ["SCRAM credential set: user 'alice', SCRAM-SHA-256, 4096 iterations"]
    assert salted.hex() not in caplog.text and "salt" not in caplog.text


def test_what_each_api_needs() -> None:
    """Kafka's checks; the two SCRAM APIs as KIP-554 has them (Describe / Alter)."""
    assert {
        name: (a.operation, a.resource.resource_type) for name, a in REQUIRED_ACCESS.items()
    } == {
        "CreateAcls": (AclOperation.ALTER, ResourceType.CLUSTER),
        "DescribeAcls": (AclOperation.DESCRIBE, ResourceType.CLUSTER),
        "DeleteAcls": (AclOperation.ALTER, ResourceType.CLUSTER),
        "DescribeUserScramCredentials": (AclOperation.DESCRIBE, ResourceType.CLUSTER),
        "AlterUserScramCredentials": (AclOperation.ALTER, ResourceType.CLUSTER),
    }


def test_each_api_checks_its_access_for_the_callers_session(
    zk: ZkClient, caplog: pytest.LogCaptureFixture
) -> None:
    """bob, without ACLs, is refused everything (naming him, the operation and the
    cluster) and nothing is written; Describe on the cluster lets him describe
    but not change; Alter lets him change."""
    cache = AclCache()
    authorizer = RequestAuthorizer(Authorizer(cache))
    admin = SecurityAdmin(zk, SecurityStore(zk), _in_thread, authorizer=authorizer)
    bob = Session(KafkaPrincipal.parse("User:bob"), "10.0.0.7", "SASL_PLAINTEXT")
    caplog.set_level(logging.INFO, "annal.authorizer")
    any_filter = st.AclBindingFilter(**ANY)
    upsert = st.ScramCredentialUpsertion(
        user="carol",
        mechanism="SCRAM-SHA-256",
        iterations=4096,
        salt=b"s" * 24,
        salted_password=hashlib.pbkdf2_hmac("sha256", b"pw", b"s" * 24, 4096),
    )

    def run() -> list[str]:
        """The error of each of the five APIs."""
        created = asyncio.run(
            admin.create_acls(st.CreateAclsRequest(creations=[binding("t")]), bob)
        )
        described = asyncio.run(admin.describe_acls(st.DescribeAclsRequest(filter=any_filter), bob))
        deleted = asyncio.run(admin.delete_acls(st.DeleteAclsRequest(filters=[any_filter]), bob))
        users = asyncio.run(
            admin.describe_user_scram_credentials(st.DescribeUserScramCredentialsRequest(), bob)
        )
        altered = asyncio.run(
            admin.alter_user_scram_credentials(
                st.AlterUserScramCredentialsRequest(upsertions=[upsert]), bob
            )
        )
        return [
            error_name(e)
            for e in (
                created.results[0].error,
                described.error,
                deleted.results[0].error,
                users.error,
                altered.results[0].error,
            )
        ]

    refused = "CLUSTER_AUTHORIZATION_FAILED"
    assert run() == [refused] * 5
    assert zk.all_acls() == {} and zk.scram_users() == []
    assert "DENIED: principal User:bob from host 10.0.0.7, operation Alter" in caplog.text
    cluster = ResourcePattern.literal(ResourceType.CLUSTER, "kafka-cluster")

    def grant(operation: AclOperation) -> None:
        cache.replace(
            cluster, [AccessControlEntry("User:bob", "*", operation, AclPermissionType.ALLOW)]
        )

    grant(AclOperation.DESCRIBE)
    assert run() == [refused, "NONE", refused, "NONE", refused]
    grant(AclOperation.ALTER)  # Alter implies Describe
    assert run() == ["NONE"] * 5
    assert zk.scram_users() == ["carol"]
