"""The controller against a real ZooKeeper, with its broker requests recorded
at the seam (the send callables and the request gate): a deposed controller's
writes fail the ``/controller_epoch`` check and it resigns; a suspended one
acts on nothing until it is connected again and has checked its office."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from annal.controller.controller import Controller
from annal.controller.requests import MetadataUpdate, PartitionUpdate
from annal.deploy.runner import wait_until
from annal.deploy.zookeeper import ZooKeeperServer
from annal.zk import layout
from annal.zk.batched import BatchedZk, Versioned, Written
from annal.zk.client import ControllerEpoch, StaleVersionError, ZkClient
from annal.zk.layout import BrokerRegistration, PartitionState, TopicAssignment
from zkproxy import ZkProxy

from annal.topic_partition import TopicPartition

SESSION_TIMEOUT_MS = 4000


@dataclass
class Recorder:
    """The broker requests a controller makes, and its gate's calls."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    leader_and_isr: list[tuple[int, int, list[PartitionUpdate]]] = field(default_factory=list)
    gate: list[str] = field(default_factory=list)

    def send_leader_and_isr(
        self,
        broker: BrokerRegistration,
        epoch: int,
        updates: Sequence[PartitionUpdate],
        live: Sequence[BrokerRegistration],
        on_storage_errors: object = None,
    ) -> None:
        with self.lock:
            self.leader_and_isr.append((broker.broker_id, epoch, list(updates)))

    def send_stop_replica(self, broker: BrokerRegistration, epoch: int, *args: object) -> None:
        pass

    def send_update_metadata(
        self, broker: BrokerRegistration, epoch: int, update: MetadataUpdate
    ) -> None:
        pass

    def hold(self) -> None:
        self.gate.append("hold")

    def release(self) -> None:
        self.gate.append("release")

    def discard(self) -> None:
        self.gate.append("discard")

    def epochs_for(self, topic: str) -> set[int]:
        with self.lock:
            return {e for _, e, ups in self.leader_and_isr for u in ups if u.topic == topic}

    def states_for(self, topic: str) -> list[PartitionState]:
        with self.lock:
            return [u.state for _, _, ups in self.leader_and_isr for u in ups if u.topic == topic]


def start_controller(zk: ZkClient, recorder: Recorder) -> Controller:
    controller = Controller(
        1,
        zk,
        recorder.send_leader_and_isr,
        recorder.send_stop_replica,
        recorder.send_update_metadata,
        gate=recorder,
    )
    controller.start()
    return controller


@pytest.fixture
def direct(zk_connect: str) -> Iterator[ZkClient]:
    """A ZooKeeper client of the test's own, with two brokers registered."""
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.register_broker(BrokerRegistration(1, "127.0.0.1", 1))
        zk.register_broker(BrokerRegistration(2, "127.0.0.1", 2))
        yield zk


@pytest.mark.timeout(60)
def test_a_deposed_controller_fails_the_epoch_check_and_resigns(
    zk_connect: str, direct: ZkClient
) -> None:
    recorder = Recorder()
    zk = ZkClient(zk_connect).start()
    controller = start_controller(zk, recorder)
    try:
        wait_until(lambda: controller.active, 20, "broker 1 in office")
        term = controller.epoch
        # Another controller's term begins: /controller_epoch moves on while this
        # one still holds /controller and has noticed nothing.
        epoch_znode = direct.get_controller_epoch()
        assert epoch_znode is not None and epoch_znode.epoch == term
        direct.kazoo.set(
            layout.CONTROLLER_EPOCH,
            layout.encode_controller_epoch(term + 1),
            version=epoch_znode.zk_version,
        )
        # Its next write (the new topic's first partition state) fails whole,
        # and it resigns: the queued broker requests are dropped.
        direct.create_topic("orders", TopicAssignment({0: (1, 2), 1: (2, 1)}))
        wait_until(lambda: "discard" in recorder.gate, 20, "the controller resigned")
        # It runs again, and takes office with an epoch past the other's.
        wait_until(lambda: controller.active and controller.epoch == term + 2, 20, "re-elected")
        wait_until(
            lambda: all(direct.get_partition_state("orders", p) is not None for p in range(2)),
            20,
            "the topic online",
        )
        for p in range(2):
            found = direct.get_partition_state("orders", p)
            assert found is not None
            assert found[0].controller_epoch == term + 2  # nothing written at the old term
        wait_until(lambda: recorder.epochs_for("orders") != set(), 20, "the replicas told")
        assert recorder.epochs_for("orders") == {term + 2}
        assert all(s.controller_epoch == term + 2 for s in recorder.states_for("orders"))
    finally:
        controller.initiate_shutdown()
        controller.await_shutdown()
        zk.stop()


