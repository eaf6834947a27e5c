"""The controller: one broker at a time, elected through ``/controller``.

Every broker runs a ``Controller``.  ZooKeeper watches and session changes
only put events on a queue; one event-loop thread handles them in order:

* ``Elect`` (``/controller`` changed or vanished): the broker that creates the
  ephemeral ``/controller`` bumps ``/controller_epoch`` in the same multi-op,
  reads brokers and topics, brings every partition online and tells every
  broker (LeaderAndIsr, UpdateMetadata).  An active controller that finds
  ``/controller`` no longer its own resigns.
* ``BrokerChange``: partitions led by a broker that left get a new leader
  (bumped leader epoch) or go offline; returning and new brokers are told
  their partitions.
* ``TopicChange``: new topics' partitions, and partitions added to existing
  topics (a data watch on each ``/brokers/topics/<t>``), go NewPartition →
  OnlinePartition.
* ``TopicDeletion``: replicas are stopped and deleted, then the znodes.
* ``IsrChange``: leaders changed ISRs themselves (``/isr_change_notification``):
  every broker's metadata cache is told.
* ``PreferredElection`` (``/admin/preferred_replica_election``) and
  ``AutoRebalance`` (every ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable``): partitions go back to their preferred
  replica, the first of the assignment, when it is alive and in the ISR.
* ``ControlledShutdown``: a stopping broker asked to hand over its
  leaderships: each partition it leads moves to another live ISR replica
  (bumped leader epoch), it leaves the ISR of the partitions it follows and
  stops copying them (StopReplica, logs kept), and the answer lists the
  replicated partitions it still leads (Kafka's semantics: the broker
  retries, then stops anyway).  Until it is gone, no election picks it.

A new partition's ISR is its live replicas; a replica whose broker dies leaves
the ISR at once (bumped leader epoch), a lagging one is dropped by its leader.

After each event every live broker gets an UpdateMetadata for its metadata
cache: the whole view when the controller takes office or brokers come and
go, the changed partitions (or deleted topics) otherwise.

**Fencing** (Kafka 2.1, KAFKA-6082).  Every ZooKeeper write of the
controller (partition states, topic assignments, the admin and notification
znodes it deletes or rewrites) is a multi-op that checks ``/controller_epoch``
at the zkVersion read when it took office, besides the znode's own version,
and carries the controller epoch; brokers refuse requests with an older
controller epoch than the newest they have seen.

**Session** (the ZooKeeper client's listener only flips state and queues an
event).  SUSPENDED: before its next broker request or ZooKeeper write the
event loop waits; the requests already queued to brokers are held too
(``RequestGate``).  CONNECTED again with the same session: it checks that
``/controller`` is still its own and ``/controller_epoch`` still at its
version, then carries on (and reads everything again, in case a handler
failed meanwhile).  LOST, ``/controller`` not its own, or a failed epoch
check: it **resigns** -- stops acting, drops its state and every request
queued to brokers (it tells no broker anything more), refuses controlled
shutdowns -- and runs for election again once connected.

Thread safety: all state lives on the event thread; other threads only
enqueue events.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from annal.zk import layout
from annal.zk.client import (
    ControllerEpoch,
    ControllerMovedError,
    SessionEvent,
    StaleVersionError,
    ZkClient,
    ZkError,
)
from annal.zk.layout import BrokerRegistration, PartitionState, TopicAssignment

from annal.topic_partition import TopicPartition

from .election import PartitionState as State
from .election import elect_leader, transition

logger = logging.getLogger(__name__)


class Event(enum.Enum):
    ELECT = "elect"
    RECONNECTED = "reconnected"
    SESSION_LOST = "session-lost"
    BROKER_CHANGE = "broker-change"
    TOPIC_CHANGE = "topic-change"
    TOPIC_DELETION = "topic-deletion"
    ISR_CHANGE = "isr-change"
    PREFERRED_ELECTION = "preferred-election"
    REASSIGNMENT = "reassignment"
    AUTO_REBALANCE = "auto-rebalance"
    CONTROLLED_SHUTDOWN = "controlled-shutdown"
    LOG_DIR_EVENT = "log-dir-event"
    OFFLINE_REPLICAS = "offline-replicas"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    """Kafka's auto.leader.rebalance.enable and leader.imbalance.* settings."""

    enabled: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10


@dataclass(frozen=True, slots=True)
class PartitionUpdate:
    """What the controller tells a replica about one partition."""

    topic: str
    partition: int
    state: PartitionState
    replicas: tuple[int, ...]
    zk_version: int


# (broker, controller epoch, updates, live brokers) -> None; raises on failure
# (broker, controller epoch, partitions, live brokers, on_storage_errors=...) -> None;
# on_storage_errors(broker id, partitions) hears of replicas on an offline log dir
SendLeaderAndIsr = Callable[..., None]
# (broker, controller epoch, partitions, delete the logs) -> None
SendStopReplica = Callable[[BrokerRegistration, int, Sequence[TopicPartition], bool], None]


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """What every broker's metadata cache hears after an event."""

    partitions: Sequence[PartitionUpdate]
    live: Sequence[BrokerRegistration]
    deleted_topics: Sequence[str] = ()
    full: bool = False


