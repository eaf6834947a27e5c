"""Kafka's data APIs on annal's data path: Produce, Fetch, ListOffsets,
OffsetForLeaderEpoch, InitProducerId.

Each handler builds the broker's own request of the same name
(``broker/requests/data_types.py``, ``producer_types.py``) from the decoded
Kafka request, hands it to the code the gRPC service runs too (``DataApi``,
``InitProducerIdApi``), and builds Kafka's answer from the service's.  Record
batches are the same bytes both ways.

Versions that predate message format v2 are served as a Kafka 2.x broker
serves them (their layouts: ``legacy_versions.py``):

* Produce v0-v2 carry message sets of magic 0 or 1; the log up-converts
  them to v2 batches as it appends (``storage/legacy.py``: CRCs checked,
  compressed wrappers inflated and stored as one batch of the same codec);
  v0 answers no throttle time, v2 answers the log append time;
* Fetch v0-v3 answer magic 0 (v0, v1) or magic 1 (v2, v3) message sets: what
  was read is converted down partition by partition
  (``storage/downconvert.py``), each within its partition's limit and what
  the response's limit has left, or the size of what was read if larger
  (the first batch always whole).  A zstd batch has no old form: its
  partition is answered UNSUPPORTED_COMPRESSION_TYPE.  Fetch v0-v2 have no
  response size limit (KIP-74): the brokers' largest is used.  Large
  answers are converted on a worker thread, so that the event loop goes on
  serving everyone else meanwhile;
* KAFKA_STORAGE_ERROR is answered NOT_LEADER_OR_FOLLOWER to Produce v0-v3
  and Fetch v0-v5, whose clients do not know it and would not retry it.

Produce v8+ names the records that got a batch refused (KIP-467:
``record_errors``, each record's index in its batch and why, beside the
partition's ``error_message``); older versions answer the error code and
nothing more.

Fetch v7+ carries a fetch session's fields (KIP-227), which only Kafka's
protocol has: ``DataApi.fetch_in_session`` keeps the sessions
(``broker/requests/fetch_sessions.py``) and answers an incremental fetch with the
partitions that have something new; an unknown session or an epoch out of
step is answered FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH
with no partitions, as Kafka answers them.  Fetch v4-v6 has no session.

Fetch v11+ from a consumer carries its rack (``rack_id``, KIP-392): with it the
consumer may read a partition from a follower (up to the follower's high
watermark), and a leader whose ``replica.selector.class`` picks a replica in
the consumer's rack answers that partition with ``preferred_read_replica`` and
no records (``broker/replication/replica_selector.py``).  Older versions read from leaders
only, as in Kafka.

Transactions (KIP-98) on the data path:

* Produce v3+ carries the producer's ``transactional_id``: with transactional
  batches it must be there and the caller may Write on it, else every
  partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  (``broker/transactions/data_path.py``);
* Fetch v4+ carries ``isolation_level``: a read_committed consumer reads up
  to the last stable offset and is answered the aborted transactions
  overlapping what it read; a read_uncommitted one is answered null aborted
  transactions, as Kafka's brokers answer it.  Every v4+ answer carries the
  partition's ``last_stable_offset``;
* ListOffsets v2+ carries ``isolation_level``: read_committed answers LATEST
  with the last stable offset;
* InitProducerId without a transactional id hands out a new producer id at
  epoch 0, as Kafka does for an idempotent producer; with one, the
  transaction coordinator answers (``broker/transactions/``: one producer id
  per transactional id, its epoch bumped each time, KIP-360's id and epoch
  of v3+ honoured), and clients before v4 are told INVALID_PRODUCER_EPOCH
  where newer ones are told PRODUCER_FENCED (KIP-588).

Each handler passes the connection's session along; the broker code decides
what it may do (docs/security.md).

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from annal.broker.data_api import DataApi
from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.producer_ids import InitProducerIdApi
from annal.broker.replication.replica_selector import ClientMetadata
from annal.broker.requests import data_types as dt
from annal.broker.requests import producer_types as pt
from annal.broker.requests.fetch_sessions import FINAL_EPOCH, INVALID_SESSION_ID, FetchSessionError
from annal.broker.transactions.data_path import READ_COMMITTED
from annal.kafkaproto import legacy_versions
from annal.kafkaproto.wire import Request, millis
from annal.storage.downconvert import UnsupportedCompressionError, down_convert
from annal.storage.errors import CorruptRecordError
from annal.storage.files import TopicPartition

from annal import errors

logger = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 22, 23
PRODUCE_VERSIONS = (0, 9)
FETCH_VERSIONS = (0, 12)
CLIENT_METADATA_VERSION = 11  # Fetch v11+ carries the consumer's rack (KIP-392)
NO_RESPONSE_LIMIT = (1 << 31) - 1  # Fetch v0-v2's max_bytes, as Kafka's brokers take it
# Answers of more bytes than this are converted down on a worker thread.
OFF_LOOP_CONVERSION_BYTES = 256 * 1024
STORAGE_ERROR = errors.KAFKA_STORAGE_ERROR.number
NOT_LEADER = errors.NOT_LEADER_OR_FOLLOWER.number


def magic_of_fetch(version: int) -> int | None:
    """The message format a Fetch of ``version`` answers in, when it is not v2:
    magic 0 for v0-v1, magic 1 for v2-v3 (None for v4+)."""
    if version <= 1:
        return 0
    if version <= 3:
        return 1
    return None


class NoDeadline:
    """A Kafka request's context: its caller set no deadline beyond its own timeouts."""

    def time_remaining(self) -> float | None:
        return None


