"""The follower's fetcher against a stand-in leader serving a real log: truncation by
leader epoch (KIP-101/279) and a restart at the leader's log start, with fetches
over gRPC and over the leader's Kafka listener (its answers made by the broker's
own Kafka-protocol code)."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import pytest
from annal.broker.kafka.data import DataApis
from annal.broker.replication.replica_fetcher import (
    FetcherSettings,
    FollowOrder,
    ReplicaFetcherManager,
    _FetcherThread,
    _Follow,
)
from annal.broker.replication.replica_transport import FetchLimits, KafkaReplicaFetch, Wanted
from annal.broker.requests.fetch_sessions import (
    CachedPartition,
    FetchKind,
    FetchSessionCache,
    PartitionFetch,
    kind_of,
)
from annal.deploy.runner import wait_until
from annal.kafkaproto.client import ConnectionFailed
from annal.kafkaproto.wire import decode_request, encode_response, peek_head, response
from annal.storage.errors import OffsetOutOfRangeError
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.records import iter_records
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors

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


class KafkaStandIn:
    """The stand-in leader's Fetch over Kafka's protocol, a thread per connection;
    requests and answers go through the broker's own ``DataApis.fetch``."""

    def __init__(self, leader: StandInLeader) -> None:
        self.leader = leader
        self.fetches = 0
        self._apis = DataApis(self, None)  # type: ignore[arg-type]
        self._server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    async def fetch(
        self, request: pb.FetchRequest, deadline: Any, session: Any = None
    ) -> pb.FetchResponse:
        return self.leader.Fetch(request, None)  # type: ignore[arg-type]

    async def fetch_in_session(
        self,
        request: pb.FetchRequest,
        session_id: int,
        epoch: int,
        forgotten: Any,
        deadline: Any,
        session: Any = None,
    ) -> tuple[pb.FetchResponse, int]:
        """Fetch sessions declined (KIP-227 allows it): session id 0, every fetch full."""
        assert epoch in (0, -1), "no session was handed out"
        return await self.fetch(request, deadline, session), 0

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            while (size := _read(connection, 4)) is not None:
                frame = _read(connection, int.from_bytes(size, "big"))
                assert frame is not None
                head = peek_head(frame)
                request = decode_request(frame, head)
                self.fetches += 1
                values = asyncio.run(self._apis.fetch(request))
                connection.sendall(encode_response(head, response(head, values)))

    def close(self) -> None:
        self._server.close()


class SessionStandIn(KafkaStandIn):
    """A stand-in that keeps fetch sessions in a real ``FetchSessionCache`` and
    answers the partitions each request names; ``restart`` forgets them all."""

    def __init__(self, leader: StandInLeader) -> None:
        super().__init__(leader)
        self.sessions = FetchSessionCache()
        # (session id, epoch, partitions named, partitions forgotten) of each request
        self.requests: list[tuple[int, int, list[int], list[int]]] = []

    def restart(self) -> None:
        self.sessions = FetchSessionCache()

    async def fetch_in_session(
        self,
        request: pb.FetchRequest,
        session_id: int,
        epoch: int,
        forgotten: Any,
        deadline: Any,
        session: Any = None,
    ) -> tuple[pb.FetchResponse, int]:
        named = {
            TopicPartition(t.name, p.partition): PartitionFetch(p.fetch_offset, 1 << 20)
            for t in request.topics
            for p in t.partitions
        }
        self.requests.append(
            (session_id, epoch, [tp.partition for tp in named], [tp.partition for tp in forgotten])
        )
        if kind_of(epoch) is FetchKind.INCREMENTAL:  # raises FetchSessionError when refused
            self.sessions.incremental(session_id, epoch, request.replica_id, "", named, forgotten)
            return await self.fetch(request, deadline), session_id
        self.sessions.remove(session_id)
        answer = await self.fetch(request, deadline)
        cached = {tp: CachedPartition(wanted) for tp, wanted in named.items()}
        opened = self.sessions.create(request.replica_id, "", cached)
        return answer, 0 if opened is None else opened.id


def _read(connection: socket.socket, size: int) -> bytes | None:
    got = b""
    while len(got) < size:
        try:
            chunk = connection.recv(size - len(got))
        except OSError:
            return None
        if not chunk:
            return None
        got += chunk
    return got


