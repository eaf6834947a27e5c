"""Exactly-once through crashes: a consume-transform-produce loop
(``tests/eos_loop.py``: confluent-kafka, read_committed consumer, transactional
producer, offsets committed in the transaction) runs on a real three-broker
cluster while the test SIGKILLs the loop, the transaction coordinator and a
leader of the output topic, each twice and in the middle of its work.  At the end
every input record is in the output exactly once, in its partition's order,
and the group's committed offsets are the input's end."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka as ck
import grpc
import pytest
from annal.admin.client import AdminClient, AdminError
from annal.deploy.runner import BrokerProcess, wait_until
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

RECORDS = 4000
PAUSE_S = 0.5  # the loop's rest after each transaction (of 50 records at most)
PARTITIONS = 6
LOOP = Path(__file__).resolve().parent.parent / "eos_loop.py"
FATAL = 3  # the loop's exit status after a fatal producer error
SETTINGS = {
    "min.insync.replicas": "2",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "zookeeper.session.timeout.ms": "6000",
    "group.initial.rebalance.delay.ms": "0",
}
_runs = itertools.count()


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    return [module_broker_factory(i, SETTINGS) for i in (1, 2, 3)]


def bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.kafka_endpoint for b in cluster)


class Loop:
    """The loop's process.  ``progress`` is how many records all its runs have
    committed together (each run prints its own count; exactly-once makes the
    sum the output's size).

    The test supervises it as an application's supervisor would:

    * a run that exits with the loop's FATAL status (Kafka's recipe for a
      fatal producer error, such as the INVALID_TXN_STATE a Kafka 2.x
      coordinator answers an abort whose AddPartitionsToTxn died with the
      old coordinator) is started again;
    * a run that stops making progress for ``STALL_S`` is SIGKILLed and
      started again: librdkafka (2.16) can spin forever when a broker it
      holds a handle to leaves the cluster's metadata while a request to it
      is being retried ("Handle is terminating ... 2 refcnts").

    Either is one more crash of the loop for exactly-once to survive; any
    other exit fails the test, and so do more than five restarts."""

    STALL_S = 45.0

    def __init__(self, cluster: list[BrokerProcess], args: list[str], out: Path) -> None:
        self.out = out
        self.args = [sys.executable, str(LOOP), bootstrap(cluster), *args]
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        with open(self.out, "ab") as log:
            log.write(b"--- started\n")
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)

    def progress(self) -> int:
        runs = self.out.read_text(errors="replace").split("--- started")[1:]
        counts = (re.findall(r"^committed (\d+)$", run, re.MULTILINE) for run in runs)
        return sum(int(found[-1]) for found in counts if found)

    def wait_for(self, at_least: int, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        last, moved = self.progress(), time.monotonic()
        while (done := self.progress()) < at_least:
            assert self.process is not None
            if self.process.poll() is not None:
                if self.process.returncode != FATAL or self.restarts >= 5:
                    self._fail(f"the loop exited ({self.process.returncode})")
                self.restarts += 1  # a fatal producer error: start it again
                self.start()
            if done != last:
                last, moved = done, time.monotonic()
            elif time.monotonic() - moved > self.STALL_S:
                self.restarts += 1
                self.kill()
                self.start()
                moved = time.monotonic()
            if time.monotonic() > deadline:
                self._fail(f"the loop committed {done} of {at_least} records in {timeout_s} s")
            time.sleep(0.1)

    def _fail(self, what: str) -> None:
        text = self.out.read_text(errors="replace")
        lines = [line for line in text.splitlines() if not line.startswith("%7|")]
        raise AssertionError(f"{what}; the loop's output ends:\n" + "\n".join(lines[-60:]))

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def loop_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "loop.log"
    yield path


def fill(cluster: list[BrokerProcess], topic: str) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for i in range(RECORDS):
        value = f"{i}".encode()
        producer.produce(topic, key=b"k" + value, value=value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def read_committed(cluster: list[BrokerProcess], topic: str) -> dict[int, list[bytes]]:
    """Every committed record of ``topic``, per partition, in order."""
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "unused",
         "isolation.level": "read_committed", "enable.partition.eof": True}
    )  # fmt: skip
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            seen[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return seen


def coordinator_of(cluster: list[BrokerProcess], transactional_id: str) -> BrokerProcess:
    for broker in cluster:
        if not broker.alive:
            continue
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = annal_pb2_grpc.AnnalStub(channel)  # type: ignore[no-untyped-call]
            answer = stub.FindCoordinator(
                pb.FindCoordinatorRequest(group=transactional_id, key_type=1), timeout=10
            )
        if answer.error == pb.NONE:
            return next(b for b in cluster if b.broker_id == answer.coordinator.id)
    raise AssertionError(f"no coordinator for {transactional_id}")


def wait_full_isr(cluster: list[BrokerProcess], topics: list[str]) -> None:
    """Every broker back in every ISR (internal topics too), so that the next
    kill leaves each partition two in-sync replicas."""
    names = [*topics, "__consumer_offsets", "__transaction_state"]

    def full() -> bool:
        try:
            with AdminClient(",".join(b.endpoint for b in cluster)) as admin:
                found = admin.describe_topics(names)
        except AdminError:  # a broker just restarted, before the controller's metadata
            return False
        return all(len(p.isr) == len(p.replicas) for t in found for p in t.partitions)

    wait_until(full, 120, "every ISR full")


def leader_of(cluster: list[BrokerProcess], topic: str, partition: int) -> BrokerProcess:
    alive = next(b for b in cluster if b.alive)
    with AdminClient(alive.endpoint) as admin:
        (found,) = admin.describe_topics([topic])
    leader = next(p.leader for p in found.partitions if p.partition == partition)
    return next(b for b in cluster if b.broker_id == leader)


def test_exactly_once_through_sigkills(cluster: list[BrokerProcess], loop_log: Path) -> None:
    run = next(_runs)
    source, sink, group, tid = f"in{run}", f"out{run}", f"eos{run}", f"eos-loop-{run}"
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(source, PARTITIONS, 3)
        admin.create_topic(sink, PARTITIONS, 3)
    fill(cluster, source)
    loop = Loop(cluster, [source, sink, group, tid, str(PAUSE_S)], loop_log)
    try:
        loop.start()
        loop.wait_for(150)
        for _ in range(2):  # the loop dies mid-transaction, twice
            loop.kill()
            loop.start()
            loop.wait_for(loop.progress() + 150)
        for round_ in range(2):  # twice: the coordinator, then an output leader, dies
            coordinator = coordinator_of(cluster, tid)
            coordinator.kill()
            loop.wait_for(loop.progress() + 150, timeout_s=180)
            coordinator.start()
            wait_full_isr(cluster, [source, sink])
            leader = leader_of(cluster, sink, round_)
            leader.kill()
            loop.wait_for(loop.progress() + 150, timeout_s=180)
            leader.start()
            wait_full_isr(cluster, [source, sink])
        loop.wait_for(RECORDS, timeout_s=300)  # every input record is in the output
    finally:
        loop.kill()
    output = read_committed(cluster, sink)
    inputs = {
        p: [f"{i}".encode() for i in range(p, RECORDS, PARTITIONS)] for p in range(PARTITIONS)
    }
    for p in range(PARTITIONS):
        assert output[p] == [v + b":out" for v in inputs[p]], f"partition {p}"
    consumer = ck.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group})
    try:
        committed = consumer.committed(
            [ck.TopicPartition(source, p) for p in range(PARTITIONS)], 30
        )
    finally:
        consumer.close()
    assert sorted((tp.partition, tp.offset) for tp in committed) == [
        (p, len(inputs[p])) for p in range(PARTITIONS)
    ]
