"""The follower's side of replication: fetcher threads that copy leaders' logs.

A broker that follows a partition asks the partition's leader for everything
past its own log end, with its broker id as ``replica_id``, and stores what
comes back with ``append_as_follower``: the leader's offsets, leader epochs and
bytes, unchanged.  Its high watermark is the leader's, capped at its own log
end, and its log start offset follows the leader's (records deleted there go
here too).  One fetcher thread serves every partition this broker follows from one
leader (``num.replica.fetchers`` of them per leader when set higher), so a
round trip carries many partitions, as in Kafka's ReplicaFetcherThread.

Truncation by leader epoch (KIP-101/279).  Before the first fetch from a new
leader a partition may hold records the new leader never had (it followed an
older leader that lost them).  The fetcher asks the leader where the
follower's latest epoch ends (OffsetsForLeaderEpoch) and cuts the log there;
when the leader answers with an older epoch, the cut is at the earlier of the
two logs' ends for that epoch; when the leader knows no epoch at or below it,
the cut falls back to the high watermark.  A fetch the leader finds out of
range restarts the copy at the leader's log start (the follower fell behind
retention) or cuts back to the leader's log end.

Errors.  A partition whose leader answers NOT_LEADER_OR_FOLLOWER, a fenced
epoch or another error is asked again after 50 ms the first time (the leader
may not have had its own LeaderAndIsr yet), then every
``replica.fetch.backoff.ms`` (the controller's next LeaderAndIsr usually
replaces it first); a leader that cannot be reached holds up its whole thread
for that backoff.

Transport.  A fetch goes to the leader's Kafka listener when it has one
and the fetcher is set to use it (``inter.broker.listener.name`` PLAINTEXT,
the default with a plaintext gRPC listener): one frame on one TCP
connection costs both brokers a fraction of a gRPC call
(``broker/replication/replica_transport.py``).  A listener that refuses the connection
is logged and that leader is fetched from over gRPC for ``KAFKA_RETRY_S``
(a firewall that lets only gRPC through) — unless gRPC fails too, which
means the leader is down, and the next try is over its Kafka listener again.
OffsetsForLeaderEpoch always goes over gRPC.  Over the Kafka listener the
thread fetches in a fetch session (KIP-227): each request names only the
partitions whose fetch offset, log start or leader epoch moved, and one held
back (an error's backoff, a truncation to do) is left out, so the leader
forgets it (it would otherwise count it as fetched) until it is due again.

Thread safety: ``self._cond`` guards each fetcher's partition map, and
fetched data is stored while holding it, so ``remove`` returns only once no
append to a removed partition is under way: a broker that becomes a
partition's leader never races its own fetcher.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import grpc
from annal.broker.replication.replica_transport import (
    Answer,
    FetchLimits,
    GrpcReplicaFetch,
    KafkaReplicaFetch,
    Wanted,
    by_topic,
)
from annal.client.security import Security
from annal.kafkaproto.client import ConnectionFailed, ListenerUnreachable
from annal.kafkaproto.client_security import ConnectionSecurity
from annal.storage.batch import read_header
from annal.storage.errors import LogDirOfflineError, NonMonotonicOffsetError, StorageError
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
REQUEST_TIMEOUT_S = 30.0
KAFKA_RETRY_S = 60  # a leader's Kafka listener refused a connection: tried again after this
OFFLINE_S = 10**9  # a copy on an offline log dir: never fetched again by this fetcher


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """The ``replica.fetch.*`` broker settings."""

    max_bytes: int = 1024 * 1024  # per partition
    response_max_bytes: int = 10 * 1024 * 1024
    wait_max_ms: int = 500
    min_bytes: int = 1
    backoff_ms: int = 1000
    fetchers_per_leader: int = 1
    security: Security = field(default_factory=Security)  # TLS with a GRPCS:// listener
    # how to reach a leader's inter-broker Kafka listener (broker/inter_broker.py);
    # None: fetch over gRPC only
    kafka_security: ConnectionSecurity | None = field(default_factory=ConnectionSecurity)

    @property
    def limits(self) -> FetchLimits:
        return FetchLimits(
            self.max_bytes, self.response_max_bytes, self.wait_max_ms, self.min_bytes
        )


@dataclass(eq=False, slots=True)
class _Follow:
    """One followed partition; replaced (not mutated) when its leader epoch changes."""

    log: Log
    leader_epoch: int
    truncated: bool = False  # epoch truncation done for this leader epoch
    delayed_until: float = 0.0
    lag: int = -1  # the leader's high watermark minus our log end, at the last answer
    errors: dict[ErrorCode, int] = field(default_factory=dict)
    # what the next fetch asks of it, kept until an answer changes the log (``_store``):
    # with thousands of partitions, rebuilding every one for every fetch costs the
    # fetcher more than the fetch itself
    wanted: Wanted | None = None


class FollowOrder(NamedTuple):
    """One partition to copy: from ``leader`` at ``endpoint`` (its gRPC listener;
    ``kafka_endpoint``: its Kafka listener, if any), in ``leader_epoch``."""

    tp: TopicPartition
    leader: int
    endpoint: str
    log: Log
    leader_epoch: int
    kafka_endpoint: str | None = None


class ReplicaFetcherManager:
    """Which fetcher thread copies which partition.  Thread-safe."""

    def __init__(self, broker_id: int, settings: FetcherSettings) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self._lock = threading.Lock()
        self._fetchers: dict[tuple[int, int], _FetcherThread] = {}
        self._owner: dict[TopicPartition, tuple[int, int]] = {}
        self._closed = False
        # told (from a fetcher thread) of each followed partition whose high
        # watermark or log start moved: consumers reading the copy wait on them (KIP-392)
        self.on_progress: Callable[[TopicPartition], None] = lambda tp: None

    def _progress(self, tp: TopicPartition) -> None:
        self.on_progress(tp)

    def follow(
        self,
        tp: TopicPartition,
        leader: int,
        endpoint: str,
        log: Log,
        leader_epoch: int,
        kafka_endpoint: str | None = None,
    ) -> None:
        """Copy ``tp`` from ``leader`` at ``endpoint`` (its gRPC listener; and
        ``kafka_endpoint``, its Kafka listener, if any) from now on (truncating first)."""
        self.follow_many([FollowOrder(tp, leader, endpoint, log, leader_epoch, kafka_endpoint)])

    def follow_many(self, orders: Iterable[FollowOrder]) -> None:
        """``follow`` for many partitions at once (a LeaderAndIsr): each fetcher
        thread takes its share in one step and wakes once."""
        with self._lock:
            if self._closed:
                return
            shares: dict[tuple[int, int], dict[TopicPartition, _Follow]] = {}
            for order in orders:
                key = (order.leader, hash(order.tp) % self.settings.fetchers_per_leader)
                previous = self._owner.get(order.tp)
                if previous is not None and previous != key:
                    self._fetchers[previous].remove([order.tp])
                fetcher = self._fetchers.get(key)
                address = (order.endpoint, order.kafka_endpoint)
                if fetcher is not None and (fetcher.endpoint, fetcher.kafka_endpoint) != address:
                    # the leader came back at another address: a new thread takes over
                    shares.setdefault(key, {}).update(fetcher.stop())
                    fetcher = None
                if fetcher is None:
                    self._fetchers[key] = _FetcherThread(
                        self.broker_id, order.leader, key[1], *address, self.settings,
                        self._progress,
                    )  # fmt: skip
                shares.setdefault(key, {})[order.tp] = _Follow(order.log, order.leader_epoch)
                self._owner[order.tp] = key
            for key, share in shares.items():
                self._fetchers[key].add(share)

    def unfollow(self, tps: Iterable[TopicPartition]) -> None:
        """Stop copying ``tps``; returns once no fetched data for them is being stored."""
        with self._lock:
            for tp in tps:
                key = self._owner.pop(tp, None)
                if key is not None:
                    self._fetchers[key].remove([tp])

    def followed(self) -> dict[TopicPartition, int]:
        """Each followed partition and the leader it is copied from."""
        with self._lock:
            return {tp: key[0] for tp, key in self._owner.items()}

    def lags(self) -> dict[TopicPartition, int]:
        """Each followed partition's lag behind its leader's high watermark at the
        last answer (Kafka's FetcherLagMetrics ConsumerLag); -1 before one."""
        with self._lock:
            fetchers = list(self._fetchers.values())
        return {tp: lag for fetcher in fetchers for tp, lag in fetcher.lags().items()}

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
            self._owner.clear()
        for fetcher in fetchers:
            fetcher.stop()


class _FetcherThread:
    """Copies partitions from one leader; see the module docstring."""

    def __init__(
        self,
        broker_id: int,
        leader: int,
        index: int,
        endpoint: str,
        kafka_endpoint: str | None,
        settings: FetcherSettings,
        progress: Callable[[TopicPartition], None] = lambda tp: None,
    ) -> None:
        self.broker_id = broker_id
        self._progress = progress
        self.leader = leader
        self.endpoint = endpoint
        self.kafka_endpoint = kafka_endpoint
        self.settings = settings
        self._cond = threading.Condition()
        self._partitions: dict[TopicPartition, _Follow] = {}
        self._stopped = False
        self._channel = settings.security.channel(
            endpoint,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self._stub = annal_pb2_grpc.AnnalStub(self._channel)
        self._grpc = GrpcReplicaFetch(self._stub, broker_id)
        self._kafka: KafkaReplicaFetch | None = None
        if kafka_endpoint and settings.kafka_security is not None:
            self._kafka = KafkaReplicaFetch(
                kafka_endpoint, broker_id, settings.wait_max_ms, settings.kafka_security
            )
        self._unreachable_since: float | None = None
        # first refusals of each partition in this pass: logged once per error
        self._refused: dict[ErrorCode, list[tuple[TopicPartition, str]]] = {}
        self._kafka_retry_at = 0.0  # Kafka listener refused: gRPC until then
        self._thread = threading.Thread(
            target=self._run,
            name=f"replica-fetcher-{broker_id}-from-{leader}-{index}",
            daemon=True,
        )
        self._thread.start()

    def lags(self) -> dict[TopicPartition, int]:
        with self._cond:
            return {tp: follow.lag for tp, follow in self._partitions.items()}

    def add(self, partitions: Mapping[TopicPartition, _Follow]) -> None:
        with self._cond:
            self._partitions.update(partitions)
            self._cond.notify_all()

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        with self._cond:
            for tp in tps:
                self._partitions.pop(tp, None)

    def stop(self) -> dict[TopicPartition, _Follow]:
        """End the thread; returns the partitions it was copying."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            partitions = dict(self._partitions)
            self._partitions.clear()
        self._channel.close()  # ends a long poll in flight
        kafka = self._kafka
        if kafka is not None:
            kafka.abort()  # likewise
        if threading.current_thread() is not self._thread:
            self._thread.join(REQUEST_TIMEOUT_S)
            if kafka is not None and not self._thread.is_alive():
                kafka.close()
        return partitions

    # -- the loop ----------------------------------------------------------

    def _ready(self) -> dict[TopicPartition, _Follow] | None:
        """Partitions due for work, waiting until there are some; None once stopped."""
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                due = {tp: f for tp, f in self._partitions.items() if f.delayed_until <= now}
                if due:
                    return due
                waits = [f.delayed_until - now for f in self._partitions.values()]
                self._cond.wait(min(waits) if waits else None)
            return None

    def _run(self) -> None:
        while (due := self._ready()) is not None:
            try:
                pending = [tp for tp, f in due.items() if not f.truncated]
                if pending:  # a new leader epoch: truncate first, fetch the others
                    self._truncate({tp: due[tp] for tp in pending})
                    due = {tp: f for tp, f in due.items() if f.truncated}
                self._fetch(due)
                self._report_refusals()
            except ListenerUnreachable as exc:
                if self._stopped:
                    return
                if self._unreachable_since is None:
                    logger.warning(
                        "cannot connect to leader %d's Kafka listener (%s): fetching over "
                        "gRPC for %d s",
                        self.leader,
                        exc,
                        KAFKA_RETRY_S,
                    )
                self._kafka_retry_at = time.monotonic() + KAFKA_RETRY_S
            except (grpc.RpcError, ConnectionFailed) as exc:
                if self._stopped:
                    return
                if isinstance(exc, grpc.RpcError):
                    self._kafka_retry_at = 0.0  # the leader is down, not its Kafka listener
                self._unreachable(exc)
                with self._cond:
                    self._cond.wait(self.settings.backoff_ms / 1000)
            except Exception:  # a bug must not end replication silently
                logger.exception("replica fetcher from broker %d failed", self.leader)
                with self._cond:
                    self._cond.wait(self.settings.backoff_ms / 1000)

    def _unreachable(self, exc: grpc.RpcError | ConnectionFailed) -> None:
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            logger.warning(
                "cannot fetch from leader %d at %s: %s; retrying every %d ms",
                self.leader,
                self.endpoint if isinstance(exc, grpc.RpcError) else self.kafka_endpoint,
                detail,
                self.settings.backoff_ms,
            )

    def _current(self, tp: TopicPartition, follow: _Follow) -> bool:
        """True while ``follow`` is still how this thread follows ``tp`` (caller holds
        ``self._cond``)."""
        return self._partitions.get(tp) is follow

    def _stop_copying(self, tp: TopicPartition, follow: _Follow, exc: LogDirOfflineError) -> None:
        """The copy's log dir is offline: fetch it no more (its fetch offset would
        look caught up to the leader and bring it back into the ISR); the
        controller hands its place to the other replicas."""
        follow.delayed_until = time.monotonic() + OFFLINE_S
        logger.error("stopped copying %s from leader %d: %s", tp, self.leader, exc)

    def _delay(self, tp: TopicPartition, follow: _Follow, error: ErrorCode, detail: str) -> None:
        seen = follow.errors.get(error, 0)
        # A first refusal is usually the leader not having its own LeaderAndIsr
        # yet (the controller tells brokers one by one): ask again soon.
        backoff_ms = self.settings.backoff_ms if seen else min(self.settings.backoff_ms, 50)
        follow.delayed_until = time.monotonic() + backoff_ms / 1000
        follow.errors[error] = seen + 1
        if follow.errors[error] == 1:
            self._refused.setdefault(error, []).append((tp, detail))

    def _report_refusals(self) -> None:
        """One line per error for the partitions the leader refused for the first
        time in this pass (a leader change refuses thousands at once)."""
        for error, refused in self._refused.items():
            named = ", ".join(str(tp) for tp, _ in refused[:NAMED_IN_LOG])
            if len(refused) > NAMED_IN_LOG:
                named += f" and {len(refused) - NAMED_IN_LOG} more"
            # expected while leaderships move: the controller's LeaderAndIsr follows
            level = logging.INFO if error in _AWAITING_THE_CONTROLLER else logging.WARNING
            logger.log(
                level,
                "fetch from leader %d: %s for %d partition(s) (%s): %s",
                self.leader,
                error,
                len(refused),
                named,
                refused[0][1] or "no detail",
            )
        self._refused.clear()

    # -- truncation by leader epoch ------------------------------------------

    def _truncate(self, pending: dict[TopicPartition, _Follow]) -> None:
        if not pending:
            return
        asked: dict[TopicPartition, int] = {}
        for tp, follow in pending.items():
            latest = follow.log.leader_epoch_cache.latest_epoch
            if latest is None:
                self._cut(tp, follow, follow.log.high_watermark, "no leader epochs of its own")
            else:
                asked[tp] = latest
        if not asked:
            return
        request = pb.OffsetsForLeaderEpochRequest(replica_id=self.broker_id)
        for topic, tps in by_topic(asked).items():
            request.topics.append(
                pb.TopicEpochs(
                    name=topic,
                    partitions=[
                        pb.PartitionEpoch(
                            partition=tp.partition,
                            current_leader_epoch=pending[tp].leader_epoch,
                            leader_epoch=asked[tp],
                        )
                        for tp in tps
                    ],
                )
            )
        response = self._stub.OffsetsForLeaderEpoch(request, timeout=REQUEST_TIMEOUT_S)
        self._unreachable_since = None
        for topic_result in response.topics:
            for result in topic_result.partitions:
                tp = TopicPartition(topic_result.name, result.partition)
                asked_for = pending.get(tp)
                if asked_for is None:
                    continue
                error = errors.from_wire(result.error)
                if error != errors.NONE:
                    with self._cond:
                        if self._current(tp, asked_for):
                            self._delay(tp, asked_for, error, "(OffsetsForLeaderEpoch)")
                    continue
                log = asked_for.log
                if result.leader_epoch < 0:
                    target, why = log.high_watermark, "the leader has no epoch at or below ours"
                else:
                    _, ours = log.leader_epoch_cache.end_offset_for(
                        result.leader_epoch, log.log_end_offset
                    )
                    target = min(result.end_offset, ours)
                    why = f"epoch {result.leader_epoch} ends at {result.end_offset} on the leader"
                self._cut(tp, asked_for, target, why)

    def _cut(self, tp: TopicPartition, follow: _Follow, offset: int, why: str) -> None:
        with self._cond:
            if not self._current(tp, follow):
                return
            log = follow.log
            if offset < log.log_end_offset:
                logger.info("truncating %s from %d to %d: %s", tp, log.log_end_offset, offset, why)
                log.truncate_to(max(offset, 0))
            follow.truncated = True

    # -- fetching --------------------------------------------------------------

    def _fetch(self, due: dict[TopicPartition, _Follow]) -> None:
        if not due:
            return
        wanted = [f.wanted or self._wanted(tp, f) for tp, f in due.items()]
        limits = self.settings.limits
        kafka = self._kafka if time.monotonic() >= self._kafka_retry_at else None
        answers = (kafka or self._grpc).fetch(wanted, limits)
        self._unreachable_since = None
        if kafka is not None:
            # Kafka's answer does not say where the leader's log ends: ask again
            # over gRPC for a partition whose fetch offset was out of range
            again = [
                w
                for w in wanted
                if answers.get(w.tp, _NO_ANSWER).error == errors.OFFSET_OUT_OF_RANGE
            ]
            if again:
                answers.update(self._grpc.fetch(again, replace(limits, wait_max_ms=0)))
        with self._cond:
            for tp, answer in answers.items():
                follow = due.get(tp)
                if follow is not None and self._current(tp, follow):
                    self._store(tp, follow, answer)

    @staticmethod
    def _wanted(tp: TopicPartition, follow: _Follow) -> Wanted:
        log = follow.log
        wanted = Wanted(tp, log.log_end_offset, follow.leader_epoch, log.log_start_offset)
        follow.wanted = wanted
        return wanted

    def _store(self, tp: TopicPartition, follow: _Follow, result: Answer) -> None:
        """Apply one partition's answer (the caller holds ``self._cond``)."""
        follow.wanted = None  # its log may move: the next fetch asks afresh
        log = follow.log
        error = result.error
        if error == errors.OFFSET_OUT_OF_RANGE:
            self._out_of_range(tp, log, result)
            return
        if error != errors.NONE:
            self._delay(tp, follow, error, result.message)
            return
        if result.records:
            try:
                log.append_as_follower(result.records)
            except NonMonotonicOffsetError:
                # The leader's batch starts below our end: our last batch ended
                # inside one of its batches.  Cut back to where its batch starts.
                base = read_header(result.records).base_offset
                logger.info("truncating %s to %d to line up with the leader's batches", tp, base)
                log.truncate_to(base)
                return
            except LogDirOfflineError as exc:
                self._stop_copying(tp, follow, exc)
                return
            except StorageError as exc:
                self._delay(tp, follow, exc.code, str(exc))
                return
        before = (log.high_watermark, log.log_start_offset)
        if log.log_start_offset < result.log_start_offset <= log.log_end_offset:
            # the leader deleted records (DeleteRecords, retention): so does the copy
            log.delete_records_before(result.log_start_offset)
        log.update_high_watermark(min(result.high_watermark, log.log_end_offset))
        follow.lag = max(0, result.high_watermark - log.log_end_offset)  # Kafka's ConsumerLag
        follow.errors.clear()
        if (log.high_watermark, log.log_start_offset) != before:
            self._progress(tp)

    def _out_of_range(self, tp: TopicPartition, log: Log, result: Answer) -> None:
        ours = log.log_end_offset
        if result.log_end_offset >= 0 and ours > result.log_end_offset:
            logger.warning(
                "truncating %s from %d to the leader's log end %d",
                tp,
                ours,
                result.log_end_offset,
            )
            log.truncate_to(result.log_end_offset)
        else:
            logger.warning(
                "%s at %d fell behind the leader's log start %d: starting over there",
                tp,
                ours,
                result.log_start_offset,
            )
            log.truncate_fully_and_start_at(result.log_start_offset)


NAMED_IN_LOG = 5  # partitions named in a line about many
_AWAITING_THE_CONTROLLER = frozenset(
    {errors.FENCED_LEADER_EPOCH, errors.NOT_LEADER_OR_FOLLOWER, errors.UNKNOWN_LEADER_EPOCH}
)

_NO_ANSWER = Answer(errors.NONE, "", -1, -1, -1, b"")
