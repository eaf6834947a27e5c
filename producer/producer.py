"""The producer: partition, batch, send, retry (DESIGN §6).

``send`` serializes the record, picks a partition (``DefaultPartitioner``
unless one is given), and appends it to that partition's open batch; it
returns a ``RecordFuture`` of ``RecordMetadata`` (``result``, ``exception``,
``add_done_callback``), a view on the batch's one future.  A batch closes
when it reaches ``batch_size`` bytes or has waited ``linger_ms``; the sender
thread groups closed batches by
partition leader into one Produce request per broker, with at most
``max_in_flight`` requests outstanding per broker.

Retriable errors (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, an unreachable
broker) refresh the metadata and send the batch again after
``retry_backoff_ms``, up to ``retries`` times; other errors fail the batch's
futures with ``ProduceError``.  With ``acks=0`` futures complete once the
request is sent, with offset -1.

Thread safety: ``send``, ``flush`` and ``close`` may be called from any
thread; ``self._lock`` guards the open batches and the in-flight counts; the
sender thread owns the requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import grpc
from annal.client.cluster import ClientError, ClusterConnection
from annal.producer.partitioner import DefaultPartitioner, Partitioner
from annal.storage.batch import Compression
from annal.storage.records import BatchBuilder, Header
from annal.v1 import annal_pb2 as pb

logger = logging.getLogger(__name__)

RETRIABLE = {
    "NOT_LEADER_OR_FOLLOWER",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "LEADER_NOT_AVAILABLE",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "REQUEST_TIMED_OUT",
    "BROKER_NOT_AVAILABLE",
}
CODECS = {c.name.lower(): c for c in Compression}

Serializer = Callable[[object], bytes | None]


class ProduceError(ClientError):
    """A record the cluster refused; ``error`` is Kafka's error name."""


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int


