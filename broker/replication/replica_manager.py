"""The partitions a broker hosts, and the appends and reads on them.

The controller decides who leads what (LeaderAndIsr); the replica manager
applies those decisions, fenced by controller epoch and leader epoch, opens
the logs, serves produce, fetch and list-offsets for the partitions this
broker leads, and hands the partitions it follows to the replica fetchers
(``replica_fetcher.py``).  Consumers see only records below the high
watermark (read_committed ones below the last stable offset, with the
aborted transactions of what they read: KIP-98), followers read up to the
log end.  The transaction coordinator's markers are leader appends
(``append_control``) that wait for the ISR like an acks=all produce.  A consumer's fetch with client
metadata (Kafka's Fetch v11+) may also read a partition this broker follows,
up to its own high watermark, and the leader may send it to a replica in its
rack instead (KIP-392: ``replica.selector.class``, ``replica_selector.py``).

Nothing here waits.  Requests that must (a long poll, acks=all, DeleteRecords)
wait in the broker's purgatories (``delayed.py``), asking this manager
whether they are done (``bytes_available``, ``replication_outcome``,
``delete_records_outcome``); every event that can finish one (an append, a
follower's fetch, a moved log start, a written ISR change, a leadership
change) is reported to ``on_change`` with its partition.

A LeaderAndIsr is applied in one pass however many partitions it names:
the topic configs of the partitions not hosted yet are read once per topic
(``topic_configs``), the fetchers are told once about the partitions this
broker now leads, and one line is logged per request (one per partition at
DEBUG).  The ISR expiration looks only at partitions where something
happened (``isr_expiry.py``).

Thread safety: ``self._lock`` guards changes to the partition map and the
controller epoch; a lookup (``partition``) is one read of the map, without it.
Each ``Partition`` guards its leader state with its own lock; logs guard
themselves.  ``on_change`` may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from annal.broker.metadata_cache import LiveBroker, MetadataSnapshot
from annal.broker.metrics import PartitionHealth
from annal.broker.replication.isr_changes import IsrChangeWriter
from annal.broker.replication.isr_expiry import IsrExpiration, IsrWatch
from annal.broker.replication.leadership_fence import LeadershipFence
from annal.broker.replication.partition import (
    Applied,
    IsrChange,
    LeaderAndIsrState,
    Partition,
    PartitionStateError,
    wall_clock_ms,
)
from annal.broker.replication.replica_fetcher import FollowOrder, ReplicaFetcherManager
from annal.broker.replication.replica_selector import ClientMetadata, ReplicaSelector, ReplicaView
from annal.broker.requests.delayed import FetchStart
from annal.storage.batch import last_header
from annal.storage.config import LogConfig
from annal.storage.control import AppendOrigin, ControlRecordType
from annal.storage.errors import InvalidRecordError, RecordError, StorageError
from annal.storage.files import TopicPartition
from annal.storage.log import Log, LogAppendInfo
from annal.storage.manager import LogManager
from annal.storage.txn_index import AbortedTxn

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

# Topic configs of several topics at once: each topic's overrides ({} for none).
TopicConfigs = Callable[[Collection[str]], Mapping[str, Mapping[str, str]]]
SHOWN_PARTITIONS = 5  # partitions a LeaderAndIsr's log line names


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode  # Kafka error name; errors.NONE on success
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str = ""
    records: int = 0  # how many were stored (0 for an idempotent producer's retry)
    # KIP-467: the records that got the batch refused, by index (storage's RecordError)
    record_errors: tuple[RecordError, ...] = ()


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    message: str = ""
    # KIP-392: the broker the consumer should read from instead (nothing was read)
    preferred_read_replica: int = -1
    from_follower: bool = False  # read from this broker's copy as a follower (KIP-392)
    last_stable_offset: int = -1  # KIP-98: below it every transaction is decided
    # read_committed: the aborted transactions overlapping what was read (None otherwise)
    aborted: tuple[AbortedTxn, ...] | None = None


class ReplicaManager:
    """See the module docstring."""

    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        topic_config: Callable[[str], Mapping[str, str]],
        partition_exists: Callable[[TopicPartition], bool] = lambda tp: False,
        fetchers: ReplicaFetcherManager | None = None,
        isr_writer: IsrChangeWriter | None = None,
        replica_lag_time_max_ms: int = 30_000,
        on_leadership: Callable[[TopicPartition, Log | None], None] | None = None,
        on_change: Callable[[TopicPartition], None] | None = None,
        *,
        topic_configs: TopicConfigs | None = None,
        fence: LeadershipFence | None = None,
        replica_selector: ReplicaSelector | None = None,
        metadata: Callable[[], MetadataSnapshot] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.fence = fence or LeadershipFence(broker_id)
        self.fetchers = fetchers
        # replica.selector.class (KIP-392), and the live brokers it may pick from
        self.replica_selector = replica_selector
        self._metadata = metadata or MetadataSnapshot
        # consumers' fetches that wait on a copy this broker follows (KIP-392) wake
        # when the fetchers move its high watermark or log start
        self.any_replica = AnyReplicaReadiness(self)
        self._isr_writer = isr_writer
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # told (partition, its log) on becoming its leader, (partition, None) on ceasing
        self._on_leadership = on_leadership or (lambda tp, log: None)
        self.isr_watch = IsrWatch()
        self._isr_expiration = IsrExpiration(
            self.isr_watch,
            replica_lag_time_max_ms,
            self.partition,
            self.hosted,
            wall_clock_ms,
        )
        self.logs = logs
        # several topics' configs in one read (ZooKeeper's, batched), else one by one
        self._topic_configs = topic_configs or (
            lambda topics: {topic: topic_config(topic) for topic in topics}
        )
        self._partition_exists = partition_exists
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        self._on_change = on_change or (lambda tp: None)
        if fetchers is not None:
            fetchers.on_progress = self._on_change
        # ISR changes this broker wrote as a leader, for metrics
        self.isr_shrinks = 0
        self.isr_expands = 0

    # -- controller requests -------------------------------------------------

    def check_controller_epoch(self, epoch: int) -> bool:
        """Remember the newest controller epoch; False for a stale one."""
        with self._lock:
            if epoch < self.controller_epoch:
                return False
            self.controller_epoch = epoch
            return True

    def become_leader_or_follower(
        self,
        states: Sequence[LeaderAndIsrState],
        leaders: Mapping[int, str] | None = None,
        kafka_leaders: Mapping[int, str] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Apply each partition's new state; a result (error name) per partition.

        ``leaders`` maps the leaders' broker ids to their gRPC endpoints and
        ``kafka_leaders`` to their Kafka listeners (those that have one): a
        follower starts copying from its leader, a new leader stops copying
        (before it takes the leadership, so no fetched batch lands after)."""
        results: dict[TopicPartition, ErrorCode] = {}
        partitions = self._get_or_create_all(states, results)
        applicable: list[tuple[LeaderAndIsrState, Partition]] = []
        for state in states:
            tp = TopicPartition(state.topic, state.partition)
            partition = partitions.get(tp)
            if partition is None:
                continue  # its log could not be opened: answered already
            if not partition.log.online:  # its log dir is offline: the controller moves it
                results[tp] = errors.KAFKA_STORAGE_ERROR
                continue
            applicable.append((state, partition))
        to_lead = [
            p.tp
            for state, p in applicable
            if state.leader == self.broker_id and state.leader_epoch > p.leader_epoch
        ]
        if to_lead and self.fetchers is not None:
            self.fetchers.unfollow(to_lead)
        led: list[TopicPartition] = []
        followed: list[tuple[LeaderAndIsrState, Partition]] = []
        for state, partition in applicable:
            tp = partition.tp
            applied = partition.apply(state)
            if applied is not Applied.NEW:
                results[tp] = (
                    errors.FENCED_LEADER_EPOCH if applied is Applied.FENCED else errors.NONE
                )
                continue
            self._on_change(tp)  # waiting requests on it answer NOT_LEADER_OR_FOLLOWER
            results[tp] = errors.NONE
            if state.leader == self.broker_id:
                led.append(tp)
                logger.debug(
                    "leader of %s at epoch %d, isr %s", tp, state.leader_epoch, list(state.isr)
                )
                self._on_leadership(tp, partition.log)
            else:
                followed.append((state, partition))
        unreachable = self._follow_all(followed, leaders or {}, kafka_leaders or {})
        if led or followed:
            logger.info(
                "LeaderAndIsr: leader of %d partitions%s, follower of %d%s%s",
                len(led),
                _some(led),
                len(followed),
                _some([p.tp for _, p in followed]),
                f", {len(unreachable)} with no reachable leader{_some(unreachable)}"
                if unreachable
                else "",
            )
        self.fence.controller_spoke()  # registered again: what it leads is known now
        return results

    def _follow_all(
        self,
        followed: Sequence[tuple[LeaderAndIsrState, Partition]],
        leaders: Mapping[int, str],
        kafka_leaders: Mapping[int, str],
    ) -> list[TopicPartition]:
        """Hand the newly followed partitions to the fetchers; those with no reachable
        leader are no longer fetched, and returned."""
        unreachable = []
        orders = []
        for state, partition in followed:
            tp = partition.tp
            endpoint = leaders.get(state.leader)
            if self.fetchers is not None:
                if state.leader < 0 or endpoint is None:
                    unreachable.append(tp)  # offline, or a leader we cannot reach yet
                    logger.debug(
                        "replica of %s with no reachable leader (epoch %d)", tp, state.leader_epoch
                    )
                else:
                    orders.append(
                        FollowOrder(
                            tp,
                            state.leader,
                            endpoint,
                            partition.log,
                            state.leader_epoch,
                            kafka_leaders.get(state.leader),
                        )
                    )
            self._on_leadership(tp, None)
        if orders and self.fetchers is not None:
            self.fetchers.follow_many(orders)
        if unreachable and self.fetchers is not None:
            self.fetchers.unfollow(unreachable)
        return unreachable

    def _get_or_create_all(
        self, states: Sequence[LeaderAndIsrState], results: dict[TopicPartition, ErrorCode]
    ) -> dict[TopicPartition, Partition]:
        """The partitions of ``states``, created (with their logs) when new; the
        configs of the new ones' topics are read once per topic.  Those whose
        log cannot be opened are answered KAFKA_STORAGE_ERROR in ``results``."""
        wanted = [TopicPartition(s.topic, s.partition) for s in states]
        with self._lock:
            found = {tp: p for tp in wanted if (p := self._partitions.get(tp)) is not None}
        missing = [tp for tp in dict.fromkeys(wanted) if tp not in found]
        if not missing:
            return found
        overrides = self._topic_configs(sorted({tp.topic for tp in missing}))
        configs: dict[str, LogConfig | ValueError] = {}
        for topic in {tp.topic for tp in missing}:
            try:
                configs[topic] = LogConfig.from_properties(
                    overrides.get(topic, {}), self.logs.default_config
                )
            except ValueError as exc:
                configs[topic] = exc
        for tp in missing:
            config = configs[tp.topic]
            try:
                if isinstance(config, ValueError):
                    raise config
                found[tp] = self._host(tp, self.logs.get_or_create_log(tp, config))
            except (StorageError, ValueError) as exc:
                logger.error("cannot open log of %s: %s", tp, exc)
                results[tp] = errors.KAFKA_STORAGE_ERROR
        return found

    def _host(self, tp: TopicPartition, log: Log) -> Partition:
        """The hosted partition of ``tp`` over ``log``, created when missing."""
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is None:
                writer = self._isr_writer
                partition = (
                    Partition(tp, log, self.broker_id, watch=self.isr_watch, fence=self.fence)
                    if writer is None
                    else Partition(
                        tp,
                        log,
                        self.broker_id,
                        submit_isr_change=writer.submit,
                        watch=self.isr_watch,
                        fence=self.fence,
                    )
                )
                self._partitions[tp] = partition
        return partition

    def update_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Reconfigure the hosted logs of ``topic`` (a dynamic config change)."""
        try:
            config = LogConfig.from_properties(overrides, self.logs.default_config)
        except ValueError as exc:
            logger.error("config of topic %s not applied: %s", topic, exc)
            return
        with self._lock:
            hosted = [p for tp, p in self._partitions.items() if tp.topic == topic]
        for partition in hosted:
            partition.log.update_config(config)

    def stop_replica(self, tp: TopicPartition, delete: bool) -> ErrorCode:
        return self.stop_replicas([tp], delete)[tp]

    def stop_replicas(
        self, tps: Sequence[TopicPartition], delete: bool
    ) -> dict[TopicPartition, ErrorCode]:
        """Stop hosting ``tps`` (a StopReplica): the fetchers let go of all of them
        at once, then each is forgotten (and its log deleted when ``delete``)."""
        if self.fetchers is not None:
            self.fetchers.unfollow(tps)
        return {tp: self._forget(tp, delete) for tp in tps}

    def _forget(self, tp: TopicPartition, delete: bool) -> ErrorCode:
        self._on_leadership(tp, None)
        with self._lock:
            partition = self._partitions.pop(tp, None)
        if partition is not None:
            self.isr_watch.discard(partition)
        self._on_change(tp)
        if delete:
            self.logs.delete_log(tp)
        return errors.NONE

    def partition(self, tp: TopicPartition) -> Partition | None:
        """The hosted partition of ``tp``: one read of the map (asked on every
        fetch and produce of every partition), without the lock."""
        return self._partitions.get(tp)

    def hosted(self) -> list[Partition]:
        """Every hosted partition, now."""
        with self._lock:
            return list(self._partitions.values())

    def wake_led(self) -> None:
        """The fence moved: every request waiting on a partition led here looks
        again (and answers NOT_LEADER_OR_FOLLOWER while fenced)."""
        for partition in self.hosted():
            if partition.is_leader:
                self._on_change(partition.tp)

    def health(self) -> list[PartitionHealth]:
        """Every hosted partition's replication state and log figures, now."""
        out = []
        for p in self.hosted():
            log = p.log
            out.append(
                PartitionHealth(
                    p.tp,
                    p.is_leader,
                    len(p.replicas),
                    len(p.isr),
                    log.config.min_insync_replicas,
                    log.size,
                    log.log_start_offset,
                    log.log_end_offset,
                )
            )
        return out

    def _not_leader_error(self, tp: TopicPartition, partition: Partition | None) -> ErrorCode:
        """NOT_LEADER_OR_FOLLOWER for a partition that exists elsewhere (clients then
        refresh metadata and retry), UNKNOWN_TOPIC_OR_PARTITION for one that does not."""
        if partition is not None or self._partition_exists(tp):
            return errors.NOT_LEADER_OR_FOLLOWER
        return errors.UNKNOWN_TOPIC_OR_PARTITION

    # -- produce -------------------------------------------------------------------

    def roll_due(self, tp: TopicPartition, size: int) -> bool:
        """Whether appending ``size`` bytes to ``tp`` here would roll its log (an estimate)."""
        partition = self.partition(tp)
        return partition is not None and partition.log.roll_due(size)

    def append(
        self,
        tp: TopicPartition,
        records: bytes,
        acks: int = 1,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendResult:
        """Append as leader (``Partition.append_as_leader``, as ``origin``); with
        ``acks`` -1 the request then waits for ``replication_outcome``."""
        partition = self.partition(tp)
        if partition is None:
            error = self._not_leader_error(tp, partition)
            return AppendResult(error, message=f"broker {self.broker_id} does not lead {tp}")
        return self._leader_append(
            tp, partition, lambda: partition.append_as_leader(records, acks, origin)
        )

    def append_control(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> AppendResult:
        """Write a transaction marker as leader (WriteTxnMarkers, KIP-98): COMMIT or
        ABORT for the producer's transaction, as an acks=-1 append that then waits
        for ``replication_outcome``.  UNKNOWN_TOPIC_OR_PARTITION when this broker
        does not host ``tp``, NOT_LEADER_OR_FOLLOWER when it does not lead it (or
        is fenced); the log answers INVALID_PRODUCER_EPOCH for an older producer
        epoch and TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch."""
        partition = self.partition(tp)
        if partition is None:
            return AppendResult(
                errors.UNKNOWN_TOPIC_OR_PARTITION,
                message=f"broker {self.broker_id} does not host {tp}",
            )
        control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        return self._leader_append(
            tp,
            partition,
            lambda: partition.append_control_as_leader(
                producer_id, producer_epoch, control_type, coordinator_epoch
            ),
        )

    def _leader_append(
        self, tp: TopicPartition, partition: Partition, append: Callable[[], LogAppendInfo]
    ) -> AppendResult:
        """Run a leader append of ``partition``; its outcome, storage's and the
        partition's refusals as Kafka's error codes."""
        try:
            info = append()
        except PartitionStateError as exc:
            return AppendResult(exc.code, message=str(exc))
        except InvalidRecordError as exc:
            return AppendResult(exc.code, message=str(exc), record_errors=exc.record_errors)
        except StorageError as exc:
            return AppendResult(exc.code, message=str(exc))
        self._on_change(tp)  # followers and consumers waiting for data, acks=all
        return AppendResult(
            errors.NONE,
            info.first_offset,
            info.last_offset,
            info.log_append_time_ms,
            partition.log.log_start_offset,
            records=0 if info.duplicate else info.num_records,
        )

    def replication_outcome(
        self, tp: TopicPartition, last_offset: int
    ) -> tuple[ErrorCode, str] | None:
        """acks=all: (error, message) once ``last_offset`` is on the whole ISR (NONE),
        or can no longer be (NOT_ENOUGH_REPLICAS_AFTER_APPEND: replicated, but by
        fewer than ``min.insync.replicas``; NOT_LEADER_OR_FOLLOWER); None while
        still waiting."""
        partition = self.partition(tp)
        if partition is None or not partition.is_leader:
            return errors.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} no longer leads {tp}"
        if (refusal := self.fence.refusal(tp)) is not None:
            return errors.NOT_LEADER_OR_FOLLOWER, refusal
        if partition.log.high_watermark <= last_offset:
            return None
        isr, needed = partition.isr, partition.log.config.min_insync_replicas
        if len(isr) < needed:
            return (
                errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"written, but the ISR of {tp} is {list(isr)}, fewer than min.insync.replicas "
                f"{needed}",
            )
        return errors.NONE, ""

    def delete_records(self, tp: TopicPartition, offset: int) -> tuple[ErrorCode, int, str]:
        """Kafka's DeleteRecords on the leader: move the log start to ``offset`` (-1:
        the high watermark; above it is OFFSET_OUT_OF_RANGE).  (error, low
        watermark, message) when refused; (errors.NONE, the new log start, "") when
        done here, and the request then waits for ``delete_records_outcome``
        (the in-sync followers, told by their next fetch, follow)."""
        partition = self.partition(tp)
        if partition is None or not partition.is_leader:
            error = self._not_leader_error(tp, partition)
            return error, -1, f"broker {self.broker_id} does not lead {tp}"
        if (refusal := self.fence.refusal(tp)) is not None:
            return errors.NOT_LEADER_OR_FOLLOWER, -1, refusal
        log = partition.log
        high_watermark = log.high_watermark
        target = high_watermark if offset == -1 else offset
        if not 0 <= target <= high_watermark:
            return (
                errors.OFFSET_OUT_OF_RANGE,
                log.log_start_offset,
                f"cannot delete records of {tp} before {offset}: the high watermark is "
                f"{high_watermark}",
            )
        try:
            log.delete_records_before(target)
        except StorageError as exc:
            return exc.code, log.log_start_offset, str(exc)
        self._on_change(tp)  # followers' long polls answer with the new start
        return errors.NONE, log.log_start_offset, ""

    def delete_records_outcome(
        self, tp: TopicPartition, target: int
    ) -> tuple[ErrorCode, int, str] | None:
        """(NONE, low watermark, "") once the in-sync followers' log starts reached
        ``target``, an error once leadership is lost; None while waiting."""
        partition = self.partition(tp)
        if partition is None or not partition.is_leader:
            return (
                errors.NOT_LEADER_OR_FOLLOWER,
                -1,
                f"broker {self.broker_id} no longer leads {tp}",
            )
        if (refusal := self.fence.refusal(tp)) is not None:
            return errors.NOT_LEADER_OR_FOLLOWER, -1, refusal
        low_watermark = partition.low_watermark()
        if low_watermark < target:
            return None
        return errors.NONE, low_watermark, ""

    def low_watermark(self, tp: TopicPartition) -> int:
        partition = self.partition(tp)
        return -1 if partition is None else partition.low_watermark()

    # -- the ISR ---------------------------------------------------------------------

    def start_isr_expiration(self) -> None:
        """Check every half ``replica.lag.time.max.ms`` for followers that fell
        behind (Kafka's isr-expiration task; ``isr_expiry.py``)."""
        self._isr_expiration.start()

    def expire_isr_once(self) -> int:
        """One run of the ISR expiration; how many partitions it looked at."""
        return self._isr_expiration.tick()

    def on_isr_written(self, change: IsrChange, version: int | None) -> None:
        """The ISR writer's report (the znode's new version, or None): the partition
        commits or drops the change, and requests waiting on it look again."""
        partition = self.partition(change.tp)
        if partition is not None:
            before = len(partition.isr)
            partition.complete_isr_change(change, version)
            after = len(partition.isr)
            if after < before:
                self.isr_shrinks += 1
            elif after > before:
                self.isr_expands += 1
        self._on_change(change.tp)

    def shutdown(self) -> None:
        self._isr_expiration.shutdown()

    # -- fetch -----------------------------------------------------------------------

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        leader_epoch: int = -1,
        replica_id: int = -1,
        follower_log_start: int = -1,
        client: ClientMetadata | None = None,
        read_committed: bool = False,
    ) -> ReadResult:
        """Batches from ``offset``: below the high watermark for consumers (below the
        last stable offset for ``read_committed`` ones, with the aborted
        transactions overlapping what was read, KIP-98), up to the log end for a
        follower (``replica_id`` >= 0) copying the log.

        A consumer's fetch with ``client`` metadata (Fetch v11+, KIP-392) reads
        a copy this broker follows too, up to its high watermark; on the leader,
        with a replica selector, it may be answered a preferred read replica
        instead of records (Kafka's ``readFromLocalLog``)."""
        partition = self.partition(tp)
        if partition is None:
            error = self._not_leader_error(tp, partition)
            return ReadResult(error, message=f"broker {self.broker_id} does not lead {tp}")
        consumer = replica_id < 0
        committed = read_committed and consumer
        try:
            bound = partition.fetch_bound(
                replica_id,
                leader_epoch,
                only_leader=not consumer or client is None,
                read_committed=committed,
            )
        except PartitionStateError as exc:
            return ReadResult(exc.code, message=str(exc))
        log = partition.log
        high_watermark = log.high_watermark
        log_end = log.log_end_offset
        leads = partition.is_leader
        if consumer and client is not None and leads:
            preferred = self.preferred_read_replica(partition, client, offset)
            if preferred is not None:
                return ReadResult(
                    errors.NONE,
                    high_watermark=high_watermark,
                    log_start_offset=log.log_start_offset,
                    log_end_offset=log_end,
                    preferred_read_replica=preferred,
                    last_stable_offset=log.last_stable_offset,
                    aborted=() if committed else None,
                )
        try:
            records = log.read(offset, max_bytes, max_offset=bound)
            aborted = self._aborted_in(log, offset, records) if committed else None
        except StorageError as exc:
            return ReadResult(
                exc.code,
                high_watermark=high_watermark,
                log_start_offset=log.log_start_offset,
                log_end_offset=log_end,
                message=str(exc),
            )
        if replica_id >= 0:
            moved = partition.record_follower_fetch(replica_id, offset, log_end)
            moved |= partition.record_follower_log_start(replica_id, follower_log_start)
            if moved:
                high_watermark = log.high_watermark
                self._on_change(tp)  # acks=all, consumers and DeleteRecords waiting
        return ReadResult(
            errors.NONE,
            records,
            high_watermark,
            log.log_start_offset,
            log_end,
            from_follower=consumer and not leads,
            last_stable_offset=log.last_stable_offset,
            aborted=aborted,
        )

    @staticmethod
    def _aborted_in(log: Log, offset: int, records: bytes) -> tuple[AbortedTxn, ...]:
        """The aborted transactions a read_committed consumer needs to drop records
        of what was read from ``offset``: those overlapping ``offset`` up to the end
        of the last batch read (Kafka's collectAbortedTransactions with its upper
        bound offset); none when nothing was read."""
        last = last_header(records)
        if last is None:
            return ()
        return tuple(log.collect_aborted_transactions(offset, last.next_offset))

    def preferred_read_replica(
        self, partition: Partition, client: ClientMetadata, fetch_offset: int
    ) -> int | None:
        """The replica ``replica.selector.class`` picks for a consumer's read of a
        partition this broker leads, when it is another broker (Kafka's
        ``findPreferredReadReplica``); None: read here.  The candidates are the
        in-sync followers holding ``fetch_offset`` whose brokers are alive with an
        endpoint on the consumer's listener (broker/replication/replica_selector.py)."""
        selector = self.replica_selector
        if selector is None:
            return None
        brokers = self._metadata().brokers

        def reachable(broker_id: int) -> LiveBroker | None:
            """The broker, when alive with an endpoint on the consumer's listener."""
            broker = brokers.get(broker_id)
            if broker is None or broker.kafka_endpoint_for(client.listener) is None:
                return None
            return broker

        me = reachable(self.broker_id)
        leader = ReplicaView(
            self.broker_id, None if me is None else me.rack, partition.log.log_end_offset, 0
        )
        candidates = [leader]
        for broker_id, log_end, since_ms in partition.read_replica_views(fetch_offset):
            broker = reachable(broker_id)
            if broker is not None:
                candidates.append(ReplicaView(broker_id, broker.rack, log_end, since_ms))
        chosen = selector.select(partition.tp, client, leader, candidates)
        if chosen is None or chosen == leader or chosen not in candidates:
            return None
        return chosen.broker_id

    def fetch_start(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        follower_log_start: int,
        read_committed: bool = False,
    ) -> FetchStart:
        """Where a fetch that has to wait begins: for ``bytes_available`` later."""
        partition = self.partition(tp)
        segment = position = -1
        if partition is not None:
            segment, position = partition.log.end_position()
        return FetchStart(tp, fetch_offset, follower_log_start, segment, position, read_committed)

    def bytes_available(
        self, start: FetchStart, follower: bool, any_replica: bool = False
    ) -> int | None:
        """Bytes a waiting fetch could read now past ``start``, estimated from byte
        positions (up to the log end, also for consumers); None when it must
        answer at once: the partition is no longer led here, the active segment
        rolled, or a follower's log start is behind the leader's.  A consumer's
        fetch with client metadata (``any_replica``, KIP-392) also waits on a
        copy this broker follows, for its high watermark to pass the fetch offset.
        A read_committed consumer's fetch (``start.read_committed``, KIP-98)
        counts only the bytes below the last stable offset."""
        partition = self.partition(start.tp)
        if partition is None:
            return None
        if not partition.is_leader:
            if follower or not any_replica:
                return None
            log = partition.log
            return self._bytes_past(log, self._consumer_end(log, start), start)
        if not follower and self.fence.fenced:
            return None  # a consumer's fetch answers NOT_LEADER_OR_FOLLOWER now
        log = partition.log
        if follower and 0 <= start.follower_log_start < log.log_start_offset:
            return None  # the follower must delete records too
        end = log.log_end_offset if follower else self._consumer_end(log, start)
        return self._bytes_past(log, end, start)

    @staticmethod
    def _consumer_end(log: Log, start: FetchStart) -> int:
        return log.last_stable_offset if start.read_committed else log.high_watermark

    @staticmethod
    def _bytes_past(log: Log, end: int, start: FetchStart) -> int | None:
        """Bytes readable past ``start`` when the readable part of ``log`` ends at
        ``end``; None when the active segment rolled since ``start``.  An ``end``
        below the log end (a last stable offset) is found in the active segment,
        so the bytes after it do not count."""
        if end <= start.fetch_offset:
            return 0
        segment, position = log.end_position()
        if segment != start.end_segment:
            return None
        if end < log.log_end_offset:
            if end <= segment:
                return 1  # the readable part ends before the active segment: no new bytes
            active = log.active_segment
            try:
                hit = active.translate_offset(end, active.offset_index.lookup(end).position)
            except (OSError, StorageError):
                return None  # answer now: the read says what is wrong
            if active.base_offset != segment:
                return None  # rolled meanwhile
            if hit is not None:
                position = hit.position
        return max(position - start.end_position, 1)

    def end_offset_for_epoch(
        self, tp: TopicPartition, current_leader_epoch: int, epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, epoch, end offset) for OffsetsForLeaderEpoch: the largest epoch at
        or below ``epoch`` and where it ends; a stale or future
        ``current_leader_epoch`` (when given) is fenced."""
        partition = self.partition(tp)
        if partition is None or not partition.is_leader:
            return self._not_leader_error(tp, partition), -1, -1
        if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
            stale = current_leader_epoch < partition.leader_epoch
            return (errors.FENCED_LEADER_EPOCH if stale else errors.UNKNOWN_LEADER_EPOCH), -1, -1
        log = partition.log
        found_epoch, end_offset = log.leader_epoch_cache.end_offset_for(epoch, log.log_end_offset)
        return errors.NONE, found_epoch, end_offset

    def list_offset(
        self, tp: TopicPartition, timestamp: int, read_committed: bool = False
    ) -> tuple[ErrorCode, int, int, int]:
        """(error, timestamp, offset, leader epoch) for ListOffsets.  With
        ``read_committed`` (KIP-98) the latest offset (-1) is the last stable
        offset, and a record found by its timestamp counts only below it, as
        Kafka's fetchOffsetForTimestamp answers a read_committed consumer."""
        partition = self.partition(tp)
        if partition is None or not partition.leads_now:
            error = self._not_leader_error(tp, partition)
            return error, -1, -1, -1
        log = partition.log
        if timestamp == -1:
            latest = log.last_stable_offset if read_committed else log.high_watermark
            return errors.NONE, -1, latest, partition.leader_epoch
        try:
            found = log.offset_for_timestamp(timestamp)
        except ValueError:
            return errors.INVALID_REQUEST, -1, -1, -1
        if found is None or (
            read_committed and timestamp != -2 and found.offset >= log.last_stable_offset
        ):
            return errors.NONE, -1, -1, partition.leader_epoch
        return errors.NONE, found.timestamp, found.offset, partition.leader_epoch


class AnyReplicaReadiness:
    """What a consumer's delayed fetch with client metadata (KIP-392) asks of the
    replica manager: ``bytes_available`` on the partitions it leads or follows."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def bytes_available(self, start: FetchStart, follower: bool) -> int | None:
        return self._replicas.bytes_available(start, follower, any_replica=True)


def _some(tps: Sequence[TopicPartition]) -> str:
    """A few of ``tps`` for a log line."""
    if not tps:
        return ""
    shown = ", ".join(str(tp) for tp in tps[:SHOWN_PARTITIONS])
    return f" ({shown}{', ...' if len(tps) > SHOWN_PARTITIONS else ''})"
