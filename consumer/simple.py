"""The simple consumer (Kafka 0.8's SimpleConsumer, its "low-level API").

Fetch from a partition at an offset, fetch many partitions at once, ask for
offsets before a time, and iterate over records.  The consumer finds each
partition's leader with Metadata from any bootstrap broker, sends each fetch
to the leader, and refreshes its metadata and retries when a leader moved or
did not answer.  Retries back off (50 ms doubling to 1 s) and go on for up to
``timeout_s`` (the request timeout; at least ``retries`` times), so a query
outlives a leader that crashed: the controller moves leadership once the
dead broker's ZooKeeper session expires, which takes its session timeout.

Fetched data is whole v2 batches; records below the requested offset (the
front of the first batch) are skipped.  An offset outside the partition is
``OffsetOutOfRangeError`` naming the valid range.

``isolation_level`` is Kafka's consumer setting (KIP-98, ``transactions.py``):
``read_uncommitted`` (the default) reads up to the high watermark;
``read_committed`` reads up to the last stable offset, its ListOffsets
LATEST is the last stable offset, and the records of aborted transactions
are dropped, batch by batch, from what is decoded.  Control records (the
transaction markers) are never handed out.  ``fetch_raw`` hands the batches
as fetched, with the aborted transactions the broker named.

Thread safety: not thread-safe; use one consumer per thread.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import grpc
from annal.client.bootstrap import resolve_bootstrap
from annal.client.cluster import ClientError, ClusterConnection
from annal.client.retry import Budget, delay
from annal.client.security import client_security
from annal.consumer.kafka_fetch import (
    FetchConnectionError,
    KafkaFetchConnection,
    ListenerUnreachable,
    PartitionAnswer,
)
from annal.consumer.transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransaction,
    committed_batches,
    isolation_number,
)
from annal.storage.batch import last_header
from annal.storage.records import Header, decode_located
from annal.v1 import annal_pb2 as pb

from annal import errors
from annal.topic_partition import TopicPartition

EARLIEST = -2
LATEST = -1

logger = logging.getLogger(__name__)


def _advance(
    response: pb.FetchResponse, positions: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Move ``positions`` past the whole batches of ``response`` (headers only,
    no decoding); the partitions that answered a retriable error, with their
    offsets."""
    retry = {}
    for topic in response.topics:
        for p in topic.partitions:
            key = TopicPartition(topic.name, p.partition)
            if p.error == pb.NONE:
                header = last_header(p.records)
                if header is not None:
                    positions[key] = header.next_offset
            elif errors.from_wire(p.error).retriable:
                retry[key] = positions[key]
    return retry


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block (records hold no cycles;
    collections triggered by the sheer number of new tuples cost a third of a
    large fetch).  Restores the collector only if it was on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class ConsumerError(ClientError):
    """A fetch the cluster refused; ``error`` is Kafka's error name."""


class OffsetOutOfRangeError(ConsumerError):
    """The requested offset is outside [log start offset, high watermark];
    both are attributes (-1 when the answer did not say)."""

    log_start_offset: int = -1
    high_watermark: int = -1


class ConsumerRecord(NamedTuple):
    """One fetched record.  A named tuple: a fetch builds one per record, and a
    tuple is built several times faster than a dataclass instance."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def _out_of_range(
    topic: str, partition: int, offset: int, log_start_offset: int, high_watermark: int
) -> OffsetOutOfRangeError:
    exc = OffsetOutOfRangeError(
        errors.OFFSET_OUT_OF_RANGE,
        f"offset {offset} of {topic}-{partition} is outside [{log_start_offset}, {high_watermark}]",
    )
    exc.log_start_offset, exc.high_watermark = log_start_offset, high_watermark
    return exc


@dataclass(frozen=True, slots=True)
class RawFetch:
    """One partition's answer undecoded: whole v2 batches (the first may start
    before the offset asked for)."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    # read_committed (KIP-98): the aborted transactions the broker named, for
    # ``consumer.transactions.committed_batches``; None for read_uncommitted
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    last_stable_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: list[ConsumerRecord]
    high_watermark: int
    next_offset: int  # where the next fetch should start
    last_stable_offset: int = -1  # KIP-98; read_committed reads stop here


