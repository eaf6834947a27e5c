"""Brokers with zookeeper.set.acl: a two-broker cluster whose znodes only its brokers
may change works as any other (topics, replication, a ZooKeeper-based consumer
group), while a client without the brokers' identity cannot take the controller,
rewrite a partition's state or read a user's credential."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.group import GroupConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.zk import layout
from annal.zk.client import ZkClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

pytestmark = pytest.mark.timeout(180)

SECURED = {"zookeeper.set.acl": "true", "zookeeper.auth.digest": "brokers:zk-secret"}


def test_a_cluster_with_secured_znodes_works_and_strangers_change_nothing(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str
) -> None:
    # the chroot made as the first broker makes a new one (before the test's own
    # clients, which would make it open)
    ZkClient(zk_connect, digest=SECURED["zookeeper.auth.digest"], set_acl=True).start().stop()
    one = broker_factory(1, SECURED)
    broker_factory(2, SECURED)
    with AdminClient(one.endpoint) as admin:
        admin.create_topic("fenced", 2, 2)
    with Producer(one.endpoint, acks="all") as producer:
        for i in range(20):
            producer.send("fenced", b"v%d" % i, partition=i % 2)
        producer.flush()

    def in_sync() -> bool:
        with ZkClient(zk_connect) as zk:
            states = [zk.get_partition_state("fenced", p) for p in (0, 1)]
        return all(s is not None and len(s[0].isr) == 2 for s in states)

    wait_until(in_sync, 60, "both replicas in sync")

    stranger = KazooClient(hosts=zk_connect)
    stranger.start(timeout=15)
    try:
        state = layout.partition_state_path("fenced", 0)
        data, _ = stranger.get(state)  # readable
        forged = {**json.loads(data), "leader": 2, "isr": [2]}
        with pytest.raises(NoAuthError):
            stranger.set(state, json.dumps(forged).encode())
        with pytest.raises(NoAuthError):
            stranger.delete(layout.CONTROLLER)
        with pytest.raises(NoAuthError):
            stranger.create(f"{layout.DELETE_TOPICS}/fenced", b"")
        assert json.loads(stranger.get(state)[0])["isr"] != [2]
    finally:
        stranger.stop()
        stranger.close()

    # a ZooKeeper-based consumer group, which does not authenticate, still works
    consumer = GroupConsumer(zk_connect, "readers", auto_offset_reset="smallest",
                             consumer_timeout_ms=30_000)  # fmt: skip
    try:
        (stream,) = consumer.create_message_streams({"fenced": 1})["fenced"]
        seen = sorted(next(stream).value for _ in range(20))
    finally:
        consumer.shutdown()
    assert seen == sorted(b"v%d" % i for i in range(20))
