"""The request layer on real brokers: one event loop, waiting requests in purgatories,
request limits."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.broker.config import BrokerConfig
from annal.broker.server import BrokerServer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc


def fetch_request(topic: str, offset: int = 0, max_wait_ms: int = 20_000) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            pb.TopicFetchData(
                name=topic,
                partitions=[
                    pb.PartitionFetchData(
                        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )


def produce_request(
    topic: str, acks: int = 1, size: int = 10, timeout_ms: int = 30_000
) -> pb.ProduceRequest:
    records = encode_batch([Record(0, int(time.time() * 1000), None, b"v" * size)])
    return pb.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topics=[
            pb.TopicProduceData(
                name=topic, partitions=[pb.PartitionProduceData(partition=0, records=records)]
            )
        ],
    )


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


@pytest.mark.timeout(120)
def test_a_long_poll_is_woken_by_an_append_long_before_its_wait(broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("woken", 1)
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)
        started = time.monotonic()
        waiting = stub.Fetch.future(fetch_request("woken", max_wait_ms=30_000), timeout=60)
        time.sleep(0.3)  # the poll is parked: nothing to read yet
        assert not waiting.done()
        stub.Produce(produce_request("woken"), timeout=30)
        answer = waiting.result()
        elapsed = time.monotonic() - started
    assert answer.topics[0].partitions[0].records
    assert elapsed < 10, f"woken after {elapsed:.1f} s, not by the append"


@pytest.mark.timeout(180)
def test_300_idle_long_polls_delay_no_produce_and_add_no_thread(broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("idle", 1)
        admin.create_topic("busy", 1)
    assert broker.pid is not None
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)
        stub.Produce(produce_request("busy"), timeout=30)  # warm
        threads_before = threads_of(broker.pid)
    stop = threading.Event()
    polls: list[int] = [0]

    async def poll_forever(ready: asyncio.Event, count: list[int]) -> None:
        async with grpc.aio.insecure_channel(broker.endpoint) as channel:
            stub = annal_pb2_grpc.AnnalStub(channel)
            while not stop.is_set():
                call = stub.Fetch(fetch_request("idle", max_wait_ms=1000), timeout=30)
                count[0] += 1
                if count[0] >= 300:
                    ready.set()
                await call

    async def pollers(ready_flag: threading.Event) -> None:
        ready = asyncio.Event()
        tasks = [asyncio.create_task(poll_forever(ready, polls)) for _ in range(300)]
        await ready.wait()
        ready_flag.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await asyncio.wait(tasks, timeout=5)

    ready_flag = threading.Event()
    runner = threading.Thread(target=lambda: asyncio.run(pollers(ready_flag)), daemon=True)
    runner.start()
    try:
        assert ready_flag.wait(60), "the pollers did not start"
        time.sleep(1.0)  # every poll parked on the broker
        latencies = []
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = annal_pb2_grpc.AnnalStub(channel)
            for _ in range(30):
                started = time.monotonic()
                response = stub.Produce(produce_request("busy"), timeout=30)
                latencies.append(time.monotonic() - started)
                assert response.topics[0].partitions[0].error == pb.NONE
        threads_during = threads_of(broker.pid)
    finally:
        stop.set()
        runner.join(30)
    # A broker that gave each poll a thread stalled every produce for the polls'
    # full second; here they wait in the purgatory.  (The median, not the worst:
    # a shared machine stalls one call now and then.)
    median = sorted(latencies)[len(latencies) // 2]
    assert median < 0.5, f"produce took {median * 1000:.0f} ms (median of 30)"
    assert threads_during <= threads_before + 2, (threads_before, threads_during)


@pytest.mark.timeout(120)
def test_a_cancelled_long_poll_leaves_nothing_behind(zk_connect: str, tmp_path: Path) -> None:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "1",
            "zookeeper.connect": zk_connect,
            "listeners": "GRPC://127.0.0.1:0",
            "log.dirs": str(tmp_path / "logs"),
            "controlled.shutdown.enable": "false",
        }
    )
    server = BrokerServer(config)
    server.start()
    try:
        endpoint = f"127.0.0.1:{server.port}"
        wait_until(lambda: server.metadata.snapshot().brokers != {}, 30, "metadata")
        with AdminClient(endpoint) as admin:
            admin.create_topic("abandoned", 1)
        waiting = server.purgatories.waiting
        with grpc.insecure_channel(endpoint) as channel:
            stub = annal_pb2_grpc.AnnalStub(channel)
            call = stub.Fetch.future(fetch_request("abandoned", max_wait_ms=60_000), timeout=30)
            wait_until(lambda: waiting()["fetch"] == 1, 10, "the poll parked")
            assert server.network is not None and server.network.limits.active == 0
            call.cancel()
            wait_until(lambda: waiting()["fetch"] == 0, 10, "the cancelled poll gone")
            with pytest.raises(grpc.FutureCancelledError):
                call.result()
            # A caller's deadline cuts the wait: answered (empty) just before it.
            short = stub.Fetch(fetch_request("abandoned", max_wait_ms=60_000), timeout=1.0)
            assert not short.topics[0].partitions[0].records
            assert waiting()["fetch"] == 0
        limits = server.network.limits
        wait_until(lambda: (limits.active, limits.bytes) == (0, 0), 10, "nothing held")
        assert server.purgatories.fetch.watched_keys() == 0
    finally:
        server.shutdown(1)


@pytest.mark.timeout(240)
def test_a_leader_change_answers_a_waiting_acks_all_produce_at_once(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = {i: broker_factory(i) for i in (1, 2)}
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic("moving", assignment={0: [2, 1]}, config={"min.insync.replicas": "1"})

        def state() -> tuple[int, list[int]]:
            p = admin.describe_topics(["moving"])[0].partitions[0]
            return p.leader, sorted(p.isr)

        # Broker 1 leads with broker 2 in sync: stop 2 cleanly, then bring it back.
        brokers[2].stop()
        wait_until(lambda: state()[0] == 1, 60, "broker 1 leading")
        brokers[2].start()
        wait_until(lambda: state() == (1, [1, 2]), 60, "broker 2 back in the ISR")
        follower = brokers[2]
        assert follower.pid is not None
        follower.freeze()  # in the ISR, not fetching: acks=all waits
        try:
            with ThreadPoolExecutor(2) as pool:
                started = time.monotonic()
                produced = pool.submit(
                    _produce_error,
                    brokers[1].endpoint,
                    produce_request("moving", -1, timeout_ms=25_000),
                )
                time.sleep(0.5)
                assert not produced.done(), "acks=all should wait for the frozen follower"
                pool.submit(admin.elect_preferred_leaders, {"moving": [0]})
                error = produced.result(timeout=60)
                answered_after = time.monotonic() - started
        finally:
            follower.thaw()
    assert error == pb.NOT_LEADER_OR_FOLLOWER
    assert answered_after < 10, f"answered after {answered_after:.1f} s, at its timeout"


def _produce_error(endpoint: str, request: pb.ProduceRequest) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        response = annal_pb2_grpc.AnnalStub(channel).Produce(request, timeout=60)
    return response.topics[0].partitions[0].error


@pytest.mark.timeout(120)
def test_request_limits_answer_resource_exhausted(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        1, {"queued.max.request.bytes": "100000", "socket.request.max.bytes": "1048576"}
    )
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("limited", 1)
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = annal_pb2_grpc.AnnalStub(channel)
        assert stub.Produce(produce_request("limited", size=1000), timeout=30)
        with pytest.raises(grpc.RpcError) as held:
            stub.Produce(produce_request("limited", size=200_000), timeout=30)
        assert held.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queued.max.request.bytes=100000" in (held.value.details() or "")
        with pytest.raises(grpc.RpcError) as large:
            stub.Produce(produce_request("limited", size=2_000_000), timeout=30)
        assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        response = stub.Produce(produce_request("limited", size=1000), timeout=30)
        assert response.topics[0].partitions[0].error == pb.NONE
