"""ClusterConnection against a stand-in broker: Metadata from a broker whose cache is
still empty (it has not heard from a controller) is asked again, not believed."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest
from annal.client.cluster import ClusterConnection
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc


class StartingBroker(annal_pb2_grpc.AnnalServicer):
    """Answers Metadata with an empty cache ``empty_answers`` times, then knows a topic."""

    def __init__(self, empty_answers: int) -> None:
        self.empty_answers = empty_answers
        self.calls = 0

    def Metadata(
        self, request: pb.MetadataRequest, context: grpc.ServicerContext
    ) -> pb.MetadataResponse:
        self.calls += 1
        if self.calls <= self.empty_answers:
            return pb.MetadataResponse(controller_id=-1)
        return pb.MetadataResponse(
            brokers=[pb.Broker(id=1, host="127.0.0.1", port=9)],
            controller_id=1,
            topics=[
                pb.TopicMetadata(
                    name="t",
                    partitions=[
                        pb.PartitionMetadata(partition=p, leader=1, replicas=[1], isr=[1])
                        for p in range(2)
                    ],
                )
            ],
        )


class NamesLeader(StartingBroker):
    """Knows topic ``t``, led by broker 1 at ``leader_address``."""

    def __init__(self) -> None:
        super().__init__(0)
        self.leader_address = ""

    def Metadata(
        self, request: pb.MetadataRequest, context: grpc.ServicerContext
    ) -> pb.MetadataResponse:
        answer = super().Metadata(request, context)
        host, port = self.leader_address.rsplit(":", 1)
        answer.brokers[0].host, answer.brokers[0].port = host, int(port)
        return answer


@pytest.mark.timeout(30)
def test_an_empty_cache_is_asked_again(serve: Callable[[StartingBroker], str]) -> None:
    broker = StartingBroker(empty_answers=2)
    connection = ClusterConnection(serve(broker), timeout_s=10)
    try:
        connection.refresh(["t"])
        assert broker.calls == 3
        assert connection.partition_counts == {"t": 2}
        assert connection.leaders == {("t", 0): "127.0.0.1:9", ("t", 1): "127.0.0.1:9"}
    finally:
        connection.close()


@pytest.mark.timeout(30)
def test_an_empty_cache_is_believed_after_the_timeout(
    serve: Callable[[StartingBroker], str],
) -> None:
    broker = StartingBroker(empty_answers=10**6)
    connection = ClusterConnection(serve(broker), timeout_s=0.5)
    try:
        started = time.monotonic()
        connection.refresh(["t"])
        assert time.monotonic() - started < 5
        assert connection.partition_counts == {} and broker.calls > 1
    finally:
        connection.close()


@pytest.mark.timeout(30)
def test_metadata_is_asked_of_the_first_server_until_the_client_moves_on(
    serve: Callable[[StartingBroker], str],
) -> None:
    first, second = StartingBroker(0), StartingBroker(0)
    cluster = ClusterConnection(f"{serve(first)},{serve(second)}")
    try:
        cluster.refresh(["t"])
        cluster.refresh(["t"])
        assert (first.calls, second.calls) == (2, 0)  # one broker: read-your-writes
        cluster.move_on()  # an answer that may mean a leader moved
        cluster.refresh(["t"])
        assert (first.calls, second.calls) == (2, 1)
        cluster.move_on()
        cluster.refresh(["t"])
        assert (first.calls, second.calls) == (3, 1)  # round the list
    finally:
        cluster.close()