# (broker, controller epoch, update) -> None; raises on failure
SendUpdateMetadata = Callable[[BrokerRegistration, int, MetadataUpdate], None]


class RequestGate(Protocol):
    """The controller's hold on the requests it queued to brokers (its channel)."""

    def hold(self) -> None:
        """Queued requests wait (the session is suspended); must not block."""

    def release(self) -> None:
        """Queued requests go out again."""

    def discard(self) -> None:
        """Drop every queued request (the controller resigned)."""


class _OpenGate:
    def hold(self) -> None:
        pass

    def release(self) -> None:
        pass

    def discard(self) -> None:
        pass


class NotInOffice(Exception):
    """The controller may not act: its session was lost, ``/controller`` or
    ``/controller_epoch`` moved on, or it is stopping.  The event loop resigns."""


STALE_STATE_ATTEMPTS = 3


class _StaleState(Exception):
    """A partition's state znode changed under an election; ``standing`` is the
    partition as it was read."""

    def __init__(self, reason: str, standing: PartitionUpdate) -> None:
        super().__init__(reason)
        self.reason = reason
        self.standing = standing


class Controller:
    """See the module docstring; ``start`` then ``initiate_shutdown``/``await_shutdown``."""

    def __init__(
        self,
        broker_id: int,
        zk: ZkClient,
        send_leader_and_isr: SendLeaderAndIsr,
        send_stop_replica: SendStopReplica,
        send_update_metadata: SendUpdateMetadata,
        unclean_leader_election: bool = False,
        rebalance: RebalanceSettings | None = None,
        gate: RequestGate | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self._gate = gate or _OpenGate()
        self._send_leader_and_isr = send_leader_and_isr
        self._send_stop_replica = send_stop_replica
        self._send_update_metadata = send_update_metadata
        self._unclean = unclean_leader_election
        self._rebalance = rebalance or RebalanceSettings()
        self._stopped = threading.Event()
        self._events: queue.Queue[Event] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self.epoch = 0
        self.active = False
        self._term: ControllerEpoch | None = None  # this controller's, while active
        # Session state, set by the listener on kazoo's thread (see _on_session).
        self._session = threading.Condition()
        self._connected = False
        self._lost = False  # a LOST the event loop has not acted on yet
        self._suspensions = 0  # SUSPENDED or LOST seen so far
        self._checked_suspensions = 0  # ... when the event loop last checked its office
        self._live: dict[int, BrokerRegistration] = {}
        self._states: dict[TopicPartition, State] = {}
        self._view: dict[TopicPartition, PartitionUpdate] = {}  # what brokers are told
        self._watches: list[object] = []
        self._topic_watches: set[str] = set()  # topics with a data watch (event thread)
        self._shutting_down: set[int] = set()  # brokers that asked for controlled shutdown
        self._shutdown_requests: queue.Queue[tuple[int, Future[list[TopicPartition] | None]]] = (
            queue.Queue()
        )
        self._armed: set[str] = set()  # topics whose watch has made its first call
        # replicas on a broker's offline log dir (KIP-112): left out of elections and
        # ISRs until the broker registers again
        self._offline: dict[int, set[TopicPartition]] = {}
        self._offline_reports: queue.Queue[tuple[int, list[TopicPartition]]] = queue.Queue()

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        with self._session:
            self._connected = self.zk.session_state is SessionEvent.CONNECTED
        self.zk.add_session_listener(self._on_session)
        self._thread.start()
        if self._rebalance.enabled:
            threading.Thread(
                target=self._rebalance_timer, name="controller-rebalance", daemon=True
            ).start()
        self._watches.append(self.zk.watch_data(layout.CONTROLLER, self._on_controller_change))
        self._events.put(Event.ELECT)

    def initiate_shutdown(self) -> None:
        self._stopped.set()
        self.zk.remove_session_listener(self._on_session)
        with self._session:
            self._session.notify_all()  # a loop waiting out a suspension
        self._events.put(Event.SHUTDOWN)

    def _rebalance_timer(self) -> None:
        while not self._stopped.wait(self._rebalance.check_interval_s):
            self._events.put(Event.AUTO_REBALANCE)

    def offline_partition_count(self) -> int:
        """Partitions with no live leader, as this controller knows them (0 when
        not in office); for metrics, from any thread."""
        if not self.active:
            return 0
        return sum(1 for state in list(self._states.values()) if state is State.OFFLINE)

    def await_shutdown(self, timeout_s: float = 10.0) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def controlled_shutdown(
        self, broker_id: int, timeout_s: float = 30.0
    ) -> list[TopicPartition] | None:
        """Called from a request thread: move ``broker_id``'s leaderships away.
        The replicated partitions it still leads, or None when this broker is
        not the active controller (or cannot act now: its session is suspended)."""
        with self._session:
            acting = self._connected and not self._lost
        if not self.active or not acting:
            return None
        reply: Future[list[TopicPartition] | None] = Future()
        self._shutdown_requests.put((broker_id, reply))
        self._events.put(Event.CONTROLLED_SHUTDOWN)
        return reply.result(timeout_s)

    # -- watches and session changes: enqueue only ----------------------------------

    def _on_session(self, event: SessionEvent) -> None:
        """On kazoo's thread: flip the state the event loop checks, hold or free
        the requests queued to brokers, queue an event; never blocks."""
        with self._session:
            if event is SessionEvent.CONNECTED:
                self._connected = True
            else:
                self._connected = False
                self._suspensions += 1
                self._lost |= event is SessionEvent.LOST
                self._gate.hold()
            self._session.notify_all()
        if event is SessionEvent.CONNECTED:
            self._events.put(Event.RECONNECTED)
        elif event is SessionEvent.LOST:
            self._events.put(Event.SESSION_LOST)

    def _on_controller_change(self, data: bytes | None, stat: object) -> None:
        self._events.put(Event.ELECT)  # vanished: run; changed: perhaps resign

    def _on_brokers(self, children: list[str]) -> None:
        self._events.put(Event.BROKER_CHANGE)

    def _on_topics(self, children: list[str]) -> None:
        self._events.put(Event.TOPIC_CHANGE)

    def _on_deletions(self, children: list[str]) -> None:
        if children:
            self._events.put(Event.TOPIC_DELETION)

    def _on_log_dir_events(self, children: list[str]) -> None:
        if children:
            self._events.put(Event.LOG_DIR_EVENT)

    def _report_offline(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        """A broker answered KAFKA_STORAGE_ERROR for these (a sender thread)."""
        self._offline_reports.put((broker_id, partitions))
        self._events.put(Event.OFFLINE_REPLICAS)

    def _on_isr_changes(self, children: list[str]) -> None:
        if children:
            self._events.put(Event.ISR_CHANGE)

    def _on_preferred_election(self, data: bytes | None, stat: object) -> None:
        if data is not None:
            self._events.put(Event.PREFERRED_ELECTION)

    def _on_reassignment(self, data: bytes | None, stat: object) -> None:
        if data is not None:
            self._events.put(Event.REASSIGNMENT)

    def _on_topic_data(self, topic: str, data: bytes | None, stat: object) -> None:
        if topic not in self._armed:  # the call made when the watch is set
            self._armed.add(topic)
        elif data is not None:  # an assignment changed: partitions were added
            self._events.put(Event.TOPIC_CHANGE)

    # -- the event loop ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            event = self._events.get()
            if event is Event.SHUTDOWN:
                return
            try:
                self._handle(event)
            except (NotInOffice, ControllerMovedError) as exc:
                if self._stopped.is_set():
                    return
                self._resign(str(exc))
                with self._session:
                    connected = self._connected
                if connected:  # else on RECONNECTED
                    self._events.put(Event.ELECT)
            except ZkError as exc:
                logger.error("controller event %s failed: %s", event.value, exc)
            except Exception:
                logger.exception("controller event %s failed", event.value)

    def _handle(self, event: Event) -> None:
        if event is Event.ELECT:
            self.handle_controller_change()
        elif event is Event.SESSION_LOST:
            if self.active:
                raise NotInOffice("its ZooKeeper session was lost")
            with self._session:
                self._lost = False  # nothing held: nothing to give up
        elif event is Event.RECONNECTED:
            self.handle_reconnected()
        elif not self.active:
            self._refuse_shutdown_requests()
        elif event is Event.BROKER_CHANGE:
            self.handle_broker_change()
        elif event is Event.TOPIC_CHANGE:
            self.handle_topic_change()
        elif event is Event.TOPIC_DELETION:
            self.handle_topic_deletion()
        elif event is Event.ISR_CHANGE:
            self.handle_isr_change()
        elif event is Event.PREFERRED_ELECTION:
            self.handle_preferred_election()
        elif event is Event.AUTO_REBALANCE:
            self.handle_auto_rebalance()
        elif event is Event.REASSIGNMENT:
            self.handle_reassignment()
        elif event is Event.CONTROLLED_SHUTDOWN:
            self.handle_controlled_shutdown()
        elif event is Event.LOG_DIR_EVENT:
            self.handle_log_dir_event()
        elif event is Event.OFFLINE_REPLICAS:
            self.handle_offline_replicas()

    # -- office: election, resignation, the session ---------------------------------

    def handle_controller_change(self) -> None:
        """``/controller`` changed or vanished: resign if it is no longer this
        controller's, run for election when nobody holds it."""
        if self.active and not self.zk.owns_controller():
            raise NotInOffice("/controller is no longer its own")
        if not self.active:
            self.elect()

    def handle_reconnected(self) -> None:
        """Connected again: an active controller checks its office (same session)
        and reads everything again, since handlers may have failed meanwhile; an
        inactive one runs for election."""
        if not self.active:
            self.elect()
            return
        self._ensure_in_office()
        logger.info("controller %d (epoch %d) reconnected; reading the cluster again",
                    self.broker_id, self.epoch)  # fmt: skip
        self.handle_broker_change()
        self.handle_topic_change()
        self.handle_topic_deletion()
        self.handle_isr_change()

    def elect(self) -> None:
        if self.active:
            return
        if self.zk.owns_controller():
            # Left from a term this broker gave up while its session lived on
            # (an epoch check failed, or taking office did): free it, run again.
            self.zk.resign_controller()
        with self._session:
            seen = self._suspensions
        term = self.zk.register_controller(self.broker_id)
        if term is None:
            return  # another broker is the controller; /controller's watch calls again
        self._take_office(term, seen)

    def _take_office(self, term: ControllerEpoch, seen: int) -> None:
        """``seen``: the session changes counted before ``/controller`` was created
        (a LOST before it concerns an older session; one after it, this term)."""
        with self._session:
            self._checked_suspensions = seen
            if self._suspensions == seen:
                self._lost = False
                if self._connected:
                    self._gate.release()
        self._term = term
        self.epoch = term.epoch
        self.active = True
        logger.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        try:
            self._on_taking_office()
        except (NotInOffice, ControllerMovedError):
            raise
        except ZkError:
            # As Kafka's failed failover: give the office up so that an election
            # (perhaps this broker's again) starts from a clean read.
            self._resign("taking office failed")
            self.zk.resign_controller()
            raise

    def _on_taking_office(self) -> None:
        self._live = {b.broker_id: b for b in self.zk.get_brokers()}
        self._states = {}
        self._view = {}
        if not self._watches[1:]:
            self._watches.append(self.zk.watch_children(layout.BROKER_IDS, self._on_brokers))
            self._watches.append(self.zk.watch_children(layout.BROKER_TOPICS, self._on_topics))
            self._watches.append(self.zk.watch_children(layout.DELETE_TOPICS, self._on_deletions))
            self._watches.append(
                self.zk.watch_children(layout.ISR_CHANGE_NOTIFICATION, self._on_isr_changes)
            )
            self._watches.append(
                self.zk.watch_data(layout.PREFERRED_REPLICA_ELECTION, self._on_preferred_election)
            )
            self._watches.append(
                self.zk.watch_data(layout.REASSIGN_PARTITIONS, self._on_reassignment)
            )
            self._watches.append(
                self.zk.watch_children(layout.LOG_DIR_EVENT_NOTIFICATION, self._on_log_dir_events)
            )
        self._offline = {}  # the brokers tell it again, answering the LeaderAndIsr below
        topics = self.zk.get_topics()
        self._watch_topics(topics)
        self._bring_online(topics, resend=True, full=True)
        self.handle_reassignment()
        self.zk.take_log_dir_events(self._fence())  # covered by the LeaderAndIsr just sent

    def _resign(self, why: str) -> None:
        """Stop acting as controller: forget everything, tell no broker anything
        more (what is queued to brokers is dropped), refuse controlled shutdowns."""
        if self.active:
            logger.warning(
                "broker %d resigns as controller (epoch %d): %s", self.broker_id, self.epoch, why
            )
        self.active = False
        self._term = None
        self._gate.discard()
        self._live = {}
        self._states = {}
        self._view = {}
        self._shutting_down = set()
        with self._session:
            self._lost = False
        self._refuse_shutdown_requests()

    def _ensure_in_office(self) -> None:
        """Before every request to a broker and every ZooKeeper write: wait while
        the session is suspended; once connected again (same session) check that
        ``/controller`` and ``/controller_epoch`` are still this controller's.
        NotInOffice when they are not, the session was lost, or it is stopping."""
        while True:
            with self._session:
                while not (self._connected or self._lost or self._stopped.is_set()):
                    self._session.wait()
                if self._stopped.is_set():
                    raise NotInOffice("the broker is stopping")
                if self._lost:
                    raise NotInOffice("its ZooKeeper session was lost")
                seen = self._suspensions
            if self._term is None or not self.active:
                raise NotInOffice("it is not the controller")
            if seen == self._checked_suspensions:
                return
            if not self.zk.owns_controller():
                raise NotInOffice("/controller is no longer its own")
            if self.zk.get_controller_epoch() != self._term:
                raise NotInOffice(f"{layout.CONTROLLER_EPOCH} moved past epoch {self.epoch}")
            with self._session:
                self._checked_suspensions = seen
                if self._suspensions == seen:
                    self._gate.release()
            logger.info("controller %d (epoch %d) acts again", self.broker_id, self.epoch)

    def _fence(self) -> ControllerEpoch:
        """The term every ZooKeeper write of this controller is checked against."""
        self._ensure_in_office()
        assert self._term is not None
        return self._term

    def _watch_topics(self, topics: Sequence[str]) -> None:
        for topic in topics:
            if topic not in self._topic_watches:
                self._topic_watches.add(topic)
                self._watches.append(
                    self.zk.watch_data(
                        layout.topic_path(topic), partial(self._on_topic_data, topic)
                    )
                )

    # -- handlers --------------------------------------------------------------------

    def handle_broker_change(self) -> None:
        brokers = {b.broker_id: b for b in self.zk.get_brokers()}
        gone = set(self._live) - set(brokers)
        joined = set(brokers) - set(self._live)
        self._live = brokers
        self._shutting_down &= set(brokers) - joined
        for broker_id in gone | joined:  # a broker that starts again recovered its dirs
            self._offline.pop(broker_id, None)
        if gone:
            logger.info("brokers %s left", sorted(gone))
        if joined:
            logger.info("brokers %s joined", sorted(joined))
        self._bring_online(self.zk.get_topics(), resend=bool(joined), dead=gone, full=True)

    def handle_topic_change(self) -> None:
        """New topics, and new partitions of known topics, come online."""
        topics = self.zk.get_topics()
        self._watch_topics(topics)
        self._bring_online(topics, resend=True, only_new=True)

    def handle_topic_deletion(self) -> None:
        for topic in self.zk.topics_to_delete():
            found = self.zk.get_topic_assignment(topic)
            if found is not None:
                assignment, _ = found
                by_broker: dict[int, list[TopicPartition]] = {}
                for partition, replicas in assignment.partitions.items():
                    for replica in replicas:
                        by_broker.setdefault(replica, []).append(TopicPartition(topic, partition))
                    key = TopicPartition(topic, partition)
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
                        self._send(
                            partial(self._send_stop_replica, broker, self.epoch, partitions, True)
                        )
            self.zk.delete_recursive(layout.topic_path(topic), self._fence())
            self.zk.delete_recursive(layout.topic_config_path(topic), self._fence())
            self.zk.delete_recursive(layout.delete_topic_path(topic), self._fence())
            self._view = {k: v for k, v in self._view.items() if k[0] != topic}
            self._publish(MetadataUpdate((), list(self._live.values()), deleted_topics=[topic]))
            logger.info("deleted topic %s", topic)

    def handle_isr_change(self) -> None:
        """Leaders changed ISRs in ZooKeeper: every broker's cache hears of it
        (the replicas already know; Kafka sends no LeaderAndIsr for this)."""
        updates: list[PartitionUpdate] = []
        for topic, partition in self.zk.take_isr_changes(self._fence()):
            known = self._view.get(TopicPartition(topic, partition))
            current = self.zk.get_partition_state(topic, partition)
            if known is None or current is None:
                continue
            state, version = current
            update = PartitionUpdate(topic, partition, state, known.replicas, version)
            self._view[TopicPartition(topic, partition)] = update
            updates.append(update)
        if updates:
            self._publish(MetadataUpdate(updates, list(self._live.values())))
        self.handle_reassignment()  # new replicas joining an ISR move reassignments on

    def handle_reassignment(self) -> None:
        """Move each requested partition one step further (Kafka's ZooKeeper-era
        reassignment): first the replica list becomes old + new and the new
        replicas start copying; once every target replica is in the ISR the
        leader moves if it must, the list becomes the target, the replicas
        dropped stop and delete their logs, and the request forgets the
        partition.  Runs on the request, on ISR changes, and on taking office."""
        found = self.zk.get_reassignments()
        if found is None:
            return
        targets, _ = found
        done = []
        for (topic, partition), target in targets.items():
            try:
                if self._reassign(topic, partition, target):
                    done.append(TopicPartition(topic, partition))
            except StaleVersionError as exc:  # a leader wrote meanwhile: its notice retries
                logger.info("reassignment of %s-%d waits: %s", topic, partition, exc)
        if done:
            self.zk.finish_reassignments(done, self._fence())

    def _reassign(self, topic: str, partition: int, target: tuple[int, ...]) -> bool:
        """One step for one partition; True once it is finished (or cannot start)."""
        found = self.zk.get_topic_assignment(topic)
        current = self.zk.get_partition_state(topic, partition)
        if found is None or partition not in found[0].partitions or not target:
            logger.warning("reassignment of %s-%d dropped: no such partition", topic, partition)
            return True
        if current is None:
            return False  # not online yet
        assignment, assignment_version = found
        replicas = tuple(assignment.partitions[partition])
        adding = tuple(assignment.adding_replicas.get(partition, ()))
        original = tuple(r for r in replicas if r not in adding)
        state, version = current
        if replicas == target and not adding:
            return True
        expanded = (*target, *(r for r in original if r not in target))
        if replicas != expanded:
            # The leader epoch moves first, so the replicas hear of the new list;
            # a failure in between repeats both writes on the next step.
            new = PartitionState(state.leader, state.leader_epoch + 1, state.isr, self.epoch)
            version = self.zk.update_partition_state(topic, partition, new, version, self._fence())
            assignment = _with_partition(
                assignment,
                partition,
                expanded,
                tuple(r for r in target if r not in original),
                tuple(r for r in original if r not in target),
            )
            self.zk.update_topic_assignment(topic, assignment, assignment_version, self._fence())
            logger.info(
                "reassigning %s-%d: %s -> %s; new replicas copying", topic, partition,
                list(original), list(target),
            )  # fmt: skip
            self._announce(PartitionUpdate(topic, partition, new, expanded, version))
            return False
        if not set(target) <= set(state.isr):
            return False  # the new replicas are still catching up
        candidates = set(self._live) - self._shutting_down
        leader = state.leader
        if leader not in target or leader not in candidates:
            leader = next((r for r in target if r in candidates and r in state.isr), -1)
            if leader < 0:
                return False
        isr = tuple(r for r in state.isr if r in target)
        new = PartitionState(leader, state.leader_epoch + 1, isr, self.epoch)
        version = self.zk.update_partition_state(topic, partition, new, version, self._fence())
        self.zk.update_topic_assignment(
            topic,
            _with_partition(assignment, partition, target, (), ()),
            assignment_version,
            self._fence(),
        )
        logger.info(
            "reassigned %s-%d to %s (leader %d, epoch %d)", topic, partition, list(target),
            leader, new.leader_epoch,
        )  # fmt: skip
        self._announce(PartitionUpdate(topic, partition, new, target, version))
        dropped = [r for r in original if r not in target]
        for broker_id in dropped:
            broker = self._live.get(broker_id)
            if broker is not None:
                self._send(
                    partial(
                        self._send_stop_replica,
                        broker,
                        self.epoch,
                        [TopicPartition(topic, partition)],
                        True,
                    )
                )
        return True

    def _announce(self, update: PartitionUpdate) -> None:
        """A partition changed: its replicas, then every broker's cache, are told."""
        self._view[TopicPartition(update.topic, update.partition)] = update
        self._tell_replicas([update])
        self._publish(MetadataUpdate([update], list(self._live.values())))

    def handle_preferred_election(self) -> None:
        """An admin asked (``/admin/preferred_replica_election``)."""
        partitions = self.zk.take_preferred_election(self._fence())
        if partitions:
            self._elect_preferred(partitions, "requested")

    def handle_auto_rebalance(self) -> None:
        """Kafka's leader rebalance: a broker that is the preferred replica of more
        than ``leader.imbalance.per.broker.percentage`` percent of partitions it
        does not lead gets them back (when it is alive and in their ISR)."""
        preferred_of: dict[int, list[TopicPartition]] = {}
        not_leading: dict[int, list[TopicPartition]] = {}
        for key, update in sorted(self._view.items()):
            if update.replicas:
                preferred = update.replicas[0]
                preferred_of.setdefault(preferred, []).append(key)
                if update.state.leader != preferred:
                    not_leading.setdefault(preferred, []).append(key)
        limit = self._rebalance.per_broker_percentage / 100
        chosen = [
            key
            for broker, keys in not_leading.items()
            if len(keys) / len(preferred_of[broker]) > limit
            for key in keys
        ]
        if chosen:
            self._elect_preferred(chosen, "leader imbalance")

    def _elect_preferred(self, partitions: Sequence[TopicPartition], why: str) -> None:
        """Each partition whose first assigned replica is alive, in the ISR and not
        leading takes it as leader (bumped leader epoch)."""
        candidates = set(self._live) - self._shutting_down
        updates: list[PartitionUpdate] = []
        for topic, partition in partitions:
            known = self._view.get(TopicPartition(topic, partition))
            current = self.zk.get_partition_state(topic, partition)
            if known is None or not known.replicas or current is None:
                continue
            state, version = current
            preferred = known.replicas[0]
            if state.leader == preferred or preferred not in candidates:
                continue
            if preferred not in state.isr:
                continue
            new = PartitionState(preferred, state.leader_epoch + 1, state.isr, self.epoch)
            try:
                version = self.zk.update_partition_state(
                    topic, partition, new, version, self._fence()
                )
            except StaleVersionError as exc:
                logger.warning("%s; %s-%d keeps its leader", exc, topic, partition)
                continue
            update = PartitionUpdate(topic, partition, new, known.replicas, version)
            self._view[TopicPartition(topic, partition)] = update
            updates.append(update)
            logger.info(
                "preferred replica %d leads %s-%d again (epoch %d; %s)",
                preferred,
                topic,
                partition,
                new.leader_epoch,
                why,
            )
        self._tell_replicas(updates)
        if updates:
            self._publish(MetadataUpdate(updates, list(self._live.values())))

    def handle_controlled_shutdown(self) -> None:
        self._answer_shutdown_requests(self._move_leaderships)

    def _refuse_shutdown_requests(self) -> None:
        self._answer_shutdown_requests(lambda broker_id: None)

    def _answer_shutdown_requests(
        self, answer: Callable[[int], list[TopicPartition] | None]
    ) -> None:
        while True:
            try:
                broker_id, reply = self._shutdown_requests.get_nowait()
            except queue.Empty:
                return
            try:
                reply.set_result(answer(broker_id))
            except Exception as exc:
                reply.set_exception(exc)

    def _move_leaderships(self, broker_id: int) -> list[TopicPartition]:
        """Hand ``broker_id``'s leaderships to other live ISR replicas and take it
        out of the ISRs it is in; the replicated partitions it still leads."""
        if broker_id not in self._live:
            return []
        self._shutting_down.add(broker_id)
        candidates = set(self._live) - self._shutting_down
        updates: list[PartitionUpdate] = []
        remaining: list[TopicPartition] = []
        followed: list[TopicPartition] = []  # it stops copying these (StopReplica, kept)
        for (topic, partition), known in sorted(self._view.items()):
            if broker_id not in known.replicas or len(known.replicas) < 2:
                continue
            current = self.zk.get_partition_state(topic, partition)
            if current is None:
                continue
            state, version = current
            isr = tuple(r for r in state.isr if r != broker_id)
            if state.leader == broker_id:
                election = elect_leader(known.replicas, isr, candidates)
                if election.leader < 0:
                    remaining.append(TopicPartition(topic, partition))
                    continue
                new = PartitionState(
                    election.leader, state.leader_epoch + 1, election.isr, self.epoch
                )
            elif broker_id in state.isr:
                new = PartitionState(state.leader, state.leader_epoch + 1, isr, self.epoch)
            else:
                continue
            try:
                version = self.zk.update_partition_state(
                    topic, partition, new, version, self._fence()
                )
            except StaleVersionError as exc:
                logger.warning("%s; %s-%d stays as it is", exc, topic, partition)
                if state.leader == broker_id:
                    remaining.append(TopicPartition(topic, partition))
                continue
            update = PartitionUpdate(topic, partition, new, known.replicas, version)
            self._view[TopicPartition(topic, partition)] = update
            updates.append(update)
            followed.append(TopicPartition(topic, partition))
            logger.info(
                "controlled shutdown of broker %d: %s-%d now led by %d (epoch %d), isr %s",
                broker_id,
                topic,
                partition,
                new.leader,
                new.leader_epoch,
                list(new.isr),
            )
        # As Kafka does: the stopping broker is not told it now follows; it stops
        # copying these partitions instead, so it never rejoins their ISRs.
        self._tell_replicas(updates, skip=broker_id)
        if followed:
            stopping = self._live[broker_id]
            self._send(partial(self._send_stop_replica, stopping, self.epoch, followed, False))
        if updates:
            self._publish(MetadataUpdate(updates, list(self._live.values())))
        return remaining

    # -- offline log dirs (KIP-112) --------------------------------------------------

    def handle_log_dir_event(self) -> None:
        """Brokers whose log dirs went offline: each is sent the state of every
        partition it holds, and answers KAFKA_STORAGE_ERROR for those on an
        offline dir (``handle_offline_replicas`` then), as Kafka's controller asks."""
        live = list(self._live.values())
        for broker_id in self.zk.take_log_dir_events(self._fence()):
            broker = self._live.get(broker_id)
            if broker is None:
                continue
            held = [u for u in self._view.values() if broker_id in u.replicas]
            logger.info("broker %d reports an offline log dir: asking about its %d "
                        "partitions", broker_id, len(held))  # fmt: skip
            if held:
                self._send(partial(self._send_leader_and_isr, broker, self.epoch, held, live,
                                   on_storage_errors=self._report_offline))  # fmt: skip

    def handle_offline_replicas(self) -> None:
        """Replicas a broker cannot serve (its log dir is offline) leave their ISRs,
        and their leaderships go to other in-sync replicas, at once."""
        fresh: set[TopicPartition] = set()
        while True:
            try:
                broker_id, partitions = self._offline_reports.get_nowait()
            except queue.Empty:
                break
            if broker_id not in self._live:
                continue
            known = self._offline.setdefault(broker_id, set())
            new = set(partitions) - known
            if new:
                logger.warning("replicas on an offline log dir of broker %d: %s", broker_id,
                               ", ".join(f"{t}-{p}" for t, p in sorted(new)))  # fmt: skip
            known |= new
            fresh |= new
        updates = []
        for key in sorted(fresh):
            standing = self._view.get(key)
            if standing is None:
                continue
            update = self._online_partition(key.topic, key.partition, standing.replicas, set())
            if update is not None:
                updates.append(update)
        if updates:
            self._tell_replicas(updates)
            self._publish(MetadataUpdate(updates, list(self._live.values())))

    def _offline_holders(self, key: TopicPartition) -> set[int]:
        """The brokers whose replica of ``key`` is on an offline log dir."""
        return {b for b, partitions in self._offline.items() if key in partitions}

    # -- partition state machine ----------------------------------------------------

    def _bring_online(
        self,
        topics: Sequence[str],
        resend: bool,
        dead: set[int] | None = None,
        full: bool = False,
        only_new: bool = False,
    ) -> None:
        """Elect leaders where needed, tell the replicas, then every broker's cache
        (everything when ``full``; ``only_new`` skips partitions already known)."""
        updates: list[PartitionUpdate] = []
        deleting = set(self.zk.topics_to_delete())
        for topic in topics:
            if topic in deleting:
                continue
            found = self.zk.get_topic_assignment(topic)
            if found is None:
                continue
            assignment, _ = found
            for partition, replicas in sorted(assignment.partitions.items()):
                if only_new and (topic, partition) in self._states:
                    continue
                update = self._online_partition(topic, partition, tuple(replicas), dead or set())
                if update is not None and (resend or update.state.leader_epoch >= 0):
                    updates.append(update)
        self._tell_replicas(updates)
        live = list(self._live.values())
        if full:
            self._publish(MetadataUpdate(list(self._view.values()), live, full=True))
        elif updates:
            self._publish(MetadataUpdate(updates, live))

    def _publish(self, update: MetadataUpdate) -> None:
        for broker in self._live.values():
            self._send(partial(self._send_update_metadata, broker, self.epoch, update))

    def _online_partition(
        self, topic: str, partition: int, replicas: tuple[int, ...], dead: set[int]
    ) -> PartitionUpdate | None:
        """Bring one partition online (see ``_online_partition_once``).  A state
        znode another writer moved on meanwhile (a leader shrinking its ISR) is read
        again and the election made again, a few times; the partition stays in the
        brokers' view as it stood in any case, so a full update never drops it."""
        for attempt in range(1, STALE_STATE_ATTEMPTS + 1):
            try:
                return self._online_partition_once(topic, partition, replicas, dead)
            except _StaleState as stale:
                key = TopicPartition(topic, partition)
                self._view.setdefault(key, stale.standing)
                logger.warning(
                    "%s (attempt %d of %d)", stale.reason, attempt, STALE_STATE_ATTEMPTS
                )
        logger.warning("%s-%d: will retry on the next event", topic, partition)
        return None

    def _online_partition_once(
        self, topic: str, partition: int, replicas: tuple[int, ...], dead: set[int]
    ) -> PartitionUpdate | None:
        key = TopicPartition(topic, partition)
        current = self.zk.get_partition_state(topic, partition)
        live = set(self._live)
        dead = dead | self._offline_holders(key)  # replicas it cannot have, for this one
        if current is None:
            self._states[key] = transition(
                topic, partition, self._states.get(key, State.NON_EXISTENT), State.NEW
            )
            election = elect_leader(replicas, replicas, live - self._shutting_down, self._unclean)
            # Every live replica of a new partition is in sync: none holds anything.
            isr = tuple(r for r in replicas if r in live) if election.leader >= 0 else replicas
            state = PartitionState(election.leader, 0, isr, self.epoch)
            try:
                version = self.zk.create_partition_state(topic, partition, state, self._fence())
            except StaleVersionError:
                return None
        else:
            state, version = current
            if state.leader in live and state.leader not in dead:
                in_sync = tuple(r for r in state.isr if r in live and r not in dead)
                if in_sync != state.isr:  # followers that died leave the ISR at once
                    changed = PartitionState(
                        state.leader, state.leader_epoch + 1, in_sync, self.epoch
                    )
                    try:
                        version = self.zk.update_partition_state(
                            topic, partition, changed, version, self._fence()
                        )
                    except StaleVersionError as exc:
                        logger.warning("%s; will retry on the next event", exc)
                    else:
                        logger.info(
                            "partition %s-%d: isr %s -> %s (replicas gone)",
                            topic,
                            partition,
                            list(state.isr),
                            list(in_sync),
                        )
                        state = changed
                self._states[key] = transition(
                    topic, partition, self._states.get(key, State.NEW), State.ONLINE
                )
                update = PartitionUpdate(topic, partition, state, replicas, version)
                self._view[key] = update
                return update
            election = elect_leader(
                replicas, state.isr, live - dead - self._shutting_down, self._unclean_for(topic)
            )
            if election.unclean:
                logger.warning(
                    "unclean election of %s-%d: %d was not in the ISR %s; records only the "
                    "lost replicas had are gone",
                    topic,
                    partition,
                    election.leader,
                    list(state.isr),
                )
            if election.leader < 0 and state.leader < 0:
                self._states[key] = transition(
                    topic, partition, self._states.get(key, State.NEW), State.OFFLINE
                )
                self._view[key] = PartitionUpdate(topic, partition, state, replicas, version)
                return None
            standing = PartitionUpdate(topic, partition, state, replicas, version)
            state = PartitionState(
                election.leader, state.leader_epoch + 1, election.isr, self.epoch
            )
            try:
                version = self.zk.update_partition_state(
                    topic, partition, state, version, self._fence()
                )
            except StaleVersionError as exc:
                raise _StaleState(str(exc), standing) from exc
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
        update = PartitionUpdate(topic, partition, state, replicas, version)
        self._view[key] = update
        return update

    def _unclean_for(self, topic: str) -> bool:
        """unclean.leader.election.enable: the topic's override, else the broker's."""
        value = self.zk.get_topic_config(topic).get("unclean.leader.election.enable")
        return self._unclean if value is None else value.strip().lower() == "true"

    def _tell_replicas(self, updates: Sequence[PartitionUpdate], skip: int = -1) -> None:
        by_broker: dict[int, list[PartitionUpdate]] = {}
        for update in updates:
            for replica in update.replicas:
                if replica != skip:
                    by_broker.setdefault(replica, []).append(update)
        live = list(self._live.values())
        for broker_id, batch in by_broker.items():
            broker = self._live.get(broker_id)
            if broker is not None:
                self._send(partial(self._send_leader_and_isr, broker, self.epoch, batch, live,
                                   on_storage_errors=self._report_offline))  # fmt: skip

    def _send(self, call: Callable[[], None]) -> None:
        self._ensure_in_office()
        try:
            call()
        except Exception as exc:  # one unreachable broker must not stop the loop
            logger.warning("controller request failed: %s", exc)


def _with_partition(
    assignment: TopicAssignment,
    partition: int,
    replicas: Sequence[int],
    adding: Sequence[int],
    removing: Sequence[int],
) -> TopicAssignment:
    """``assignment`` with one partition's replicas (and its adding/removing lists,
    dropped when empty) replaced."""

    def put(m: Mapping[int, Sequence[int]], value: Sequence[int]) -> dict[int, Sequence[int]]:
        out = {p: r for p, r in m.items() if p != partition}
        if value:
            out[partition] = tuple(value)
        return out

    return TopicAssignment(
        put(assignment.partitions, replicas),
        put(assignment.adding_replicas, adding),
        put(assignment.removing_replicas, removing),
    )
