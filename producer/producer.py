"""The producer: partition, batch, send, retry (docs/architecture.md).

``send`` serializes the record, picks a partition (``DefaultPartitioner``
unless one is given), and appends it to that partition's open batch; it
returns a ``RecordFuture`` of ``RecordMetadata`` (``result``, ``exception``,
``add_done_callback``), a view on the batch's one future.  A batch closes
when it reaches ``batch_size`` bytes or has waited ``linger_ms``.

The sender thread groups closed batches by partition leader into one
Produce request per broker and sends it without waiting for the answer, so
up to ``max_in_flight`` requests per broker travel at once.  A partition has
at most one batch in flight: gRPC does not order concurrent calls the way a
Kafka connection does, so this is what keeps a partition's records in the
order they were sent, retries included.  Each call runs on a pooled I/O
thread, which also handles its answer: completes the futures, puts retriable
batches back at the front of their partition's queue and refreshes metadata.

Retriable errors (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, an unreachable
broker) refresh the metadata and send the batch again after
``retry_backoff_ms``, up to ``retries`` times; other errors fail the batch's
futures with ``ProduceError``.  With ``acks=0`` futures complete once the
request is sent, with offset -1.

Idempotence (``enable_idempotence``, on by default as in Kafka 3.x).  The
sender gets a producer id and epoch with InitProducerId (from any broker)
before it sends the first batch.  Each batch gets, when it first leaves,
the partition's next sequence number; a retry resends the same bytes, so a
leader (old or new) that already stored the batch answers with its original
offsets instead of storing it twice.  When the broker answers
OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID (an earlier batch of the
partition ended with an unknown outcome and never reached the log, or the
broker lost the producer's state), the producer bumps its epoch, as Kafka's
Java client does since 2.5 (a new producer id once the epoch would pass
32767).  Every partition's next new batch then starts again at sequence 0,
and the refused batch is sent again under the new epoch.  A batch refused
for good (MESSAGE_TOO_LARGE, INVALID_RECORD, ...) gives its sequence numbers
back.  Idempotence needs ``acks="all"``, ``retries`` > 0 and
``max_in_flight`` <= 5.  Asked for explicitly with any other value, it is a
ValueError naming the setting.  Left at its default, it is turned off
when one of those is set otherwise, as Kafka 3.x does.

Transactions (KIP-98; docs/transactions.md).  With a ``transactional_id``
(which implies idempotence, hence ``acks="all"``) and its
``transaction_timeout_ms`` (60000), the producer has Kafka's methods
``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
``commit_transaction`` and ``abort_transaction`` (``producer/transactions.py``);
``send`` is then refused outside a transaction.  Its batches are
transactional, each round's new partitions are added to the transaction
before the round leaves, and its epochs are the coordinator's: a sequence
error fails the transaction (to be aborted) instead of bumping the epoch here.

Thread safety: ``send``, ``flush`` and ``close`` may be called from any
thread; ``self._mutex`` guards the batches and the in-flight bookkeeping,
and ``self._changed`` (on the same mutex) wakes waiters.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate
from operator import add

import grpc
from annal.client.bootstrap import resolve_bootstrap
from annal.client.cluster import ClientError, ClusterConnection
from annal.client.retry import Budget
from annal.client.security import client_security
from annal.producer.futures import RecordFuture as RecordFuture
from annal.producer.futures import RecordMetadata as RecordMetadata
from annal.producer.partitioner import DefaultPartitioner, Partitioner
from annal.producer.settings import (
    ACKS,
    CODECS,
    INT32_MAX,
    MAX_PRODUCER_EPOCH,
    Serializer,
    idempotence,
    identity,
)
from annal.producer.transactions import TransactionManager, TransactionMethods
from annal.storage.records import BatchBuilder, Header
from annal.v1 import annal_pb2 as pb

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# answers after which an idempotent producer bumps its epoch and sends again
_SEQUENCE_ERRORS = (errors.OUT_OF_ORDER_SEQUENCE_NUMBER, errors.UNKNOWN_PRODUCER_ID)
# retriable answers that may mean the leader moved or is cut off (besides the
# invalid-metadata ones): a timed-out acks=all, an ISR too small to write to
_MAYBE_MOVED = (
    errors.REQUEST_TIMED_OUT,
    errors.NOT_ENOUGH_REPLICAS,
    errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
)


class ProduceError(ClientError):
    """A record the cluster refused; ``error`` is Kafka's error name."""


