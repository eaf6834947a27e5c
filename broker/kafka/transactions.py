"""Kafka's transaction APIs on annal's transaction coordinator (KIP-98, KIP-664):
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions.  InitProducerId is in ``data.py``, FindCoordinator with key
type 1 in ``groups.py``, TxnOffsetCommit in ``groups.py`` (the group
coordinator's), WriteTxnMarkers beside the other inter-broker requests.

Each handler builds the broker's own request of the same name
(``broker/requests/txn_types.py``) from the decoded one and hands it to
``broker/transactions/api.py``, which authorizes it; the answer is built from
the broker's own answer.
Clients older than KIP-588 (AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
before v2) do not know PRODUCER_FENCED and are told INVALID_PRODUCER_EPOCH,
as Kafka tells them.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

import datetime

from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.requests import txn_types as tt
from annal.broker.transactions.api import TransactionApi
from annal.kafkaproto.wire import Request

from annal import errors

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
FENCED_SINCE = 2  # the first version of the three that knows PRODUCER_FENCED


# -1 (no transaction) as kio writes a non-nullable timestamp: the instant 1 ms
# before the epoch, which it writes back as -1
_NO_TIME = datetime.datetime.fromtimestamp(-0.001, datetime.UTC)


def _time(ms: int) -> datetime.datetime | int:
    return _NO_TIME if ms < 0 else ms


def _fenced_word(error: int, version: int) -> int:
    if error == errors.PRODUCER_FENCED.number and version < FENCED_SINCE:
        return errors.INVALID_PRODUCER_EPOCH.number
    return error


class TransactionApis:
    """See the module docstring."""

    def __init__(self, transactions: TransactionApi) -> None:
        self._txn = transactions

    def register(self, apis: KafkaApis) -> None:
        apis.add(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", (0, 3), self.add_partitions)
        apis.add(ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", (0, 3), self.add_offsets)
        apis.add(END_TXN, "EndTxn", (0, 3), self.end_txn)
        apis.add(DESCRIBE_TRANSACTIONS, "DescribeTransactions", (0, 0), self.describe)
        apis.add(LIST_TRANSACTIONS, "ListTransactions", (0, 0), self.listing)

    async def add_partitions(self, request: Request) -> Values:
        body = request.body
        answer = await self._txn.add_partitions(
            tt.AddPartitionsToTxnRequest(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                [
                    tt.AddPartitionsToTxnTopic(t.name, list(t.partitions))
                    for t in body.v3_and_below_topics
                ],
            ),
            request.session,
        )
        version = request.head.api_version
        by_topic: dict[str, list[Values]] = {}
        for r in answer.results:
            error = _fenced_word(r.error, version)
            by_topic.setdefault(r.topic, []).append(
                {"partition_index": r.partition, "partition_error_code": error}
            )
        return {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [
                {"name": name, "results_by_partition": results}
                for name, results in by_topic.items()
            ],
        }

    async def add_offsets(self, request: Request) -> Values:
        body = request.body
        answer = await self._txn.add_offsets(
            tt.AddOffsetsToTxnRequest(
                body.transactional_id, body.producer_id, body.producer_epoch, body.group_id
            ),
            request.session,
        )
        return {
            "throttle_time": 0,
            "error_code": _fenced_word(answer.error, request.head.api_version),
        }

    async def end_txn(self, request: Request) -> Values:
        body = request.body
        answer = await self._txn.end_txn(
            tt.EndTxnRequest(
                body.transactional_id, body.producer_id, body.producer_epoch, body.committed
            ),
            request.session,
        )
        return {
            "throttle_time": 0,
            "error_code": _fenced_word(answer.error, request.head.api_version),
        }

    async def describe(self, request: Request) -> Values:
        answer = self._txn.describe(
            tt.DescribeTransactionsRequest(list(request.body.transactional_ids)),
            request.session,
        )
        return {
            "throttle_time": 0,
            "transaction_states": [
                {
                    "error_code": t.error,
                    "transactional_id": t.transactional_id,
                    "transaction_state": t.transaction_state,
                    "transaction_timeout": t.transaction_timeout_ms,
                    # an error carries Java's default (0); Empty and Complete
                    # states -1, as Kafka answers them
                    "transaction_start_time": _time(
                        t.transaction_start_time_ms if t.transaction_state else 0
                    ),
                    "producer_id": t.producer_id,
                    "producer_epoch": t.producer_epoch,
                    "topics": [
                        {"topic": tp.topic, "partitions": list(tp.partitions)} for tp in t.topics
                    ],
                }
                for t in answer.transaction_states
            ],
        }

    async def listing(self, request: Request) -> Values:
        body = request.body
        answer = self._txn.listing(
            tt.ListTransactionsRequest(list(body.state_filters), list(body.producer_id_filters)),
            request.session,
        )
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "unknown_state_filters": list(answer.unknown_state_filters),
            "transaction_states": [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": t.transaction_state,
                }
                for t in answer.transaction_states
            ],
        }
