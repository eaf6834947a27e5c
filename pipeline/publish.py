"""Publishing one staged micro-batch as an idempotent producer with a fixed
identity, in rounds that can be sent again after a crash without a duplicate.

A micro-batch's rows (an Arrow table: ``topic``, ``partition``, ``key``,
``value``, ``headers``) are cut into **rounds** by ``plan_rounds``, a pure
function of the rows and ``batch_bytes``: each partition's rows, in row
order, are split into batches of at most ``batch_bytes`` (a single larger
record makes a batch of its own), and round ``r`` holds the ``r``-th batch
of every partition that has one.  So a round holds **at most one batch per
partition**, and planning the same rows again gives the same rounds.

Round ``r`` is sent under producer id ``P`` and epoch ``E0 + r`` (both
chosen once, before the first round, and stored with the rows), each
batch with base sequence 0; a round is over when every leader acknowledged
its batches with acks=all.  What the broker does with a round sent again
(Kafka's idempotence rules, ``storage/producer_state.py``):

* a batch it stored already has the same epoch and exactly the same
  sequence range as that producer's last batch on the partition: a
  duplicate, answered with the offsets it was stored at, not stored again;
* a batch it never stored comes with a newer epoch at sequence 0: stored.

Since a round has one batch per partition, the batch in doubt is always
the producer's newest on its partition, which the broker recognises even
right after loading its producer state from a snapshot (which keeps only
the newest batch).  Rounds before the one in doubt are never sent again,
and a zombie still sending an older round is fenced by its older epoch
(INVALID_PRODUCER_EPOCH).

Retriable failures (a leader moving or unreachable, NOT_ENOUGH_REPLICAS, a
timeout) are sent again, with the same bytes, for up to ``timeout_s``; any
other answer fails the round with ``PublishError`` naming the partition.

Thread safety: ``Publisher`` is used by one thread; it sends one request
per leader at a time from a small pool of its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
import pyarrow as pa
import pyarrow.compute as pc
from annal.client.cluster import ClientError, ClusterConnection
from annal.client.retry import Budget
from annal.storage.batch import Compression
from annal.storage.records import BatchBuilder
from annal.v1 import annal_pb2 as pb

from annal import errors
from annal.topic_partition import TopicPartition

MAX_PRODUCER_EPOCH = 32767
RECORD_OVERHEAD = 24  # bytes a record costs besides its key, value and headers

Round = dict[TopicPartition, list[int]]  # row indexes of each partition's one batch


class PublishError(ClientError):
    """A round the cluster refused for good; the message names the partition."""


def record_sizes(table: pa.Table) -> list[int]:
    """Each row's estimated bytes in a batch (the same estimate on every run)."""
    keys = pc.fill_null(pc.binary_length(table["key"]), 0).to_pylist()
    values = pc.fill_null(pc.binary_length(table["value"]), 0).to_pylist()
    sizes = [RECORD_OVERHEAD + k + v for k, v in zip(keys, values, strict=True)]
    if "headers" in table.column_names:
        for i, headers in enumerate(table["headers"].to_pylist()):
            for header in headers or ():
                sizes[i] += len(header["key"].encode()) + len(header["value"] or b"") + 4
    return sizes


def plan_rounds(
    topics: Sequence[str], partitions: Sequence[int], sizes: Sequence[int], batch_bytes: int
) -> list[Round]:
    """See the module docstring: each partition's rows in batches of at most
    ``batch_bytes``; round ``r`` is every partition's ``r``-th batch."""
    batches: dict[TopicPartition, list[list[int]]] = {}
    filled: dict[TopicPartition, int] = {}
    if len(topics) != len(partitions):
        raise ValueError(f"{len(topics)} topics for {len(partitions)} partitions")
    for row, key in enumerate(map(TopicPartition, topics, partitions)):
        mine = batches.get(key)
        if mine is None:
            mine = batches[key] = [[]]
            filled[key] = 0
        if mine[-1] and filled[key] + sizes[row] > batch_bytes:
            mine.append([])
            filled[key] = 0
        mine[-1].append(row)
        filled[key] += sizes[row]
    count = max((len(b) for b in batches.values()), default=0)
    return [{k: b[r] for k, b in sorted(batches.items()) if r < len(b)} for r in range(count)]


@dataclass(frozen=True)
class RoundData:
    """The columns a round's batches are built from (Python lists, built once)."""

    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]] | None
    timestamp_ms: int

    @classmethod
    def of(cls, table: pa.Table, timestamp_ms: int) -> RoundData:
        headers = None
        if "headers" in table.column_names:
            headers = [
                [(h["key"], h["value"]) for h in row or ()] for row in table["headers"].to_pylist()
            ]
        return cls(table["key"].to_pylist(), table["value"].to_pylist(), headers, timestamp_ms)


