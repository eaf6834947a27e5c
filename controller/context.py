"""The controller's in-memory view of the cluster, as Kafka's ControllerContext.

It holds what the controller read from ZooKeeper when it took office and what
it learned and decided since: the live brokers (with their epochs), each
topic's assignment and its znode's version, each partition's leadership as
last told to brokers (state, zkVersion, replicas), the partition and replica
states of the two state machines, the brokers shutting down, the replicas on
offline log dirs and the topics being deleted.  Handlers read ZooKeeper only
for what an event says changed; everything else comes from here.

No I/O: this module only keeps and answers.  Only the controller's event
thread changes it; ``offline_partition_count`` may be read from any thread
(a racy but safe count, for metrics).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from annal.zk.layout import BrokerRegistration

from annal.topic_partition import TopicPartition

from .election import PartitionState as State
from .election import ReplicaState, replica_transition, transition
from .requests import PartitionUpdate


@dataclass
class ControllerContext:
    epoch: int = 0
    live: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    assignment_versions: dict[str, int] = field(default_factory=dict)
    leadership: dict[TopicPartition, PartitionUpdate] = field(default_factory=dict)
    partition_states: dict[TopicPartition, State] = field(default_factory=dict)
    replica_states: dict[tuple[TopicPartition, int], ReplicaState] = field(default_factory=dict)
    # replicas on a broker's offline log dir (KIP-112): left out of elections and
    # ISRs until the broker registers again
    offline_replicas: dict[int, set[TopicPartition]] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)

    # -- brokers -------------------------------------------------------------------

    def candidates(self, tp: TopicPartition) -> set[int]:
        """The brokers that may lead ``tp``: live, not shutting down, its replica's
        log dir online."""
        return {b for b in self.live if b not in self.shutting_down
                and tp not in self.offline_replicas.get(b, ())}  # fmt: skip

    def replica_online(self, broker: int, tp: TopicPartition) -> bool:
        return broker in self.live and tp not in self.offline_replicas.get(broker, ())

    def recipients(self, tp: TopicPartition) -> list[int]:
        """The replicas of ``tp`` told its LeaderAndIsr: live, not shutting down."""
        return [b for b in self.replicas(tp) if b in self.live and b not in self.shutting_down]

    # -- topics and partitions -------------------------------------------------------

    def add_topic(self, topic: str, partitions: Mapping[int, Sequence[int]], version: int) -> None:
        self.assignments[topic] = {p: tuple(r) for p, r in partitions.items()}
        self.assignment_versions[topic] = version

    def remove_topic(self, topic: str) -> None:
        for partition in self.assignments.pop(topic, {}):
            tp = TopicPartition(topic, partition)
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            for broker in list(self.live) + list(self.offline_replicas):
                self.replica_states.pop((tp, broker), None)
        self.assignment_versions.pop(topic, None)
        self.deleting.discard(topic)

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def partitions(self) -> Iterator[TopicPartition]:
        for topic, partitions in self.assignments.items():
            for partition in partitions:
                yield TopicPartition(topic, partition)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def partitions_on(self, broker: int) -> list[TopicPartition]:
        """Every partition with a replica on ``broker`` (topics being deleted left out)."""
        return [tp for tp in self.partitions()
                if broker in self.replicas(tp) and tp.topic not in self.deleting]  # fmt: skip

    def leader_of(self, tp: TopicPartition) -> int:
        known = self.leadership.get(tp)
        return -1 if known is None else known.state.leader

    # -- states ----------------------------------------------------------------------

    def state_of(self, tp: TopicPartition) -> State:
        return self.partition_states.get(tp, State.NON_EXISTENT)

    def move(self, tp: TopicPartition, target: State) -> None:
        self.partition_states[tp] = transition(tp.topic, tp.partition, self.state_of(tp), target)

    def partitions_in(self, *states: State) -> list[TopicPartition]:
        return sorted(tp for tp in self.partitions()
                      if self.state_of(tp) in states and tp.topic not in self.deleting)  # fmt: skip

    def replica_state(self, tp: TopicPartition, broker: int) -> ReplicaState:
        return self.replica_states.get((tp, broker), ReplicaState.NON_EXISTENT)

    def move_replica(self, tp: TopicPartition, broker: int, target: ReplicaState) -> None:
        current = self.replica_state(tp, broker)
        if target is ReplicaState.NON_EXISTENT:
            self.replica_states.pop((tp, broker), None)
            return
        if current is ReplicaState.NON_EXISTENT and target is not ReplicaState.NEW:
            current = ReplicaState.NEW  # first seen: a replica that exists already
        self.replica_states[(tp, broker)] = replica_transition(
            tp.topic, tp.partition, broker, current, target
        )

    def offline_partition_count(self) -> int:
        return sum(1 for s in list(self.partition_states.values()) if s is State.OFFLINE)

    def view(self) -> list[PartitionUpdate]:
        """Every partition's leadership as brokers are told it."""
        return [self.leadership[tp] for tp in sorted(self.leadership)
                if tp.topic not in self.deleting]  # fmt: skip

    def offline_holders(self, tp: TopicPartition) -> set[int]:
        return {b for b, partitions in self.offline_replicas.items() if tp in partitions}

    def forget_offline(self, brokers: Iterable[int]) -> None:
        for broker in brokers:
            self.offline_replicas.pop(broker, None)