NO_DEADLINE = NoDeadline()


class DataApis:
    """See the module docstring."""

    def __init__(self, data: DataApi, producer_ids: InitProducerIdApi) -> None:
        self._data = data
        self._producer_ids = producer_ids

    def register(self, apis: KafkaApis) -> None:
        legacy_versions.install()
        apis.add(PRODUCE, "Produce", PRODUCE_VERSIONS, self.produce)
        apis.add(FETCH, "Fetch", FETCH_VERSIONS, self.fetch)
        apis.add(LIST_OFFSETS, "ListOffsets", (1, 6), self.list_offsets)
        apis.add(OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", (2, 4), self.leader_epochs)
        apis.add(INIT_PRODUCER_ID, "InitProducerId", (0, 4), self.init_producer_id)

    async def produce(self, request: Request) -> Values | None:
        body = request.body
        ask = dt.ProduceRequest(
            body.acks,
            millis(body.timeout),
            [
                dt.TopicProduceData(
                    topic.name,
                    [
                        dt.PartitionProduceData(p.index, bytes(p.records or b""))
                        for p in topic.partition_data
                    ],
                )
                for topic in body.topic_data
            ],
            getattr(body, "transactional_id", None) or "",  # v3+
        )
        answer = await self._data.produce(ask, NO_DEADLINE, request.session)
        if body.acks == 0:
            return None
        storage_error = NOT_LEADER if request.head.api_version <= 3 else STORAGE_ERROR
        return {
            "responses": [
                {
                    "name": t.name,
                    "partition_responses": [
                        {
                            "index": p.partition,
                            "error_code": storage_error if p.error == STORAGE_ERROR else p.error,
                            "base_offset": p.base_offset,
                            "log_append_time": p.log_append_time_ms,
                            "log_start_offset": p.log_start_offset,
                            "error_message": p.error_message or None,
                            "record_errors": [  # v8+ (KIP-467); older versions drop it
                                {
                                    "batch_index": e.batch_index,
                                    "batch_index_error_message": e.message or None,
                                }
                                for e in p.record_errors
                            ],
                        }
                        for p in t.partitions
                    ],
                }
                for t in answer.topics
            ],
            "throttle_time": 0,
        }

    async def fetch(self, request: Request) -> Values:
        body = request.body
        session_id = getattr(body, "session_id", INVALID_SESSION_ID)  # v7+
        epoch = getattr(body, "session_epoch", FINAL_EPOCH)
        forgotten = [
            TopicPartition(t.topic, p)
            for t in getattr(body, "forgotten_topics_data", ())
            for p in t.partitions
        ]
        preferred: dict[TopicPartition, int] = {}  # KIP-392: partitions sent elsewhere
        client = _client_metadata(request)
        more = () if client is None else (client, preferred)
        try:
            answer, session_id = await self._data.fetch_in_session(
                _fetch_request(body), session_id, epoch, forgotten, NO_DEADLINE, request.session,
                *more,
            )  # fmt: skip
        except FetchSessionError as exc:
            return {
                "throttle_time": 0,
                "error_code": exc.code.number,
                "session_id": INVALID_SESSION_ID,
                "responses": [],
            }
        version = request.head.api_version
        storage_error = NOT_LEADER if version <= 5 else STORAGE_ERROR
        committed = getattr(body, "isolation_level", 0) == READ_COMMITTED  # v4+
        responses = [
            {
                "topic": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": storage_error if p.error == STORAGE_ERROR else p.error,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                        "log_start_offset": p.log_start_offset,
                        "aborted_transactions": [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in p.aborted_transactions
                        ]
                        if committed
                        else None,
                        "preferred_read_replica": preferred.get(
                            TopicPartition(t.name, p.partition), -1
                        ),
                        "records": p.records,
                    }
                    for p in t.partitions
                ],
            }
            for t in answer.topics
        ]
        magic = magic_of_fetch(version)
        if magic is not None:
            max_bytes = getattr(body, "max_bytes", NO_RESPONSE_LIMIT)
            await _convert_down(responses, magic, _fetch_offsets(body), max_bytes)
        return {
            "throttle_time": 0,
            "error_code": errors.NONE.number,
            "session_id": session_id,
            "responses": responses,
        }

    async def list_offsets(self, request: Request) -> Values:
        body = request.body
        ask = dt.ListOffsetsRequest(
            body.replica_id,
            [
                dt.TopicListOffsets(
                    topic.name,
                    [
                        dt.PartitionListOffsets(
                            p.partition_index,
                            p.timestamp,
                            getattr(p, "current_leader_epoch", -1),  # v4+
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in body.topics
            ],
            getattr(body, "isolation_level", 0),  # v2+
        )
        answer = self._data.list_offsets(ask, request.session)
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": p.error,
                            "timestamp": p.timestamp,
                            "offset": p.offset,
                            "leader_epoch": p.leader_epoch,
                        }
                        for p in t.partitions
                    ],
                }
                for t in answer.topics
            ],
        }

    async def leader_epochs(self, request: Request) -> Values:
        body = request.body
        ask = dt.OffsetsForLeaderEpochRequest(
            getattr(body, "replica_id", -1),  # v3+
            [
                dt.TopicEpochs(
                    topic.topic,
                    [
                        dt.PartitionEpoch(p.partition, p.current_leader_epoch, p.leader_epoch)
                        for p in topic.partitions
                    ],
                )
                for topic in body.topics
            ],
        )
        answer = self._data.offsets_for_leader_epoch(ask, request.session)
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "topic": t.name,
                    "partitions": [
                        {
                            "error_code": p.error,
                            "partition": p.partition,
                            "leader_epoch": p.leader_epoch,
                            "end_offset": p.end_offset,
                        }
                        for p in t.partitions
                    ],
                }
                for t in answer.topics
            ],
        }

    async def init_producer_id(self, request: Request) -> Values:
        body = request.body
        ask = pt.InitProducerIdRequest(
            body.transactional_id or "",
            millis(body.transaction_timeout),
            getattr(body, "producer_id", pt.NO_PRODUCER_ID),  # v3+ (KIP-360)
            getattr(body, "producer_epoch", pt.NO_PRODUCER_EPOCH),
        )
        answer = await self._producer_ids.init_producer_id(ask, request.session)
        error = answer.error
        if error == errors.PRODUCER_FENCED.number and request.head.api_version < 4:
            error = errors.INVALID_PRODUCER_EPOCH.number  # older clients' word (KIP-588)
        return {
            "throttle_time": 0,
            "error_code": error,
            "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch,
        }