class Served(NamedTuple):
    endpoint: str  # gRPC
    kafka_endpoint: str | None


@pytest.fixture(params=["grpc", "kafka"])
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[[StandInLeader], Served]]:
    servers: list[grpc.Server] = []
    listeners: list[KafkaStandIn] = []

    def start(leader: StandInLeader) -> Served:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        annal_pb2_grpc.add_AnnalServicer_to_server(leader, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        if request.param == "grpc":
            return Served(f"127.0.0.1:{port}", None)
        listeners.append(KafkaStandIn(leader))
        return Served(f"127.0.0.1:{port}", listeners[-1].endpoint)

    yield start
    for server in servers:
        server.stop(None)
    for listener in listeners:
        listener.close()
    if request.param == "kafka":
        assert sum(listener.fetches for listener in listeners) > 0  # the path was taken


@pytest.fixture
def fetchers() -> Iterator[ReplicaFetcherManager]:
    manager = ReplicaFetcherManager(2, FetcherSettings(wait_max_ms=20, backoff_ms=50))
    yield manager
    manager.shutdown()


def log_bytes(log: Log) -> bytes:
    return b"".join(segment.read_all() for segment in log.segments())


@pytest.mark.timeout(60)
def test_a_follower_cuts_what_the_new_leader_never_had(
    tmp_path: Path, serve: Callable[[StandInLeader], Served], fetchers: ReplicaFetcherManager
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

    served = serve(StandInLeader(leader, 2))
    fetchers.follow(TP, 1, served.endpoint, follower, 2, served.kafka_endpoint)
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
    tmp_path: Path, serve: Callable[[StandInLeader], Served], fetchers: ReplicaFetcherManager
) -> None:
    leader = open_log(tmp_path / "leader" / "t-0")
    for i in range(10):
        leader.append_as_leader(batch([b"v%d" % i]), 0)
    leader.delete_records_before(6)
    follower = open_log(tmp_path / "follower" / "t-0")

    served = serve(StandInLeader(leader, 0))  # over Kafka, the log end is asked over gRPC
    fetchers.follow(TP, 1, served.endpoint, follower, 0, served.kafka_endpoint)
    wait_until(lambda: follower.log_end_offset == 10, 30, "the follower caught up")
    assert follower.log_start_offset == 6
    assert [r.value for r in iter_records(follower.read(6, 1 << 20))] == [
        b"v6", b"v7", b"v8", b"v9"
    ]  # fmt: skip


@pytest.mark.timeout(60)
def test_a_fenced_follower_waits_and_keeps_its_log(
    tmp_path: Path, serve: Callable[[StandInLeader], Served], fetchers: ReplicaFetcherManager
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
    endpoint, kafka_endpoint = serve(stand_in)
    fetchers.follow(TP, 1, endpoint, follower, 2, kafka_endpoint)
    wait_until(lambda: len(asked) >= 2, 30, "a second try after the backoff")
    assert follower.log_end_offset == 2  # nothing cut while fenced
    fetchers.follow(TP, 1, endpoint, follower, 3, kafka_endpoint)  # the next LeaderAndIsr
    wait_until(lambda: log_bytes(follower) == log_bytes(leader), 30, "the follower in line")


@pytest.mark.timeout(60)
def test_a_kafka_listener_that_refuses_connections_is_passed_over_for_grpc(
    tmp_path: Path, fetchers: ReplicaFetcherManager
) -> None:
    """A firewall lets only the leader's gRPC port through: the follower copies
    over gRPC."""
    leader = open_log(tmp_path / "leader" / "t-0")
    leader.append_as_leader(batch([b"a", b"b"]), 0)
    follower = open_log(tmp_path / "follower" / "t-0")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    annal_pb2_grpc.add_AnnalServicer_to_server(StandInLeader(leader, 0), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    walled = socket.socket()  # bound, never listening: connections are refused
    walled.bind(("127.0.0.1", 0))
    try:
        kafka_endpoint = f"127.0.0.1:{walled.getsockname()[1]}"
        fetchers.follow(TP, 1, f"127.0.0.1:{port}", follower, 0, kafka_endpoint)
        wait_until(lambda: log_bytes(follower) == log_bytes(leader), 30, "copied over gRPC")
    finally:
        walled.close()
        server.stop(None)


@pytest.mark.timeout(60)
def test_stopping_ends_a_long_poll_over_the_kafka_listener(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader" / "t-0")
    follower = open_log(tmp_path / "follower" / "t-0")
    stand_in = StandInLeader(leader, 0)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    annal_pb2_grpc.add_AnnalServicer_to_server(stand_in, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    listener = KafkaStandIn(stand_in)  # nothing to read: it holds each fetch 20 s
    manager = ReplicaFetcherManager(2, FetcherSettings(wait_max_ms=20_000))
    try:
        manager.follow(TP, 1, f"127.0.0.1:{port}", follower, 0, listener.endpoint)
        wait_until(lambda: listener.fetches > 0, 30, "a long poll under way")
        started = time.monotonic()
        manager.shutdown()
        assert time.monotonic() - started < 5
    finally:
        manager.shutdown()
        listener.close()
        server.stop(None)


@pytest.mark.timeout(60)
def test_a_follower_ahead_of_the_leaders_log_end_cuts_back_to_it(
    tmp_path: Path,
    serve: Callable[[StandInLeader], Served],
    fetchers: ReplicaFetcherManager,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The leader's epoch answer leaves the follower's 10 records whole, but the
    leader's log ends at 3 (it lost the rest): the fetch is out of range, and the
    follower cuts back to the leader's end rather than starting over.  Over the
    Kafka listener, whose answer does not say where the leader's log ends, the
    follower asks that over gRPC."""
    leader = open_log(tmp_path / "leader" / "t-0")
    follower = open_log(tmp_path / "follower" / "t-0")
    shared = batch([b"s%d" % i for i in range(3)])
    for log in (leader, follower):
        log.append_as_leader(shared, 0)
    follower.append_as_leader(batch([b"x%d" % i for i in range(7)]), 0)
    stand_in = StandInLeader(leader, 0)

    def unclean(
        request: pb.OffsetsForLeaderEpochRequest, context: grpc.ServicerContext
    ) -> pb.OffsetsForLeaderEpochResponse:
        end = pb.PartitionEpochEnd(partition=0, leader_epoch=0, end_offset=10)
        return pb.OffsetsForLeaderEpochResponse(
            topics=[pb.TopicEpochEnds(name="t", partitions=[end])]
        )

    stand_in.OffsetsForLeaderEpoch = unclean  # type: ignore[method-assign]
    served = serve(stand_in)
    with caplog.at_level("WARNING", logger="annal.broker.replication.replica_fetcher"):
        fetchers.follow(TP, 1, served.endpoint, follower, 0, served.kafka_endpoint)
        wait_until(lambda: follower.log_end_offset == 3, 30, "the follower cut back")
    assert log_bytes(follower) == log_bytes(leader)
    assert "truncating t-0 from 10 to the leader's log end 3" in caplog.text
    assert "fell behind" not in caplog.text


@pytest.mark.timeout(60)
def test_replica_fetches_go_in_a_session_and_start_over_when_the_leader_forgot_it(
    tmp_path: Path,
) -> None:
    """The first fetch is full and opens a session; the next ones name only what
    moved and forget what is no longer fetched; a leader that no longer knows the
    session (it restarted, or evicted it) is asked again at once in full."""
    leader = open_log(tmp_path / "leader" / "t-0")
    leader.append_as_leader(batch([b"a", b"b"]), 0)
    listener = SessionStandIn(StandInLeader(leader, 0))
    fetch = KafkaReplicaFetch(listener.endpoint, 2, 10)
    limits = FetchLimits(1 << 20, 10 << 20, 10, 1)
    t1 = TopicPartition("t", 1)
    try:
        first = fetch.fetch([Wanted(TP, 0, 0, 0), Wanted(t1, 2, 0, 0)], limits)
        assert first[TP].records and first[TP].high_watermark == 2
        (session_id, *_), *_ = listener.requests
        opened = listener.sessions.get(fetch.session.session_id)
        assert session_id == 0 and opened is not None
        fetch.fetch([Wanted(TP, 2, 0, 0), Wanted(t1, 2, 0, 0)], limits)  # TP moved on
        fetch.fetch([Wanted(TP, 2, 0, 0), Wanted(t1, 2, 0, 0)], limits)  # nothing moved
        fetch.fetch([Wanted(TP, 2, 0, 0)], limits)  # t1 no longer fetched
        listener.restart()
        again = fetch.fetch([Wanted(TP, 0, 0, 0)], limits)  # refused, then full at once
        assert again[TP].records
        reopened = fetch.session.session_id
        assert listener.sessions.get(reopened) is not None
        sid = opened.id
        assert listener.requests == [
            (0, 0, [0, 1], []),  # full, asking for a session
            (sid, 1, [0], []),
            (sid, 2, [], []),
            (sid, 3, [], [1]),
            (sid, 4, [0], []),  # FETCH_SESSION_ID_NOT_FOUND
            (0, 0, [0], []),  # full again: a new session
        ]
        fetch.abort()  # a failed connection: the next fetch is full, closing the session
        with pytest.raises(ConnectionFailed):
            fetch.fetch([Wanted(TP, 2, 0, 0)], limits)
        fetch.fetch([Wanted(TP, 2, 0, 0)], limits)
        assert listener.requests[-1] == (reopened, 0, [0], [])
    finally:
        fetch.close()
        listener.close()


@pytest.mark.timeout(60)
def test_a_leader_and_isr_hands_each_fetcher_thread_its_share_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 partitions from two leaders, two threads per leader: each thread
    takes its share in one step (it wakes once, not once per partition)."""
    shares: list[tuple[int, int]] = []
    real_add = _FetcherThread.add

    def add(self: _FetcherThread, share: Any) -> None:
        shares.append((self.leader, len(share)))
        real_add(self, share)

    monkeypatch.setattr(_FetcherThread, "add", add)
    manager = ReplicaFetcherManager(
        2, FetcherSettings(wait_max_ms=20, backoff_ms=5_000, fetchers_per_leader=2)
    )
    try:
        log = open_log(tmp_path / "t-0")  # the logs are not touched: no leader answers
        orders = [
            FollowOrder(TopicPartition("t", p), 1 + p % 2 * 2, "127.0.0.1:1", log, 4, None)
            for p in range(1_000)
        ]
        manager.follow_many(orders)
        assert len(shares) == 4  # (leader, thread): 1 and 3, two threads each
        assert sorted(leader for leader, _ in shares) == [1, 1, 3, 3]
        assert sum(n for _, n in shares) == 1_000
        assert manager.followed() == {o.tp: o.leader for o in orders}

        moved = [o._replace(leader=3) for o in orders[:10] if o.leader == 1]  # a new leader
        shares.clear()
        manager.follow_many(moved)
        assert sum(n for _, n in shares) == len(moved) and len(shares) <= 2
        assert all(manager.followed()[o.tp] == 3 for o in moved)
    finally:
        manager.shutdown()


def test_thousands_of_partitions_refused_at_once_make_one_line_per_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader change refuses every followed partition in one answer: the fetcher
    says so once per error, naming a few, and at INFO for the refusals that only
    wait for the controller's LeaderAndIsr."""
    thread = _FetcherThread(2, 1, 0, "127.0.0.1:1", None, FetcherSettings())
    log = open_log(tmp_path / "t-0")
    try:
        with caplog.at_level("INFO", logger="annal.broker.replication.replica_fetcher"):
            for partition in range(2000):
                follow = _Follow(log, 1)
                tp = TopicPartition("t", partition)
                thread._delay(tp, follow, errors.FENCED_LEADER_EPOCH, "epoch 1 is old")
                thread._delay(tp, follow, errors.FENCED_LEADER_EPOCH, "again")  # not first
            thread._delay(TopicPartition("u", 0), _Follow(log, 1), errors.CORRUPT_MESSAGE, "")
            thread._report_refusals()
            thread._report_refusals()  # nothing new
    finally:
        thread.stop()
        log.close()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("INFO", "fetch from leader 1: FENCED_LEADER_EPOCH for 2000 partition(s) (t-0, t-1, "
                 "t-2, t-3, t-4 and 1995 more): epoch 1 is old"),
        ("WARNING", "fetch from leader 1: CORRUPT_MESSAGE for 1 partition(s) (u-0): no detail"),
    ]  # fmt: skip
