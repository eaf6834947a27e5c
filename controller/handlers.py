"""What the controller does on each event, to its context and through its state machines.

``EventHandlers`` holds the controller's context (``context.py``) and the
request batch of the event being handled; the controller's event loop
(``controller.py``) calls one method per event, then sends the batch.  Each
method reads ZooKeeper only for what its event says changed, decides through
the state machines (``state_machines.py``) and the strategies
(``election.py``), and adds what brokers must hear to the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from annal.zk import layout
from annal.zk.batched import BatchedZk
from annal.zk.client import ControllerEpoch, ZkClient

from annal.topic_partition import TopicPartition

from .context import ControllerContext
from .election import PartitionState as State
from .election import Reason, ReplicaState
from .reassignment import Reassigner
from .requests import PartitionUpdate, RequestBatch
from .state_machines import PartitionStateMachine, ReplicaStateMachine

logger = logging.getLogger(__name__)


class EventHandlers:
    def __init__(
        self,
        broker_id: int,
        zk: ZkClient,
        fence: Callable[[], ControllerEpoch],
        watch_topics: Callable[[Sequence[str]], None],
        unclean_default: bool,
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.batched = BatchedZk(zk)
        self.fence = fence
        self.watch_topics = watch_topics
        self.unclean_default = unclean_default
        self.ctx = ControllerContext()
        self.batch = RequestBatch()  # what the event being handled tells brokers

    def load(self, epoch: int) -> None:
        """Read the whole cluster into a fresh context (batched), bring every
        partition online, take dead replicas out of their ISRs, and queue
        everything to every broker: a LeaderAndIsr of all its partitions and the
        whole metadata view (offline log dirs: the brokers tell it again)."""
        ctx = self.ctx = ControllerContext(epoch=epoch)
        ctx.live = {b.broker_id: b for b in self.zk.get_brokers()}
        topics = self.zk.get_topics()
        self.watch_topics(topics)
        ctx.deleting = set(self.zk.topics_to_delete()) & set(topics)
        for topic, (assignment, version) in self.batched.topic_assignments(topics).items():
            ctx.add_topic(topic, assignment.partitions, version)
        states = self.batched.partition_states(ctx.partitions())
        for tp in ctx.partitions():
            found = states.get(tp)
            if found is None:
                ctx.move(tp, State.NEW)
                continue
            state, version = found
            ctx.leadership[tp] = PartitionUpdate(*tp, state, ctx.replicas(tp), version)
            ctx.move(tp, State.NEW)
            ctx.move(tp, State.ONLINE if state.leader in ctx.live else State.OFFLINE)
            for broker in ctx.replicas(tp):
                target = ReplicaState.ONLINE if broker in ctx.live else ReplicaState.OFFLINE
                ctx.move_replica(tp, broker, target)
        logger.info("controller %d (epoch %d) loaded %d topics, %d partitions, brokers %s",
                    self.broker_id, epoch, len(ctx.assignments), len(states),
                    sorted(ctx.live))  # fmt: skip
        partitions, replicas = self.machines(just_read=True)
        partitions.handle_state_changes(ctx.partitions_in(State.NEW, State.OFFLINE), State.ONLINE)
        dead = [(b, tp) for tp in ctx.partitions() if tp.topic not in ctx.deleting
                for b in ctx.replicas(tp) if b not in ctx.live]  # fmt: skip
        replicas.handle_state_changes(dead, ReplicaState.OFFLINE)
        alive = [(b, tp) for tp in ctx.partitions() if tp.topic not in ctx.deleting
                 for b in ctx.replicas(tp) if b in ctx.live]  # fmt: skip
        replicas.handle_state_changes(alive, ReplicaState.ONLINE)
        self.batch.full_metadata = True

    def machines(
        self, *, just_read: bool = False
    ) -> tuple[PartitionStateMachine, ReplicaStateMachine]:
        """The state machines; ``just_read``: the context's partition states were
        read in this event, and their first round decides from them."""
        fresh: set[TopicPartition] = set()  # read or written in this event
        return (
            PartitionStateMachine(self.ctx, self.batched, self.batch, self.fence,
                                  self.unclean_topics, just_read=just_read, fresh=fresh),
            ReplicaStateMachine(self.ctx, self.batched, self.batch, self.fence,
                                just_read=just_read, fresh=fresh),
        )  # fmt: skip

    def reassigner(self) -> Reassigner:
        return Reassigner(self.ctx, self.zk, self.batch, self.fence)

    def unclean_topics(self, topics: Sequence[str]) -> set[str]:
        """unclean.leader.election.enable: each topic's override, else the broker's."""
        configs = self.batched.topic_configs(topics)
        allowed = set()
        for topic in topics:
            value = configs.get(topic, {}).get("unclean.leader.election.enable")
            if self.unclean_default if value is None else value.strip().lower() == "true":
                allowed.add(topic)
        return allowed

    # -- handlers --------------------------------------------------------------------

    def broker_change(self) -> None:
        """Brokers left, joined, or registered anew (restarted within their old
        session's lifetime: a new epoch), as Kafka's onBrokerFailure and
        onBrokerStartup."""
        ctx = self.ctx
        brokers = {b.broker_id: b for b in self.zk.get_brokers()}
        bounced = {b for b, r in brokers.items() if b in ctx.live and ctx.live[b].epoch != r.epoch}
        gone = set(ctx.live) - set(brokers) | bounced
        joined = set(brokers) - set(ctx.live) | bounced
        if not gone and not joined:
            return
        ctx.shutting_down -= gone | joined
        ctx.forget_offline(gone | joined)  # a broker that starts again recovered its dirs
        partitions, replicas = self.machines()
        if gone:
            logger.info("brokers %s left", sorted(gone))
            ctx.live = {b: r for b, r in brokers.items() if b not in bounced}
            led = [tp for tp in ctx.partitions()
                   if ctx.leader_of(tp) in gone and tp.topic not in ctx.deleting]  # fmt: skip
            partitions.handle_state_changes(led, State.OFFLINE)
            partitions.handle_state_changes(led, State.ONLINE, Reason.OFFLINE)
            held = [(b, tp) for b in sorted(gone) for tp in ctx.partitions_on(b)]
            replicas.handle_state_changes(held, ReplicaState.OFFLINE)
        ctx.live = brokers
        if joined:
            logger.info("brokers %s joined", sorted(joined))
            held = [(b, tp) for b in sorted(joined) for tp in ctx.partitions_on(b)]
            replicas.handle_state_changes(held, ReplicaState.ONLINE)
            waiting = ctx.partitions_in(State.NEW, State.OFFLINE)
            partitions.handle_state_changes(waiting, State.ONLINE, Reason.OFFLINE)
        self.batch.full_metadata = True  # the live brokers changed

    def topic_change(self) -> None:
        """New topics: their partitions go New → Online."""
        ctx = self.ctx
        new = [t for t in self.zk.get_topics() if t not in ctx.assignments]
        if not new:
            return
        self.watch_topics(new)
        deleting = set(self.zk.topics_to_delete())
        for topic, (assignment, version) in self.batched.topic_assignments(new).items():
            ctx.add_topic(topic, assignment.partitions, version)
            if topic in deleting:
                ctx.deleting.add(topic)
        self._new_partitions([tp for t in new if t not in deleting for tp in ctx.partitions_of(t)])

    def partition_change(self, topic: str) -> None:
        """``topic``'s assignment changed: partitions added to it go New → Online."""
        ctx = self.ctx
        found = self.zk.get_topic_assignment(topic)
        if found is None or topic in ctx.deleting or topic not in ctx.assignments:
            return
        assignment, version = found
        added = [TopicPartition(topic, p) for p in sorted(assignment.partitions)
                 if p not in ctx.assignments[topic]]  # fmt: skip
        ctx.add_topic(topic, assignment.partitions, version)
        self._new_partitions(added)

    def _new_partitions(self, added: Sequence[TopicPartition]) -> None:
        """Kafka's onNewPartitionCreation: New replicas, New → Online partitions."""
        for tp in added:
            for broker in self.ctx.replicas(tp):
                self.ctx.move_replica(tp, broker, ReplicaState.NEW)
        partitions, _ = self.machines()
        partitions.handle_state_changes(added, State.ONLINE)
        live = [(b, tp) for tp in added for b in self.ctx.replicas(tp) if b in self.ctx.live]
        for broker, tp in live:
            self.ctx.move_replica(tp, broker, ReplicaState.ONLINE)

    def topic_deletion(self) -> None:
        """Every replica of each topic marked for deletion stops and deletes its
        log, then the topic's znodes go and every broker's cache forgets it."""
        ctx = self.ctx
        topics = self.zk.topics_to_delete()
        if not topics:
            return
        ctx.deleting |= set(topics)
        partitions, replicas = self.machines()
        doomed = [tp for t in topics for tp in ctx.partitions_of(t)]
        held = [(b, tp) for tp in doomed for b in ctx.replicas(tp)]
        for broker, tp in held:
            ctx.move_replica(tp, broker, ReplicaState.OFFLINE)
        replicas.handle_state_changes(held, ReplicaState.DELETION_STARTED)
        replicas.handle_state_changes(held, ReplicaState.NON_EXISTENT)
        partitions.handle_state_changes(doomed, State.OFFLINE)
        partitions.forget(doomed)
        trees = [
            path
            for t in topics
            for path in (
                layout.topic_path(t),
                layout.topic_config_path(t),
                layout.delete_topic_path(t),
            )
        ]
        self.batched.delete_trees(trees, self.fence())  # fmt: skip
        for topic in topics:
            ctx.remove_topic(topic)
            self.batch.add_deleted_topic(topic)
            logger.info("deleted topic %s", topic)

    def isr_change(self) -> None:
        """Leaders changed ISRs in ZooKeeper: every broker's cache hears of it
        (the replicas already know; Kafka sends no LeaderAndIsr for this)."""
        ctx = self.ctx
        changed = [tp for tp in self.zk.take_isr_changes(self.fence()) if tp in ctx.leadership]
        for tp, (state, version) in self.batched.partition_states(changed).items():
            update = PartitionUpdate(*tp, state, ctx.replicas(tp), version)
            ctx.leadership[tp] = update
            self.batch.add_update_metadata([update])
        self.reassigner().run()  # new replicas joining an ISR move reassignments on

    def preferred_election(self) -> None:
        """An admin asked (``/admin/preferred_replica_election``)."""
        partitions = self.zk.take_preferred_election(self.fence())
        if partitions:
            self._elect_preferred(partitions, "requested")

    def auto_rebalance(self, per_broker_percentage: int) -> None:
        """Kafka's leader rebalance: a broker that is the preferred replica of more
        than ``leader.imbalance.per.broker.percentage`` percent of partitions it
        does not lead gets them back (when it is alive and in their ISR)."""
        preferred_of: dict[int, list[TopicPartition]] = {}
        not_leading: dict[int, list[TopicPartition]] = {}
        for update in self.ctx.view():
            if update.replicas:
                preferred = update.replicas[0]
                preferred_of.setdefault(preferred, []).append(update.key)
                if update.state.leader != preferred:
                    not_leading.setdefault(preferred, []).append(update.key)
        limit = per_broker_percentage / 100
        chosen = [
            key
            for broker, keys in not_leading.items()
            if len(keys) / len(preferred_of[broker]) > limit
            for key in keys
        ]
        if chosen:
            self._elect_preferred(chosen, "leader imbalance")

    def _elect_preferred(self, partitions: Sequence[TopicPartition], why: str) -> None:
        """Partitions whose preferred replica (the first assigned) is not leading
        move to it, when it is alive and in the ISR (bumped leader epoch)."""
        ctx = self.ctx
        asked = [TopicPartition(*tp) for tp in partitions]
        chosen = [tp for tp in asked if tp in ctx.leadership and ctx.replicas(tp)
                  and ctx.leader_of(tp) != ctx.replicas(tp)[0]]  # fmt: skip
        if chosen:
            logger.info("preferred replica election of %d partitions (%s)", len(chosen), why)
            partitions_sm, _ = self.machines()
            partitions_sm.handle_state_changes(chosen, State.ONLINE, Reason.PREFERRED)

    def move_leaderships(self, broker_id: int) -> list[TopicPartition]:
        """Hand ``broker_id``'s leaderships to other live ISR replicas and take it
        out of the ISRs it is in; the replicated partitions it still leads."""
        ctx = self.ctx
        if broker_id not in ctx.live:
            return []
        ctx.shutting_down.add(broker_id)
        held = [tp for tp in ctx.partitions_on(broker_id) if len(ctx.replicas(tp)) > 1]
        led = [tp for tp in held if ctx.leader_of(tp) == broker_id]
        partitions, replicas = self.machines()
        moved = partitions.handle_state_changes(led, State.ONLINE, Reason.CONTROLLED_SHUTDOWN)
        remaining = [tp for tp in led if ctx.leader_of(tp) == broker_id]
        for tp in remaining:
            logger.info("controlled shutdown of broker %d: %s stays led by it: %s",
                        broker_id, tp, moved.get(tp))  # fmt: skip
        # As Kafka does: the stopping broker is not told it now follows; it stops
        # copying these partitions instead, so it never rejoins their ISRs.
        followed = [(broker_id, tp) for tp in held if tp not in remaining]
        replicas.handle_state_changes(followed, ReplicaState.OFFLINE)
        logger.info("controlled shutdown of broker %d: %d leaderships moved, %d remain, "
                    "%d replicas stopped", broker_id, len(led) - len(remaining),
                    len(remaining), len(followed))  # fmt: skip
        return remaining

    # -- offline log dirs (KIP-112) --------------------------------------------------

    def log_dir_event(self) -> None:
        """Brokers whose log dirs went offline: each is sent the state of every
        partition it holds, and answers KAFKA_STORAGE_ERROR for those on an
        offline dir (``handle_offline_replicas`` then), as Kafka's controller asks."""
        ctx = self.ctx
        for broker_id in self.zk.take_log_dir_events(self.fence()):
            if broker_id not in ctx.live:
                continue
            held = [ctx.leadership[tp] for tp in ctx.partitions_on(broker_id)
                    if tp in ctx.leadership]  # fmt: skip
            logger.info("broker %d reports an offline log dir: asking about its %d "
                        "partitions", broker_id, len(held))  # fmt: skip
            for update in held:
                self.batch.add_leader_and_isr([broker_id], update)

    def offline_replicas(self, reports: Sequence[tuple[int, Sequence[TopicPartition]]]) -> None:
        """Replicas a broker cannot serve (its log dir is offline) lose their
        leaderships to other in-sync replicas and leave their ISRs, at once."""
        ctx = self.ctx
        fresh: list[tuple[int, TopicPartition]] = []
        for broker_id, reported in reports:
            if broker_id not in ctx.live:
                continue
            known = ctx.offline_replicas.setdefault(broker_id, set())
            new = {TopicPartition(*tp) for tp in reported} - known
            if new:
                logger.warning("replicas on an offline log dir of broker %d: %s", broker_id,
                               ", ".join(str(tp) for tp in sorted(new)))  # fmt: skip
            known |= new
            fresh += [(broker_id, tp) for tp in sorted(new) if tp in ctx.leadership]
        partitions, replicas = self.machines()
        led = [tp for b, tp in fresh if ctx.leader_of(tp) == b]
        partitions.handle_state_changes(led, State.OFFLINE)
        partitions.handle_state_changes(led, State.ONLINE, Reason.OFFLINE)
        replicas.remove_from_isr(fresh)