class Publisher:
    """Sends rounds (see the module docstring) to the cluster behind ``cluster``."""

    def __init__(
        self, cluster: ClusterConnection, compression: Compression, timeout_s: float
    ) -> None:
        self.cluster = cluster
        self.compression = compression
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="annal-publish")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def send_round(
        self, data: RoundData, plan: Round, producer_id: int, epoch: int
    ) -> dict[TopicPartition, int]:
        """Send one round and wait until every batch is stored (or was already);
        the base offset of each partition's batch."""
        if epoch > MAX_PRODUCER_EPOCH:
            raise ValueError(f"producer epoch {epoch} is past {MAX_PRODUCER_EPOCH}")
        encoded = {key: self._build(data, rows, producer_id, epoch) for key, rows in plan.items()}
        pending = dict(encoded)
        stored: dict[TopicPartition, int] = {}
        retry = Budget(self.timeout_s)
        last = "no answer"
        while pending:
            by_leader: dict[str, dict[TopicPartition, bytes]] = {}
            unknown = []
            for key, records in pending.items():
                leader = self.cluster.leaders.get(key)
                if leader is None:
                    unknown.append(key[0])
                else:
                    by_leader.setdefault(leader, {})[key] = records
            if unknown:
                self._refresh(sorted(set(unknown)))
            calls = [
                (leader, self._pool.submit(self._produce, leader, batches))
                for leader, batches in by_leader.items()
            ]
            for leader, call in calls:
                for key, (error, message, base_offset) in call.result().items():
                    if error is errors.NONE:
                        stored[key] = base_offset
                        del pending[key]
                    elif error.retriable:
                        last = f"{key[0]}-{key[1]} at {leader}: {error.name} {message}".strip()
                        if error.invalid_metadata:
                            self.cluster.forget([key[0]])
                    else:
                        raise PublishError(
                            error,
                            f"{key[0]}-{key[1]} refused producer {producer_id} epoch {epoch}"
                            + (f": {message}" if message else ""),
                        )
            if not pending:
                break
            if retry.expires_in_next_wait():
                raise PublishError(
                    errors.REQUEST_TIMED_OUT,
                    f"{len(pending)} partitions not acknowledged within "
                    f"{self.timeout_s:.0f} s; last: {last}",
                )
            retry.sleep()
        return stored

    def _build(self, data: RoundData, rows: list[int], producer_id: int, epoch: int) -> bytes:
        builder = BatchBuilder(
            self.compression, producer_id=producer_id, producer_epoch=epoch, base_sequence=0
        )
        for row in rows:
            headers = data.headers[row] if data.headers is not None else ()
            builder.append(data.keys[row], data.values[row], data.timestamp_ms, headers)
        return builder.build()

    def _refresh(self, topics: list[str]) -> None:
        try:
            self.cluster.refresh(topics)
        except ClientError:
            pass  # no broker answered: the round's deadline decides

    def _produce(
        self, leader: str, batches: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, tuple[errors.ErrorCode, str, int]]:
        topics: dict[str, list[pb.PartitionProduceData]] = {}
        for (topic, partition), records in batches.items():
            topics.setdefault(topic, []).append(
                pb.PartitionProduceData(partition=partition, records=records)
            )
        request = pb.ProduceRequest(
            acks=-1,
            timeout_ms=int(self.timeout_s * 900),
            topics=[pb.TopicProduceData(name=t, partitions=ps) for t, ps in topics.items()],
        )
        try:
            answer = self.cluster.stub(leader).Produce(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            error = errors.transport_error(exc)
            self.cluster.forget([t for t, _ in batches])
            return {key: (error, str(exc.details() or ""), -1) for key in batches}
        results = {}
        for topic_result in answer.topics:
            for p in topic_result.partitions:
                key = TopicPartition(topic_result.name, p.partition)
                results[key] = (errors.from_wire(p.error), p.error_message, p.base_offset)
        for key in batches:
            results.setdefault(key, (errors.UNKNOWN_SERVER_ERROR, "no answer", -1))
        return results


def init_producer_id(cluster: ClusterConnection, timeout_s: float) -> int:
    """A new producer id (epoch 0) from any broker, asking again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = cluster.call_any("InitProducerId", pb.InitProducerIdRequest())
            error, message = errors.from_wire(answer.error), answer.error_message
        except ClientError as exc:
            error, message = exc.code, exc.message
        else:
            if error is errors.NONE:
                return int(answer.producer_id)
        if not error.retriable or time.monotonic() + 0.5 > deadline:
            raise PublishError(error, f"no producer id: {message}")
        time.sleep(0.5)
