"""The broker's SecurityStore against a real ZooKeeper: it loads what is there, follows
ACL and user changes written through other sessions within seconds, and reloads after
a lost session; the config-change listener still applies topic configs beside users."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from annal.broker.config_changes import ConfigChangeListener
from annal.broker.security.security_store import SecurityStore
from annal.deploy.runner import wait_until
from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    Resource,
    ResourcePattern,
    ResourceType,
)
from annal.security.authorizer import Authorizer
from annal.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    format_credential,
    make_credential,
)
from annal.zk import users
from annal.zk.client import ZkClient
from kazoo.client import KazooClient

pytestmark = pytest.mark.timeout(90)

ALICE = KafkaPrincipal("User", "alice")
READ = AccessControlEntry(str(ALICE), "*", AclOperation.READ, AclPermissionType.ALLOW)
ORDERS = ResourcePattern.literal(ResourceType.TOPIC, "orders")
PREFIX = ResourcePattern.prefixed(ResourceType.TOPIC, "ord")


@pytest.fixture
def writer(zk_connect: str) -> Iterator[ZkClient]:
    """Another broker's (or tool's) session: what it writes reaches the store only
    through ZooKeeper's notifications."""
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        yield zk


@pytest.fixture
def store(zk_connect: str, writer: ZkClient) -> Iterator[SecurityStore]:
    zk = ZkClient(zk_connect).start()
    security = SecurityStore(zk)
    security.start()
    yield security
    security.stop()
    zk.stop()


def reads(store: SecurityStore, topic: str) -> bool:
    authorizer = Authorizer(store.acls)
    return authorizer.authorize(
        ALICE, "10.0.0.1", AclOperation.READ, Resource(ResourceType.TOPIC, topic)
    ).allowed


def test_what_exists_at_start_is_loaded(zk_connect: str, writer: ZkClient) -> None:
    writer.add_acls(ORDERS, [READ])
    credential = make_credential(SCRAM_SHA_512, "alice-secret")
    writer.upsert_scram_credential("alice", SCRAM_SHA_512, credential)
    with ZkClient(zk_connect) as zk:
        store = SecurityStore(zk)
        store.start()
        try:
            assert store.acls.entries(ORDERS) == {READ}
            assert dict(store.credentials("alice")) == {SCRAM_SHA_512: credential}
            assert store.credentials("bob") == {}
            assert store.users() == ["alice"]
        finally:
            store.stop()


def test_acl_changes_on_another_session_arrive_within_seconds(
    store: SecurityStore, writer: ZkClient
) -> None:
    assert not reads(store, "orders")
    writer.add_acls(ORDERS, [READ])
    wait_until(lambda: reads(store, "orders"), 5, "the literal ACL applied")
    writer.add_acls(PREFIX, [READ])
    wait_until(lambda: reads(store, "ordinary"), 5, "the prefixed ACL applied")
    writer.remove_acls(ORDERS, [READ])
    writer.remove_acls(PREFIX, [READ])
    wait_until(lambda: store.acls.patterns() == frozenset(), 5, "both removed")
    assert not reads(store, "orders")


def test_user_changes_on_another_session_arrive_within_seconds(
    store: SecurityStore, writer: ZkClient
) -> None:
    first = make_credential(SCRAM_SHA_256, "one")
    writer.upsert_scram_credential("alice", SCRAM_SHA_256, first)
    wait_until(lambda: dict(store.credentials("alice")) == {SCRAM_SHA_256: first}, 5, "set")
    second = make_credential(SCRAM_SHA_256, "two")
    writer.alter_user_scram_credentials(
        "alice", {SCRAM_SHA_256: second, SCRAM_SHA_512: make_credential(SCRAM_SHA_512, "x")}
    )
    wait_until(lambda: store.credentials("alice").get(SCRAM_SHA_256) == second, 5, "replaced")
    writer.alter_user_scram_credentials("alice", deletions=[SCRAM_SHA_256, SCRAM_SHA_512])
    wait_until(lambda: store.credentials("alice") == {}, 5, "deleted")
    assert store.users() == []


def test_a_lost_session_reloads_everything(
    zk_connect: str, store: SecurityStore, writer: ZkClient
) -> None:
    """Notifications may expire while a broker is cut off: after a new session the
    store reads everything again."""
    writer.add_acls(ORDERS, [READ])
    wait_until(lambda: reads(store, "orders"), 5, "applied")
    # Change ZooKeeper behind the store's back: no notification for these.
    writer.kazoo.delete("/kafka-acl/Topic/orders")
    credential = make_credential(SCRAM_SHA_512, "carol-secret")
    config = {SCRAM_SHA_512: format_credential(credential)}
    writer.kazoo.create("/config/users/carol", users.encode_user_config(config))
    _expire_session(store.zk)
    wait_until(lambda: not reads(store, "orders"), 30, "ACLs reloaded after the new session")
    wait_until(
        lambda: dict(store.credentials("carol")) == {SCRAM_SHA_512: credential}, 30, "reloaded"
    )


def test_topic_configs_and_user_changes_share_the_listener(
    zk_connect: str, writer: ZkClient
) -> None:
    topics: list[tuple[str, Mapping[str, str]]] = []
    changed_users: list[str] = []
    with ZkClient(zk_connect) as zk:
        listener = ConfigChangeListener(
            zk, lambda t, c: topics.append((t, dict(c))), changed_users.append
        )
        listener.start()
        try:
            writer.set_topic_config("orders", {"retention.ms": "1000"})
            writer.upsert_scram_credential(
                "CN=a,O=b", SCRAM_SHA_256, make_credential(SCRAM_SHA_256, "p")
            )
            wait_until(lambda: topics and changed_users, 5, "both callbacks")
            assert topics == [("orders", {"retention.ms": "1000"})]
            assert changed_users == ["CN=a,O=b"]
        finally:
            listener.stop()


def _expire_session(zk: ZkClient) -> None:
    """Expire ``zk``'s session as ZooKeeper does for a client cut off too long: a
    second client with the same session id closes it."""
    session_id, password = zk.kazoo.client_id
    twin = KazooClient(hosts=zk.hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()
