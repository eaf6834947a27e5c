"""Users' SCRAM credentials and ACLs in ZooKeeper, in Kafka's layout: the pure encodings
of zk/users.py, and ZkClient's versioned read-modify-writes against a real server."""

from __future__ import annotations

import json
import threading

import pytest
from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    make_credential,
    parse_credential,
)
from annal.zk import acls, layout, users
from annal.zk.client import CredentialNotFoundError, ZkClient

pytestmark = pytest.mark.timeout(60)

TOPIC = ResourceType.TOPIC
READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
WRITE = AccessControlEntry("User:bob", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY)
ORDERS = ResourcePattern.literal(TOPIC, "orders")
ORD_PREFIX = ResourcePattern.prefixed(TOPIC, "ord")


def credential(mechanism: str = SCRAM_SHA_512, password: str = "secret") -> ScramCredential:
    return make_credential(mechanism, password, salt=b"0123456789abcdef")


def znode_json(zk: ZkClient, path: str) -> object:
    found = zk.get(path)
    assert found is not None, path
    return json.loads(found[0])


def config_changes(zk: ZkClient) -> list[str]:
    return [entity for _, entity in zk.config_changes(-1)]


# -- zk/users.py -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "znode"),
    [
        ("alice", "alice"),
        ("a.b_c-d", "a.b_c-d"),
        ("CN=app,O=corp", "CN%3Dapp%2CO%3Dcorp"),
        ("x y*z~", "x%20y%2Az%7E"),
        ("a/b", "a%2Fb"),
        ("é", "%C3%A9"),
    ],
)
def test_user_names_are_sanitized_as_kafka_does(user: str, znode: str) -> None:
    assert users.sanitize(user) == znode
    assert users.desanitize(znode) == user
    assert users.user_config_path(user) == f"/config/users/{znode}"
    assert users.user_entity_path(user) == f"users/{znode}"
    assert users.user_of_entity(f"users/{znode}") == user


def test_user_config_encoding() -> None:
    data = users.encode_user_config({"b": "2", "SCRAM-SHA-512": "x"})
    assert data == b'{"version":1,"config":{"SCRAM-SHA-512":"x","b":"2"}}'
    assert users.decode_user_config("u", data) == {"SCRAM-SHA-512": "x", "b": "2"}
    assert users.decode_user_config("u", b"") == {}
    assert users.decode_user_config("u", b"null") == {}
    with pytest.raises(users.UserLayoutError, match="znode /config/users/u does not hold JSON"):
        users.decode_user_config("u", b"{nope")
    with pytest.raises(users.UserLayoutError, match="'config' is not a JSON object"):
        users.decode_user_config("u", b'{"version":1,"config":[]}')
    assert users.user_of_entity("topics/orders") is None
    with pytest.raises(users.UserLayoutError, match="non-empty"):
        users.user_config_path("")


# -- users in ZooKeeper ----------------------------------------------------------------------


