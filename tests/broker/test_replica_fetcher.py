"""The follower's fetcher against a stand-in leader serving a real log: truncation by
leader epoch (KIP-101/279) and a restart at the leader's log start."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from annal.broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from annal.deploy.runner import wait_until
from annal.storage.errors import OffsetOutOfRangeError
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.records import iter_records
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from logutil import batch, open_log

TP = TopicPartition("t", 0)


class StandInLeader(annal_pb2_grpc.AnnalServicer):
    """Serves Fetch and OffsetsForLeaderEpoch from ``log`` as a leader would."""

    def __init__(self, log: Log, leader_epoch: int) -> None:
        self.log = log
        self.leader_epoch = leader_epoch

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> pb.FetchResponse:
        response = pb.FetchResponse()
        for topic in request.topics:
            out = pb.TopicFetchResponse(name=topic.name)
            for p in topic.partitions:
                result = pb.PartitionFetchResponse(
                    partition=p.partition,
                    high_watermark=self.log.log_end_offset,
                    log_start_offset=self.log.log_start_offset,
                    log_end_offset=self.log.log_end_offset,
                )
                try:
                    result.records = self.log.read(p.fetch_offset, p.partition_max_bytes)
                except OffsetOutOfRangeError as exc:
                    result.error = pb.OFFSET_OUT_OF_RANGE
                    result.error_message = str(exc)
                if not result.records and not result.error:
                    time.sleep(request.max_wait_ms / 1000)  # a long poll that found nothing
                out.partitions.append(result)
            response.topics.append(out)
        return response

    def OffsetsForLeaderEpoch(
        self, request: pb.OffsetsForLeaderEpochRequest, context: grpc.ServicerContext
    ) -> pb.OffsetsForLeaderEpochResponse:
        response = pb.OffsetsForLeaderEpochResponse()
        for topic in request.topics:
            out = pb.TopicEpochEnds(name=topic.name)
            for p in topic.partitions:
                if p.current_leader_epoch != self.leader_epoch:
                    out.partitions.append(
                        pb.PartitionEpochEnd(partition=p.partition, error=pb.FENCED_LEADER_EPOCH)
                    )
                    continue
                epoch, end = self.log.leader_epoch_cache.end_offset_for(
                    p.leader_epoch, self.log.log_end_offset
                )
                out.partitions.append(
                    pb.PartitionEpochEnd(partition=p.partition, leader_epoch=epoch, end_offset=end)
                )
            response.topics.append(out)
        return response


@pytest.fixture
def serve() -> Iterator[Callable[[StandInLeader], str]]:
    servers: list[grpc.Server] = []

    def start(leader: StandInLeader) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        annal_pb2_grpc.add_AnnalServicer_to_server(leader, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(None)


@pytest.fixture
def fetchers() -> Iterator[ReplicaFetcherManager]:
    manager = ReplicaFetcherManager(2, FetcherSettings(wait_max_ms=20, backoff_ms=50))
    yield manager
    manager.shutdown()


def log_bytes(log: Log) -> bytes:
    return b"".join(segment.read_all() for segment in log.segments())


@pytest.mark.timeout(60)
def test_a_follower_cuts_what_the_new_leader_never_had(
    tmp_path: Path, serve: Callable[[StandInLeader], str], fetchers: ReplicaFetcherManager
) -> None:
    """The follower wrote offsets 5..9 under epoch 1, which the new leader (epoch 2)
    never saw: the leader's largest epoch at or below 1 is 0, ending at 5, so the
    follower cuts at 5 and copies the leader's 5..7."""
    leader = open_log(tmp_path / "leader" / "t-0")
    follower = open_log(tmp_path / "follower" / "t-0")
    shared = batch([b"s%d" % i for i in range(5)])
    for log in (leader, follower):
        log.append_as_leader(shared, 0)
    leader.append_as_leader(batch([b"new%d" % i for i in range(3)]), 2)
    follower.append_as_leader(batch([b"lost%d" % i for i in range(5)]), 1)
    assert follower.log_end_offset == 10

    fetchers.follow(TP, 1, serve(StandInLeader(leader, 2)), follower, 2)
    wait_until(lambda: log_bytes(follower) == log_bytes(leader), 30, "the follower in line")
    assert follower.leader_epoch_cache.epoch_entries() == leader.leader_epoch_cache.epoch_entries()
    assert [r.value for r in iter_records(log_bytes(follower))][5:] == [b"new0", b"new1", b"new2"]

    leader.append_as_leader(batch([b"more"]), 2)  # and it keeps copying
    wait_until(lambda: follower.log_end_offset == 9, 30, "the next batch copied")
    assert follower.high_watermark == 9
    assert fetchers.followed() == {TP: 1}
    fetchers.unfollow([TP])
    assert fetchers.followed() == {}


@pytest.mark.timeout(60)
def test_a_follower_behind_the_leaders_log_start_starts_over_there(
    tmp_path: Path, serve: Callable[[StandInLeader], str], fetchers: ReplicaFetcherManager
) -> None:
    leader = open_log(tmp_path / "leader" / "t-0")
    for i in range(10):
        leader.append_as_leader(batch([b"v%d" % i]), 0)
    leader.delete_records_before(6)
    follower = open_log(tmp_path / "follower" / "t-0")

    fetchers.follow(TP, 1, serve(StandInLeader(leader, 0)), follower, 0)
    wait_until(lambda: follower.log_end_offset == 10, 30, "the follower caught up")
    assert follower.log_start_offset == 6
    assert [r.value for r in iter_records(follower.read(6, 1 << 20))] == [
        b"v6", b"v7", b"v8", b"v9"
    ]  # fmt: skip


@pytest.mark.timeout(60)
def test_a_fenced_follower_waits_and_keeps_its_log(
    tmp_path: Path, serve: Callable[[StandInLeader], str], fetchers: ReplicaFetcherManager
) -> None:
    """A follower with a stale epoch is refused (FENCED_LEADER_EPOCH): it changes
    nothing and asks again after the backoff, until the controller's next word."""
    leader = open_log(tmp_path / "leader" / "t-0")
    leader.append_as_leader(batch([b"a"]), 3)
    follower = open_log(tmp_path / "follower" / "t-0")
    follower.append_as_leader(batch([b"b", b"c"]), 1)
    stand_in = StandInLeader(leader, 3)
    asked: list[int] = []
    answer = stand_in.OffsetsForLeaderEpoch

    def counting(
        request: pb.OffsetsForLeaderEpochRequest, context: grpc.ServicerContext
    ) -> pb.OffsetsForLeaderEpochResponse:
        asked.append(request.topics[0].partitions[0].current_leader_epoch)
        return answer(request, context)

    stand_in.OffsetsForLeaderEpoch = counting  # type: ignore[method-assign]
    endpoint = serve(stand_in)
    fetchers.follow(TP, 1, endpoint, follower, 2)
    wait_until(lambda: len(asked) >= 2, 30, "a second try after the backoff")
    assert follower.log_end_offset == 2  # nothing cut while fenced
    fetchers.follow(TP, 1, endpoint, follower, 3)  # the controller's next LeaderAndIsr
    wait_until(lambda: log_bytes(follower) == log_bytes(leader), 30, "the follower in line")