class RecordFuture:
    """The acknowledgement of one record: a view on its batch's future (one
    ``concurrent.futures.Future`` per batch, as the Java client's
    FutureRecordMetadata over ProduceRequestResult).  Thread-safe."""

    __slots__ = ("_batch", "_index", "_partition", "_timestamp", "_topic")

    def __init__(
        self, batch: Future[int], index: int, topic: str, partition: int, timestamp: int
    ) -> None:
        self._batch = batch
        self._index = index
        self._topic = topic
        self._partition = partition
        self._timestamp = timestamp

    def _metadata(self, base_offset: int) -> RecordMetadata:
        offset = base_offset + self._index if base_offset >= 0 else -1
        return RecordMetadata(self._topic, self._partition, offset, self._timestamp)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; raises ProduceError if it was not written."""
        return self._metadata(self._batch.result(timeout))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.exception(timeout)

    def done(self) -> bool:
        return self._batch.done()

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        self._batch.add_done_callback(lambda _: fn(self))


@dataclass
class _Batch:
    topic: str
    partition: int
    builder: BatchBuilder
    created: float
    future: Future[int] = field(default_factory=Future)  # the base offset, or ProduceError
    count: int = 0
    size: int = 61
    attempts: int = 0
    retry_at: float = 0.0
    in_flight_key: str = ""  # the leader it was counted against while in flight


def _identity(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"cannot send {type(value).__name__} without a serializer")


class Producer:
    """See the module docstring; ``close()`` (or a ``with`` block) sends what is left."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        acks: int = 1,
        batch_size: int = 16384,
        linger_ms: int = 0,
        compression: str = "none",
        retries: int = 5,
        retry_backoff_ms: int = 100,
        max_in_flight: int = 5,
        request_timeout_ms: int = 30_000,
        key_serializer: Serializer = _identity,
        value_serializer: Serializer = _identity,
        partitioner: Partitioner | None = None,
    ) -> None:
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1 (all), 0 or 1, not {acks}")
        if compression not in CODECS:
            raise ValueError(f"compression must be one of {sorted(CODECS)}, not {compression!r}")
        self.cluster = ClusterConnection(bootstrap_servers, request_timeout_ms / 1000)
        self.acks = acks
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.compression = CODECS[compression]
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.max_in_flight = max(1, max_in_flight)
        self.request_timeout_s = request_timeout_ms / 1000
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._partitioner: Partitioner = partitioner or DefaultPartitioner()
        self._lock = threading.Condition()
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: list[_Batch] = []
        self._in_flight: dict[str, int] = {}
        self._unfinished = 0
        self._closing = False
        self._flushing = 0
        self._sender = threading.Thread(target=self._run, name="producer-sender", daemon=True)
        self._sender.start()

    # -- metadata ---------------------------------------------------------------------

    def _refresh(self, topics: Sequence[str]) -> None:
        try:
            self.cluster.refresh(topics)
        except ClientError as exc:
            logger.warning("metadata refresh failed: %s", exc)

    def partitions_for(self, topic: str) -> int:
        """Partition count of ``topic``; ProduceError if it does not exist."""
        counts = self.cluster.partition_counts
        if topic not in counts:
            self._refresh([topic])
            counts = self.cluster.partition_counts
        if topic not in counts:
            raise ProduceError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist")
        return counts[topic]

    # -- send -------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header | tuple[str, bytes | None]] = (),
    ) -> RecordFuture:
        if self._closing:
            raise RuntimeError("send() after close()")
        key_bytes = self._key_serializer(key)
        value_bytes = self._value_serializer(value)
        partitions = self.partitions_for(topic)
        if partition is None:
            available = (
                [p for p in range(partitions) if (topic, p) in self.cluster.leaders]
                if key_bytes is None
                else ()
            )
            partition = self._partitioner.partition(topic, key_bytes, partitions, available)
        elif not 0 <= partition < partitions:
            raise ProduceError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has partitions 0..{partitions - 1}"
            )
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        with self._lock:
            batch = self._open.get((topic, partition))
            if batch is None:
                batch = self._open[(topic, partition)] = _Batch(
                    topic, partition, BatchBuilder(self.compression), time.monotonic()
                )
                self._lock.notify_all()  # the sender arms its linger timer
            batch.builder.append(key_bytes, value_bytes, timestamp, headers)
            record = RecordFuture(batch.future, batch.count, topic, partition, timestamp)
            batch.count += 1
            batch.size += 14 + len(key_bytes or b"") + len(value_bytes or b"")
            self._unfinished += 1
            if batch.size >= self.batch_size:
                self._close_batch(batch)
                self._lock.notify_all()
        return record

    def _close_batch(self, batch: _Batch) -> None:
        del self._open[(batch.topic, batch.partition)]
        self._ready.append(batch)
        self._partitioner.on_new_batch(batch.topic, batch.partition)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every open batch now and wait until every record is acknowledged."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            self._flushing += 1
            self._lock.notify_all()
            try:
                while self._unfinished:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"{self._unfinished} records still unacknowledged")
                    self._lock.wait(remaining if remaining is not None else 0.1)
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        if self._closing:
            return
        try:
            self.flush(timeout_s)
        finally:
            with self._lock:
                self._closing = True
                self._lock.notify_all()
            self._sender.join(5)
            self.cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sender thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                batches = self._collect()
                while not batches:
                    if self._closing:
                        return
                    self._lock.wait(self._wait_time())
                    batches = self._collect()
            self._send(batches)

    def _wait_time(self) -> float:
        now = time.monotonic()
        waits = [b.created + self.linger_s - now for b in self._open.values()]
        waits += [b.retry_at - now for b in self._ready]
        return max(min(waits, default=0.1), 0.001)

    def _collect(self) -> list[_Batch]:
        """Batches to send now (callers hold the lock)."""
        now = time.monotonic()
        for batch in list(self._open.values()):
            if self._flushing or self._closing or now - batch.created >= self.linger_s:
                self._close_batch(batch)
        due = [b for b in self._ready if b.retry_at <= now]
        chosen = []
        partitions: set[tuple[str, int]] = set()
        for batch in due:
            if (batch.topic, batch.partition) in partitions:
                continue  # one batch per partition per request; the next goes after it
            partitions.add((batch.topic, batch.partition))
            leader = self.cluster.leaders.get((batch.topic, batch.partition), "")
            if self._in_flight.get(leader, 0) < self.max_in_flight:
                chosen.append(batch)
                batch.in_flight_key = leader
                self._in_flight[leader] = self._in_flight.get(leader, 0) + 1
        for batch in chosen:
            self._ready.remove(batch)
        return chosen

    def _send(self, batches: list[_Batch]) -> None:
        by_leader: dict[str, list[_Batch]] = {}
        for batch in batches:
            leader = self.cluster.leaders.get((batch.topic, batch.partition))
            if leader is None:
                self._refresh([batch.topic])
                leader = self.cluster.leaders.get((batch.topic, batch.partition))
            by_leader.setdefault(leader or "", []).append(batch)
        for leader, group in by_leader.items():
            self._send_to(leader, group)

    def _send_to(self, leader: str, group: list[_Batch]) -> None:
        try:
            if not leader:
                self._done(group, {}, "LEADER_NOT_AVAILABLE")
                return
            built = {(b.topic, b.partition): b.builder.build() for b in group}
            topics: dict[str, list[pb.PartitionProduceData]] = {}
            for (topic, partition), data in built.items():
                topics.setdefault(topic, []).append(
                    pb.PartitionProduceData(partition=partition, records=data)
                )
            request = pb.ProduceRequest(
                acks=self.acks,
                timeout_ms=int(self.request_timeout_s * 1000),
                topics=[pb.TopicProduceData(name=t, partitions=ps) for t, ps in topics.items()],
            )
            try:
                response = self.cluster.stub(leader).Produce(
                    request, timeout=self.request_timeout_s
                )
            except grpc.RpcError as exc:
                retriable = exc.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                self._done(group, {}, "BROKER_NOT_AVAILABLE" if retriable else exc.code().name)
                return
            results = {(t.name, p.partition): p for t in response.topics for p in t.partitions}
            self._done(group, results, "UNKNOWN_SERVER_ERROR")
        finally:
            with self._lock:
                for batch in group:
                    key = batch.in_flight_key
                    self._in_flight[key] = self._in_flight.get(key, 1) - 1
                self._lock.notify_all()

    def _done(
        self,
        group: list[_Batch],
        results: dict[tuple[str, int], pb.PartitionProduceResponse],
        default_error: str,
    ) -> None:
        refresh: set[str] = set()
        for batch in group:
            result = results.get((batch.topic, batch.partition))
            error = pb.ErrorCode.Name(result.error) if result is not None else default_error
            if error == "NONE":
                base = result.base_offset if result is not None and self.acks != 0 else -1
                batch.future.set_result(base)
                self._finish(batch.count)
            elif error in RETRIABLE and batch.attempts < self.retries:
                batch.attempts += 1
                batch.retry_at = time.monotonic() + self.retry_backoff_s * batch.attempts
                refresh.add(batch.topic)
                with self._lock:
                    self._ready.append(batch)
            else:
                message = result.error_message if result is not None else ""
                batch.future.set_exception(ProduceError(error, message))
                self._finish(batch.count)
        if refresh:
            self.cluster.forget(sorted(refresh))
            self._refresh(sorted(refresh))

    def _finish(self, records: int) -> None:
        with self._lock:
            self._unfinished -= records
            self._lock.notify_all()
