"""annal's consumer against stand-in brokers: an answer that may mean the leader
moved (NOT_LEADER_OR_FOLLOWER) refreshes metadata from another bootstrap server
than the one asked last, as the producer does (the broker asked last may be a
deposed leader naming itself: docs/architecture.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from annal.consumer.simple import SimpleConsumer
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))
from test_cluster_connection import NamesLeader


class DeposedLeader(NamesLeader):
    """Names itself leader; its first Fetch answers NOT_LEADER_OR_FOLLOWER, the
    others an empty partition."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched = 0

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> pb.FetchResponse:
        self.fetched += 1
        error = pb.NOT_LEADER_OR_FOLLOWER if self.fetched == 1 else pb.NONE
        return pb.FetchResponse(
            topics=[
                pb.TopicFetchResponse(
                    name=t.name,
                    partitions=[
                        pb.PartitionFetchResponse(partition=p.partition, error=error)
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )


@pytest.mark.timeout(30)
def test_a_not_leader_answer_refreshes_metadata_from_the_next_server(
    serve: Callable[[annal_pb2_grpc.AnnalServicer], str],
) -> None:
    leader, other = DeposedLeader(), NamesLeader()
    leader.leader_address = other.leader_address = serve(leader)
    consumer = SimpleConsumer(f"{leader.leader_address},{serve(other)}", timeout_s=10)
    try:
        assert consumer.fetch("t", 0, 0).records == []
        assert leader.fetched == 2  # fetched again after the refresh
        assert other.calls == 1  # the refresh asked the other server
        assert consumer.fetch_raw("t", 0, 0).records == b""
    finally:
        consumer.close()
