"""The data path: Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch, DeleteRecords.

These run on the broker's event loop.  What they do at once (append to and
read from the page cache, look up offsets) is short and runs inline; what
they wait for (a long poll short of ``min_bytes``, an acks=all append not
yet on the ISR, followers that must move their log starts) waits in a
purgatory (``delayed.py``), holding no thread.

Every handler checks the request's fields first (``request_checks``):
request-level faults raise ``InvalidRequest`` (INVALID_ARGUMENT, by the
request guard), per-partition ones are answered with Kafka's error codes.

Fetch from follower (KIP-392, docs/kafka-protocol.md): a consumer's fetch that
carries client metadata (Kafka's Fetch v11+) reads a partition this broker
follows too, up to its high watermark, and a leader with a replica selector may
answer a partition with the replica to read it from instead of records; those
partitions come back in ``preferred`` (broker id by partition).

Produce and Fetch take and give the data path's own types
(``requests/data_types.py``); each protocol edge adapts its messages to them.

Transactions (KIP-98, ``transactional_data.py``): a Produce of transactional
batches needs Write on its transactional id; a consumer's Fetch with
isolation_level 1 (read_committed) reads up to each partition's last stable
offset, not its high watermark, and is answered the aborted transactions
overlapping what it read (read_uncommitted: none); its long poll counts bytes
below the last stable offset only, and a fetch session answers a partition
whose last stable offset moved.  Every answer carries the last stable
offset.  A read_committed ListOffsets answers LATEST with the last stable
offset.  Followers (``replica_id`` >= 0) always read up to the log end.

Authorization (docs/security.md): each handler takes the caller's ``Session``
and asks what Kafka 2.x asks, answering a refused topic's partitions
TOPIC_AUTHORIZATION_FAILED: Produce needs Write on the topic (and, with
transactional batches, Write on the transactional id), Fetch Read
(a follower's fetch ClusterAction on the cluster), ListOffsets Describe,
DeleteRecords Delete; OffsetsForLeaderEpoch needs ClusterAction on the
cluster or Describe on the topic, and from a replica (``replica_id`` >= 0)
ClusterAction (else CLUSTER_AUTHORIZATION_FAILED); DescribeLogDirs needs
Describe on the cluster and answers no log dirs without it.

Thread safety: runs on the event loop only.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from annal.broker.metrics import BrokerMetrics
from annal.broker.replication.replica_manager import AppendResult, ReadResult, ReplicaManager
from annal.broker.replication.replica_selector import ClientMetadata
from annal.broker.requests import admin_types as at
from annal.broker.requests import data_types as dt
from annal.broker.requests import request_checks as checks
from annal.broker.requests.delayed import (
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    DelayedSessionFetch,
    Purgatories,
)
from annal.broker.requests.fetch_sessions import (
    INVALID_SESSION_ID,
    CachedPartition,
    FetchKind,
    FetchSession,
    FetchSessionCache,
    PartitionFetch,
    Probe,
    kind_of,
)
from annal.broker.security.authorization import (
    ALLOW_ALL,
    INTERNAL,
    RequestAuthorizer,
)
from annal.broker.transactions.data_path import (
    READ_COMMITTED,
    aborted_transactions,
    check_isolation_level,
    has_transactional_batches,
    transactional_refusal,
)
from annal.security.acl import AclOperation
from annal.security.session import Session
from annal.storage.batch import count_records
from annal.storage.files import TopicPartition

from annal import errors
from annal.errors import ErrorCode

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024
# How often an incremental fetch looks at every partition of its session (``_sweep``):
# this, or a quarter of replica.lag.time.max.ms when that is shorter.
SESSION_SWEEP_S = 10.0


class Deadline(Protocol):
    """What the handlers need of a request's context: the time its caller has left
    (a gRPC context; the Kafka listener's requests carry no deadline of their own)."""

    def time_remaining(self) -> float | None: ...


def wait_ms(timeout_ms: int, context: Deadline) -> int:
    """A request's wait: its timeout (0 for the default), cut at the caller's deadline."""
    return checks.bounded_wait_ms(timeout_ms, DEFAULT_TIMEOUT_MS, context.time_remaining())


@dataclass(frozen=True, slots=True)
class _Awaited:
    """An acks=-1 append waiting for its ISR: where its answer is in the response."""

    tp: TopicPartition
    last_offset: int
    topic_slot: int
    partition_slot: int


class DataApi:
    """See the module docstring."""

    def __init__(
        self,
        replicas: ReplicaManager,
        purgatories: Purgatories,
        run_storage: Callable[[Callable[[], AppendResult]], Awaitable[AppendResult]],
        metrics: BrokerMetrics | None = None,
        authorizer: RequestAuthorizer = ALLOW_ALL,
        fetch_sessions: FetchSessionCache | None = None,
    ) -> None:
        self._replicas = replicas
        self._metrics = metrics
        self._authorizer = authorizer
        self._purgatories = purgatories
        self._run_storage = run_storage
        # Kafka's Fetch v7+ sessions (KIP-227); events on a partition mark it dirty
        # in the sessions holding it and wake their waiting fetches
        self.fetch_sessions = fetch_sessions or FetchSessionCache()
        purgatories.add_listener(self._touched)
        if metrics is not None:
            metrics.add_fetch_sessions(self.fetch_sessions)
        # Partitions with an append on the storage thread: the end of each one's
        # chain.  Later appends to them queue behind it, in arrival order.
        self._off_loop: dict[TopicPartition, asyncio.Future[AppendResult]] = {}

    # -- produce -------------------------------------------------------------------

    async def produce(
        self, request: dt.ProduceRequest, context: Deadline, session: Session = INTERNAL
    ) -> dt.ProduceResponse:
        """Append each partition's records (Write on the topic: Kafka's Produce)."""
        checks.check_timeout_ms(request.timeout_ms)
        if request.transactional_id or has_transactional_batches(
            data.records for topic in request.topics for data in topic.partitions
        ):
            txn_refusal = transactional_refusal(self._authorizer, session, request.transactional_id)
            if txn_refusal is not None:
                return _produce_refused(request, txn_refusal)
        refused_acks = checks.acks(request.acks)
        replicas = self._replicas
        response = dt.ProduceResponse()
        waiting: list[_Awaited] = []
        refused = self._authorizer.refused_topics(
            session, AclOperation.WRITE, [t.name for t in request.topics]
        )
        for topic in request.topics:
            out = dt.TopicProduceResponse(topic.name)
            response.topics.append(out)
            for data in topic.partitions:
                records = data.records
                refusal = (
                    refused.get(topic.name)
                    or refused_acks
                    or checks.produce_partition(topic.name, data.partition)
                )
                if refusal is not None:
                    out.partitions.append(
                        dt.PartitionProduceResponse(
                            data.partition, refusal.error.number, error_message=refusal.message
                        )
                    )
                    continue
                tp = TopicPartition(topic.name, data.partition)
                if tp in self._off_loop or replicas.roll_due(tp, len(records)):
                    result = await self._append_off_loop(tp, records, request.acks)
                else:
                    result = replicas.append(tp, records, request.acks)
                if self._metrics is not None:
                    self._count_in(topic.name, len(records), result)
                if request.acks == -1 and result.error == errors.NONE:
                    waiting.append(
                        _Awaited(
                            tp, result.last_offset, len(response.topics) - 1, len(out.partitions)
                        )
                    )
                out.partitions.append(
                    dt.PartitionProduceResponse(
                        data.partition,
                        result.error.number,
                        result.base_offset,
                        result.log_append_time_ms,
                        result.log_start_offset,
                        result.message,
                        [
                            dt.ProduceRecordError(e.batch_index, e.message)
                            for e in result.record_errors
                        ],
                    )
                )
        if waiting:
            await self._await_replication(response, waiting, wait_ms(request.timeout_ms, context))
        return response

    def _count_in(self, topic: str, size: int, result: AppendResult) -> None:
        metrics = self._metrics
        assert metrics is not None
        if result.error == errors.NONE:
            if result.records:
                metrics.topic("bytesin", topic, size)
                metrics.topic("messagesin", topic, result.records)
        else:
            metrics.request_error("Produce", result.error.name)

    def _count_out(self, topic: str, result: ReadResult, follower: bool) -> None:
        metrics = self._metrics
        assert metrics is not None
        if result.error != errors.NONE:
            metrics.request_error("Fetch", result.error.name)
        elif result.preferred_read_replica >= 0:
            metrics.topic("preferredreadreplica", topic, 1)
        elif result.records:
            if follower:
                metrics.topic("replicationbytesout", topic, len(result.records))
            else:
                metrics.topic("bytesout", topic, len(result.records))
                metrics.topic("messagesout", topic, count_records(result.records))
                if result.from_follower:
                    metrics.topic("followerbytesout", topic, len(result.records))

    async def _append_off_loop(self, tp: TopicPartition, records: bytes, acks: int) -> AppendResult:
        """An append that rolls its log runs on the storage thread (a new segment's
        files take milliseconds to create), so the loop serves everyone else
        meanwhile.  Appends to the same partition that arrive in the meantime
        follow it there one by one, so they keep their order; a cancelled
        request's append still finishes before the next begins."""
        previous = self._off_loop.get(tp)

        async def chained() -> AppendResult:
            if previous is not None:
                await asyncio.wait([previous])  # its outcome is its own request's
            try:
                return await self._run_storage(lambda: self._replicas.append(tp, records, acks))
            finally:
                if self._off_loop.get(tp) is task:
                    del self._off_loop[tp]

        task = self._off_loop[tp] = asyncio.ensure_future(chained())
        return await asyncio.shield(task)

    async def _await_replication(
        self, response: dt.ProduceResponse, waiting: list[_Awaited], timeout_ms: int
    ) -> None:
        """acks=-1: answer each appended partition once the ISR holds it, or with
        the reason it does not (the records stay appended, as in Kafka)."""
        last: dict[TopicPartition, int] = {}
        for awaited in waiting:  # a partition named twice waits for its later append
            last[awaited.tp] = max(last.get(awaited.tp, -1), awaited.last_offset)
        outcomes = await self.await_replication(last, timeout_ms)
        for awaited in waiting:
            error, message = outcomes[awaited.tp]
            if error != errors.NONE:
                answer = response.topics[awaited.topic_slot].partitions[awaited.partition_slot]
                answer.error = error.number
                answer.error_message = message

    async def await_replication(
        self, appended: dict[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, tuple[ErrorCode, str]]:
        """(error, message) per partition once each appended last offset is on the
        ISR, or cannot be, or ``timeout_ms`` passed (REQUEST_TIMED_OUT)."""
        operation = DelayedProduce(self._replicas.replication_outcome, appended, timeout_ms)
        return await self._purgatories.produce.wait(operation, appended, timeout_ms)

    # -- fetch ---------------------------------------------------------------------

    async def fetch(
        self,
        request: dt.FetchRequest,
        context: Deadline,
        session: Session = INTERNAL,
        client: ClientMetadata | None = None,
        preferred: dict[TopicPartition, int] | None = None,
    ) -> dt.FetchResponse:
        """Read each partition (Read on the topic; a follower's fetch, replica_id >= 0,
        needs ClusterAction on the cluster), waiting for min_bytes up to max_wait_ms.
        A consumer's ``client`` metadata (KIP-392) lets it read from a follower and
        have partitions answered a preferred read replica, put in ``preferred``."""
        checks.check_replica_id(request.replica_id)
        checks.check_fetch_limits(request.max_wait_ms, request.min_bytes, request.max_bytes)
        check_isolation_level(request.isolation_level)
        if request.replica_id >= 0 and not self._authorizer.cluster_action(session):
            return _fetch_refused(request, _refused_replica(session, request.replica_id))
        if request.replica_id >= 0:
            client = None  # a follower copies from the leader only
        chosen: dict[TopicPartition, int] = {}
        # a refused topic's partitions are errors: the answer comes at once
        refused = self._authorizer.refused_topics(
            session, AclOperation.READ, [t.name for t in request.topics]
        )
        response = self._fetch_once(request, refused, client, chosen)
        wanted = max(request.min_bytes, 1)
        if (
            request.max_wait_ms <= 0
            or _size(response) >= wanted
            or _has_error(response)
            or chosen  # sent elsewhere: answered at once, as Kafka 3.2+ (KAFKA-13767)
        ):
            if preferred is not None:
                preferred.update(chosen)
            return response
        follower = request.replica_id >= 0
        committed = _read_committed(request)
        starts = [
            self._replicas.fetch_start(
                TopicPartition(topic.name, p.partition),
                p.fetch_offset,
                p.log_start_offset,
                committed,
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        readiness = self._replicas if client is None else self._replicas.any_replica
        operation = DelayedFetch(readiness, starts, wanted, follower)
        timeout_ms = wait_ms(request.max_wait_ms, context)
        await self._purgatories.fetch.wait(operation, [s.tp for s in starts], timeout_ms)
        if operation.saw_nothing:
            return response  # expired with nothing new: the first answer still holds
        response = self._fetch_once(request, refused, client, chosen)
        if preferred is not None:
            preferred.update(chosen)
        return response

    def _fetch_once(
        self,
        request: dt.FetchRequest,
        refused: Mapping[str, checks.Refusal],
        client: ClientMetadata | None = None,
        chosen: dict[TopicPartition, int] | None = None,
    ) -> dt.FetchResponse:
        """Read each partition once; those a leader sends elsewhere (KIP-392) go
        into ``chosen`` (cleared first) with the replica to read them from."""
        if chosen is not None:
            chosen.clear()
        replicas = self._replicas
        budget = request.max_bytes or DEFAULT_FETCH_MAX_BYTES
        committed = _read_committed(request)
        response = dt.FetchResponse()
        for topic in request.topics:
            out = dt.TopicFetchResponse(topic.name)
            response.topics.append(out)
            for p in topic.partitions:
                epoch = p.current_leader_epoch
                refusal = refused.get(topic.name) or checks.fetch_partition(
                    topic.name,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    epoch,
                    p.log_start_offset,
                )
                if refusal is not None:
                    out.partitions.append(
                        dt.PartitionFetchResponse(
                            p.partition, refusal.error.number, error_message=refusal.message
                        )
                    )
                    continue
                limit = min(p.partition_max_bytes or budget, budget)
                tp = TopicPartition(topic.name, p.partition)
                result = replicas.read(
                    tp,
                    p.fetch_offset,
                    max(limit, 1),
                    epoch,
                    request.replica_id,
                    p.log_start_offset,
                    client,
                    committed,
                )
                if result.preferred_read_replica >= 0 and chosen is not None:
                    chosen[tp] = result.preferred_read_replica
                budget = max(budget - len(result.records), 0)
                if self._metrics is not None:
                    self._count_out(topic.name, result, request.replica_id >= 0)
                out.partitions.append(
                    dt.PartitionFetchResponse(
                        p.partition,
                        result.error.number,
                        result.high_watermark,
                        result.log_start_offset,
                        result.records,
                        result.message,
                        result.log_end_offset,
                        result.last_stable_offset,
                        aborted_transactions(result.aborted),
                    )
                )
        return response

    # -- fetch sessions (KIP-227) --------------------------------------------------

    async def fetch_in_session(
        self,
        request: dt.FetchRequest,
        session_id: int,
        epoch: int,
        forgotten: Iterable[TopicPartition],
        context: Deadline,
        session: Session = INTERNAL,
        client: ClientMetadata | None = None,
        preferred: dict[TopicPartition, int] | None = None,
    ) -> tuple[dt.FetchResponse, int]:
        """A Fetch with a fetch session's fields (``broker/requests/fetch_sessions.py``): its
        answer and the session id to send with it.  A full fetch is ``fetch``'s,
        opening a session when asked and a slot is free; an incremental fetch
        (``request`` holds the partitions added or changed) is answered with the
        session's partitions that have something new.  Raises FetchSessionError
        for an incremental fetch of an unknown session or out of step.  ``client``
        and ``preferred`` are ``fetch``'s (KIP-392)."""
        checks.check_replica_id(request.replica_id)
        checks.check_fetch_limits(request.max_wait_ms, request.min_bytes, request.max_bytes)
        check_isolation_level(request.isolation_level)
        if request.replica_id >= 0:
            client = None  # a follower copies from the leader only
        sessions = self.fetch_sessions
        kind = kind_of(epoch)
        if kind is not FetchKind.INCREMENTAL:
            if session_id != INVALID_SESSION_ID:
                sessions.remove(session_id, session.user)  # a full fetch closes it
            response = await self.fetch(request, context, session, client, preferred)
            if kind is FetchKind.SESSIONLESS:
                return response, INVALID_SESSION_ID
            opened = sessions.create(request.replica_id, session.user, _cached(request, response))
            return response, INVALID_SESSION_ID if opened is None else opened.id
        changed = dict(_partition_fetches(request))
        fetch = sessions.incremental(
            session_id, epoch, request.replica_id, session.user, changed, forgotten
        )
        if fetch is None:  # it forgot every partition: closed
            return dt.FetchResponse(), INVALID_SESSION_ID
        chosen: dict[TopicPartition, int] = {}
        response = await self._fetch_incremental(
            fetch, changed, request, context, session, client, chosen
        )
        if preferred is not None:
            preferred.update(chosen)
        return response, fetch.id

    async def _fetch_incremental(
        self,
        fetch: FetchSession,
        changed: Iterable[TopicPartition],
        request: dt.FetchRequest,
        context: Deadline,
        session: Session,
        client: ClientMetadata | None,
        chosen: dict[TopicPartition, int],
    ) -> dt.FetchResponse:
        """Read the partitions the request names and those touched since (all of them
        once per sweep), answer those with something new; with nothing to answer,
        wait for the session's partitions to be touched, up to max_wait_ms.  A
        partition sent to another replica (``chosen``, KIP-392) is answered at once."""
        any_replica = client is not None
        committed = _read_committed(request)
        wanted = max(request.min_bytes, 1)
        loop = asyncio.get_running_loop()
        timeout_ms = wait_ms(request.max_wait_ms, context) if request.max_wait_ms > 0 else 0
        deadline = loop.time() + timeout_ms / 1000
        to_read = dict.fromkeys(changed)
        now = time.monotonic()
        if now - fetch.swept >= self._sweep_s:
            fetch.swept = now
            self._sweep(fetch, to_read, any_replica, committed)
        before = -1  # bytes found by the previous read: a wake-up that finds no more answers
        while True:
            to_read.update(dict.fromkeys(fetch.take_dirty()))
            response = self._read_session(fetch, to_read, request, session, client, chosen)
            news, size, urgent = _news(fetch, response, chosen)
            if size >= wanted or urgent or size <= before or loop.time() >= deadline:
                return _answered(fetch, response, news, chosen)
            before = size
            to_read = dict.fromkeys(news)  # read again after the wait
            operation = DelayedSessionFetch(
                fetch,
                lambda tp, cached: self._probe(tp, cached, fetch.follower, any_replica, committed),
            )
            remaining_ms = max(int((deadline - loop.time()) * 1000), 0)
            await self._purgatories.fetch.wait(operation, [fetch], remaining_ms)
            to_read.update(dict.fromkeys(operation.news))

    @property
    def _sweep_s(self) -> float:
        return min(SESSION_SWEEP_S, self._replicas.replica_lag_time_max_ms / 4000)

    def _sweep(
        self,
        fetch: FetchSession,
        to_read: dict[TopicPartition, None],
        any_replica: bool,
        committed: bool,
    ) -> None:
        """Look at every partition of a session (what no event reports: retention
        moving a log start), and have a follower count as fetching those it is
        caught up on: Kafka's leader takes each fetch of a session as a fetch of
        all its partitions, and a follower that no longer fetched them would
        leave their ISRs after replica.lag.time.max.ms."""
        follower = fetch.follower
        for tp, cached in fetch.partitions.items():
            if self._probe(tp, cached, follower, any_replica, committed) is not Probe.NOTHING:
                to_read[tp] = None
                continue
            partition = self._replicas.partition(tp) if follower else None
            if partition is not None and partition.record_follower_fetch(
                fetch.replica_id, cached.fetch.fetch_offset, partition.log.log_end_offset
            ):
                self._purgatories.touch(tp)  # the high watermark moved

    def _read_session(
        self,
        fetch: FetchSession,
        tps: Iterable[TopicPartition],
        request: dt.FetchRequest,
        session: Session,
        client: ClientMetadata | None,
        chosen: dict[TopicPartition, int],
    ) -> dt.FetchResponse:
        """``_fetch_once`` of some of a session's partitions, at their cached positions."""
        ask = dt.FetchRequest(
            replica_id=fetch.replica_id,
            min_bytes=request.min_bytes,
            max_bytes=request.max_bytes,
            isolation_level=request.isolation_level,
        )
        topics: dict[str, dt.TopicFetchData] = {}
        for tp in tps:
            cached = fetch.partitions.get(tp)
            if cached is None:
                continue
            out = topics.get(tp.topic)
            if out is None:
                out = topics[tp.topic] = dt.TopicFetchData(tp.topic)
                ask.topics.append(out)
            wanted = cached.fetch
            out.partitions.append(
                dt.PartitionFetchData(
                    tp.partition,
                    wanted.fetch_offset,
                    wanted.max_bytes,
                    max(wanted.leader_epoch, dt.NO_LEADER_EPOCH),
                    wanted.log_start_offset,
                )
            )
        if fetch.follower and not self._authorizer.cluster_action(session):
            return _fetch_refused(ask, _refused_replica(session, fetch.replica_id))
        refused = self._authorizer.refused_topics(session, AclOperation.READ, list(topics))
        return self._fetch_once(ask, refused, client, chosen)

    def _probe(
        self,
        tp: TopicPartition,
        cached: CachedPartition,
        follower: bool,
        any_replica: bool,
        committed: bool = False,
    ) -> Probe:
        """What a session's touched partition has to say, from attributes alone.  A
        consumer with client metadata (``any_replica``, KIP-392) reads a copy this
        broker follows as well as one it leads; a read_committed one (``committed``)
        reads up to the last stable offset."""
        partition = self._replicas.partition(tp)
        if partition is None:
            return Probe.NOW
        if follower:
            leads = partition.is_leader
        elif partition.is_leader:
            leads = partition.leads_now
        else:
            leads = any_replica  # read here up to this follower's high watermark
        if not leads or cached.high_watermark < 0:
            # an error to answer (a consumer's too, when fenced), or never answered
            return Probe.NOW
        wanted = cached.fetch
        if 0 <= wanted.leader_epoch != partition.leader_epoch:
            return Probe.NOW
        log = partition.log
        if log.log_start_offset != cached.log_start_offset:
            return Probe.NOW
        end = log.log_end_offset
        if wanted.fetch_offset > end:
            return Probe.NOW  # out of range: the log was cut back
        stable = log.last_stable_offset
        readable = end if follower else stable if committed else log.high_watermark
        if readable > wanted.fetch_offset:
            return Probe.DATA
        if log.high_watermark == cached.high_watermark and stable == cached.last_stable_offset:
            return Probe.NOTHING
        return Probe.METADATA

    def _touched(self, tp: TopicPartition) -> None:
        """An event on ``tp`` (``Purgatories.touch``, on the loop): the sessions
        holding it mark it dirty, and a fetch waiting on one of them looks."""
        for fetch in self.fetch_sessions.touched(tp):
            self._purgatories.fetch.check_and_complete(fetch)

    # -- log dirs ------------------------------------------------------------------

    def describe_log_dirs(
        self, request: at.DescribeLogDirsRequest, session: Session = INTERNAL
    ) -> at.DescribeLogDirsResponse:
        """Each log dir of this broker with the partitions in it (their size), as
        Kafka's DescribeLogDirs answers; ``topics`` narrows the partitions.  A
        caller that may not Describe the cluster is answered no log dirs, as
        Kafka 2.x answers it."""
        response = at.DescribeLogDirsResponse()
        if not self._authorizer.cluster(session, AclOperation.DESCRIBE):
            return response
        logs = self._replicas.logs
        wanted = set(request.topics)
        response.log_dirs = [at.LogDirDescription(str(d)) for d in logs.log_dirs]
        by_dir = {entry.path: entry for entry in response.log_dirs}
        offline = {str(d) for d in logs.failures.offline_dirs()}
        for path, entry in by_dir.items():
            if path in offline:  # Kafka answers an offline dir this way (KIP-113)
                entry.error = errors.KAFKA_STORAGE_ERROR.number
                entry.total_bytes = entry.usable_bytes = -1
                continue
            try:
                usage = shutil.disk_usage(path)
            except OSError:
                entry.error = errors.KAFKA_STORAGE_ERROR.number
                entry.total_bytes = entry.usable_bytes = -1
                continue
            entry.total_bytes, entry.usable_bytes = usage.total, usage.free
        for tp, log in sorted(logs.all_logs().items()):
            where = logs.log_dir_of(tp)
            if (wanted and tp.topic not in wanted) or where is None or str(where) in offline:
                continue
            by_dir[str(where)].partitions.append(
                at.LogDirPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    size=log.size,
                    offset_lag=max(log.high_watermark - log.log_end_offset, 0),
                    is_future=False,
                )
            )
        return response

    # -- offsets -------------------------------------------------------------------

    def list_offsets(
        self, request: dt.ListOffsetsRequest, session: Session = INTERNAL
    ) -> dt.ListOffsetsResponse:
        """Each partition's offset for its timestamp (Describe on the topic); LATEST
        is the last stable offset for a read_committed caller (KIP-98)."""
        checks.check_replica_id(request.replica_id)
        check_isolation_level(request.isolation_level)
        committed = request.isolation_level == READ_COMMITTED
        refused = self._authorizer.refused_topics(
            session, AclOperation.DESCRIBE, [t.name for t in request.topics]
        )
        response = dt.ListOffsetsResponse()
        for topic in request.topics:
            out = dt.TopicListOffsetsResponse(topic.name)
            response.topics.append(out)
            for p in topic.partitions:
                refusal = refused.get(topic.name) or checks.list_offsets_partition(
                    topic.name, p.partition, p.timestamp, p.current_leader_epoch
                )
                if refusal is not None:
                    error, timestamp, offset, epoch = refusal.error, -1, -1, -1
                else:
                    error, timestamp, offset, epoch = self._replicas.list_offset(
                        TopicPartition(topic.name, p.partition), p.timestamp, committed
                    )
                out.partitions.append(
                    dt.PartitionListOffsetsResponse(
                        p.partition, error.number, timestamp, offset, epoch
                    )
                )
        return response

    def offsets_for_leader_epoch(
        self, request: dt.OffsetsForLeaderEpochRequest, session: Session = INTERNAL
    ) -> dt.OffsetsForLeaderEpochResponse:
        """Where each asked-for leader epoch ends on this leader (KIP-101/279): what
        a follower truncates to before it fetches, and a consumer checks after a
        leader change (KIP-320).  ClusterAction on the cluster allows every
        partition; without it a replica (``replica_id`` >= 0) is refused
        CLUSTER_AUTHORIZATION_FAILED and a consumer needs Describe on each topic."""
        checks.check_replica_id(request.replica_id)
        names = [t.name for t in request.topics]
        refused: dict[str, checks.Refusal] = {}
        if not self._authorizer.cluster(
            session, AclOperation.CLUSTER_ACTION, log_denied=request.replica_id >= 0
        ):
            if request.replica_id >= 0:
                replica = _refused_replica(session, request.replica_id, "OffsetsForLeaderEpoch")
                refused = dict.fromkeys(names, replica)
            else:
                refused = self._authorizer.refused_topics(session, AclOperation.DESCRIBE, names)
        response = dt.OffsetsForLeaderEpochResponse()
        for topic in request.topics:
            out = dt.TopicEpochEnds(topic.name)
            response.topics.append(out)
            for p in topic.partitions:
                refusal = refused.get(topic.name) or checks.epoch_partition(
                    topic.name, p.partition, p.current_leader_epoch, p.leader_epoch
                )
                if refusal is not None:
                    error, epoch, end_offset = refusal.error, -1, -1
                else:
                    error, epoch, end_offset = self._replicas.end_offset_for_epoch(
                        TopicPartition(topic.name, p.partition),
                        p.current_leader_epoch,
                        p.leader_epoch,
                    )
                out.partitions.append(
                    dt.PartitionEpochEnd(p.partition, error.number, epoch, end_offset)
                )
        return response

    # -- delete records ------------------------------------------------------------

    async def delete_records(
        self, request: at.DeleteRecordsRequest, context: Deadline, session: Session = INTERNAL
    ) -> at.DeleteRecordsResponse:
        """Move each partition's log start on its leader (this broker), then answer
        once the in-sync followers have followed (or the wait ran out).  Needs
        Delete on the topic."""
        checks.check_timeout_ms(request.timeout_ms)
        refused = self._authorizer.refused_topics(
            session, AclOperation.DELETE, [p.topic for p in request.partitions], audited=True
        )
        outcomes: dict[int, tuple[ErrorCode, int, str]] = {}
        targets: dict[TopicPartition, int] = {}
        slots: dict[int, TopicPartition] = {}
        for slot, wanted in enumerate(request.partitions):
            refusal = refused.get(wanted.topic) or checks.delete_records_partition(
                wanted.topic, wanted.partition, wanted.offset
            )
            if refusal is not None:
                outcomes[slot] = (refusal.error, -1, refusal.message)
                continue
            tp = TopicPartition(wanted.topic, wanted.partition)
            error, low_watermark, message = self._replicas.delete_records(tp, wanted.offset)
            if error != errors.NONE:
                outcomes[slot] = (error, low_watermark, message)
                continue
            targets[tp] = max(targets.get(tp, -1), low_watermark)
            slots[slot] = tp
        if targets:
            timeout_ms = wait_ms(request.timeout_ms, context)
            operation = DelayedDeleteRecords(
                self._replicas.delete_records_outcome,
                self._replicas.low_watermark,
                targets,
                timeout_ms,
            )
            done = await self._purgatories.delete_records.wait(operation, targets, timeout_ms)
            for slot, tp in slots.items():
                outcomes[slot] = done[tp]
        response = at.DeleteRecordsResponse()
        for slot, wanted in enumerate(request.partitions):
            error, low_watermark, message = outcomes[slot]
            response.results.append(
                at.DeleteRecordsResult(
                    topic=wanted.topic,
                    partition=wanted.partition,
                    low_watermark=low_watermark,
                    error=error.number,
                    error_message=message,
                )
            )
        return response


def _partition_fetches(
    request: dt.FetchRequest,
) -> Iterable[tuple[TopicPartition, PartitionFetch]]:
    for topic in request.topics:
        for p in topic.partitions:
            epoch = p.current_leader_epoch
            yield (
                TopicPartition(topic.name, p.partition),
                PartitionFetch(p.fetch_offset, p.partition_max_bytes, p.log_start_offset, epoch),
            )


def _cached(
    request: dt.FetchRequest, response: dt.FetchResponse
) -> dict[TopicPartition, CachedPartition]:
    """A new session's partitions: as a full fetch asked for them and was answered."""
    cached = {tp: CachedPartition(wanted) for tp, wanted in _partition_fetches(request)}
    for t in response.topics:
        for p in t.partitions:
            found = cached.get(TopicPartition(t.name, p.partition))
            if found is not None:
                found.answered(p.error, p.high_watermark, p.log_start_offset, p.last_stable_offset)
    return cached


def _news(
    fetch: FetchSession, response: dt.FetchResponse, chosen: Mapping[TopicPartition, int]
) -> tuple[list[TopicPartition], int, bool]:
    """The partitions of ``response`` with something new for the session's fetcher,
    their bytes of records, and whether one must be answered now (an error, a
    moved log start, a preferred read replica in ``chosen``: Kafka always answers
    one)."""
    news: list[TopicPartition] = []
    size = 0
    urgent = False
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            cached = fetch.partitions[tp]
            records = len(p.records)
            redirected = tp in chosen
            if redirected or cached.has_news(
                p.error, p.high_watermark, p.log_start_offset, records, p.last_stable_offset
            ):
                news.append(tp)
                size += records
                urgent |= (
                    redirected
                    or p.error != errors.NONE.number
                    or p.log_start_offset != cached.log_start_offset
                )
    return news, size, urgent


def _answered(
    fetch: FetchSession,
    response: dt.FetchResponse,
    news: Sequence[TopicPartition],
    chosen: Mapping[TopicPartition, int],
) -> dt.FetchResponse:
    """``response`` cut down to ``news``, which the session remembers as sent.  A
    partition answered with records, an error or a preferred read replica
    (``chosen``) stays dirty: the next fetch reads it again, so records the
    fetcher did not move past are sent again, and an error is answered until it
    is gone or the fetcher forgets the partition (as Kafka, which reads every
    partition of a session on every fetch, does)."""
    sent = set(news)
    for t in response.topics:
        for i in reversed(range(len(t.partitions))):
            if TopicPartition(t.name, t.partitions[i].partition) not in sent:
                del t.partitions[i]
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            fetch.partitions[tp].answered(
                p.error, p.high_watermark, p.log_start_offset, p.last_stable_offset
            )
            if p.error != errors.NONE.number or p.records or tp in chosen:
                fetch.dirty.add(tp)
    for i in reversed(range(len(response.topics))):
        if not response.topics[i].partitions:
            del response.topics[i]
    return response


def _read_committed(request: dt.FetchRequest) -> bool:
    """A consumer's read_committed fetch (a follower's reads to the log end)."""
    return request.isolation_level == READ_COMMITTED and request.replica_id < 0


def _produce_refused(request: dt.ProduceRequest, refusal: checks.Refusal) -> dt.ProduceResponse:
    """Every partition of ``request`` answered ``refusal``."""
    error = refusal.error.number
    return dt.ProduceResponse(
        [
            dt.TopicProduceResponse(
                topic.name,
                [
                    dt.PartitionProduceResponse(p.partition, error, error_message=refusal.message)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _size(response: dt.FetchResponse) -> int:
    return sum(len(p.records) for t in response.topics for p in t.partitions)


def _has_error(response: dt.FetchResponse) -> bool:
    return any(p.error != errors.NONE.number for t in response.topics for p in t.partitions)


# -- authorization -------------------------------------------------------------------


def _refused_replica(session: Session, replica_id: int, what: str = "a fetch") -> checks.Refusal:
    return checks.Refusal(
        errors.CLUSTER_AUTHORIZATION_FAILED,
        f"{what} as replica {replica_id} needs ClusterAction on the cluster, which "
        f"{session.principal} does not have",
    )


def _fetch_refused(request: dt.FetchRequest, refusal: checks.Refusal) -> dt.FetchResponse:
    error = refusal.error.number
    return dt.FetchResponse(
        [
            dt.TopicFetchResponse(
                topic.name,
                [
                    dt.PartitionFetchResponse(p.partition, error, error_message=refusal.message)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )
