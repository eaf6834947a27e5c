"""A group member cut off from ZooKeeper (not from the brokers) stops delivering
records within its session timeout, before ZooKeeper hands its partitions to
another member, and rejoins once it reaches ZooKeeper again: no partition is
ever delivered by two members at once.

Member a reaches ZooKeeper through a proxy (tests/zkproxy.py) that the test
pauses past a's session timeout; member b reaches it directly.  Records keep
arriving the whole time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from annal.admin.client import AdminClient
from annal.consumer.group import ConsumerTimeout, GroupConsumer, Stream
from annal.deploy.runner import BrokerProcess, wait_until
from annal.deploy.zookeeper import ZooKeeperServer
from annal.producer.producer import Producer
from runcli import annal
from zkproxy import ZkProxy

SESSION_TIMEOUT_MS = 4000
QUICK = {"offsets.topic.num.partitions": "3"}
PARTITIONS = 4


@dataclass(frozen=True, slots=True)
class Delivery:
    at: float  # time.monotonic() when the stream returned the record
    member: str
    partition: int
    offset: int


class Reader:
    """Drains a stream on its own thread, noting when each record was delivered."""

    def __init__(self, member: str, stream: Stream, into: list[Delivery]) -> None:
        self.member = member
        self._into = into
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: Stream) -> None:
        while True:
            try:
                for record in stream:
                    now = time.monotonic()
                    self._into.append(Delivery(now, self.member, record.partition, record.offset))
                return
            except ConsumerTimeout:
                continue

    def join(self) -> None:
        self._thread.join(30)


def member(connect: str, name: str) -> GroupConsumer:
    return GroupConsumer(
        connect,
        "readers",
        consumer_id=name,
        auto_offset_reset="smallest",
        auto_commit_interval_ms=200,
        rebalance_backoff_ms=200,
        rebalance_max_retries=30,
        consumer_timeout_ms=200,
        zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS,
    )


def keep_producing(endpoint: str, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        with Producer(endpoint, linger_ms=5) as producer:
            i = 0
            while not stop.wait(0.005):  # a steady trickle, about 200 records a second
                producer.send("events", value=b"%06d" % i, partition=i % PARTITIONS)
                i += 1
            producer.flush(30)

    thread = threading.Thread(target=run, name="producer", daemon=True)
    thread.start()
    return thread


def by(deliveries: list[Delivery], name: str, partition: int, after: float) -> list[float]:
    return [
        d.at for d in deliveries if d.member == name and d.partition == partition and d.at > after
    ]


@pytest.mark.timeout(180)
def test_a_member_cut_off_from_zookeeper_stops_delivering_before_another_takes_over(
    zookeeper: ZooKeeperServer,
    zk_connect: str,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(1, QUICK)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("events", partitions=PARTITIONS)
    chroot = "/" + zk_connect.split("/", 1)[1]
    deliveries: list[Delivery] = []
    stop = threading.Event()
    producer = keep_producing(broker.endpoint, stop)
    with ZkProxy(zookeeper.host, zookeeper.port) as proxy:
        a = member(proxy.connect_string(chroot), "a")
        b = member(zk_connect, "b")
        readers: list[Reader] = []
        try:
            readers += [
                Reader("a", a.create_message_streams({"events": 1})["events"][0], deliveries),
                Reader("b", b.create_message_streams({"events": 1})["events"][0], deliveries),
            ]
            wait_until(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, 60, "two each")
            started = time.monotonic()
            wait_until(  # owning two still (no rebalance meanwhile) and delivering from both
                lambda: len(owned := a.owned()) == 2
                and all(by(deliveries, "a", p, started) for _, p in owned),
                30,
                "a delivering",
            )
            a_partitions = sorted(p for _, p in a.owned())

            paused_at = time.monotonic()
            proxy.pause()
            wait_until(lambda: len(b.owned()) == PARTITIONS, 60, "b owning every partition")
            wait_until(
                lambda: all(by(deliveries, "b", p, paused_at) for p in a_partitions),
                30,
                "b delivering a's partitions",
            )
            a_last = max(d.at for d in deliveries if d.member == "a")
            # a stopped within its session timeout (its client noticed within two
            # thirds of it), and before b delivered any of its partitions.
            assert a_last < paused_at + SESSION_TIMEOUT_MS / 1000
            for p in a_partitions:
                assert a_last < min(by(deliveries, "b", p, paused_at)), p
            assert a.suspended

            resumed_at = time.monotonic()
            proxy.resume()
            wait_until(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, 60, "a rejoined")
            back = sorted(p for _, p in a.owned())
            wait_until(
                lambda: all(by(deliveries, "a", p, resumed_at) for p in back),
                30,
                "a delivering again",
            )
            assert not a.suspended
            # The way back: b let go of each partition before a delivered it.
            for p in back:
                b_last = max(by(deliveries, "b", p, resumed_at) or [resumed_at])
                assert b_last < min(by(deliveries, "a", p, resumed_at)), p
        finally:
            if proxy.paused:  # a failure while cut off: let a stop in time
                proxy.resume()
            stop.set()
            producer.join(30)
            a.shutdown()
            b.shutdown()
    for reader in readers:
        reader.join()


@pytest.mark.timeout(60)
def test_consumer_groups_takes_a_session_timeout(zk_connect: str) -> None:
    helped = annal("consumer-groups", "--help")
    assert "--zookeeper-session-timeout-ms" in helped.stdout
    assert "zookeeper.session.timeout.ms" in helped.stdout
    listed = annal("consumer-groups", "--zookeeper", zk_connect, "--list",
                   "--zookeeper-session-timeout-ms", "4000")  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    short = annal("consumer-groups", "--zookeeper", zk_connect, "--list",
                  "--zookeeper-session-timeout-ms", "10")  # fmt: skip
    assert short.returncode == 2
    assert "10 ms is too short" in short.stderr