@pytest.mark.timeout(60)
def test_a_suspended_controller_waits_then_checks_its_office(
    zookeeper: ZooKeeperServer, zk_connect: str, direct: ZkClient
) -> None:
    recorder = Recorder()
    chroot = "/" + zk_connect.split("/", 1)[1]
    with ZkProxy(zookeeper.host, zookeeper.port) as proxy:
        zk = ZkClient(proxy.connect_string(chroot), session_timeout_ms=SESSION_TIMEOUT_MS).start()
        controller = start_controller(zk, recorder)
        try:
            wait_until(lambda: controller.active, 20, "broker 1 in office")
            assert controller.acting
            term = controller.epoch
            proxy.pause()
            wait_until(lambda: "hold" in recorder.gate, 10, "the channel held")
            # still in office, but not acting: the metrics report it inactive
            assert controller.active and not controller.acting
            # A controlled shutdown is refused at once while it cannot act.
            assert controller.controlled_shutdown(2, timeout_s=5) is None
            direct.create_topic("during", TopicAssignment({0: (1, 2)}))
            proxy.resume()  # well within the session timeout: the same session
            # Connected again, it checks /controller and /controller_epoch, goes on
            # with the same epoch, and reads what happened meanwhile.
            wait_until(lambda: recorder.gate[-1] == "release", 20, "the channel released")
            wait_until(lambda: recorder.epochs_for("during") != set(), 20, "the topic online")
            assert recorder.epochs_for("during") == {term}
            assert controller.active and controller.epoch == term
            assert controller.acting
            assert "discard" not in recorder.gate
        finally:
            controller.initiate_shutdown()
            controller.await_shutdown()
            zk.stop()


@pytest.mark.timeout(60)
def test_an_election_that_meets_a_moved_state_is_made_again_and_never_drops_the_partition(
    zk_connect: str, direct: ZkClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taking office while a leader writes its ISR: the election's conditional
    write finds the state znode moved on.  The controller reads it again and
    elects again, and its full metadata update still lists the partition (a
    broker's cache would otherwise lose the topic for a while)."""
    direct.create_topic("moved", TopicAssignment({0: (3, 1)}))
    direct.create_partition_state("moved", 0, PartitionState(3, 4, (3, 1), 0))  # 3 is dead
    updates: list[MetadataUpdate] = []

    class Recording(Recorder):
        def send_update_metadata(
            self, broker: BrokerRegistration, epoch: int, update: MetadataUpdate
        ) -> None:
            with self.lock:
                updates.append(update)

    zk = ZkClient(zk_connect).start()
    real_update = BatchedZk.update_partition_states
    refused: list[str] = []
    moved = TopicPartition("moved", 0)

    def update_once_stale(
        self: BatchedZk, states: dict[TopicPartition, Versioned], fence: ControllerEpoch
    ) -> dict[TopicPartition, Written]:
        if moved in states and not refused:
            refused.append(moved.topic)  # as if the leader had just written its ISR
            rest = {k: v for k, v in states.items() if k != moved}
            out = real_update(self, rest, fence) if rest else {}
            out[moved] = StaleVersionError("/brokers/topics/moved/partitions/0/state changed")
            return out
        return real_update(self, states, fence)

    monkeypatch.setattr(BatchedZk, "update_partition_states", update_once_stale)
    controller = start_controller(zk, Recording())
    try:
        wait_until(lambda: controller.active, 20, "in office")
        wait_until(
            lambda: (
                (found := direct.get_partition_state("moved", 0)) is not None
                and found[0].leader == 1
            ),
            20,
            "moved-0 led by broker 1 after the retry",
        )
        assert refused == ["moved"]
        with Recording().lock:
            full = [u for u in updates if u.full]
        assert full and all(any(p.topic == "moved" for p in u.partitions) for u in full), (
            "a full update left the partition out"
        )
    finally:
        controller.initiate_shutdown()
        controller.await_shutdown()
        zk.stop()
