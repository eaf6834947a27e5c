"""The controller: one broker at a time, elected through ``/controller``.

Every broker runs a ``Controller``.  ZooKeeper watches only put events on a
queue; one event-loop thread handles them in order:

* ``Elect``: try to create the ephemeral ``/controller``; the winner bumps
  ``/controller_epoch``, reads brokers and topics, brings every partition
  online and tells every broker (LeaderAndIsr, UpdateMetadata).
* ``BrokerChange``: partitions led by a broker that left get a new leader
  (bumped leader epoch) or go offline; returning and new brokers are told
  their partitions.
* ``TopicChange``: new topics' partitions go NewPartition → OnlinePartition.
* ``TopicDeletion``: replicas are stopped and deleted, then the znodes.

Every partition-state write is conditioned on the znode version read and
carries the controller epoch; a controller that lost ``/controller`` stops
acting (``Resign``).

Thread safety: all state lives on the event thread; other threads only
enqueue events.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from annal.zk import layout
from annal.zk.client import StaleVersionError, ZkClient, ZkError
from annal.zk.layout import BrokerRegistration, PartitionState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from .election import PartitionState as State
from .election import elect_leader, transition

logger = logging.getLogger(__name__)


class Event(enum.Enum):
    ELECT = "elect"
    BROKER_CHANGE = "broker-change"
    TOPIC_CHANGE = "topic-change"
    TOPIC_DELETION = "topic-deletion"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class PartitionUpdate:
    """What the controller tells a replica about one partition."""

    topic: str
    partition: int
    state: PartitionState
    replicas: tuple[int, ...]
    zk_version: int


# (broker, controller epoch, updates, live brokers) -> None; raises on failure
SendLeaderAndIsr = Callable[
    [BrokerRegistration, int, Sequence[PartitionUpdate], Sequence[BrokerRegistration]], None
]
SendStopReplica = Callable[[BrokerRegistration, int, Sequence[tuple[str, int]]], None]


class Controller:
    """See the module docstring; ``start`` then ``initiate_shutdown``/``await_shutdown``."""

    def __init__(
        self,
        broker_id: int,
        zk: ZkClient,
        send_leader_and_isr: SendLeaderAndIsr,
        send_stop_replica: SendStopReplica,
        unclean_leader_election: bool = False,
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self._send_leader_and_isr = send_leader_and_isr
        self._send_stop_replica = send_stop_replica
        self._unclean = unclean_leader_election
        self._events: queue.Queue[Event] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self.epoch = 0
        self.active = False
        self._live: dict[int, BrokerRegistration] = {}
        self._states: dict[tuple[str, int], State] = {}
        self._watches: list[object] = []

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._watches.append(
            DataWatch(self.zk.kazoo, layout.CONTROLLER, self._on_controller_change)
        )
        self._events.put(Event.ELECT)

    def initiate_shutdown(self) -> None:
        self._events.put(Event.SHUTDOWN)

    def await_shutdown(self, timeout_s: float = 10.0) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # -- watches: enqueue only ---------------------------------------------------

    def _on_controller_change(self, data: bytes | None, stat: object) -> None:
        if data is None:
            self._events.put(Event.ELECT)

    def _on_brokers(self, children: list[str]) -> None:
        self._events.put(Event.BROKER_CHANGE)

    def _on_topics(self, children: list[str]) -> None:
        self._events.put(Event.TOPIC_CHANGE)

    def _on_deletions(self, children: list[str]) -> None:
        if children:
            self._events.put(Event.TOPIC_DELETION)

    # -- the event loop ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            event = self._events.get()
            if event is Event.SHUTDOWN:
                return
            try:
                self._handle(event)
            except ZkError as exc:
                logger.error("controller event %s failed: %s", event.value, exc)
            except Exception:
                logger.exception("controller event %s failed", event.value)

    def _handle(self, event: Event) -> None:
        if event is Event.ELECT:
            self.elect()
        elif not self.active:
            return
        elif event is Event.BROKER_CHANGE:
            self.handle_broker_change()
        elif event is Event.TOPIC_CHANGE:
            self.handle_topic_change()
        elif event is Event.TOPIC_DELETION:
            self.handle_topic_deletion()

    def elect(self) -> None:
        current = self.zk.get_controller()
        if current is not None:
            self.active = current == self.broker_id
            return
        if not self.zk.try_become_controller(self.broker_id):
            self.active = False
            return
        self.epoch = self.zk.increment_controller_epoch()
        self.active = True
        logger.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self._live = {b.broker_id: b for b in self.zk.get_brokers()}
        self._states = {}
        if not self._watches[1:]:
            self._watches.append(ChildrenWatch(self.zk.kazoo, layout.BROKER_IDS, self._on_brokers))
            self._watches.append(
                ChildrenWatch(self.zk.kazoo, layout.BROKER_TOPICS, self._on_topics)
            )
            self._watches.append(
                ChildrenWatch(self.zk.kazoo, layout.DELETE_TOPICS, self._on_deletions)
            )
        self._bring_online(self.zk.get_topics(), resend=True)

    # -- handlers --------------------------------------------------------------------

    def handle_broker_change(self) -> None:
        brokers = {b.broker_id: b for b in self.zk.get_brokers()}
        gone = set(self._live) - set(brokers)
        joined = set(brokers) - set(self._live)
        self._live = brokers
        if gone:
            logger.info("brokers %s left", sorted(gone))
        if joined:
            logger.info("brokers %s joined", sorted(joined))
        self._bring_online(self.zk.get_topics(), resend=bool(joined), dead=gone)

    def handle_topic_change(self) -> None:
        new = [t for t in self.zk.get_topics() if not any(k[0] == t for k in self._states)]
        if new:
            self._bring_online(new, resend=True)

    def handle_topic_deletion(self) -> None:
        for topic in self.zk.topics_to_delete():
            found = self.zk.get_topic_assignment(topic)
            if found is not None:
                assignment, _ = found
                by_broker: dict[int, list[tuple[str, int]]] = {}
                for partition, replicas in assignment.partitions.items():
                    for replica in replicas:
                        by_broker.setdefault(replica, []).append((topic, partition))
                    key = (topic, partition)
                    self._states[key] = transition(
                        topic,
                        partition,
                        self._states.get(key, State.NON_EXISTENT),
                        State.NON_EXISTENT,
                    )
                    del self._states[key]
                for broker_id, partitions in by_broker.items():
                    broker = self._live.get(broker_id)
                    if broker is not None:
                        self._send(partial(self._send_stop_replica, broker, self.epoch, partitions))
            self.zk.delete_recursive(layout.topic_path(topic))
            self.zk.delete_recursive(layout.topic_config_path(topic))
            self.zk.delete_recursive(layout.delete_topic_path(topic))
            logger.info("deleted topic %s", topic)

    # -- partition state machine ----------------------------------------------------

    def _bring_online(
        self, topics: Sequence[str], resend: bool, dead: set[int] | None = None
    ) -> None:
        """Elect leaders where needed and tell the replicas."""
        updates: list[PartitionUpdate] = []
        for topic in topics:
            if topic in self.zk.topics_to_delete():
                continue
            found = self.zk.get_topic_assignment(topic)
            if found is None:
                continue
            assignment, _ = found
            for partition, replicas in sorted(assignment.partitions.items()):
                update = self._online_partition(topic, partition, tuple(replicas), dead or set())
                if update is not None and (resend or update.state.leader_epoch >= 0):
                    updates.append(update)
        self._tell_replicas(updates)

    def _online_partition(
        self, topic: str, partition: int, replicas: tuple[int, ...], dead: set[int]
    ) -> PartitionUpdate | None:
        key = (topic, partition)
        current = self.zk.get_partition_state(topic, partition)
        live = set(self._live)
        if current is None:
            self._states[key] = transition(
                topic, partition, self._states.get(key, State.NON_EXISTENT), State.NEW
            )
            election = elect_leader(replicas, replicas, live, self._unclean)
            state = PartitionState(election.leader, 0, election.isr or replicas, self.epoch)
            try:
                version = self.zk.create_partition_state(topic, partition, state)
            except StaleVersionError:
                return None
        else:
            state, version = current
            if state.leader in live and state.leader not in dead:
                self._states[key] = transition(
                    topic, partition, self._states.get(key, State.NEW), State.ONLINE
                )
                return PartitionUpdate(topic, partition, state, replicas, version)
            election = elect_leader(replicas, state.isr, live - dead, self._unclean)
            if election.leader < 0 and state.leader < 0:
                self._states[key] = transition(
                    topic, partition, self._states.get(key, State.NEW), State.OFFLINE
                )
                return None
            state = PartitionState(
                election.leader, state.leader_epoch + 1, election.isr, self.epoch
            )
            try:
                version = self.zk.update_partition_state(topic, partition, state, version)
            except StaleVersionError as exc:
                logger.warning("%s; will retry on the next event", exc)
                return None
        target = State.ONLINE if state.leader >= 0 else State.OFFLINE
        self._states[key] = transition(topic, partition, self._states.get(key, State.NEW), target)
        logger.info(
            "partition %s-%d: leader %d, epoch %d, isr %s",
            topic,
            partition,
            state.leader,
            state.leader_epoch,
            list(state.isr),
        )
        return PartitionUpdate(topic, partition, state, replicas, version)

    def _tell_replicas(self, updates: Sequence[PartitionUpdate]) -> None:
        by_broker: dict[int, list[PartitionUpdate]] = {}
        for update in updates:
            for replica in update.replicas:
                by_broker.setdefault(replica, []).append(update)
        live = list(self._live.values())
        for broker_id, batch in by_broker.items():
            broker = self._live.get(broker_id)
            if broker is not None:
                self._send(partial(self._send_leader_and_isr, broker, self.epoch, batch, live))

    def _send(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # one unreachable broker must not stop the loop
            logger.warning("controller request failed: %s", exc)
