"""The gRPC edge's adapters for the data path: annal.proto's Produce and Fetch
messages to and from the data path's own types (``data_types.py``)."""

from __future__ import annotations

from typing import cast

from annal.broker.requests import data_types as dt
from annal.v1 import annal_pb2 as pb


def produce_request(request: pb.ProduceRequest) -> dt.ProduceRequest:
    return dt.ProduceRequest(
        request.acks,
        request.timeout_ms,
        [
            dt.TopicProduceData(
                t.name, [dt.PartitionProduceData(p.partition, p.records) for p in t.partitions]
            )
            for t in request.topics
        ],
        request.transactional_id,
    )


def produce_response(answer: dt.ProduceResponse) -> pb.ProduceResponse:
    response = pb.ProduceResponse()
    for t in answer.topics:
        out = response.topics.add(name=t.name)
        for p in t.partitions:
            part = out.partitions.add(
                partition=p.partition,
                error=wire_code(p.error),
                base_offset=p.base_offset,
                log_append_time_ms=p.log_append_time_ms,
                log_start_offset=p.log_start_offset,
            )
            # set only when there is one: every field passed costs, and the
            # answer to each produce request goes through here
            if p.error_message:
                part.error_message = p.error_message
            if p.record_errors:
                part.record_errors.extend(
                    pb.ProduceRecordError(batch_index=e.batch_index, message=e.message)
                    for e in p.record_errors
                )
    return response


def fetch_request(request: pb.FetchRequest) -> dt.FetchRequest:
    return dt.FetchRequest(
        request.replica_id,
        request.max_wait_ms,
        request.min_bytes,
        request.max_bytes,
        [
            dt.TopicFetchData(
                t.name,
                [
                    dt.PartitionFetchData(
                        p.partition,
                        p.fetch_offset,
                        p.partition_max_bytes,
                        p.current_leader_epoch
                        if p.HasField("current_leader_epoch")
                        else dt.NO_LEADER_EPOCH,
                        p.log_start_offset,
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
        request.isolation_level,
    )


def fetch_response(answer: dt.FetchResponse) -> pb.FetchResponse:
    response = pb.FetchResponse()
    for t in answer.topics:
        out = response.topics.add(name=t.name)
        for p in t.partitions:
            out.partitions.add(
                partition=p.partition,
                error=wire_code(p.error),
                high_watermark=p.high_watermark,
                log_start_offset=p.log_start_offset,
                log_end_offset=p.log_end_offset,
                records=p.records,
                error_message=p.error_message,
                last_stable_offset=p.last_stable_offset,
                aborted_transactions=[
                    pb.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in p.aborted_transactions
                ],
            )
    return response


def wire_code(number: int) -> pb.ErrorCode.ValueType:
    """A Kafka error number as annal.v1's ErrorCode (whose numbers are Kafka's)."""
    return cast(pb.ErrorCode.ValueType, number)


def list_offsets_request(request: pb.ListOffsetsRequest) -> dt.ListOffsetsRequest:
    return dt.ListOffsetsRequest(
        request.replica_id,
        [
            dt.TopicListOffsets(
                t.name,
                [
                    dt.PartitionListOffsets(p.partition, p.timestamp, p.current_leader_epoch)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
        request.isolation_level,
    )


def list_offsets_response(answer: dt.ListOffsetsResponse) -> pb.ListOffsetsResponse:
    response = pb.ListOffsetsResponse()
    for t in answer.topics:
        out = response.topics.add(name=t.name)
        for p in t.partitions:
            out.partitions.add(
                partition=p.partition,
                error=wire_code(p.error),
                timestamp=p.timestamp,
                offset=p.offset,
                leader_epoch=p.leader_epoch,
            )
    return response


def epochs_request(request: pb.OffsetsForLeaderEpochRequest) -> dt.OffsetsForLeaderEpochRequest:
    return dt.OffsetsForLeaderEpochRequest(
        request.replica_id,
        [
            dt.TopicEpochs(
                t.name,
                [
                    dt.PartitionEpoch(p.partition, p.current_leader_epoch, p.leader_epoch)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def epochs_response(answer: dt.OffsetsForLeaderEpochResponse) -> pb.OffsetsForLeaderEpochResponse:
    response = pb.OffsetsForLeaderEpochResponse()
    for t in answer.topics:
        out = response.topics.add(name=t.name)
        for p in t.partitions:
            out.partitions.add(
                partition=p.partition,
                error=wire_code(p.error),
                leader_epoch=p.leader_epoch,
                end_offset=p.end_offset,
            )
    return response
