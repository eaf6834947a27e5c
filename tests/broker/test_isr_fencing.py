"""A leader cut off from ZooKeeper changes no ISR: the ISR-change writer holds
while its session is suspended and writes, version-checked, once connected.

The leader's ZooKeeper traffic goes through a proxy (tests/zkproxy.py) that
the test pauses; ZooKeeper is real.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
from annal.broker.replication.isr_changes import IsrChangeWriter
from annal.broker.replication.partition import IsrChange
from annal.deploy.runner import wait_until
from annal.deploy.zookeeper import ZooKeeperServer
from annal.storage.files import TopicPartition
from annal.zk.client import SessionEvent, ZkClient
from annal.zk.layout import PartitionState, TopicAssignment
from zkproxy import ZkProxy

SESSION_TIMEOUT_MS = 4000


def chroot_of(connect: str) -> str:
    return "/" + connect.split("/", 1)[1]


@pytest.mark.timeout(60)
def test_a_leader_cut_off_from_zookeeper_holds_its_isr_changes(
    zookeeper: ZooKeeperServer, zk_connect: str
) -> None:
    tp = TopicPartition("events", 0)
    with ZkClient(zk_connect) as direct, ZkProxy(zookeeper.host, zookeeper.port) as proxy:
        direct.ensure_persistent_paths()
        direct.create_topic(tp.topic, TopicAssignment({0: (1, 2)}))
        before = PartitionState(1, 3, (1, 2), 1)
        direct.create_partition_state(tp.topic, tp.partition, before)

        leader_zk = ZkClient(
            proxy.connect_string(chroot_of(zk_connect)), session_timeout_ms=SESSION_TIMEOUT_MS
        ).start()
        attempts: list[float] = []  # when the writer tried ZooKeeper
        attempted = threading.Event()

        def write_state(tp: TopicPartition, state: PartitionState, version: int) -> int:
            attempts.append(time.monotonic())
            attempted.set()
            return leader_zk.update_partition_state(tp.topic, tp.partition, state, version)

        written: queue.Queue[tuple[IsrChange, int | None]] = queue.Queue()
        writer = IsrChangeWriter(
            write_state,
            lambda tps: leader_zk.notify_isr_change([(t.topic, t.partition) for t in tps]),
            lambda change, version: written.put((change, version)),
        )
        leader_zk.add_session_listener(writer.session_changed)
        writer.start()
        try:
            proxy.pause()
            wait_until(lambda: writer.holding, 10, "the leader's session suspended")
            assert leader_zk.session_state is SessionEvent.SUSPENDED
            shrink = IsrChange(tp, PartitionState(1, 3, (1,), 1), 0, "follower 2 fell behind")
            writer.submit(shrink)
            # The leader decided, but nothing is tried while it is cut off ...
            assert not attempted.wait(1.5)
            assert written.empty()
            assert direct.get_partition_state(tp.topic, tp.partition) == (before, 0)

            # ... and once connected (the same session) the change is written.
            resumed_at = time.monotonic()
            proxy.resume()
            change, version = written.get(timeout=20)
            assert (change, version) == (shrink, 1)
            assert all(t >= resumed_at for t in attempts)
            assert direct.get_partition_state(tp.topic, tp.partition) == (shrink.state, 1)
            wait_until(
                lambda: direct.children("/isr_change_notification") != [],
                10,
                "the controller notified",
            )
        finally:
            writer.initiate_shutdown()
            writer.await_shutdown()
            leader_zk.stop()
