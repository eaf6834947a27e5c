"""The gRPC edge's data-path adapters keep every field, both ways."""

from __future__ import annotations

from annal.broker.requests import data_types as dt
from annal.broker.requests import grpc_data
from annal.v1 import annal_pb2 as pb


def test_produce_request_and_answer_keep_every_field() -> None:
    request = pb.ProduceRequest(acks=-1, timeout_ms=1500, transactional_id="t-1")
    topic = request.topics.add(name="orders")
    topic.partitions.add(partition=3, records=b"batch")
    own = grpc_data.produce_request(request)
    assert own == dt.ProduceRequest(
        -1, 1500, [dt.TopicProduceData("orders", [dt.PartitionProduceData(3, b"batch")])], "t-1"
    )
    answer = dt.ProduceResponse(
        [
            dt.TopicProduceResponse(
                "orders",
                [
                    dt.PartitionProduceResponse(3, 0, 41, 1700, 5),
                    dt.PartitionProduceResponse(
                        4, 87, -1, -1, -1, "one bad record", [dt.ProduceRecordError(2, "no key")]
                    ),
                ],
            )
        ]
    )
    wire = grpc_data.produce_response(answer)
    ok, bad = wire.topics[0].partitions
    assert wire.topics[0].name == "orders"
    assert (ok.partition, ok.error, ok.base_offset, ok.log_append_time_ms) == (3, 0, 41, 1700)
    assert (ok.log_start_offset, ok.error_message, list(ok.record_errors)) == (5, "", [])
    assert (bad.partition, bad.error, bad.error_message) == (4, 87, "one bad record")
    assert [(e.batch_index, e.message) for e in bad.record_errors] == [(2, "no key")]