def test_scram_credentials_round_trip_in_kafkas_format(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        assert zk.get_user_scram_credentials("alice") == {}
        first = credential()
        assert zk.upsert_scram_credential("alice", SCRAM_SHA_512, first)
        stored = znode_json(zk, "/config/users/alice")
        assert isinstance(stored, dict) and stored["version"] == 1
        assert list(stored["config"]) == [SCRAM_SHA_512]
        value = stored["config"][SCRAM_SHA_512]
        assert value.startswith("salt=") and value.endswith(",iterations=4096")
        assert parse_credential(value, SCRAM_SHA_512) == first
        assert config_changes(zk) == ["users/alice"]
        found = znode_json(zk, f"{layout.CONFIG_CHANGES}/config_change_0000000000")
        assert found == {"version": 2, "entity_path": "users/alice"}

        # Other entries (Kafka's quotas) are kept; a second mechanism joins.
        config = zk.get_user_config_versioned("alice")[0]
        zk.kazoo.set(
            "/config/users/alice",
            users.encode_user_config({**config, "producer_byte_rate": "1024"}),
        )
        other = credential(SCRAM_SHA_256)
        assert zk.upsert_scram_credential("alice", SCRAM_SHA_256, other)
        assert zk.get_user_scram_credentials("alice") == {
            SCRAM_SHA_512: first,
            SCRAM_SHA_256: other,
        }
        assert zk.get_user_config_versioned("alice")[0]["producer_byte_rate"] == "1024"
        assert not zk.upsert_scram_credential("alice", SCRAM_SHA_256, other)  # no change
        assert config_changes(zk) == ["users/alice", "users/alice"]

        assert zk.scram_users() == ["alice"]
        assert zk.all_scram_credentials() == {"alice": {SCRAM_SHA_512: first, SCRAM_SHA_256: other}}

        # Deleting every credential leaves the quota; deleting the quota too empties it.
        assert zk.alter_user_scram_credentials("alice", deletions=[SCRAM_SHA_256, SCRAM_SHA_512])
        assert zk.get_user_config_versioned("alice")[0] == {"producer_byte_rate": "1024"}
        assert zk.scram_users() == []


def test_the_last_credential_gone_deletes_the_znode(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.upsert_scram_credential("CN=app,O=corp", SCRAM_SHA_256, credential(SCRAM_SHA_256))
        assert zk.children(users.CONFIG_USERS) == ["CN%3Dapp%2CO%3Dcorp"]
        assert zk.scram_users() == ["CN=app,O=corp"]
        with pytest.raises(CredentialNotFoundError, match="has no SCRAM-SHA-512 credential"):
            zk.delete_scram_credential("CN=app,O=corp", SCRAM_SHA_512)
        assert len(config_changes(zk)) == 1  # the refused deletion wrote nothing
        assert zk.delete_scram_credential("CN=app,O=corp", SCRAM_SHA_256)
        assert zk.children(users.CONFIG_USERS) == []
        assert config_changes(zk) == ["users/CN%3Dapp%2CO%3Dcorp"] * 2
        with pytest.raises(CredentialNotFoundError):
            zk.delete_scram_credential("nobody", SCRAM_SHA_256)


def test_concurrent_credential_writes_lose_nothing(zk_connect: str) -> None:
    """Each write is conditioned on the version read; a writer that loses re-reads."""
    with ZkClient(zk_connect) as a, ZkClient(zk_connect) as b:
        a.ensure_persistent_paths()
        names = [f"user-{i}" for i in range(4)]

        def write(zk: ZkClient, mechanism: str) -> None:
            for name in names:
                for _ in range(3):
                    zk.upsert_scram_credential("shared", mechanism, credential(mechanism))
                zk.alter_user_scram_credentials(name, {mechanism: credential(mechanism)})

        threads = [
            threading.Thread(target=write, args=(a, SCRAM_SHA_256)),
            threading.Thread(target=write, args=(b, SCRAM_SHA_512)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in [*names, "shared"]:
            assert set(a.get_user_scram_credentials(name)) == {SCRAM_SHA_256, SCRAM_SHA_512}


# -- ACLs in ZooKeeper ------------------------------------------------------------------------


def test_acls_round_trip_with_change_notifications(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        for path in acls.PERSISTENT_PATHS:
            assert zk.get(path) is not None, path
        assert zk.acls_of(ORDERS) == (frozenset(), -1)

        assert zk.add_acls(ORDERS, [READ]) == {READ}
        assert znode_json(zk, "/kafka-acl/Topic/orders") == {
            "version": 1,
            "acls": [
                {
                    "principal": "User:alice",
                    "permissionType": "Allow",
                    "operation": "Read",
                    "host": "*",
                }
            ],
        }
        assert zk.add_acls(ORDERS, [READ, WRITE]) == {READ, WRITE}
        assert zk.acls_of(ORDERS) == ({READ, WRITE}, 1)
        assert zk.add_acls(ORDERS, [READ]) == {READ, WRITE}  # nothing new: no write
        assert zk.acls_of(ORDERS)[1] == 1
        changes = zk.children(acls.LITERAL_CHANGES)
        assert changes == ["acl_changes_0000000000", "acl_changes_0000000001"]
        assert zk.get(f"{acls.LITERAL_CHANGES}/{changes[0]}")[0] == b"Topic:orders"  # type: ignore[index]
        assert zk.acl_changes(ORDERS.pattern_type, 0) == [(1, ORDERS)]

        assert zk.add_acls(ORD_PREFIX, [WRITE]) == {WRITE}
        assert zk.get("/kafka-acl-extended/prefixed/Topic/ord") is not None
        assert zk.acl_changes(ORD_PREFIX.pattern_type, -1) == [(0, ORD_PREFIX)]
        extended = zk.get(f"{acls.EXTENDED_CHANGES}/acl_changes_0000000000")
        assert extended is not None and json.loads(extended[0]) == {
            "version": 1,
            "resourceType": "Topic",
            "name": "ord",
            "patternType": "PREFIXED",
        }
        assert zk.all_acls() == {ORDERS: {READ, WRITE}, ORD_PREFIX: {WRITE}}

        assert zk.remove_acls(
            ORDERS,
            [
                WRITE,
                AccessControlEntry("User:carol", "*", AclOperation.ALL, AclPermissionType.ALLOW),
            ],
        ) == {WRITE}
        assert zk.remove_acls(ORDERS, [READ]) == {READ}
        assert zk.get("/kafka-acl/Topic/orders") is None  # the last entry took the znode
        assert zk.remove_acls(ORDERS, [READ]) == frozenset()
        assert len(zk.children(acls.LITERAL_CHANGES)) == 4
        assert zk.all_acls() == {ORD_PREFIX: {WRITE}}


def test_acl_writes_retry_when_another_writer_wins(zk_connect: str) -> None:
    """A write that lost the version race is computed again from what the winner left."""
    with ZkClient(zk_connect) as zk, ZkClient(zk_connect) as rival:
        zk.ensure_persistent_paths()
        zk.add_acls(ORDERS, [READ])
        calls: list[frozenset[AccessControlEntry]] = []

        def change(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
            calls.append(current)
            if len(calls) == 1:  # another broker writes between our read and our write
                rival.add_acls(ORDERS, [WRITE])
            return current - {READ}

        before, after = zk.update_acls(ORDERS, change)
        assert calls == [{READ}, {READ, WRITE}]
        assert (before, after) == ({READ, WRITE}, {WRITE})
        assert zk.acls_of(ORDERS) == ({WRITE}, 2)


def test_unreadable_acl_znodes_are_skipped_when_loading(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.add_acls(ORDERS, [READ])
        zk.kazoo.create("/kafka-acl/Topic/broken", b"{not json")
        zk.kazoo.create(f"{acls.LITERAL_CHANGES}/acl_changes_0000000042", b"Nonsense")
        assert zk.all_acls() == {ORDERS: {READ}}
        assert zk.acl_changes(ORDERS.pattern_type, 0) == [(42, None)]


def test_old_notifications_are_purged(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.add_acls(ORDERS, [READ])
        zk.upsert_scram_credential("alice", SCRAM_SHA_256, credential(SCRAM_SHA_256))
        assert zk.purge_notifications(acls.LITERAL_CHANGES, "acl_changes_", 600_000) == 0
        assert zk.purge_notifications(acls.LITERAL_CHANGES, "acl_changes_", -60_000) == 1
        assert zk.children(acls.LITERAL_CHANGES) == []
        assert zk.purge_notifications(layout.CONFIG_CHANGES, "other_", -60_000) == 0
        assert zk.purge_notifications(layout.CONFIG_CHANGES, "config_change_", -60_000) == 1