class RawFetchAhead:
    """A ``fetch_raw`` already on its way (``SimpleConsumer.fetch_raw_ahead``)."""

    def __init__(self, offset: int, future: Future[RawFetch]) -> None:
        self.offset = offset
        self._future = future

    def result(self) -> RawFetch:
        return self._future.result()

    def cancel(self) -> None:
        """Drop it: a call not yet started is not made; one under way finishes unread."""
        self._future.cancel()


class SimpleConsumer:
    """See the module docstring.

    The cluster is found through ``bootstrap_servers`` (``"host:port,..."``) or
    through ``zookeeper_connect=`` (``"host:port[/chroot]"``: the brokers
    registered there, read once within ``timeout_s``); give exactly one.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        max_wait_ms: int = 100,
        min_bytes: int = 1,
        timeout_s: float = 30.0,
        retries: int = 5,
        *,
        zookeeper_connect: str | None = None,
        security_protocol: str | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        kafka_listener_fetch: bool = False,
        isolation_level: str = READ_UNCOMMITTED,
    ) -> None:
        self._isolation = isolation_number(isolation_level)  # checked before connecting
        self.isolation_level = isolation_level
        bootstrap = resolve_bootstrap(bootstrap_servers, zookeeper_connect, timeout_s)
        security = client_security(
            security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
            sasl_plain_username, sasl_plain_password, sasl_mechanism,
        )  # fmt: skip
        self.cluster = ClusterConnection(bootstrap, timeout_s, security)
        self._ahead: ThreadPoolExecutor | None = None  # fetch_raw_ahead's thread
        # fetch_raw over the Kafka listeners of this client's security protocol
        self._kafka_fetch = kafka_listener_fetch
        self._kafka: dict[str, KafkaFetchConnection] = {}  # by listener endpoint
        self._unreachable: set[str] = set()  # listeners that refused: gRPC to those brokers
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.timeout_s = timeout_s
        self.retries = retries

    # -- metadata ------------------------------------------------------------------

    def refresh_metadata(self, topics: Sequence[str]) -> None:
        try:
            self.cluster.refresh(topics)
        except ClientError as exc:
            raise ConsumerError(exc.code, exc.message) from exc

    def partitions_for(self, topic: str) -> list[int]:
        """Partitions of ``topic`` that have a leader now.  Any without one are
        named in a warning: their records cannot be read until one is elected."""
        self.refresh_metadata([topic])
        led = sorted(p for (t, p) in self.cluster.leaders if t == topic)
        leaderless = self.leaderless(topic)
        if leaderless:
            logger.warning(
                "%s: partition%s %s %s no leader now; %s records are not read until one is elected",
                topic,
                "s" if len(leaderless) > 1 else "",
                ", ".join(map(str, leaderless)),
                "have" if len(leaderless) > 1 else "has",
                "their" if len(leaderless) > 1 else "its",
            )
        return led

    def leaderless(self, topic: str) -> list[int]:
        """Partitions of ``topic`` with no leader in the metadata last read."""
        count = self.cluster.partition_counts.get(topic, 0)
        return [p for p in range(count) if TopicPartition(topic, p) not in self.cluster.leaders]

    def leader(self, topic: str, partition: int) -> str:
        key = TopicPartition(topic, partition)
        if key not in self.cluster.leaders:
            self.refresh_metadata([topic])
        try:
            return self.cluster.leaders[key]
        except KeyError:
            raise ConsumerError(
                errors.LEADER_NOT_AVAILABLE,
                f"{topic}-{partition} has no leader (or does not exist)",
            ) from None

    def _leaders_may_have_moved(self) -> None:
        """Forget the known leaders and ask the next bootstrap server for them: the
        broker that named them last may be a deposed leader (docs/architecture.md)."""
        self.cluster.forget()
        self.cluster.move_on()

    # -- fetching ------------------------------------------------------------------

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20
    ) -> FetchResult:
        return self.multi_fetch({TopicPartition(topic, partition): offset}, max_bytes)[
            TopicPartition(topic, partition)
        ]

    def multi_fetch(
        self, offsets: Mapping[TopicPartition, int], max_bytes: int = 1 << 20
    ) -> dict[TopicPartition, FetchResult]:
        """Fetch many partitions, one request per leader; retries when leaders move."""
        results: dict[TopicPartition, FetchResult] = {}
        pending = dict(offsets)
        retry = Budget(self.timeout_s, self.retries)
        while True:
            by_leader: dict[str, dict[TopicPartition, int]] = {}
            for key, offset in pending.items():
                try:
                    by_leader.setdefault(self.leader(*key), {})[key] = offset
                except ConsumerError:
                    if retry.exhausted():
                        raise
            for endpoint, wanted in by_leader.items():
                self._fetch_from(endpoint, wanted, max_bytes, results)
            pending = {k: v for k, v in pending.items() if k not in results}
            if not pending:
                return results
            if retry.exhausted():
                raise ConsumerError(
                    errors.NOT_LEADER_OR_FOLLOWER,
                    f"no leader answered for {sorted(pending)} within {retry.describe()}",
                )
            self._leaders_may_have_moved()
            retry.sleep()

    def _fetch_from(
        self,
        endpoint: str,
        wanted: Mapping[TopicPartition, int],
        max_bytes: int,
        results: dict[TopicPartition, FetchResult],
    ) -> dict[TopicPartition, int]:
        request = self._fetch_request(wanted, max_bytes)
        try:
            response = self.cluster.stub(endpoint).Fetch(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if errors.transport_error(exc).retriable:
                return dict(wanted)
            raise ConsumerError.from_rpc(exc) from exc
        return self._read_response(response, wanted, results)

    def _fetch_request(
        self, wanted: Mapping[TopicPartition, int], max_bytes: int
    ) -> pb.FetchRequest:
        topics: dict[str, list[pb.PartitionFetchData]] = {}
        for (topic, partition), offset in wanted.items():
            topics.setdefault(topic, []).append(
                pb.PartitionFetchData(
                    partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes
                )
            )
        request = pb.FetchRequest(
            replica_id=-1,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=max_bytes * len(wanted),
            topics=[pb.TopicFetchData(name=t, partitions=ps) for t, ps in topics.items()],
            isolation_level=self._isolation,
        )
        return request

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    def _read_response(
        self,
        response: pb.FetchResponse,
        wanted: Mapping[TopicPartition, int],
        results: dict[TopicPartition, FetchResult],
    ) -> dict[TopicPartition, int]:
        """Decode each partition into ``results``; the retriable ones (leader moved)
        come back with their offsets.  OFFSET_OUT_OF_RANGE and other errors raise."""
        retry: dict[TopicPartition, int] = {}
        with paused_gc():  # tens of thousands of tuples: no collections midway
            for topic in response.topics:
                for p in topic.partitions:
                    key = TopicPartition(topic.name, p.partition)
                    offset = wanted[key]
                    error = errors.from_wire(p.error)
                    if error.retriable:
                        retry[key] = offset
                        continue
                    if error is errors.OFFSET_OUT_OF_RANGE:
                        raise _out_of_range(
                            topic.name, p.partition, offset, p.log_start_offset, p.high_watermark
                        )
                    if error is not errors.NONE:
                        raise ConsumerError(error, p.error_message)
                    data = p.records  # each read of the field copies it
                    aborted = (
                        [AbortedTransaction(a.producer_id, a.first_offset)
                         for a in p.aborted_transactions]
                        if self.read_committed
                        else None
                    )  # fmt: skip
                    records = decode_located(
                        committed_batches(data, aborted),
                        ConsumerRecord,
                        topic.name,
                        p.partition,
                        offset,
                    )
                    header = last_header(data)
                    next_offset = header.next_offset if header is not None else offset
                    results[key] = FetchResult(
                        records, p.high_watermark, next_offset, p.last_stable_offset
                    )
        return retry

    def fetch_raw(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20
    ) -> RawFetch:
        """One partition's batches from ``offset``, undecoded, for readers that
        decode them their own way (control batches included; read_committed
        answers name the aborted transactions, for ``committed_batches``);
        retries as ``multi_fetch``.  With
        ``kafka_listener_fetch`` the request goes to the leader's Kafka
        listener of this client's security protocol where it has one
        (consumer/kafka_fetch.py: about half gRPC's CPU per megabyte at both
        ends), and over gRPC otherwise."""
        retry = Budget(self.timeout_s, self.retries)
        while True:
            try:
                leader = self.leader(topic, partition)
                answer = self._fetch_one(leader, topic, partition, offset, max_bytes)
            except ConsumerError:
                if retry.exhausted():
                    raise
            else:
                error = errors.from_wire(answer.error)
                if error is errors.NONE:
                    return RawFetch(
                        answer.records,
                        answer.high_watermark,
                        answer.log_start_offset,
                        answer.aborted_transactions if self.read_committed else None,
                        answer.last_stable_offset,
                    )
                if error is errors.OFFSET_OUT_OF_RANGE:
                    raise _out_of_range(
                        topic, partition, offset, answer.log_start_offset, answer.high_watermark
                    )
                if not error.retriable or retry.exhausted():
                    raise ConsumerError(error, answer.message or f"fetch {topic}-{partition}")
            self._leaders_may_have_moved()
            retry.sleep()

    def _fetch_one(
        self, leader: str, topic: str, partition: int, offset: int, max_bytes: int
    ) -> PartitionAnswer:
        """One partition's answer from ``leader``.  A transport failure that can
        pass is an answer with a retriable error; the others raise."""
        listener = self.cluster.kafka_listeners.get(leader) if self._kafka_fetch else None
        if listener is not None and listener not in self._unreachable:
            connection = self._kafka.get(listener)
            if connection is None:  # setdefault: the fetch-ahead thread may race this one
                connection = self._kafka.setdefault(
                    listener,
                    KafkaFetchConnection(
                        listener, self.timeout_s, "annal-consumer", self.cluster.security
                    ),
                )
            try:
                return connection.fetch(
                    topic, partition, offset, max_bytes, self.max_wait_ms, self.min_bytes,
                    self._isolation,
                )  # fmt: skip
            except ListenerUnreachable as exc:
                logger.warning("%s; fetching from %s over gRPC from now on", exc, leader)
                self._unreachable.add(listener)
            except FetchConnectionError as exc:
                return PartitionAnswer(errors.BROKER_NOT_AVAILABLE.number, -1, -1, b"", str(exc))
        request = self._fetch_request({TopicPartition(topic, partition): offset}, max_bytes)
        try:
            response = self.cluster.stub(leader).Fetch(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            code = errors.transport_error(exc)
            if not code.retriable:
                raise ConsumerError.from_rpc(exc, f"fetch {topic}-{partition}") from exc
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            return PartitionAnswer(
                code.number, -1, -1, b"", f"fetch {topic}-{partition} from {leader}: {details}"
            )
        p = response.topics[0].partitions[0]
        return PartitionAnswer(
            p.error,
            p.high_watermark,
            p.log_start_offset,
            p.records,
            p.error_message,
            tuple(
                AbortedTransaction(a.producer_id, a.first_offset) for a in p.aborted_transactions
            ),
            p.last_stable_offset,
        )

    def fetch_raw_ahead(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20
    ) -> RawFetchAhead:
        """``fetch_raw`` on the consumer's I/O thread, answered by ``result()``:
        the request is on its way while the caller works on the answer before.
        (A blocking call on a thread of its own costs less CPU than grpcio's
        ``future()``, whose polling thread spins while the call is out.)"""
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="consumer-fetch-ahead")
        future = self._ahead.submit(self.fetch_raw, topic, partition, offset, max_bytes)
        return RawFetchAhead(offset, future)

    def stream(
        self, offsets: Mapping[TopicPartition, int], max_bytes: int = 1 << 20
    ) -> Generator[dict[TopicPartition, FetchResult], None, None]:
        """Fetch ``offsets`` round after round, each continuing where the last
        ended, with the next round's requests (one per leader) already on their
        way while the caller reads this one, as Kafka's fetcher threads run
        ahead of the application.  Yields one dict per round.  Leaders that
        moved are looked up again; OFFSET_OUT_OF_RANGE raises."""
        positions = dict(offsets)
        ahead = self._start_round(positions, max_bytes)
        try:
            failures = 0
            while True:
                responses = []
                retry: dict[TopicPartition, int] = {}
                for _, wanted, call in ahead:
                    try:
                        response = call.result()
                    except grpc.RpcError as exc:
                        if not errors.transport_error(exc).retriable:
                            raise ConsumerError.from_rpc(exc) from exc
                        retry.update(wanted)
                        continue
                    responses.append((wanted, response))
                    retry.update(_advance(response, positions))
                ahead = [] if retry else self._start_round(positions, max_bytes)
                results: dict[TopicPartition, FetchResult] = {}
                for wanted, response in responses:
                    retry.update(self._read_response(response, wanted, results))
                yield results
                failures = failures + 1 if retry else 0
                if not ahead:
                    self.cluster.forget()
                    if retry:  # the broker that named those leaders may be a deposed one
                        self.cluster.move_on()
                        time.sleep(delay(failures))
                    ahead = self._start_round(positions, max_bytes)
        finally:
            for _, _, call in ahead:
                call.cancel()

    def _start_round(
        self, positions: Mapping[TopicPartition, int], max_bytes: int
    ) -> list[tuple[str, dict[TopicPartition, int], grpc.Future]]:
        """One Fetch per leader, sent without waiting; partitions with no known
        leader sit this round out."""
        by_leader: dict[str, dict[TopicPartition, int]] = {}
        for key, offset in positions.items():
            try:
                by_leader.setdefault(self.leader(*key), {})[key] = offset
            except ConsumerError:
                continue
        return [
            (
                endpoint,
                wanted,
                self.cluster.stub(endpoint).Fetch.future(
                    self._fetch_request(wanted, max_bytes), timeout=self.timeout_s
                ),
            )
            for endpoint, wanted in by_leader.items()
        ]

    def offsets_before(self, topic: str, partition: int, timestamp: int) -> int:
        """The first offset at or after ``timestamp`` (EARLIEST -2, LATEST -1: the last
        stable offset with read_committed); -1 if none."""
        return self.offset_for_time(topic, partition, timestamp)[0]

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """As ``offsets_before``, with the found record's timestamp (-1 for
        EARLIEST/LATEST and when no record is that recent)."""
        retry = Budget(self.timeout_s, self.retries)
        while True:
            request = pb.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=self._isolation,
                topics=[
                    pb.TopicListOffsets(
                        name=topic,
                        partitions=[
                            pb.PartitionListOffsets(partition=partition, timestamp=timestamp)
                        ],
                    )
                ],
            )
            try:
                leader = self.leader(topic, partition)
            except ConsumerError:
                if retry.exhausted():
                    raise
                self._leaders_may_have_moved()
                retry.sleep()
                continue
            try:
                response = self.cluster.stub(leader).ListOffsets(request, timeout=self.timeout_s)
            except grpc.RpcError as exc:
                failed = errors.transport_error(exc)
                if not failed.retriable:
                    raise ConsumerError.from_rpc(exc) from exc
                error, detail = failed, f"leader {leader} of {topic}-{partition}"
            else:
                result = response.topics[0].partitions[0]
                error, detail = errors.from_wire(result.error), ""
                if error is errors.NONE:
                    return int(result.offset), int(result.timestamp)
            if not error.retriable or retry.exhausted():
                where = detail or f"list offsets of {topic}-{partition}"
                raise ConsumerError(error, f"{where} (gave up after {retry.describe()})")
            self._leaders_may_have_moved()
            retry.sleep()

    def iterate(self, topic: str, partition: int, offset: int) -> Iterator[ConsumerRecord]:
        """Records from ``offset`` until the high watermark (the last stable offset
        with read_committed) as it was when reached."""
        while True:
            result = self.fetch(topic, partition, offset)
            yield from result.records
            end = result.last_stable_offset if self.read_committed else result.high_watermark
            if result.next_offset >= end or result.next_offset == offset:
                return
            offset = result.next_offset

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.shutdown(wait=False, cancel_futures=True)
        for connection in list(self._kafka.values()):
            connection.close()
        self.cluster.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
