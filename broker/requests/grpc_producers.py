"""The gRPC edge's adapters for the producer services: annal.proto's InitProducerId
and DescribeProducers messages to and from their own types (``producer_types.py``).

annal.proto's DescribeProducersResponse lists one partition per partition asked
for, each naming its topic; the own answer groups them under the request's
topics, in the same order, so flattening it gives annal.proto's list back."""

from __future__ import annotations

from annal.broker.requests import producer_types as pt
from annal.broker.requests.grpc_data import wire_code
from annal.v1 import annal_pb2 as pb


def init_producer_id_request(request: pb.InitProducerIdRequest) -> pt.InitProducerIdRequest:
    """A producer id or epoch left unset is Kafka's -1, except an epoch unset beside a
    producer id that is set, which annal.proto reads as 0."""
    has_id = request.HasField("producer_id")
    return pt.InitProducerIdRequest(
        request.transactional_id,
        request.transaction_timeout_ms,
        request.producer_id if has_id else pt.NO_PRODUCER_ID,
        request.producer_epoch
        if request.HasField("producer_epoch") or has_id
        else pt.NO_PRODUCER_EPOCH,
    )


def init_producer_id_response(answer: pt.InitProducerIdResponse) -> pb.InitProducerIdResponse:
    return pb.InitProducerIdResponse(
        error=wire_code(answer.error),
        producer_id=answer.producer_id,
        producer_epoch=answer.producer_epoch,
        error_message=answer.error_message,
    )


def describe_producers_request(
    request: pb.DescribeProducersRequest,
) -> pt.DescribeProducersRequest:
    return pt.DescribeProducersRequest(
        [pt.DescribeProducersTopic(t.topic, list(t.partitions)) for t in request.topics]
    )


def describe_producers_response(
    answer: pt.DescribeProducersResponse,
) -> pb.DescribeProducersResponse:
    response = pb.DescribeProducersResponse()
    for t in answer.topics:
        for p in t.partitions:
            response.partitions.add(
                topic=t.name,
                partition=p.partition_index,
                error=wire_code(p.error),
                error_message=p.error_message,
                producers=[
                    pb.ProducerState(
                        producer_id=s.producer_id,
                        producer_epoch=s.producer_epoch,
                        last_sequence=s.last_sequence,
                        last_timestamp_ms=s.last_timestamp,
                        coordinator_epoch=s.coordinator_epoch,
                        current_txn_start_offset=s.current_txn_start_offset,
                    )
                    for s in p.active_producers
                ],
            )
    return response
