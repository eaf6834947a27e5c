"""annal's producer against stand-in brokers: an answer that may mean the leader
moved or is cut off (REQUEST_TIMED_OUT) refreshes metadata, from another
bootstrap server than the one asked last, before the batch is sent again."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from annal.producer.producer import Producer
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))
from test_cluster_connection import NamesLeader, StartingBroker


class TimingOutLeader(NamesLeader):
    """Knows topic ``t`` (led by broker 1, at this stand-in's address); its first
    Produce answers REQUEST_TIMED_OUT, the others are stored at offset 7."""

    def __init__(self) -> None:
        super().__init__()
        self.produced = 0

    def Produce(
        self, request: pb.ProduceRequest, context: grpc.ServicerContext
    ) -> pb.ProduceResponse:
        self.produced += 1
        error = pb.REQUEST_TIMED_OUT if self.produced == 1 else pb.NONE
        return pb.ProduceResponse(
            topics=[
                pb.TopicProduceResponse(
                    name=t.name,
                    partitions=[
                        pb.PartitionProduceResponse(
                            partition=p.partition, error=error,
                            base_offset=-1 if error else 7,
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )  # fmt: skip


@pytest.mark.timeout(30)
def test_a_timed_out_produce_refreshes_metadata_from_the_next_server(
    serve: Callable[[annal_pb2_grpc.AnnalServicer], str],
) -> None:
    leader, other = TimingOutLeader(), StartingBroker(0)
    leader.leader_address = serve(leader)
    bootstrap = f"{leader.leader_address},{serve(other)}"
    with Producer(bootstrap, acks=1, enable_idempotence=False, retry_backoff_ms=10) as producer:
        asked_before = (leader.calls, other.calls)
        metadata = producer.send("t", b"v", partition=0).result(20)
    assert metadata.offset == 7 and leader.produced == 2  # sent again after the timeout
    assert other.calls > asked_before[1]  # the refresh asked the other server
