"""ReplicaManager fencing: controller epochs and leader epochs."""

from __future__ import annotations

from pathlib import Path

from annal.broker.replica_manager import LeaderAndIsrState, ReplicaManager
from annal.storage.files import TopicPartition
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch

TP = TopicPartition("t", 0)


def state(leader: int, leader_epoch: int) -> LeaderAndIsrState:
    return LeaderAndIsrState("t", 0, 1, leader, leader_epoch, (leader,), (1, 2), 0)


def test_fencing(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], broker_id=1, settings=LogManagerConfig(cleaner_enable=False))
    logs.startup()
    try:
        replicas = ReplicaManager(1, logs, lambda topic: {}, lambda tp: tp == TP)
        assert replicas.check_controller_epoch(3)
        assert not replicas.check_controller_epoch(2)  # a stale controller
        assert replicas.become_leader_or_follower([state(1, 5)]) == {TP: "NONE"}
        assert replicas.append(TP, encode_batch([Record(0, 0, None, b"a")])).error == "NONE"
        assert replicas.become_leader_or_follower([state(2, 4)]) == {TP: "FENCED_LEADER_EPOCH"}
        assert replicas.become_leader_or_follower([state(2, 6)]) == {TP: "NONE"}
        refused = replicas.append(TP, encode_batch([Record(0, 0, None, b"b")]))
        assert refused.error == "NOT_LEADER_OR_FOLLOWER"
        other = replicas.append(TopicPartition("zzz", 0), b"")
        assert other.error == "UNKNOWN_TOPIC_OR_PARTITION"
        assert replicas.read(TP, 0, 100).error == "NOT_LEADER_OR_FOLLOWER"
    finally:
        logs.shutdown()
