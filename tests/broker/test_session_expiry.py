"""A broker whose ZooKeeper session expires re-registers with a new session and keeps serving.

A broker's ZooKeeper session loss removes its registration; on reconnect
with a new session it registers again.  The session expires for real: the broker
process is frozen (SIGSTOP) until ZooKeeper drops its ephemeral znodes, then
thawed (SIGCONT).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.zk import layout
from annal.zk.client import ZkClient

# The test ZooKeeper (deploy/zookeeper.py) runs with tickTime=500 and accepts
# session timeouts from 1000 to 60000 ms.
SESSION_TIMEOUT_MS = 4000


def ephemeral_owner(zk: ZkClient, path: str) -> int | None:
    """The session owning the ephemeral ``path``; None when it does not exist."""
    stat = zk.kazoo.exists(path)
    return None if stat is None else int(stat.ephemeralOwner)


def produce_one(endpoint: str, topic: str, value: bytes) -> int:
    with Producer(endpoint) as producer:
        return producer.send(topic, value=value, partition=0).result(30).offset


@pytest.mark.timeout(120)
def test_expired_session_re_registers_and_the_broker_keeps_serving(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str
) -> None:
    broker = broker_factory(1, settings={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    assert broker.pid is not None
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("before", partitions=1)
    assert produce_one(broker.endpoint, "before", b"written before") == 0

    registration = layout.broker_path(1)
    with ZkClient(zk_connect) as zk:
        old_session = ephemeral_owner(zk, registration)
        assert old_session is not None
        assert ephemeral_owner(zk, layout.CONTROLLER) == old_session  # the only broker

        broker.freeze()
        try:
            wait_until(
                lambda: ephemeral_owner(zk, registration) is None,
                30,
                "ZooKeeper expiring the frozen broker's session",
            )
            assert zk.get_controller() is None  # its other ephemeral znode went too
        finally:
            broker.thaw()

        wait_until(
            lambda: ephemeral_owner(zk, registration) is not None, 30, "broker 1 re-registered"
        )
        new_session = ephemeral_owner(zk, registration)
        assert new_session not in (None, old_session)
        wait_until(lambda: zk.get_controller() is not None, 30, "a controller elected again")
        assert zk.get_controller() == 1
        assert ephemeral_owner(zk, layout.CONTROLLER) == new_session
    assert broker.alive

    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("after", partitions=1)
        assert admin.list_topics() == ["after", "before"]
    assert produce_one(broker.endpoint, "after", b"written after") == 0
    assert produce_one(broker.endpoint, "before", b"written after") == 1
    with SimpleConsumer(broker.endpoint) as consumer:
        assert [r.value for r in consumer.iterate("before", 0, 0)] == [
            b"written before",
            b"written after",
        ]
        assert [r.value for r in consumer.iterate("after", 0, 0)] == [b"written after"]
