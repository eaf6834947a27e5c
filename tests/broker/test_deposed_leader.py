"""A leader cut off from ZooKeeper and from its peers, while clients still reach
it, stops leading once its session must have expired (broker/replication/leadership_fence.py):
producers get NOT_LEADER_OR_FOLLOWER, find the new leader and are acknowledged
again within the session timeout and a few seconds; nothing acknowledged is lost.

The cut is real (tests/nemesis.py: nftables drops the isolated broker's packets
to ZooKeeper and to its peers' listeners, and theirs to its listeners), not a
SIGSTOP: the isolated broker goes on running and answering clients.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer, RecordFuture
from annal.zk.client import ZkClient
from nemesis import NetworkCut

pytestmark = pytest.mark.timeout(240)

SESSION_TIMEOUT_S = 6
PARTITIONS = 6
# broker 3 (not the controller: broker 1 starts first) leads 0 and 1
ASSIGNMENT = {0: [3, 1, 2], 1: [3, 2, 1], 2: [1, 2, 3], 3: [1, 3, 2], 4: [2, 3, 1], 5: [2, 1, 3]}
VICTIM = 3


@dataclass
class Acks:
    """What the producer was told, by partition: (ack time, offset, value)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[int, list[tuple[float, int, bytes]]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    def delivered(self, err: ck.KafkaError | None, msg: ck.Message) -> None:
        with self.lock:
            if err is not None:
                self.failed.append(f"{msg.partition()}: {err}")
                return
            value = msg.value()
            assert value is not None
            entry = (time.monotonic(), msg.offset(), value)
            self.acked.setdefault(msg.partition(), []).append(entry)

    def annal_delivered(self, partition: int, value: bytes, future: RecordFuture) -> None:
        failure = future.exception()
        with self.lock:
            if failure is not None:
                self.failed.append(f"{partition}: {failure}")
                return
            entry = (time.monotonic(), future.result().offset, value)
            self.acked.setdefault(partition, []).append(entry)

    def longest_silence(self, partition: int, since: float, until: float) -> float:
        """The longest time in [since, until] with no acknowledgement on ``partition``."""
        with self.lock:
            times = sorted(t for t, _, _ in self.acked.get(partition, []) if since <= t <= until)
        marks = [since, *times, until]
        return max(b - a for a, b in itertools.pairwise(marks))


class Sender:
    """A producer, Kafka's (librdkafka) or annal's, sending to given partitions."""

    def __init__(self, client: str, brokers: dict[int, BrokerProcess], acks: Acks) -> None:
        self.client, self.acks = client, acks
        if client == "confluent-kafka":
            self._kafka = ck.Producer(
                {
                    "bootstrap.servers": ",".join(b.kafka_endpoint for b in brokers.values()),
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 120_000,
                }
            )
        else:  # annal's producer: Kafka's retry budget rather than a count
            self._annal = Producer(
                ",".join(b.endpoint for b in brokers.values()),
                acks="all",
                linger_ms=5,
                retries=1_000,
                retry_backoff_ms=100,
            )

    def send(self, partition: int, value: bytes) -> None:
        if self.client == "confluent-kafka":
            self._kafka.produce("cut", value, partition=partition, on_delivery=self.acks.delivered)
            self._kafka.poll(0.005)
        else:
            future = self._annal.send("cut", value=value, partition=partition)
            future.add_done_callback(partial(self.acks.annal_delivered, partition, value))
            time.sleep(0.005)  # the pace of the stream, as librdkafka's poll gives

    def finish(self) -> None:
        if self.client == "confluent-kafka":
            assert self._kafka.flush(60) == 0
        else:
            self._annal.flush(60)
            self._annal.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "annal"])
def test_a_leader_cut_off_stops_leading_and_producers_move_on(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str, client: str
) -> None:
    cut = NetworkCut()
    settings = {
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_S * 1000),
        "min.insync.replicas": "2",
        "replica.lag.time.max.ms": "10000",
    }
    brokers = {b: broker_factory(b, settings) for b in (1, 2, 3)}
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic("cut", assignment=ASSIGNMENT)
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: isrs_full(zk), 60, "every ISR full")
        assert zk.get_controller() != VICTIM
    zk_port = int(zk_connect.split("/")[0].rsplit(":", 1)[1])

    acks = Acks()
    producer = Sender(client, brokers, acks)
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.send(i % PARTITIONS, f"v{i}".encode())
            i += 1

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acks.acked.get(0, [])) > 20, 30, "acks before the cut")
        victim = brokers[VICTIM]
        assert victim.pid is not None
        peers = [b.pid for n, b in brokers.items() if n != VICTIM and b.pid is not None]
        with cut:
            cut_at = time.monotonic()
            cut.isolate(victim.pid, peers, zk_port)
            # the cut lasts well past the bound: an answer within it came through the fence
            bound = SESSION_TIMEOUT_S + 5
            time.sleep(bound + 5)  # the cut's length is the experiment, not a wait
            healed_at = time.monotonic()
        for partition in (0, 1):
            silence = acks.longest_silence(partition, cut_at, healed_at)
            print(f"partition {partition}: longest silence {silence:.1f} s during the cut")
            assert silence <= bound, f"partition {partition} unacknowledged for {silence:.1f} s"
        assert victim.alive
        assert "stops acting as a leader" in victim.log_path.read_text()
    finally:
        stop.set()
        thread.join(10)
    producer.finish()
    assert acks.failed == []

    with ZkClient(zk_connect) as zk:  # healed: the isolated broker catches up again
        wait_until(lambda: isrs_full(zk), 90, "every ISR full after the heal")
    stored = _stored(brokers[1].kafka_endpoint)
    for partition, entries in acks.acked.items():
        for _, offset, value in entries:
            assert stored[partition].get(offset) == value, (partition, offset, value)
        values = list(stored[partition].values())
        assert len(values) == len(set(values)), f"a duplicate in partition {partition}"


def isrs_full(zk: ZkClient) -> bool:
    return all(
        (s := zk.get_partition_state("cut", p)) is not None and len(s[0].isr) == 3
        for p in range(PARTITIONS)
    )


def _stored(bootstrap: str) -> dict[int, dict[int, bytes]]:
    """Every record of every partition, read back through Kafka's protocol."""
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    ends = {p: consumer.get_watermark_offsets(ck.TopicPartition("cut", p), 30)[1]
            for p in range(PARTITIONS)}  # fmt: skip
    consumer.assign([ck.TopicPartition("cut", p, 0) for p in range(PARTITIONS)])
    out: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while any(len(out[p]) < ends[p] for p in out) and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None or msg.error():
            continue
        value = msg.value()
        assert value is not None
        out[msg.partition()][msg.offset()] = value
    consumer.close()
    return out