_new_tuple = tuple.__new__


@dataclass(eq=False)
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
    epoch: int = -1  # producer epoch and base sequence once stamped (idempotence)
    sequence: int = -1


@dataclass(slots=True)
class _Sequences:
    """Where a partition's sequence numbers stand under one producer epoch."""

    epoch: int
    next: int = 0


class Producer(TransactionMethods):
    """See the module docstring; ``close()`` (or a ``with`` block) sends what is left
    (and aborts an open transaction).

    The cluster is found through ``bootstrap_servers`` (``"host:port,..."``) or,
    as the ZooKeeper-era producer's ``zookeeper.connect``, through
    ``zookeeper_connect=`` (``"host:port[/chroot]"``: the brokers registered
    there, read once within ``request_timeout_ms``); give exactly one.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        *,
        zookeeper_connect: str | None = None,
        acks: int | str | None = None,
        batch_size: int = 16384,
        linger_ms: int = 0,
        compression: str = "none",
        retries: int | None = None,
        retry_backoff_ms: int = 100,
        max_in_flight: int | None = None,
        request_timeout_ms: int = 30_000,
        max_block_ms: int = 60_000,
        key_serializer: Serializer = identity,
        value_serializer: Serializer = identity,
        partitioner: Partitioner | None = None,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        security_protocol: str | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ) -> None:
        """Settings left None take Kafka 3.x's defaults: ``acks="all"``,
        ``retries`` 5, ``max_in_flight`` 5, ``enable_idempotence`` True (unless
        another setting given rules it out; see the module docstring).  A
        ``transactional_id`` makes it transactional (``producer/transactions.py``)."""
        resolved = ACKS.get(acks.strip().lower()) if isinstance(acks, str) else acks
        if acks is None:
            resolved = -1
        if resolved not in (-1, 0, 1):
            raise ValueError(f"acks must be all (-1), 0 or 1, not {acks!r}")
        self.idempotent = idempotence(
            enable_idempotence, resolved, acks, retries, max_in_flight, transactional_id
        )
        if compression not in CODECS:
            raise ValueError(f"compression must be one of {sorted(CODECS)}, not {compression!r}")
        bootstrap = resolve_bootstrap(
            bootstrap_servers, zookeeper_connect, request_timeout_ms / 1000
        )
        security = client_security(
            security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
            sasl_plain_username, sasl_plain_password, sasl_mechanism,
        )  # fmt: skip
        self.cluster = ClusterConnection(bootstrap, request_timeout_ms / 1000, security)
        self.acks: int = resolved
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.compression = CODECS[compression]
        self.retries = 5 if retries is None else retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.max_in_flight = max(1, 5 if max_in_flight is None else max_in_flight)
        self.request_timeout_s = request_timeout_ms / 1000
        self.max_block_s = max_block_ms / 1000
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._partitioner: Partitioner = partitioner or DefaultPartitioner()
        # null keys with the default partitioner: read its sticky choice directly
        self._sticky = (
            self._partitioner.sticky if isinstance(self._partitioner, DefaultPartitioner) else None
        )
        self._raw_keys = key_serializer is identity
        self._raw_values = value_serializer is identity
        self._mutex = threading.Lock()
        self._changed = threading.Condition(self._mutex)
        self._open: dict[TopicPartition, _Batch] = {}
        # closed batches waiting to go, oldest first, per partition
        self._ready: dict[TopicPartition, deque[_Batch]] = {}
        self._unacknowledged: set[_Batch] = set()
        self._in_flight: dict[str, int] = {}  # requests per leader
        self._muted: set[TopicPartition] = set()  # partitions with a batch in flight
        self._closing = False
        self._flushing = 0
        # idempotence: the producer id and epoch (guarded by the mutex; -1: none
        # yet), and each partition's sequences (stamped by the sender thread)
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, _Sequences] = {}
        self._txn = (
            None
            if transactional_id is None
            else TransactionManager(self, transactional_id, transaction_timeout_ms, self._mutex)
        )
        self._io = ThreadPoolExecutor(
            max_workers=4 * self.max_in_flight, thread_name_prefix="producer-io"
        )
        self._sender = threading.Thread(target=self._run, name="producer-sender", daemon=True)
        self._sender.start()

    # -- metadata ---------------------------------------------------------------------

    def _refresh(self, topics: Sequence[str]) -> ClientError | None:
        """Refresh metadata; the failure, if no broker answered."""
        try:
            self.cluster.refresh(topics)
        except ClientError as exc:
            logger.warning("metadata refresh failed: %s", exc)
            return exc
        return None

    def partitions_for(self, topic: str) -> int:
        """Partition count of ``topic``.  A topic the metadata does not show yet
        (just created: the brokers' caches catch up a moment later) is asked
        for again, with a growing backoff, for up to ``max_block_ms``, as
        Kafka's producer waits for it; then UNKNOWN_TOPIC_OR_PARTITION.  When no
        broker answers at all, it gives up within ``request_timeout_ms`` with
        BROKER_NOT_AVAILABLE naming the servers tried."""
        counts = self.cluster.partition_counts
        if topic in counts:
            return counts[topic]
        retry = Budget(self.max_block_s)
        while True:
            failure = self._refresh([topic])
            counts = self.cluster.partition_counts
            if topic in counts:
                return counts[topic]
            if topic in self.cluster.unauthorized:
                raise ProduceError(
                    errors.TOPIC_AUTHORIZATION_FAILED,
                    f"not authorized to access topic {topic!r} (Describe is needed to see it)",
                )
            reachable_s = min(self.request_timeout_s, self.max_block_s)
            if failure is not None and retry.expires_in_next_wait(within_s=reachable_s):
                raise ProduceError(
                    failure.code,
                    f"cannot send to {topic!r}: no broker reachable within "
                    f"{int(self.request_timeout_s * 1000)} ms ({failure.message})",
                )
            if retry.expires_in_next_wait():
                raise ProduceError(
                    errors.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {topic!r} not present in metadata after "
                    f"{int(self.max_block_s * 1000)} ms",
                )
            retry.sleep()

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
        """Queue one record; the hot path: no I/O, one lock, a few dict look-ups."""
        if self._closing:
            raise RuntimeError("send() after close()")
        if self._raw_keys and (key is None or type(key) is bytes):
            key_bytes: bytes | None = key
        else:
            key_bytes = self._key_serializer(key)
        if self._raw_values and (value is None or type(value) is bytes):
            value_bytes: bytes | None = value
        else:
            value_bytes = self._value_serializer(value)
        partitions = self.cluster.partition_counts.get(topic) or self.partitions_for(topic)
        if partition is None:
            if key_bytes is None and self._sticky is not None:
                partition = self._sticky.get(topic)  # the default partitioner's current pick
            if partition is None or partition >= partitions:
                partition = self._partitioner.partition(
                    topic, key_bytes, partitions, self.cluster.available.get(topic, ())
                )
        elif not 0 <= partition < partitions:
            raise ProduceError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has partitions 0..{partitions - 1}"
            )
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        size = 14 + (len(key_bytes) if key_bytes else 0) + (len(value_bytes) if value_bytes else 0)
        with self._mutex:
            if self._txn is not None:
                self._txn.check_send()  # under the mutex: commit's flush sees the record
            # a plain tuple finds the TopicPartition key (equal, same hash)
            # without building a named tuple per record
            batch = self._open.get((topic, partition))  # type: ignore[call-overload]
            if batch is None:
                batch = self._open_batch(topic, partition)
            index = batch.count
            batch.builder.append(key_bytes, value_bytes, timestamp_ms, headers)
            batch.count = index + 1
            batch.size += size
            if batch.size >= self.batch_size:
                self._close_batch(batch)
                self._changed.notify_all()
        return _new_tuple(RecordFuture, (batch, index, timestamp_ms))

    def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> list[RecordFuture]:
        """Queue many records of bytes, with one timestamp and no headers, batch
        by batch rather than record by record: to ``partition``, or where
        ``send`` would put them one at a time (per key; null keys stick to one
        partition per batch).  Returns one future per run of records that went
        into one batch, for the last record of the run (the run succeeds or
        fails as one); keys that spread the records are sent one by one, with
        a future each."""
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        if (keys is not None and any(k is not None for k in keys)) and partition is None:
            return [self.send(topic, v, k) for v, k in zip(values, keys, strict=True)]
        if self._closing:
            raise RuntimeError("send_many() after close()")
        partitions = self.cluster.partition_counts.get(topic) or self.partitions_for(topic)
        if partition is not None and not 0 <= partition < partitions:
            raise ProduceError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has partitions 0..{partitions - 1}"
            )
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        n = len(values)
        sizes = [14 if v is None else 14 + len(v) for v in values]
        if keys is not None:
            sizes = list(map(add, sizes, [0 if k is None else len(k) for k in keys]))
        ends = list(accumulate(sizes))  # ends[j]: bytes of records 0..j
        futures: list[RecordFuture] = []
        with self._mutex:
            if self._txn is not None:
                self._txn.check_send()
            start = 0
            while start < n:
                chosen = partition
                if chosen is None:
                    chosen = self._sticky.get(topic) if self._sticky is not None else None
                    if chosen is None or chosen >= partitions:
                        chosen = self._partitioner.partition(
                            topic, None, partitions, self.cluster.available.get(topic, ())
                        )
                batch = self._open.get(TopicPartition(topic, chosen))
                if batch is None:
                    batch = self._open_batch(topic, chosen)
                before = ends[start - 1] if start else 0
                # up to and with the record that fills the batch, as send() closes it
                last = min(bisect_left(ends, before + self.batch_size - batch.size, start), n - 1)
                batch.builder.extend(
                    values[start : last + 1],
                    None if keys is None else keys[start : last + 1],
                    timestamp_ms,
                )
                batch.count += last + 1 - start
                batch.size += ends[last] - before
                futures.append(_new_tuple(RecordFuture, (batch, batch.count - 1, timestamp_ms)))
                if batch.size >= self.batch_size:
                    self._close_batch(batch)
                    self._changed.notify_all()
                start = last + 1
        return futures

    def _open_batch(self, topic: str, partition: int) -> _Batch:
        """A new open batch (callers hold the mutex)."""
        builder = BatchBuilder(self.compression, is_transactional=self._txn is not None)
        batch = _Batch(topic, partition, builder, time.monotonic())
        self._open[TopicPartition(topic, partition)] = batch
        self._unacknowledged.add(batch)
        self._changed.notify_all()  # the sender arms its linger timer
        return batch

    def _drop_unsent(self, error: ErrorCode, message: str) -> bool:
        """Fail every batch not sent yet (abort_transaction); whether one of them
        was sent before (a retry), so that the log may hold it."""
        with self._changed:
            dropped = [*self._open.values(), *(b for q in self._ready.values() for b in q)]
            self._open.clear()
            self._ready.clear()
            self._unacknowledged.difference_update(dropped)
            self._changed.notify_all()
        for batch in dropped:
            batch.future.set_exception(ProduceError(error, message))
        return any(batch.sequence >= 0 for batch in dropped)

    def _abandon(self, groups: dict[str, list[_Batch]], error: ErrorCode, message: str) -> None:
        """Fail a send round's batches, unsent and not to be retried (a transaction
        that cannot take them)."""
        for leader, group in groups.items():
            for batch in group:
                batch.attempts = self.retries
            self._finished_request(leader, group, {}, error, message)

    def _close_batch(self, batch: _Batch) -> None:
        del self._open[TopicPartition(batch.topic, batch.partition)]
        self._ready.setdefault(TopicPartition(batch.topic, batch.partition), deque()).append(batch)
        self._partitioner.on_new_batch(batch.topic, batch.partition)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every open batch now and wait until every record is acknowledged."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            self._flushing += 1
            self._changed.notify_all()
            try:
                while self._unacknowledged:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        records = sum(b.count for b in self._unacknowledged)
                        raise TimeoutError(f"{records} records still unacknowledged")
                    self._changed.wait(remaining if remaining is not None else 0.1)
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        if self._closing:
            return
        try:
            if self._txn is not None:
                self._txn.close(timeout_s)
            self.flush(timeout_s)
        finally:
            with self._changed:
                self._closing = True
                self._changed.notify_all()
            self._sender.join(5)
            self._io.shutdown(wait=False)
            self.cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sender thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._changed:
                batches = self._collect()
                while not batches:
                    if self._closing and not self._in_flight_total():
                        return
                    self._changed.wait(self._wait_time())
                    batches = self._collect()
            self._send(batches)

    def _in_flight_total(self) -> int:
        return sum(self._in_flight.values())

    def _wait_time(self) -> float:
        now = time.monotonic()
        muted = self._muted
        waits = [b.created + self.linger_s - now for k, b in self._open.items() if k not in muted]
        waits += [q[0].retry_at - now for k, q in self._ready.items() if k not in muted]
        return max(min(waits, default=0.1), 0.001)

    def _collect(self) -> dict[str, list[_Batch]]:
        """Batches to send now by leader ("" when unknown), at most one per
        partition and none for a partition in flight; a leader at
        ``max_in_flight`` waits.  Full batches go first; an open batch is
        drained once it has lingered (or on flush), so while its partition is
        in flight it keeps filling, as in Kafka's accumulator.  Counts the
        requests (callers hold the mutex)."""
        now = time.monotonic()
        chosen: dict[str, list[_Batch]] = {}
        leaders = self.cluster.leaders
        muted = self._muted
        draining = self._flushing or self._closing

        def sendable(key: TopicPartition) -> str | None:
            leader = leaders.get(key, "")
            if leader not in chosen:
                if leader and self._in_flight.get(leader, 0) >= self.max_in_flight:
                    return None
                chosen[leader] = []
            return leader

        for key, queue in list(self._ready.items()):
            if key in muted or queue[0].retry_at > now:
                continue
            leader = sendable(key)
            if leader is not None:
                chosen[leader].append(queue.popleft())
                if not queue:
                    del self._ready[key]
                muted.add(key)
        for key, batch in list(self._open.items()):
            if key in muted or key in self._ready:
                continue
            if not draining and now - batch.created < self.linger_s:
                continue
            leader = sendable(key)
            if leader is not None:
                del self._open[key]
                self._partitioner.on_new_batch(batch.topic, batch.partition)
                chosen[leader].append(batch)
                muted.add(key)
        for leader in chosen:
            if leader:
                self._in_flight[leader] = self._in_flight.get(leader, 0) + 1
        return chosen

    def _send(self, groups: dict[str, list[_Batch]]) -> None:
        """Send each leader its group; batches with no known leader look it up first."""
        if self._txn is not None and not self._txn.prepare_send(groups):
            return
        if self.idempotent and not self._stamp(groups):
            return
        unrouted = groups.pop("", [])
        if unrouted:
            counted = set(groups)  # _collect counted these requests already
            self._refresh(sorted({b.topic for b in unrouted}))
            for batch in unrouted:
                leader = self.cluster.leaders.get(TopicPartition(batch.topic, batch.partition), "")
                groups.setdefault(leader, []).append(batch)
            if "" in groups:
                self._finished_request("", groups.pop(""), {}, errors.LEADER_NOT_AVAILABLE)
            with self._mutex:
                for leader in set(groups) - counted:
                    self._in_flight[leader] = self._in_flight.get(leader, 0) + 1
        # One request and nothing else outstanding: make the call right here,
        # one thread hop less for the latency of a lone record.
        alone = len(groups) == 1 and self._in_flight_total() <= 1
        for leader, group in groups.items():
            self._send_to(leader, group, inline=alone)

    # -- idempotence ------------------------------------------------------------------

    def _stamp(self, groups: dict[str, list[_Batch]]) -> bool:
        """Give every batch that leaves for the first time (under the current
        epoch) the producer id, epoch and its partition's next sequence numbers
        (sender thread).  False when no producer id could be had: the batches
        then went back for a retry, or failed."""
        if self.producer_id < 0:
            error, message = self._init_producer_id()
            if error is not errors.NONE:
                for leader, group in groups.items():
                    self._finished_request(leader, group, {}, error, message)
                return False
        with self._mutex:
            producer_id, epoch = self.producer_id, self.producer_epoch
            for group in groups.values():
                for batch in group:
                    if batch.sequence >= 0:
                        continue  # a retry: the same bytes again
                    key = TopicPartition(batch.topic, batch.partition)
                    sequences = self._sequences.get(key)
                    if sequences is None or sequences.epoch != epoch:
                        sequences = self._sequences[key] = _Sequences(epoch)
                    batch.epoch, batch.sequence = epoch, sequences.next
                    sequences.next = (sequences.next + batch.count) & INT32_MAX
                    builder = batch.builder
                    builder.producer_id = producer_id
                    builder.producer_epoch = epoch
                    builder.base_sequence = batch.sequence
        return True

    def _init_producer_id(self) -> tuple[ErrorCode, str]:
        """InitProducerId from the bootstrap servers, then any leader, until one
        answers (retrying retriable answers) or ``max_block_ms`` passes."""
        deadline = time.monotonic() + self.max_block_s
        error, message = errors.BROKER_NOT_AVAILABLE, "no broker to ask"
        while True:
            endpoints = list(
                dict.fromkeys([*self.cluster.bootstrap, *self.cluster.leaders.values()])
            )
            for endpoint in endpoints:
                try:
                    answer = self.cluster.stub(endpoint).InitProducerId(
                        pb.InitProducerIdRequest(), timeout=self.request_timeout_s
                    )
                except grpc.RpcError as exc:
                    error, message = errors.transport_error(exc), f"{endpoint}: {exc.details()}"
                    continue
                error, message = errors.from_wire(answer.error), answer.error_message
                if error is errors.NONE:
                    with self._mutex:
                        self.producer_id, self.producer_epoch = (
                            answer.producer_id,
                            answer.producer_epoch,
                        )
                    logger.info(
                        "producer id %d, epoch %d", answer.producer_id, answer.producer_epoch
                    )
                    return errors.NONE, ""
                if not error.retriable:
                    return error, message
            if time.monotonic() + self.retry_backoff_s > deadline:
                return error, f"no producer id within max_block_ms: {message}"
            time.sleep(self.retry_backoff_s)

    def _bump_epoch(self, batch: _Batch) -> None:
        """A new epoch after a sequence error (callers hold the mutex): every
        partition's next new batch starts at sequence 0 under it.  Past the
        largest epoch, a new producer id is fetched before the next send."""
        if batch.epoch == self.producer_epoch and self.producer_id >= 0:
            if self.producer_epoch >= MAX_PRODUCER_EPOCH:
                self.producer_id = self.producer_epoch = -1
            else:
                self.producer_epoch += 1
            logger.info(
                "%s-%d: sequence error; producer epoch is now %d",
                batch.topic,
                batch.partition,
                self.producer_epoch,
            )
        batch.epoch = batch.sequence = -1  # stamped again when it next leaves

    def _release_sequences(self, batch: _Batch) -> None:
        """A batch the broker refused for good: the log never had its sequence
        numbers, so the partition's next batch takes them (callers hold the mutex;
        nothing else of the partition is stamped while it was in flight)."""
        sequences = self._sequences.get(TopicPartition(batch.topic, batch.partition))
        if sequences is not None and sequences.epoch == batch.epoch and batch.sequence >= 0:
            sequences.next = batch.sequence

    def _send_to(self, leader: str, group: list[_Batch], inline: bool = False) -> None:
        """Start one Produce request; its answer is queued for the sender thread."""
        request = pb.ProduceRequest(
            acks=self.acks,
            # the broker's REQUEST_TIMED_OUT (acks=all) comes before our own deadline
            timeout_ms=int(self.request_timeout_s * 900),
            transactional_id=self._txn.transactional_id if self._txn is not None else "",
        )
        # built in place: a sub-message passed to a constructor is copied whole
        topics: dict[str, pb.TopicProduceData] = {}
        for batch in group:
            topic = topics.get(batch.topic)
            if topic is None:
                topic = topics[batch.topic] = request.topics.add(name=batch.topic)
            topic.partitions.add(partition=batch.partition, records=batch.builder.build())
        if inline:
            self._call(leader, group, request)
        else:
            self._io.submit(self._call, leader, group, request)

    def _call(self, leader: str, group: list[_Batch], request: pb.ProduceRequest) -> None:
        """On an I/O thread: one blocking Produce call, and its answer handled
        right here, so an acknowledgement reaches the futures (and unmutes the
        partition) without another thread hop.  (A blocking call on a pooled
        thread is cheaper than grpcio's ``future()``, which starts a polling
        thread whenever none is running.)"""
        answer: pb.ProduceResponse | grpc.RpcError
        try:
            answer = self.cluster.stub(leader).Produce(request, timeout=self.request_timeout_s)
        except grpc.RpcError as exc:
            answer = exc
        self._answered(leader, group, answer)

    def _answered(
        self, leader: str, group: list[_Batch], answer: pb.ProduceResponse | grpc.RpcError
    ) -> None:
        if isinstance(answer, grpc.RpcError):
            self._finished_request(leader, group, {}, errors.transport_error(answer))
            return
        results = {
            TopicPartition(t.name, p.partition): p for t in answer.topics for p in t.partitions
        }
        self._finished_request(leader, group, results, errors.UNKNOWN_SERVER_ERROR)

    def _finished_request(
        self,
        leader: str,
        group: list[_Batch],
        results: dict[TopicPartition, pb.PartitionProduceResponse],
        default_error: ErrorCode,
        default_message: str = "",
    ) -> None:
        """Complete, retry or fail each batch of a request that ended."""
        refresh: set[str] = set()
        finished: list[_Batch] = []
        retry: list[_Batch] = []
        released: list[_Batch] = []
        rewind: list[_Batch] = []
        for batch in group:
            result = results.get(TopicPartition(batch.topic, batch.partition))
            error = errors.from_wire(result.error) if result is not None else default_error
            if error is errors.NONE:
                base = result.base_offset if result is not None and self.acks != 0 else -1
                batch.future.set_result(base)
                finished.append(batch)
            elif (
                self.idempotent
                and self._txn is None  # a transactional producer's epochs are its coordinator's
                and error in _SEQUENCE_ERRORS
                and batch.sequence >= 0
                and batch.attempts < self.retries
            ):
                batch.attempts += 1
                batch.retry_at = time.monotonic() + self.retry_backoff_s
                rewind.append(batch)
                retry.append(batch)
            elif error.retriable and batch.attempts < self.retries:
                batch.attempts += 1
                batch.retry_at = time.monotonic() + self.retry_backoff_s * batch.attempts
                if error.invalid_metadata or error in _MAYBE_MOVED:
                    refresh.add(batch.topic)
                retry.append(batch)
            else:
                message = result.error_message if result is not None else default_message
                batch.future.set_exception(ProduceError(error, message))
                finished.append(batch)
                refused = result is not None and not error.retriable
                definite = refused and error not in _SEQUENCE_ERRORS
                if definite:
                    released.append(batch)  # refused for good: never in the log
                if self._txn is not None:  # one sent before may be in the log, unless refused
                    self._txn.batch_failed(
                        batch, error, message, batch.sequence >= 0 and not definite
                    )
        if refresh:
            self.cluster.forget(sorted(refresh))
            self.cluster.move_on()  # the broker that told us last may be the stale one
            self._refresh(sorted(refresh))
        with self._changed:
            for batch in rewind:
                self._bump_epoch(batch)
            for batch in released:
                self._release_sequences(batch)
            if leader:
                self._in_flight[leader] -= 1
            for batch in group:
                self._muted.discard((batch.topic, batch.partition))
            self._unacknowledged.difference_update(finished)
            for batch in retry:  # it goes first: older than anything queued behind it
                self._ready.setdefault(
                    TopicPartition(batch.topic, batch.partition), deque()
                ).appendleft(batch)
            self._changed.notify_all()
