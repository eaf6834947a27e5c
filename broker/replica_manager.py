"""The partitions a broker hosts, and the appends and reads on them.

The controller decides who leads what (LeaderAndIsr); the replica manager
applies those decisions, fenced by controller epoch and leader epoch, opens
the logs, serves produce, fetch and list-offsets for the partitions this
broker leads, and hands the partitions it follows to the replica fetchers
(``replica_fetcher.py``).  Consumers see only records below the high
watermark, followers read up to the log end; with a single in-sync replica
(followers do not join the ISR yet) the high watermark follows the log end.

Thread safety: ``self._lock`` guards the partition map and the controller
epoch; each ``Partition`` guards its leader state with its own lock; logs
guard themselves.  Fetches that want more data wait on ``self._appended``,
a condition notified on every append (no busy waiting).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from annal.broker.replica_fetcher import ReplicaFetcherManager
from annal.storage.config import LogConfig
from annal.storage.errors import StorageError
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.manager import LogManager

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaderAndIsrState:
    """One partition of a LeaderAndIsr request, free of protobuf types."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: str  # Kafka error name; "NONE" on success
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str = ""


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: str
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    message: str = ""


class Partition:
    """A hosted partition.  ``self._lock`` guards leader, epochs and ISR."""

    def __init__(self, tp: TopicPartition, log: Log) -> None:
        self.tp = tp
        self.log = log
        self._lock = threading.Lock()
        self.leader = -1
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.zk_version = -1

    def apply(self, state: LeaderAndIsrState) -> bool:
        """Take a newer leader epoch; False (fenced) for an older one."""
        with self._lock:
            if state.leader_epoch < self.leader_epoch:
                return False
            self.leader = state.leader
            self.leader_epoch = state.leader_epoch
            self.isr = state.isr
            self.replicas = state.replicas
            self.zk_version = state.zk_version
            return True


