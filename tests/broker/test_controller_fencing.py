"""The controller's broker is cut off from ZooKeeper, not from the other brokers.

Broker 1, the controller, reaches ZooKeeper through a proxy (tests/zkproxy.py)
that the test pauses past its session timeout; brokers 2 and 3 reach it
directly.  While it is cut off another broker takes office with the next
epoch, a topic is created and a broker dies.  Once the proxy lets broker 1
through again it finds its session lost and resigns: it acts as controller
no more (it answers ControlledShutdown with NOT_CONTROLLER), no partition
state written after the new epoch began carries an older controller epoch,
and the cluster converges with broker 1 back in the ISRs.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.deploy.zookeeper import ZooKeeperServer
from annal.producer.producer import Producer
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk import layout
from annal.zk.client import ZkClient
from annal.zk.layout import PartitionState
from zkproxy import ZkProxy

SESSION_TIMEOUT_MS = 4000
SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "offsets.topic.num.partitions": "1",
    "auto.leader.rebalance.enable": "false",
}
BEFORE = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


def states(zk: ZkClient, topic: str, count: int) -> list[tuple[PartitionState, int]]:
    """Each partition's state and the zxid of its last write ([] until all exist)."""
    out = []
    for partition in range(count):
        path = layout.partition_state_path(topic, partition)
        found = zk.get_partition_state(topic, partition)
        stat = zk.kazoo.exists(path)
        if found is None or stat is None:
            return []
        out.append((found[0], int(stat.mzxid)))
    return out


def ephemeral_owner(zk: ZkClient, path: str) -> int | None:
    stat = zk.kazoo.exists(path)
    return None if stat is None else int(stat.ephemeralOwner)


def controlled_shutdown_error(endpoint: str, broker_id: int) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        response = annal_pb2_grpc.BrokerControlStub(channel).ControlledShutdown(
            pb.ControlledShutdownRequest(broker_id=broker_id), timeout=30
        )
    return int(response.error)


@pytest.mark.timeout(240)
def test_a_controller_cut_off_from_zookeeper_resigns_and_writes_nothing_after_the_new_epoch(
    zookeeper: ZooKeeperServer,
    zk_connect: str,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    chroot = "/" + zk_connect.split("/", 1)[1]
    with ZkProxy(zookeeper.host, zookeeper.port) as proxy, ZkClient(zk_connect) as zk:
        brokers = {
            1: broker_factory(1, {**SETTINGS, "zookeeper.connect": proxy.connect_string(chroot)})
        }
        assert zk.get_controller() == 1  # the first broker up
        for broker_id in (2, 3):
            brokers[broker_id] = broker_factory(broker_id, SETTINGS)
        with AdminClient(brokers[2].endpoint) as admin:
            admin.create_topic("before", assignment=BEFORE)
        wait_until(
            lambda: [len(s.isr) for s, _ in states(zk, "before", 3)] == [3, 3, 3],
            30,
            "topic before online with full ISRs",
        )
        old = zk.get_controller_epoch()
        assert old is not None
        old_session = ephemeral_owner(zk, layout.CONTROLLER)

        proxy.pause()
        wait_until(lambda: zk.get_controller() not in (None, 1), 30, "a new controller")
        new_id = zk.get_controller()
        assert new_id is not None
        new = zk.get_controller_epoch()
        assert new is not None and new.epoch > old.epoch
        epoch_stat = zk.kazoo.exists(layout.CONTROLLER_EPOCH)
        new_term_zxid = int(epoch_stat.mzxid)
        # Broker 1's session is gone: the new controller took it out of every ISR.
        wait_until(
            lambda: all(1 not in s.isr for s, _ in states(zk, "before", 3)),
            30,
            "broker 1 out of the ISRs",
        )
        survivor = new_id
        victim = 5 - new_id  # the other of brokers 2 and 3
        with AdminClient(brokers[survivor].endpoint) as admin:
            admin.create_topic("during", assignment={0: [survivor, victim], 1: [victim, survivor]})
        wait_until(lambda: len(states(zk, "during", 2)) == 2, 30, "topic during online")
        brokers[victim].kill()
        wait_until(
            lambda: all(
                s.leader == survivor
                for topic, n in (("before", 3), ("during", 2))
                for s, _ in states(zk, topic, n)
            ),
            30,
            f"broker {survivor} leading every partition",
        )
        assert proxy.paused  # broker 1 heard of none of it

        proxy.resume()
        wait_until(
            lambda: ephemeral_owner(zk, layout.broker_path(1)) not in (None, old_session),
            30,
            "broker 1 registered with a new session",
        )
        # It is no controller any more, and says so.
        assert controlled_shutdown_error(brokers[1].endpoint, survivor) == pb.NOT_CONTROLLER
        wait_until(
            lambda: "resigns as controller" in brokers[1].log_path.read_text("utf-8", "replace"),
            30,
            "broker 1 resigned",
        )

        # The cluster converges: broker 1 is told its partitions and catches up.
        wait_until(
            lambda: all(
                {1, survivor} <= set(s.isr) and s.leader in (1, survivor)
                for s, _ in states(zk, "before", 3)
            ),
            60,
            "broker 1 back in the ISRs",
        )
        for broker_id in (1, survivor):
            wait_until(
                lambda b=broker_id: metadata_lists(brokers[b].endpoint, [1, survivor]),  # type: ignore[misc]
                30,
                f"broker {broker_id}'s metadata",
            )
        with Producer(brokers[survivor].endpoint) as producer:
            for topic, partition in (("before", 0), ("before", 2), ("during", 1)):
                producer.send(topic, value=b"after", partition=partition).result(30)
        with SimpleConsumer(brokers[1].endpoint) as consumer:
            assert [r.value for r in consumer.iterate("during", 1, 0)] == [b"after"]

        # The fencing itself: every partition state written since the new term
        # began carries its epoch (or a later one), none the deposed controller's.
        assert zk.get_controller() == survivor
        for topic, count in (("before", 3), ("during", 2)):
            for partition, (state, zxid) in enumerate(states(zk, topic, count)):
                if zxid > new_term_zxid:
                    assert state.controller_epoch >= new.epoch, (topic, partition, state)