def _fetch_request(body: Any) -> dt.FetchRequest:
    """The partitions a Fetch names, as the data path's FetchRequest."""
    return dt.FetchRequest(
        body.replica_id,
        millis(body.max_wait),
        body.min_bytes,
        getattr(body, "max_bytes", NO_RESPONSE_LIMIT),  # v3+
        [
            dt.TopicFetchData(
                topic.topic,
                [
                    dt.PartitionFetchData(
                        p.partition,
                        p.fetch_offset,
                        p.partition_max_bytes,
                        max(getattr(p, "current_leader_epoch", -1), dt.NO_LEADER_EPOCH),  # v9+
                        getattr(p, "log_start_offset", -1),  # v5+
                    )
                    for p in topic.partitions
                ],
            )
            for topic in body.topics
        ],
        getattr(body, "isolation_level", 0),  # v4+
    )


def _client_metadata(request: Request) -> ClientMetadata | None:
    """A consumer's Fetch v11+ carries its rack (KIP-392): the client metadata that
    lets it read from a follower; None for older versions and for followers."""
    body = request.body
    if request.head.api_version < CLIENT_METADATA_VERSION or body.replica_id >= 0:
        return None
    session = request.session
    return ClientMetadata(
        rack_id=body.rack_id or "",
        client_id=request.client_id or "",
        client_address=request.client_host,
        principal=session.user,
        listener=session.listener,
    )