class ReplicaManager:
    """See the module docstring."""

    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        topic_config: Callable[[str], Mapping[str, str]],
        partition_exists: Callable[[TopicPartition], bool] = lambda tp: False,
        fetchers: ReplicaFetcherManager | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.fetchers = fetchers
        self.logs = logs
        self._topic_config = topic_config
        self._partition_exists = partition_exists
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        self._appended = threading.Condition()

    # -- controller requests -------------------------------------------------

    def check_controller_epoch(self, epoch: int) -> bool:
        """Remember the newest controller epoch; False for a stale one."""
        with self._lock:
            if epoch < self.controller_epoch:
                return False
            self.controller_epoch = epoch
            return True

    def become_leader_or_follower(
        self, states: Sequence[LeaderAndIsrState], leaders: Mapping[int, str] | None = None
    ) -> dict[TopicPartition, str]:
        """Apply each partition's new state; a result (error name) per partition.

        ``leaders`` maps the leaders' broker ids to their endpoints: a follower
        starts copying from its leader, a new leader stops copying."""
        results: dict[TopicPartition, str] = {}
        for state in states:
            tp = TopicPartition(state.topic, state.partition)
            try:
                partition = self._get_or_create(tp)
            except (StorageError, ValueError) as exc:
                logger.error("cannot open log of %s: %s", tp, exc)
                results[tp] = "KAFKA_STORAGE_ERROR"
                continue
            if not partition.apply(state):
                results[tp] = "FENCED_LEADER_EPOCH"
                continue
            if state.leader == self.broker_id:
                if self.fetchers is not None:
                    self.fetchers.unfollow([tp])
                partition.log.update_high_watermark(partition.log.log_end_offset)
                logger.info("leader of %s at epoch %d", tp, state.leader_epoch)
            else:
                self._follow(tp, partition, state, leaders or {})
            results[tp] = "NONE"
        return results

    def _follow(
        self,
        tp: TopicPartition,
        partition: Partition,
        state: LeaderAndIsrState,
        leaders: Mapping[int, str],
    ) -> None:
        endpoint = leaders.get(state.leader)
        if self.fetchers is None:
            return
        if state.leader < 0 or endpoint is None:
            self.fetchers.unfollow([tp])  # offline, or a leader we cannot reach yet
            logger.info("replica of %s with no reachable leader (epoch %d)", tp, state.leader_epoch)
            return
        self.fetchers.follow(tp, state.leader, endpoint, partition.log, state.leader_epoch)
        logger.info(
            "follower of %s (leader %d at %s, epoch %d)",
            tp,
            state.leader,
            endpoint,
            state.leader_epoch,
        )

    def _get_or_create(self, tp: TopicPartition) -> Partition:
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is not None:
                return partition
        overrides = self._topic_config(tp.topic)
        config = LogConfig.from_properties(overrides, self.logs.default_config)
        log = self.logs.get_or_create_log(tp, config)
        with self._lock:
            partition = self._partitions.setdefault(tp, Partition(tp, log))
        return partition

    def stop_replica(self, tp: TopicPartition, delete: bool) -> str:
        if self.fetchers is not None:
            self.fetchers.unfollow([tp])
        with self._lock:
            self._partitions.pop(tp, None)
        if delete:
            self.logs.delete_log(tp)
        return "NONE"

    def partition(self, tp: TopicPartition) -> Partition | None:
        with self._lock:
            return self._partitions.get(tp)

    def _not_leader_error(self, tp: TopicPartition, partition: Partition | None) -> str:
        """NOT_LEADER_OR_FOLLOWER for a partition that exists elsewhere (clients then
        refresh metadata and retry), UNKNOWN_TOPIC_OR_PARTITION for one that does not."""
        if partition is not None or self._partition_exists(tp):
            return "NOT_LEADER_OR_FOLLOWER"
        return "UNKNOWN_TOPIC_OR_PARTITION"

    # -- produce -------------------------------------------------------------------

    def append(self, tp: TopicPartition, records: bytes) -> AppendResult:
        partition = self.partition(tp)
        if partition is None or partition.leader != self.broker_id:
            error = self._not_leader_error(tp, partition)
            return AppendResult(error, message=f"broker {self.broker_id} does not lead {tp}")
        try:
            info = partition.log.append_as_leader(records, partition.leader_epoch)
        except StorageError as exc:
            return AppendResult(exc.code, message=str(exc))
        log = partition.log
        log.update_high_watermark(log.log_end_offset)  # the ISR is the leader alone for now
        with self._appended:
            self._appended.notify_all()
        return AppendResult(
            "NONE", info.first_offset, info.log_append_time_ms, log.log_start_offset
        )

    # -- fetch -----------------------------------------------------------------------

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        leader_epoch: int = -1,
        replica_id: int = -1,
    ) -> ReadResult:
        """Batches from ``offset``: below the high watermark for consumers, up to the
        log end for a follower (``replica_id`` >= 0) copying the log."""
        partition = self.partition(tp)
        if partition is None or partition.leader != self.broker_id:
            error = self._not_leader_error(tp, partition)
            return ReadResult(error, message=f"broker {self.broker_id} does not lead {tp}")
        if leader_epoch >= 0 and leader_epoch != partition.leader_epoch:
            error = (
                "FENCED_LEADER_EPOCH"
                if leader_epoch < partition.leader_epoch
                else "UNKNOWN_LEADER_EPOCH"
            )
            return ReadResult(
                error, message=f"leader epoch {leader_epoch} vs {partition.leader_epoch}"
            )
        log = partition.log
        high_watermark = log.high_watermark
        try:
            records = log.read(
                offset, max_bytes, max_offset=high_watermark if replica_id < 0 else None
            )
        except StorageError as exc:
            return ReadResult(
                exc.code,
                high_watermark=high_watermark,
                log_start_offset=log.log_start_offset,
                log_end_offset=log.log_end_offset,
                message=str(exc),
            )
        return ReadResult("NONE", records, high_watermark, log.log_start_offset, log.log_end_offset)

    def wait_for_data(self, ready: Callable[[], bool], max_wait_ms: int) -> None:
        """Block until ``ready()`` or ``max_wait_ms`` passes; woken by appends."""
        deadline = time.monotonic() + max_wait_ms / 1000
        with self._appended:
            while not ready():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._appended.wait(remaining)

    def end_offset_for_epoch(
        self, tp: TopicPartition, current_leader_epoch: int, epoch: int
    ) -> tuple[str, int, int]:
        """(error, epoch, end offset) for OffsetsForLeaderEpoch: the largest epoch at
        or below ``epoch`` and where it ends; a stale or future
        ``current_leader_epoch`` (when given) is fenced."""
        partition = self.partition(tp)
        if partition is None or partition.leader != self.broker_id:
            return self._not_leader_error(tp, partition), -1, -1
        if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
            stale = current_leader_epoch < partition.leader_epoch
            return ("FENCED_LEADER_EPOCH" if stale else "UNKNOWN_LEADER_EPOCH"), -1, -1
        log = partition.log
        found_epoch, end_offset = log.leader_epoch_cache.end_offset_for(epoch, log.log_end_offset)
        return "NONE", found_epoch, end_offset

    def list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[str, int, int, int]:
        """(error, timestamp, offset, leader epoch) for ListOffsets."""
        partition = self.partition(tp)
        if partition is None or partition.leader != self.broker_id:
            error = self._not_leader_error(tp, partition)
            return error, -1, -1, -1
        log = partition.log
        if timestamp == -1:
            return "NONE", -1, log.high_watermark, partition.leader_epoch
        try:
            found = log.offset_for_timestamp(timestamp)
        except ValueError:
            return "INVALID_REQUEST", -1, -1, -1
        if found is None:
            return "NONE", -1, -1, partition.leader_epoch
        return "NONE", found.timestamp, found.offset, partition.leader_epoch
