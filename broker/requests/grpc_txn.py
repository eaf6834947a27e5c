"""The gRPC edge's adapters for the transaction APIs: annal.proto's
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions and WriteTxnMarkers messages to and from the broker's own types
(``txn_types.py``)."""

from __future__ import annotations

from annal.broker.requests import txn_types as tt
from annal.broker.requests.grpc_data import wire_code
from annal.v1 import annal_pb2 as pb


def _partition_errors(results: list[tt.PartitionResult]) -> list[pb.PartitionError]:
    return [
        pb.PartitionError(topic=r.topic, partition=r.partition, error=wire_code(r.error))
        for r in results
    ]


def add_partitions_request(request: pb.AddPartitionsToTxnRequest) -> tt.AddPartitionsToTxnRequest:
    return tt.AddPartitionsToTxnRequest(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [tt.AddPartitionsToTxnTopic(t.topic, list(t.partitions)) for t in request.topics],
    )


def add_partitions_response(answer: tt.AddPartitionsToTxnResponse) -> pb.AddPartitionsToTxnResponse:
    return pb.AddPartitionsToTxnResponse(
        results=_partition_errors(answer.results), error_message=answer.error_message
    )


def add_offsets_request(request: pb.AddOffsetsToTxnRequest) -> tt.AddOffsetsToTxnRequest:
    return tt.AddOffsetsToTxnRequest(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group
    )


def end_txn_request(request: pb.EndTxnRequest) -> tt.EndTxnRequest:
    return tt.EndTxnRequest(
        request.transactional_id, request.producer_id, request.producer_epoch, request.commit
    )


def txn_response(answer: tt.TxnResponse) -> pb.TxnResponse:
    """AddOffsetsToTxn's and EndTxn's answer."""
    return pb.TxnResponse(error=wire_code(answer.error), error_message=answer.error_message)


def describe_request(request: pb.DescribeTransactionsRequest) -> tt.DescribeTransactionsRequest:
    return tt.DescribeTransactionsRequest(list(request.transactional_ids))


def describe_response(answer: tt.DescribeTransactionsResponse) -> pb.DescribeTransactionsResponse:
    return pb.DescribeTransactionsResponse(
        transactions=[
            pb.TransactionDescription(
                error=wire_code(t.error),
                transactional_id=t.transactional_id,
                state=t.transaction_state,
                transaction_timeout_ms=t.transaction_timeout_ms,
                transaction_start_time_ms=t.transaction_start_time_ms,
                producer_id=t.producer_id,
                producer_epoch=t.producer_epoch,
                topics=[
                    pb.TopicPartitions(topic=tp.topic, partitions=tp.partitions) for tp in t.topics
                ],
            )
            for t in answer.transaction_states
        ]
    )


def list_request(request: pb.ListTransactionsRequest) -> tt.ListTransactionsRequest:
    return tt.ListTransactionsRequest(
        list(request.state_filters), list(request.producer_id_filters)
    )


def list_response(answer: tt.ListTransactionsResponse) -> pb.ListTransactionsResponse:
    return pb.ListTransactionsResponse(
        error=wire_code(answer.error),
        unknown_state_filters=answer.unknown_state_filters,
        transactions=[
            pb.TransactionListing(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                state=t.transaction_state,
            )
            for t in answer.transaction_states
        ],
    )


def markers_request(request: pb.WriteTxnMarkersRequest) -> tt.WriteTxnMarkersRequest:
    return tt.WriteTxnMarkersRequest(
        [
            tt.WritableTxnMarker(
                m.producer_id,
                m.producer_epoch,
                m.commit,
                [tt.WritableTxnMarkerTopic(t.topic, list(t.partitions)) for t in m.topics],
                m.coordinator_epoch,
            )
            for m in request.markers
        ]
    )


def markers_response(answer: tt.WriteTxnMarkersResponse) -> pb.WriteTxnMarkersResponse:
    return pb.WriteTxnMarkersResponse(
        markers=[
            pb.TxnMarkerResult(
                producer_id=m.producer_id, partitions=_partition_errors(m.partitions)
            )
            for m in answer.markers
        ]
    )
