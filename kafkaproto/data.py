"""Kafka's data APIs on annal's data path: Produce, Fetch, ListOffsets,
OffsetForLeaderEpoch, InitProducerId.

Each handler turns the decoded Kafka request into the request of the same
name that annal's gRPC service takes, hands it to the same broker code
(``DataApi``, ``InitProducerIdApi``), and turns the answer back.  Record
batches are the same bytes both ways.

Fetch v7+ carries a fetch session's fields (KIP-227), which only Kafka's
protocol has: ``DataApi.fetch_in_session`` keeps the sessions
(``broker/fetch_sessions.py``) and answers an incremental fetch with the
partitions that have something new; an unknown session or an epoch out of
step is answered FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH
with no partitions, as Kafka answers them.  Fetch v4-v6 has no session.

What Kafka's protocol has and annal does not (transactions) is answered as
Kafka allows:

* a read_committed fetch or ListOffsets sees the high watermark as the last
  stable offset (annal writes no transactional batches), with no aborted
  transactions;
* InitProducerId always hands out a new producer id at epoch 0, as Kafka does
  for a producer without a transactional id (the id and epoch a v3+ request
  carries are not needed to bump an epoch then); one with a transactional id
  is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, authorized or not.

Each handler passes the connection's session along; the broker code decides
what it may do (docs/security.md).

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from typing import Any

from annal.broker.data_api import DataApi
from annal.broker.fetch_sessions import FINAL_EPOCH, INVALID_SESSION_ID, FetchSessionError
from annal.broker.producer_ids import InitProducerIdApi
from annal.kafkaproto.apis import KafkaApis, Values
from annal.kafkaproto.wire import Request, millis
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from kio.schema.errors import ErrorCode as KioErrorCode

from annal import errors

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 22, 23


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
        apis.add(PRODUCE, "Produce", (3, 9), self.produce)
        apis.add(FETCH, "Fetch", (4, 12), self.fetch)
        apis.add(LIST_OFFSETS, "ListOffsets", (1, 6), self.list_offsets)
        apis.add(OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", (2, 4), self.leader_epochs)
        apis.add(INIT_PRODUCER_ID, "InitProducerId", (0, 4), self.init_producer_id)

    async def produce(self, request: Request) -> Values | None:
        body = request.body
        if body.transactional_id is not None:
            return _produce_refused(
                body, KioErrorCode.transactional_id_authorization_failed.value,
                "annal has no transactions",
            )  # fmt: skip
        ask = pb.ProduceRequest(acks=body.acks, timeout_ms=millis(body.timeout))
        for topic in body.topic_data:
            out = ask.topics.add(name=topic.name)
            for p in topic.partition_data:
                out.partitions.add(partition=p.index, records=bytes(p.records or b""))
        answer = await self._data.produce(ask, NO_DEADLINE, request.session)
        if body.acks == 0:
            return None
        return {
            "responses": [
                {
                    "name": t.name,
                    "partition_responses": [
                        {
                            "index": p.partition,
                            "error_code": p.error,
                            "base_offset": p.base_offset,
                            "log_append_time": p.log_append_time_ms,
                            "log_start_offset": p.log_start_offset,
                            "error_message": p.error_message or None,
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
        try:
            answer, session_id = await self._data.fetch_in_session(
                _fetch_request(body), session_id, epoch, forgotten, NO_DEADLINE, request.session
            )
        except FetchSessionError as exc:
            return {
                "throttle_time": 0,
                "error_code": exc.code.number,
                "session_id": INVALID_SESSION_ID,
                "responses": [],
            }
        return {
            "throttle_time": 0,
            "error_code": errors.NONE.number,
            "session_id": session_id,
            "responses": [
                {
                    "topic": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": p.error,
                            "high_watermark": p.high_watermark,
                            "last_stable_offset": p.high_watermark,
                            "log_start_offset": p.log_start_offset,
                            "aborted_transactions": [],
                            "preferred_read_replica": -1,
                            "records": p.records,
                        }
                        for p in t.partitions
                    ],
                }
                for t in answer.topics
            ],
        }

    async def list_offsets(self, request: Request) -> Values:
        body = request.body
        ask = pb.ListOffsetsRequest(replica_id=body.replica_id)
        for topic in body.topics:
            out = ask.topics.add(name=topic.name)
            for p in topic.partitions:
                out.partitions.add(
                    partition=p.partition_index,
                    timestamp=p.timestamp,
                    current_leader_epoch=getattr(p, "current_leader_epoch", -1),
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
        ask = pb.OffsetsForLeaderEpochRequest(replica_id=getattr(body, "replica_id", -1))
        for topic in body.topics:
            out = ask.topics.add(name=topic.topic)
            for p in topic.partitions:
                out.partitions.add(
                    partition=p.partition,
                    current_leader_epoch=p.current_leader_epoch,
                    leader_epoch=p.leader_epoch,
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
        answer = await self._producer_ids.init_producer_id(
            pb.InitProducerIdRequest(
                transactional_id=body.transactional_id or "",
                transaction_timeout_ms=millis(body.transaction_timeout),
            ),
            request.session,
        )
        error = int(answer.error)
        if body.transactional_id is not None:
            # authorized or not, a transactional producer cannot go on: Kafka's
            # clients give up on this code (annal's own answer is INVALID_REQUEST)
            error = int(KioErrorCode.transactional_id_authorization_failed.value)
        return {
            "throttle_time": 0,
            "error_code": error,
            "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch,
        }


def _produce_refused(body: Any, error: int, message: str) -> Values:
    return {
        "responses": [
            {
                "name": t.name,
                "partition_responses": [
                    {"index": p.index, "error_code": error, "base_offset": -1,
                     "error_message": message}
                    for p in t.partition_data
                ],
            }
            for t in body.topic_data
        ],
        "throttle_time": 0,
    }  # fmt: skip


def _fetch_request(body: Any) -> pb.FetchRequest:
    """The partitions a Fetch names, as annal's FetchRequest."""
    ask = pb.FetchRequest(
        replica_id=body.replica_id,
        max_wait_ms=millis(body.max_wait),
        min_bytes=body.min_bytes,
        max_bytes=body.max_bytes,
    )
    for topic in body.topics:
        out = ask.topics.add(name=topic.topic)
        for p in topic.partitions:
            wanted = out.partitions.add(
                partition=p.partition,
                fetch_offset=p.fetch_offset,
                partition_max_bytes=p.partition_max_bytes,
                log_start_offset=p.log_start_offset,
            )
            epoch = getattr(p, "current_leader_epoch", -1)
            if epoch >= 0:
                wanted.current_leader_epoch = epoch
    return ask
