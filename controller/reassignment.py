"""Partition reassignment, Kafka's ZooKeeper-era steps (``/admin/reassign_partitions``).

Each requested partition moves one step further each time this runs (on the
request, on ISR changes, and on taking office):

1. the replica list becomes target + the old replicas not in it, the new
   replicas are recorded as adding and the dropped ones as removing, and the
   leader epoch moves so that every replica hears the list: the new replicas
   start copying;
2. once every target replica is in the ISR, the leader moves if it must (the
   reassignment strategy: the first target replica that is live and in
   sync), the ISR and the list become the target's, the dropped replicas stop
   and delete their logs, and the request forgets the partition.

A failure in between repeats the writes on the next step.  Reassignments are
few, so each partition is read and written on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from annal.zk.client import ControllerEpoch, StaleVersionError, ZkClient
from annal.zk.layout import PartitionState, TopicAssignment

from annal.topic_partition import TopicPartition

from .context import ControllerContext
from .election import Candidates, Reason, elect
from .requests import PartitionUpdate, RequestBatch

logger = logging.getLogger(__name__)


class Reassigner:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        batch: RequestBatch,
        fence: Callable[[], ControllerEpoch],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.fence = fence

    def run(self) -> None:
        found = self.zk.get_reassignments()
        if found is None:
            return
        targets, _ = found
        done = []
        for (topic, partition), target in targets.items():
            try:
                if self._step(topic, partition, target):
                    done.append(TopicPartition(topic, partition))
            except StaleVersionError as exc:  # a leader wrote meanwhile: its notice retries
                logger.info("reassignment of %s-%d waits: %s", topic, partition, exc)
        if done:
            self.zk.finish_reassignments(done, self.fence())

    def _step(self, topic: str, partition: int, target: tuple[int, ...]) -> bool:
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
            new = PartitionState(state.leader, state.leader_epoch + 1, state.isr, self.ctx.epoch)
            version = self.zk.update_partition_state(topic, partition, new, version, self.fence())
            changed = _with_partition(
                assignment,
                partition,
                expanded,
                tuple(r for r in target if r not in original),
                tuple(r for r in original if r not in target),
            )
            self._write_assignment(topic, changed, assignment_version)
            logger.info("reassigning %s-%d: %s -> %s; new replicas copying", topic, partition,
                        list(original), list(target))  # fmt: skip
            self._announce(PartitionUpdate(topic, partition, new, expanded, version))
            return False
        if not set(target) <= set(state.isr):
            return False  # the new replicas are still catching up
        tp = TopicPartition(topic, partition)
        live = self.ctx.candidates(tp)
        leader = state.leader
        if leader not in target or leader not in live:
            leader = elect(Reason.REASSIGNMENT, Candidates(replicas, state.isr, live,
                                                           target=target)).leader  # fmt: skip
            if leader < 0:
                return False
        isr = tuple(r for r in state.isr if r in target)
        new = PartitionState(leader, state.leader_epoch + 1, isr, self.ctx.epoch)
        version = self.zk.update_partition_state(topic, partition, new, version, self.fence())
        self._write_assignment(
            topic, _with_partition(assignment, partition, target, (), ()), assignment_version
        )
        logger.info("reassigned %s-%d to %s (leader %d, epoch %d)", topic, partition,
                    list(target), leader, new.leader_epoch)  # fmt: skip
        self._announce(PartitionUpdate(topic, partition, new, target, version))
        for broker in original:
            if broker not in target:
                self.batch.add_stop_replica(broker, tp, delete=True)
        return True

    def _write_assignment(self, topic: str, assignment: TopicAssignment, version: int) -> None:
        written = self.zk.update_topic_assignment(topic, assignment, version, self.fence())
        self.ctx.add_topic(topic, assignment.partitions, written)

    def _announce(self, update: PartitionUpdate) -> None:
        """A partition changed: its replicas, then every broker's cache, hear."""
        self.ctx.leadership[update.key] = update
        self.batch.add_leader_and_isr(self.ctx.recipients(update.key), update)


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
