"""The gRPC edge's transaction adapters (``broker/requests/grpc_txn.py``): every
field of annal.proto's transaction messages survives the trip through the
broker's own types, requests pb -> own and answers own -> pb."""

from __future__ import annotations

from typing import Any

from annal.broker.requests import grpc_txn
from annal.broker.requests import txn_types as tt
from annal.v1 import annal_pb2 as pb
from google.protobuf.message import Message


def every_field_set(message: Message) -> None:
    """Each field of ``message`` (and of the messages in it) holds a value other
    than its default, so that a field an adapter forgets shows."""
    assert len(message.ListFields()) == len(message.DESCRIPTOR.fields), message
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        values: Any = [value] if isinstance(value, Message) else value
        for item in values:
            every_field_set(item)


def test_add_partitions_to_txn() -> None:
    request = pb.AddPartitionsToTxnRequest(
        transactional_id="tx", producer_id=7, producer_epoch=3,
        topics=[pb.TopicPartitions(topic="a", partitions=[0, 2]),
                pb.TopicPartitions(topic="b", partitions=[1])],
    )  # fmt: skip
    every_field_set(request)
    assert grpc_txn.add_partitions_request(request) == tt.AddPartitionsToTxnRequest(
        "tx", 7, 3, [tt.AddPartitionsToTxnTopic("a", [0, 2]), tt.AddPartitionsToTxnTopic("b", [1])]
    )
    answer = tt.AddPartitionsToTxnResponse(
        [tt.PartitionResult("a", 2, 29), tt.PartitionResult("b", 1, 3)], "why"
    )
    response = grpc_txn.add_partitions_response(answer)
    every_field_set(response)
    assert response == pb.AddPartitionsToTxnResponse(
        results=[
            pb.PartitionError(topic="a", partition=2, error=pb.TOPIC_AUTHORIZATION_FAILED),
            pb.PartitionError(topic="b", partition=1, error=pb.UNKNOWN_TOPIC_OR_PARTITION),
        ],
        error_message="why",
    )


def test_add_offsets_to_txn_and_end_txn() -> None:
    offsets = pb.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=7, producer_epoch=3, group="g"
    )
    every_field_set(offsets)
    assert grpc_txn.add_offsets_request(offsets) == tt.AddOffsetsToTxnRequest("tx", 7, 3, "g")
    end = pb.EndTxnRequest(transactional_id="tx", producer_id=7, producer_epoch=3, commit=True)
    every_field_set(end)
    assert grpc_txn.end_txn_request(end) == tt.EndTxnRequest("tx", 7, 3, True)
    assert not grpc_txn.end_txn_request(pb.EndTxnRequest(transactional_id="tx")).committed
    response = grpc_txn.txn_response(tt.TxnResponse(90, "fenced"))
    every_field_set(response)
    assert response == pb.TxnResponse(error=pb.PRODUCER_FENCED, error_message="fenced")


def test_describe_transactions() -> None:
    request = pb.DescribeTransactionsRequest(transactional_ids=["a", "b"])
    every_field_set(request)
    assert grpc_txn.describe_request(request) == tt.DescribeTransactionsRequest(["a", "b"])
    ongoing = tt.TransactionState(
        15, "a", "Ongoing", 60_000, 1_700_000_000_000, 7, 3,
        [tt.TransactionTopic("t", [0, 1]), tt.TransactionTopic("u", [2])],
    )  # fmt: skip
    response = grpc_txn.describe_response(tt.DescribeTransactionsResponse([ongoing]))
    every_field_set(response)
    assert response == pb.DescribeTransactionsResponse(
        transactions=[
            pb.TransactionDescription(
                error=pb.COORDINATOR_NOT_AVAILABLE, transactional_id="a", state="Ongoing",
                transaction_timeout_ms=60_000, transaction_start_time_ms=1_700_000_000_000,
                producer_id=7, producer_epoch=3,
                topics=[pb.TopicPartitions(topic="t", partitions=[0, 1]),
                        pb.TopicPartitions(topic="u", partitions=[2])],
            )
        ]
    )  # fmt: skip
    refused = grpc_txn.describe_response(
        tt.DescribeTransactionsResponse([tt.TransactionState(53, "b")])
    )
    assert refused.transactions[0] == pb.TransactionDescription(
        error=pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id="b",
        producer_id=-1, producer_epoch=-1, transaction_start_time_ms=-1,
    )  # fmt: skip


def test_list_transactions() -> None:
    request = pb.ListTransactionsRequest(state_filters=["Ongoing", "x"], producer_id_filters=[7])
    every_field_set(request)
    assert grpc_txn.list_request(request) == tt.ListTransactionsRequest(["Ongoing", "x"], [7])
    answer = tt.ListTransactionsResponse(
        51, ["x"], [tt.TransactionListing("a", 7, "Ongoing"), tt.TransactionListing("b", 8, "")]
    )
    response = grpc_txn.list_response(answer)
    every_field_set(response.transactions[0])
    assert len(response.ListFields()) == len(response.DESCRIPTOR.fields)
    assert response == pb.ListTransactionsResponse(
        error=pb.CONCURRENT_TRANSACTIONS,
        unknown_state_filters=["x"],
        transactions=[
            pb.TransactionListing(transactional_id="a", producer_id=7, state="Ongoing"),
            pb.TransactionListing(transactional_id="b", producer_id=8),
        ],
    )


def test_write_txn_markers() -> None:
    request = pb.WriteTxnMarkersRequest(
        markers=[
            pb.TxnMarker(producer_id=7, producer_epoch=3, commit=True, coordinator_epoch=5,
                         topics=[pb.TopicPartitions(topic="t", partitions=[0, 1])]),
            pb.TxnMarker(producer_id=8, producer_epoch=1, commit=False,
                         topics=[pb.TopicPartitions(topic="u", partitions=[2])]),
        ]
    )  # fmt: skip
    every_field_set(request.markers[0])
    assert grpc_txn.markers_request(request) == tt.WriteTxnMarkersRequest(
        [
            tt.WritableTxnMarker(7, 3, True, [tt.WritableTxnMarkerTopic("t", [0, 1])], 5),
            tt.WritableTxnMarker(8, 1, False, [tt.WritableTxnMarkerTopic("u", [2])], 0),
        ]
    )
    answer = tt.WriteTxnMarkersResponse(
        [
            tt.WritableTxnMarkerResult(
                7, [tt.PartitionResult("t", 4, 6), tt.PartitionResult("t", 1, 19)]
            ),
            tt.WritableTxnMarkerResult(8, [tt.PartitionResult("u", 2, 31)]),
        ]
    )
    response = grpc_txn.markers_response(answer)
    every_field_set(response)
    assert response == pb.WriteTxnMarkersResponse(
        markers=[
            pb.TxnMarkerResult(producer_id=7, partitions=[
                pb.PartitionError(topic="t", partition=4, error=pb.NOT_LEADER_OR_FOLLOWER),
                pb.PartitionError(topic="t", partition=1, error=pb.NOT_ENOUGH_REPLICAS),
            ]),
            pb.TxnMarkerResult(producer_id=8, partitions=[
                pb.PartitionError(topic="u", partition=2, error=pb.CLUSTER_AUTHORIZATION_FAILED),
            ]),
        ]
    )  # fmt: skip