def _fetch_offsets(body: Any) -> dict[TopicPartition, tuple[int, int]]:
    """The offset a Fetch asks each of its partitions from, and its size limit."""
    return {
        TopicPartition(t.topic, p.partition): (p.fetch_offset, p.partition_max_bytes)
        for t in body.topics
        for p in t.partitions
    }


async def _convert_down(
    responses: list[dict[str, Any]],
    magic: int,
    wanted: dict[TopicPartition, tuple[int, int]],
    max_bytes: int,
) -> None:
    """Each partition's records of a Fetch v0-v3 answer as a ``magic`` message
    set, in place; on a worker thread when they are many bytes."""
    work = [
        (
            topic["topic"],
            partition,
            *wanted.get(TopicPartition(topic["topic"], partition["partition_index"]), (0, 0)),
        )
        for topic in responses
        for partition in topic["partitions"]
        if partition["records"]
    ]
    if not work:
        return
    if sum(len(p["records"]) for _, p, _, _ in work) <= OFF_LOOP_CONVERSION_BYTES:
        _convert_partitions(work, magic, max_bytes)
    else:
        await asyncio.to_thread(_convert_partitions, work, magic, max_bytes)


def _convert_partitions(
    work: list[tuple[str, dict[str, Any], int, int]], magic: int, max_bytes: int
) -> None:
    """Convert each partition's records.  Old messages take more bytes than v2
    batches: a partition may take what its read took, or more, up to its own
    limit, while the response stays within its limit (the slack what was read
    left of ``max_bytes``)."""
    slack = max(max_bytes - sum(len(p["records"]) for _, p, _, _ in work), 0)
    for topic, partition, first_offset, partition_max_bytes in work:
        read = partition["records"]
        limit = max(len(read), min(partition_max_bytes, len(read) + slack))
        try:
            partition["records"] = down_convert(read, magic, first_offset, limit).records
        except UnsupportedCompressionError as exc:
            partition["records"] = b""
            partition["error_code"] = exc.code.number
            logger.debug("%s-%d: %s", topic, partition["partition_index"], exc)
        except CorruptRecordError as exc:
            partition["records"] = b""
            partition["error_code"] = errors.CORRUPT_MESSAGE.number
            where = f"{topic}-{partition['partition_index']} from offset {first_offset}"
            logger.warning("%s: stored records not converted to magic %d: %s", where, magic, exc)
        slack = max(slack + len(read) - len(partition["records"]), 0)
