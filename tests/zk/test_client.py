"""ZkClient against a real ZooKeeper server."""

from __future__ import annotations

import pytest
from annal.zk import layout
from annal.zk.client import (
    BrokerIdTakenError,
    ControllerMovedError,
    SessionEvent,
    StaleVersionError,
    ZkClient,
    ZkError,
)
from annal.zk.layout import BrokerRegistration, PartitionState, TopicAssignment
from kazoo.client import KazooClient


def test_chroot_is_created_and_cluster_id_is_stable(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        first = zk.get_or_create_cluster_id()
    with ZkClient(zk_connect) as zk:
        assert zk.get_or_create_cluster_id() == first
        assert "brokers" in zk.children("/")
    hosts, chroot = zk_connect.split("/", 1)
    raw = KazooClient(hosts)
    raw.start(10)
    try:
        assert raw.exists(f"/{chroot}/cluster/id") is not None
    finally:
        raw.stop()


def test_broker_registration_is_ephemeral_and_exclusive(zk_connect: str) -> None:
    first = ZkClient(zk_connect).start()
    first.register_broker(BrokerRegistration(1, "127.0.0.1", 9092))
    first.register_broker(BrokerRegistration(1, "127.0.0.1", 9092))  # retried create: fine
    with ZkClient(zk_connect) as second:
        with pytest.raises(
            BrokerIdTakenError, match=r"broker.id 1 is registered .* 127.0.0.1:9092"
        ):
            second.register_broker(BrokerRegistration(1, "127.0.0.1", 9093))
        assert [b.broker_id for b in second.get_brokers()] == [1]
        first.stop()  # session closed: the ephemeral znode goes
        assert second.get_brokers() == []
        second.register_broker(BrokerRegistration(1, "127.0.0.1", 9093))
        registered = second.get_broker(1)
        assert registered is not None and registered.port == 9093


def test_controller_election_and_epoch(zk_connect: str) -> None:
    with ZkClient(zk_connect) as a, ZkClient(zk_connect) as b:
        first = a.register_controller(1)
        assert first is not None and first.epoch == 1
        assert b.register_controller(2) is None  # /controller is held
        assert b.get_controller() == 1
        assert b.get_controller_epoch() == first
        assert a.owns_controller() and not b.owns_controller()
        assert not b.resign_controller()  # not its own
        assert a.resign_controller()
        second = b.register_controller(2)
        assert second is not None and second.epoch == 2
        assert second.zk_version == first.zk_version + 1
        assert b.get_controller() == 2


def test_a_deposed_controllers_writes_fail_the_epoch_check(zk_connect: str) -> None:
    """KAFKA-6082: once a new controller took office, every write of the old one
    (partition states, assignments, the znodes it deletes) fails whole."""
    with ZkClient(zk_connect) as old, ZkClient(zk_connect) as new:
        old.ensure_persistent_paths()
        term = old.register_controller(1)
        assert term is not None
        assignment = TopicAssignment({0: (1, 2)})
        assert old.create_topic("orders", assignment)
        state = PartitionState(1, 0, (1, 2), term.epoch)
        assert old.create_partition_state("orders", 0, state, term) == 0
        assert old.update_partition_state("orders", 0, state, 0, term) == 1
        assert old.mark_topic_for_deletion("gone")
        old.notify_isr_change([("orders", 0)])

        # /controller goes (as with the old controller's session expiring) and another
        # broker takes office with the next epoch.
        reader = ZkClient(zk_connect).start()
        try:
            assert old.resign_controller()
            newer = new.register_controller(2)
            assert newer is not None and newer.epoch == term.epoch + 1
            deposed = PartitionState(2, 1, (2,), term.epoch)
            with pytest.raises(ControllerMovedError, match="controller epoch 1 is over"):
                old.update_partition_state("orders", 0, deposed, 1, term)
            with pytest.raises(ControllerMovedError):
                old.create_partition_state("orders", 1, deposed, term)
            with pytest.raises(ControllerMovedError):
                old.update_topic_assignment("orders", TopicAssignment({0: (2,)}), 0, term)
            with pytest.raises(ControllerMovedError):
                old.delete_recursive(layout.delete_topic_path("gone"), term)
            with pytest.raises(ControllerMovedError):
                old.take_isr_changes(term)
            # Nothing of it landed.
            assert reader.get_partition_state("orders", 0) == (state, 1)
            assert reader.get_partition_state("orders", 1) is None
            found = reader.get_topic_assignment("orders")
            assert found is not None and found[0].partitions == {0: (1, 2)}
            assert reader.topics_to_delete() == ["gone"]
            assert reader.children(layout.ISR_CHANGE_NOTIFICATION) != []
            # The new controller's writes go through.
            newest = PartitionState(2, 1, (2,), newer.epoch)
            assert new.update_partition_state("orders", 0, newest, 1, newer) == 2
            new.delete_recursive(layout.delete_topic_path("gone"), newer)
            assert new.topics_to_delete() == []
            assert new.take_isr_changes(newer) == [("orders", 0)]
            new.delete_recursive(layout.topic_path("orders"), newer)
            assert new.get_topics() == []
        finally:
            reader.stop()


def test_session_listeners_hear_every_change(zk_connect: str) -> None:
    heard: list[SessionEvent] = []
    zk = ZkClient(zk_connect)
    zk.add_session_listener(heard.append)
    zk.add_session_listener(lambda event: 1 / 0)  # a broken owner silences no other
    zk.start()
    assert zk.session_state is SessionEvent.CONNECTED
    zk.stop()
    assert heard == [SessionEvent.CONNECTED, SessionEvent.LOST]
    assert zk.session_state is SessionEvent.LOST


def test_topics_and_fenced_partition_state(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        assignment = TopicAssignment({0: (1,), 1: (2,)})
        assert zk.create_topic("orders", assignment, {"cleanup.policy": "compact"})
        assert not zk.create_topic("orders", assignment)
        assert zk.get_topics() == ["orders"]
        found = zk.get_topic_assignment("orders")
        assert found is not None and found[0].partitions == {0: (1,), 1: (2,)}
        assert zk.get_topic_config("orders") == {"cleanup.policy": "compact"}
        state = PartitionState(1, 0, (1,), 1)
        assert zk.create_partition_state("orders", 0, state) == 0
        assert zk.update_partition_state("orders", 0, PartitionState(1, 1, (1,), 1), 0) == 1
        with pytest.raises(StaleVersionError, match="changed since version 0"):
            zk.update_partition_state("orders", 0, PartitionState(2, 2, (2,), 1), 0)
        current = zk.get_partition_state("orders", 0)
        assert current == (PartitionState(1, 1, (1,), 1), 1)
        assert zk.mark_topic_for_deletion("orders")
        assert zk.topics_to_delete() == ["orders"]
        zk.delete_recursive(layout.topic_path("orders"))
        assert zk.get_topics() == []


def test_topic_config_writes_can_be_conditional(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        assert zk.get_topic_config_versioned("logs") == ({}, -1)
        zk.set_topic_config("logs", {"retention.ms": "1000"}, -1)
        with pytest.raises(StaleVersionError):
            zk.set_topic_config("logs", {"retention.ms": "2000"}, -1)  # created meanwhile
        config, version = zk.get_topic_config_versioned("logs")
        assert (config, version) == ({"retention.ms": "1000"}, 0)
        zk.set_topic_config("logs", {"retention.ms": "3000"}, version)
        with pytest.raises(StaleVersionError, match="changed since version 0"):
            zk.set_topic_config("logs", {"retention.ms": "4000"}, version)  # a lost update
        assert zk.get_topic_config("logs") == {"retention.ms": "3000"}
        zk.set_topic_config("logs", {"retention.ms": "5000"})  # unconditional
        assert zk.get_topic_config_versioned("logs") == ({"retention.ms": "5000"}, 2)


def test_unreachable_zookeeper_is_a_clear_error() -> None:
    from annal.deploy.zookeeper import free_port

    client = ZkClient(f"127.0.0.1:{free_port()}", timeout_s=1.0)
    with pytest.raises(ZkError, match="cannot reach ZooKeeper at 127.0.0.1"):
        client.start()
