"""zookeeper.set.acl (zk/znode_acls.py) against a real ZooKeeper: znodes made by a
client with the brokers' digest identity can be read by anyone but changed only
by that identity, SCRAM credentials cannot even be read by others, /consumers
stays open to ZooKeeper-based consumers, and bad settings are refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from annal.broker.config import BrokerConfig, ConfigError
from annal.security.scram import SCRAM_SHA_512, make_credential
from annal.zk import layout
from annal.zk.client import ZkClient, ZkError
from annal.zk.layout import TopicAssignment
from annal.zk.znode_acls import is_sensitive, secure_acls
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

pytestmark = pytest.mark.timeout(60)

DIGEST = "annal-brokers:zk-s3cret"


@pytest.fixture
def stranger(zk_connect: str) -> Iterator[KazooClient]:
    """A client that reaches ZooKeeper without any identity (the chroot made first by
    a client with the brokers' identity, as the first broker makes it)."""
    ZkClient(zk_connect, digest=DIGEST, set_acl=True).start().stop()
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def test_the_acl_choice_per_path() -> None:
    assert is_sensitive("/config/users") and is_sensitive("/config/users/alice")
    assert not is_sensitive("/config/usersx") and not is_sensitive("/config/topics/t")
    assert [a.id.scheme for a in secure_acls("/consumers")] == ["world"]
    assert secure_acls("/consumers")[0].perms == Permissions.ALL
    assert [a.id.scheme for a in secure_acls("/config/users/alice")] == ["auth"]
    assert sorted(a.id.scheme for a in secure_acls("/brokers/topics/t")) == ["auth", "world"]


def test_secured_znodes_are_read_by_all_and_changed_by_the_brokers(
    zk_connect: str, stranger: KazooClient
) -> None:
    with ZkClient(zk_connect, digest=DIGEST, set_acl=True) as zk:
        zk.ensure_persistent_paths()
        zk.create_topic("guarded", TopicAssignment({0: (1, 2)}))
        zk.upsert_scram_credential("alice", SCRAM_SHA_512, make_credential(SCRAM_SHA_512, "pw"))
    topic = layout.topic_path("guarded")
    data, _ = stranger.get(topic)  # anyone may look
    assert b'"partitions"' in data
    with pytest.raises(NoAuthError):
        stranger.set(topic, b"{}")
    with pytest.raises(NoAuthError):
        stranger.delete(topic)
    with pytest.raises(NoAuthError):
        stranger.create(f"{layout.CONTROLLER}", b'{"brokerid": 666}', ephemeral=True)
    with pytest.raises(NoAuthError):
        stranger.get("/config/users/alice")  # a credential is not even readable
    with pytest.raises(NoAuthError):
        stranger.delete(layout.BROKER_IDS)  # nor empty a tree
    acl, _ = stranger.get_acls(topic)
    assert {(a.id.scheme, a.perms) for a in acl} == {
        ("digest", Permissions.ALL), ("world", Permissions.READ),
    }  # fmt: skip
    assert acl[0].id.id.startswith("annal-brokers:")
    # ZooKeeper-based consumers, which do not authenticate, still make their groups
    stranger.create("/consumers/g/ids/c1", b"{}", makepath=True)
    # another broker with the same identity changes what the first made
    with ZkClient(zk_connect, digest=DIGEST, set_acl=True) as other:
        found = other.get_topic_assignment("guarded")
        assert found is not None
        other.update_topic_assignment("guarded", TopicAssignment({0: (2, 1)}), found[1])
        assert other.get_user_scram_credentials("alice")
    # a wrong identity is a stranger too
    with ZkClient(zk_connect, digest="annal-brokers:wrong") as wrong, pytest.raises(ZkError):
        wrong.get_user_scram_credentials("alice")


def test_settings_that_cannot_work_are_refused(zk_connect: str) -> None:
    with pytest.raises(ZkError, match="zookeeper.set.acl needs a ZooKeeper identity"):
        ZkClient(zk_connect, set_acl=True)
    base = {"broker.id": "1", "zookeeper.connect": zk_connect}
    with pytest.raises(ConfigError, match="zookeeper.set.acl=true needs zookeeper.auth.digest"):
        BrokerConfig.from_properties({**base, "zookeeper.set.acl": "true"})
    with pytest.raises(ConfigError, match="zookeeper.auth.digest: expected user:password"):
        BrokerConfig.from_properties({**base, "zookeeper.auth.digest": "no-colon"})
    config = BrokerConfig.from_properties(
        {**base, "zookeeper.set.acl": "true", "zookeeper.auth.digest": DIGEST}
    )
    assert config.zookeeper_auth == (DIGEST, True)
