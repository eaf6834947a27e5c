"""The controller: one broker at a time, elected through ``/controller``.

Every broker runs a ``Controller``.  ZooKeeper watches and session changes
only put events on a queue; one event-loop thread handles them in order, in
the shape of Kafka's KafkaController:

* the in-memory view (``context.ControllerContext``) is read whole from
  ZooKeeper when it takes office, in batched rounds; afterwards each handler
  reads only what its event says changed;
* leaders are chosen by one pure strategy per reason (``election``), and
  partitions and replicas move through Kafka's two state machines
  (``state_machines``), which read and write ZooKeeper in batched, pipelined
  rounds (``zk.batched``), each write fenced by ``/controller_epoch``;
* what brokers must hear is gathered per event (``requests.RequestBatch``)
  and sent when the event is done: one LeaderAndIsr and one StopReplica per
  broker, one UpdateMetadata per live broker (``channel`` sends them).

Events:

* ``Elect`` (``/controller`` changed or vanished): the broker that creates the
  ephemeral ``/controller`` bumps ``/controller_epoch`` in the same multi-op,
  loads the context, brings every partition online, takes dead replicas out
  of their ISRs and tells every broker everything.  An active controller that
  finds ``/controller`` no longer its own resigns.
* ``BrokerChange``: partitions led by a broker that left (or registered anew)
  get a new leader (offline strategy) or go offline, and its replicas leave
  their ISRs; returning and new brokers hear their partitions.
* ``TopicChange`` (new topics) and ``PartitionChange`` (a topic's assignment
  changed: partitions added): the new partitions go New → Online.
* ``TopicDeletion``: replicas stop and delete their logs, then the znodes go.
* ``IsrChange``: leaders changed ISRs themselves (``/isr_change_notification``):
  every broker's metadata cache hears of it.
* ``PreferredElection`` (``/admin/preferred_replica_election``) and
  ``AutoRebalance`` (every ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable``): the preferred strategy.
* ``Reassignment``: Kafka's ZooKeeper-era steps (``reassignment``).
* ``ControlledShutdown``: a stopping broker's leaderships move (controlled
  shutdown strategy: another live ISR replica, the stopping broker out of the
  ISR), its other replicas go Offline (it stops copying them, logs kept, and
  leaves their ISRs), and the answer lists the replicated partitions it still
  leads (Kafka's semantics: the broker retries, then stops anyway).  Until it
  is gone no election picks it.  The answer goes after the requests are queued.
* ``LogDirEvent`` / ``OfflineReplicas`` (KIP-112): replicas on a failed log
  dir lose their leaderships and leave their ISRs.

**Fencing** (Kafka 2.1, KAFKA-6082).  Every ZooKeeper write of the
controller is a multi-op that checks ``/controller_epoch`` at the zkVersion
read when it took office, besides the znode's own version, and carries the
controller epoch; brokers refuse requests with an older controller epoch
than the newest they have seen.

**Session** (the ZooKeeper client's listener only flips state and queues an
event).  SUSPENDED: before its next broker request or ZooKeeper write the
event loop waits; the requests already queued to brokers are held too
(``RequestGate``).  CONNECTED again with the same session: it checks that
``/controller`` is still its own and ``/controller_epoch`` still at its
version, then carries on (reading everything again if a handler failed
meanwhile).  LOST, ``/controller`` not its own, or a failed epoch check: it
**resigns** -- stops acting, drops its state and every request queued to
brokers, refuses controlled shutdowns -- and runs for election again once
connected.  A handler that fails otherwise leaves the context to be read
again a second later.

Thread safety: all state lives on the event thread; other threads only
enqueue events.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial

from annal.zk import layout
from annal.zk.client import (
    ControllerEpoch,
    ControllerMovedError,
    SessionEvent,
    ZkClient,
    ZkError,
)

from annal.topic_partition import TopicPartition

from .context import ControllerContext
from .events import Event, NotInOffice, RebalanceSettings, RequestGate, _OpenGate
from .handlers import EventHandlers
from .requests import (
    RequestBatch,
    Senders,
    SendLeaderAndIsr,
    SendStopReplica,
    SendUpdateMetadata,
)

logger = logging.getLogger(__name__)

RELOAD_AFTER_FAILURE_S = 1.0


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
        self._senders = Senders(send_leader_and_isr, send_stop_replica, send_update_metadata)
        self._rebalance = rebalance or RebalanceSettings()
        self._stopped = threading.Event()
        self._events: queue.Queue[tuple[Event, str]] = queue.Queue()
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
        self._handlers = EventHandlers(
            broker_id, zk, self._fence, self._watch_topics, unclean_leader_election
        )
        self._dirty = False  # a handler failed part way: read everything again
        self._watches: list[object] = []
        self._topic_watches: set[str] = set()  # topics with a data watch (event thread)
        self._shutdown_requests: queue.Queue[tuple[int, Future[list[TopicPartition] | None]]] = (
            queue.Queue()
        )
        self._armed: set[str] = set()  # topics whose watch has made its first call
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
        self._events.put((Event.ELECT, ""))

    def set_unclean_leader_election(self, enabled: bool) -> None:
        """``unclean.leader.election.enable`` changed at run time (a dynamic broker
        config, KIP-226): topics without their own override follow it from the next
        election on."""
        self._handlers.unclean_default = enabled

    def initiate_shutdown(self) -> None:
        self._stopped.set()
        self.zk.remove_session_listener(self._on_session)
        with self._session:
            self._session.notify_all()  # a loop waiting out a suspension
        self._events.put((Event.SHUTDOWN, ""))

    def _rebalance_timer(self) -> None:
        while not self._stopped.wait(self._rebalance.check_interval_s):
            self._events.put((Event.AUTO_REBALANCE, ""))

    def offline_partition_count(self) -> int:
        """Partitions with no live leader, as this controller knows them (0 when
        not in office); for metrics, from any thread."""
        if not self.active:
            return 0
        return self._handlers.ctx.offline_partition_count()

    def await_shutdown(self, timeout_s: float = 10.0) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def controlled_shutdown(
        self, broker_id: int, timeout_s: float = 30.0
    ) -> list[TopicPartition] | None:
        """Called from a request thread: move ``broker_id``'s leaderships away.
        The replicated partitions it still leads, or None when this broker is
        not the active controller (or cannot act now: its session is suspended)."""
        if not self.acting:
            return None
        reply: Future[list[TopicPartition] | None] = Future()
        self._shutdown_requests.put((broker_id, reply))
        self._events.put((Event.CONTROLLED_SHUTDOWN, ""))
        return reply.result(timeout_s)

    @property
    def acting(self) -> bool:
        """The controller, and able to act now: its session is connected (a
        suspended controller may already have been replaced)."""
        with self._session:
            return self.active and self._connected and not self._lost

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
            self._events.put((Event.RECONNECTED, ""))
        elif event is SessionEvent.LOST:
            self._events.put((Event.SESSION_LOST, ""))

    def _on_controller_change(self, data: bytes | None, stat: object) -> None:
        self._events.put((Event.ELECT, ""))  # vanished: run; changed: perhaps resign

    def _on_brokers(self, children: list[str]) -> None:
        self._events.put((Event.BROKER_CHANGE, ""))

    def _on_topics(self, children: list[str]) -> None:
        self._events.put((Event.TOPIC_CHANGE, ""))

    def _on_deletions(self, children: list[str]) -> None:
        if children:
            self._events.put((Event.TOPIC_DELETION, ""))

    def _on_log_dir_events(self, children: list[str]) -> None:
        if children:
            self._events.put((Event.LOG_DIR_EVENT, ""))

    def _report_offline(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        """A broker answered KAFKA_STORAGE_ERROR for these (a sender thread)."""
        self._offline_reports.put((broker_id, partitions))
        self._events.put((Event.OFFLINE_REPLICAS, ""))

    def _on_isr_changes(self, children: list[str]) -> None:
        if children:
            self._events.put((Event.ISR_CHANGE, ""))

    def _on_preferred_election(self, data: bytes | None, stat: object) -> None:
        if data is not None:
            self._events.put((Event.PREFERRED_ELECTION, ""))

    def _on_reassignment(self, data: bytes | None, stat: object) -> None:
        if data is not None:
            self._events.put((Event.REASSIGNMENT, ""))

    def _on_topic_data(self, topic: str, data: bytes | None, stat: object) -> None:
        if topic not in self._armed:  # the call made when the watch is set
            self._armed.add(topic)
        elif data is not None:  # an assignment changed: partitions were added
            self._events.put((Event.PARTITION_CHANGE, topic))

    # -- the event loop ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            event, topic = self._events.get()
            if event is Event.SHUTDOWN:
                return
            self._handlers.batch = RequestBatch()
            try:
                self._handle(event, topic)
                self._flush()
            except (NotInOffice, ControllerMovedError) as exc:
                if self._stopped.is_set():
                    return
                self._resign(str(exc))
                with self._session:
                    connected = self._connected
                if connected:  # else on RECONNECTED
                    self._events.put((Event.ELECT, ""))
            except Exception as exc:
                if isinstance(exc, ZkError):
                    logger.error("controller event %s failed: %s", event.value, exc)
                else:
                    logger.exception("controller event %s failed", event.value)
                if self.active:  # what it wrote may be untold: read and tell it all again
                    self._dirty = True
                    timer = threading.Timer(RELOAD_AFTER_FAILURE_S, self._events.put,
                                            [(Event.RELOAD, "")])  # fmt: skip
                    timer.daemon = True
                    timer.start()

    def _handle(self, event: Event, topic: str) -> None:
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
        elif event is Event.RELOAD:
            if self._dirty:
                self._load()
        elif event is Event.CONTROLLED_SHUTDOWN:
            self._answer_shutdown_requests(self._handlers.move_leaderships)
        elif event is Event.OFFLINE_REPLICAS:
            self._handlers.offline_replicas(_drain(self._offline_reports))
        elif event is Event.AUTO_REBALANCE:
            self._handlers.auto_rebalance(self._rebalance.per_broker_percentage)
        elif event is Event.PARTITION_CHANGE:
            self._handlers.partition_change(topic)
        else:
            self._simple_handler(event)()

    def _simple_handler(self, event: Event) -> Callable[[], None]:
        h = self._handlers
        return {
            Event.BROKER_CHANGE: h.broker_change,
            Event.TOPIC_CHANGE: h.topic_change,
            Event.TOPIC_DELETION: h.topic_deletion,
            Event.ISR_CHANGE: h.isr_change,
            Event.PREFERRED_ELECTION: h.preferred_election,
            Event.REASSIGNMENT: lambda: h.reassigner().run(),
            Event.LOG_DIR_EVENT: h.log_dir_event,
        }[event]

    def _flush(self) -> None:
        """Send what the event gathered (see ``RequestBatch.send``)."""
        batch, self._handlers.batch = self._handlers.batch, RequestBatch()
        ctx = self._handlers.ctx
        if self.active and not batch.empty():
            batch.send(self.epoch, dict(ctx.live), ctx.view, self._senders,
                       self._report_offline, self._send)  # fmt: skip

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
        and catches up on what it may have missed; an inactive one runs for
        election."""
        if not self.active:
            self.elect()
            return
        self._ensure_in_office()
        logger.info("controller %d (epoch %d) reconnected; reading the cluster again",
                    self.broker_id, self.epoch)  # fmt: skip
        if self._dirty:
            self._load()
            return
        for handle in (self._handlers.broker_change, self._handlers.topic_change,
                       self._handlers.topic_deletion, self._handlers.isr_change):  # fmt: skip
            handle()

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
        started = time.monotonic()
        try:
            self._on_taking_office()
            logger.info("controller %d (epoch %d) took office: loaded, decided and queued "
                        "to every broker in %.1f s", self.broker_id, self.epoch,
                        time.monotonic() - started)  # fmt: skip
        except (NotInOffice, ControllerMovedError):
            raise
        except ZkError:
            # As Kafka's failed failover: give the office up so that an election
            # (perhaps this broker's again) starts from a clean read.
            self._resign("taking office failed")
            self.zk.resign_controller()
            raise

    def _on_taking_office(self) -> None:
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
        self._load()
        self.zk.take_log_dir_events(self._fence())  # covered by the LeaderAndIsr sent

    def _load(self) -> None:
        """Read everything again and tell every broker everything (taking
        office, or after a handler failed part way)."""
        self._dirty = False
        self._handlers.load(self.epoch)
        self._flush()
        self._handlers.reassigner().run()
        if self._handlers.ctx.deleting:
            self._handlers.topic_deletion()

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
        self._handlers.ctx = ControllerContext()
        self._handlers.batch = RequestBatch()
        self._dirty = False
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

    def _refuse_shutdown_requests(self) -> None:
        self._answer_shutdown_requests(lambda broker_id: None)

    def _answer_shutdown_requests(
        self, answer: Callable[[int], list[TopicPartition] | None]
    ) -> None:
        """Answer every waiting request, once what they changed is queued to brokers."""
        answered: list[tuple[Future[list[TopicPartition] | None], object]] = []
        while True:
            try:
                broker_id, reply = self._shutdown_requests.get_nowait()
            except queue.Empty:
                break
            try:
                answered.append((reply, answer(broker_id)))
            except Exception as exc:
                answered.append((reply, exc))
        if answered and self.active:
            self._flush()
        for reply, result in answered:
            if isinstance(result, Exception):
                reply.set_exception(result)
            else:
                reply.set_result(result)  # type: ignore[arg-type]

    def _send(self, call: Callable[[], None]) -> None:
        self._ensure_in_office()
        try:
            call()
        except Exception as exc:  # one unreachable broker must not stop the loop
            logger.warning("controller request failed: %s", exc)


def _drain(
    reports: queue.Queue[tuple[int, list[TopicPartition]]],
) -> list[tuple[int, list[TopicPartition]]]:
    out = []
    while True:
        try:
            out.append(reports.get_nowait())
        except queue.Empty:
            return out
