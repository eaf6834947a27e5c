"""Replication on real brokers: followers copy their leaders' logs byte for byte, and
the ISR and high watermark follow them."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import grpc
import pytest
from annal.admin.client import AdminClient, AdminError
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.storage.files import partition_dir_name
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from annal.zk.layout import PartitionState

from annal import errors


def segment_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """Every ``.log`` of the partition on ``broker``, concatenated in offset order."""
    directory: Path = broker.log_dir / partition_dir_name(topic, partition)
    if not directory.is_dir():
        return b""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def connected_ports(pid: int | None) -> set[int]:
    """The remote ports of a process's established TCP connections."""
    assert pid is not None
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):  # gRPC connects over IPv6 sockets, v4-mapped
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in sockets:  # ESTABLISHED, this process's
                ports.add(int(fields[2].rpartition(":")[2], 16))
    return ports


def produce(endpoint: str, topic: str, partitions: int, count: int, tag: bytes) -> None:
    with Producer(endpoint, linger_ms=5) as producer:
        for i in range(count):
            producer.send(topic, value=tag + b"-%06d" % i, partition=i % partitions)
        producer.flush(60)


@pytest.mark.timeout(240)
def test_followers_copy_the_leaders_log_byte_for_byte(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Broker 1 fetches over broker 2's Kafka listener (the default); broker 2,
    told ``inter.broker.listener.name=GRPC``, over broker 1's gRPC listener."""
    brokers = {
        b.broker_id: b
        for b in (broker_factory(1), broker_factory(2, {"inter.broker.listener.name": "GRPC"}))
    }
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic(
            "copied", partitions=2, replication_factor=2, config={"segment.bytes": "16384"}
        )
        partitions = admin.describe_topics(["copied"])[0].partitions
    leaders = {p.partition: p.leader for p in partitions}
    assert set(leaders.values()) == {1, 2}  # each broker leads one and follows the other

    def copied() -> bool:
        return all(
            segment_bytes(brokers[3 - leader], "copied", partition)
            == segment_bytes(brokers[leader], "copied", partition)
            for partition, leader in leaders.items()
        )

    produce(brokers[1].endpoint, "copied", 2, 4000, b"first")
    wait_until(copied, 60, "followers holding the leaders' bytes")
    assert len(list((brokers[1].log_dir / "copied-0").glob("*.log"))) > 1  # several segments
    assert brokers[2].kafka_port in connected_ports(brokers[1].pid)
    assert brokers[1].port in connected_ports(brokers[2].pid)
    assert brokers[1].kafka_port not in connected_ports(brokers[2].pid)

    # A follower that was down catches up from where it stopped.
    follower_of_0 = brokers[3 - leaders[0]]
    follower_of_0.kill()
    with Producer(brokers[leaders[0]].endpoint) as producer:
        for i in range(1000):
            producer.send("copied", value=b"while-down-%04d" % i, partition=0)
        producer.flush(60)
    follower_of_0.start()
    leader_of_0 = brokers[leaders[0]]

    def caught_up() -> bool:
        return segment_bytes(follower_of_0, "copied", 0) == segment_bytes(leader_of_0, "copied", 0)

    wait_until(caught_up, 60, "the follower caught up")


@pytest.mark.timeout(240)
def test_a_stalled_follower_leaves_the_isr_and_rejoins(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Consumers see only what the whole ISR holds; a follower that stops fetching
    leaves the ISR after replica.lag.time.max.ms (and acks=all with
    min.insync.replicas=2 is refused meanwhile); caught up again, it rejoins."""
    lag = {"replica.lag.time.max.ms": "6000"}  # long enough for the checks before it passes
    leader, follower = broker_factory(1, lag), broker_factory(2, lag)
    with AdminClient(leader.endpoint) as admin:
        admin.create_topic("isr", assignment={0: [1, 2]}, config={"min.insync.replicas": "2"})

        def isr() -> list[int]:
            return sorted(admin.describe_topics(["isr"])[0].partitions[0].isr)

        assert isr() == [1, 2]
        with Producer(leader.endpoint, acks=-1) as producer:
            for i in range(10):
                producer.send("isr", value=b"both-%d" % i)
            producer.flush(60)
        assert visible(leader) == 10

        follower.freeze()
        try:
            # in the ISR but not fetching: acks=all cannot be answered in time
            assert produce_all(leader.endpoint, timeout_ms=300) == pb.REQUEST_TIMED_OUT
            with Producer(leader.endpoint, acks=1) as producer:
                for i in range(10):
                    producer.send("isr", value=b"alone-%d" % i)
                producer.flush(60)
            assert visible(leader) == 10  # appended, but not yet on the whole ISR
            wait_until(lambda: isr() == [1], 60, "the stalled follower out of the ISR")
            assert visible(leader) == 21  # the timed-out record was appended: it stays
            assert produce_all(leader.endpoint) == pb.NOT_ENOUGH_REPLICAS
        finally:
            follower.thaw()
        wait_until(lambda: isr() == [1, 2], 60, "the follower back in the ISR")
    assert produce_all(leader.endpoint) == pb.NONE


def visible(broker: BrokerProcess) -> int:
    """How many records of "isr" a consumer can read (those below the high watermark)."""
    with SimpleConsumer(broker.endpoint) as consumer:
        return sum(1 for _ in consumer.iterate("isr", 0, 0))


def produce_all(endpoint: str, timeout_ms: int = 10_000) -> int:
    """The error code of one acks=all Produce of one record to "isr"-0."""
    data = pb.PartitionProduceData(partition=0, records=encode_batch([Record(0, 0, None, b"all")]))
    request = pb.ProduceRequest(
        acks=-1, timeout_ms=timeout_ms, topics=[pb.TopicProduceData(name="isr", partitions=[data])]
    )
    with grpc.insecure_channel(endpoint) as channel:
        response = annal_pb2_grpc.AnnalStub(channel).Produce(request, timeout=30)
    return response.topics[0].partitions[0].error


@pytest.mark.timeout(300)
def test_acknowledged_records_survive_leader_kills(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A drill: three brokers, acks=all with min.insync.replicas=2, records flowing
    while the leader of partition 0 is SIGKILLed twice (and restarted).  Every
    acknowledged record is then at its acknowledged offset, and the three
    replicas of each partition end up byte for byte the same."""
    quick = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "4000"}
    brokers = {i: broker_factory(i, quick) for i in (1, 2, 3)}
    bootstrap = ",".join(b.endpoint for b in brokers.values())
    with AdminClient(bootstrap) as admin:
        admin.create_topic(
            "drill", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"}
        )
    acked: dict[bytes, tuple[int, int]] = {}
    refused: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        with Producer(
            bootstrap, acks="all", retries=1000, retry_backoff_ms=100, linger_ms=2
        ) as producer:
            i = 0
            while not stop.is_set():
                value = b"r%06d" % i
                future = producer.send("drill", value=value, partition=i % 2)
                future.add_done_callback(partial(note, value))
                i += 1
                if i % 100 == 0:
                    producer.flush(120)
            producer.flush(120)

    def note(value: bytes, future: object) -> None:
        error = future.exception()  # type: ignore[attr-defined]
        if error is not None:
            refused.append(error)
        else:
            meta = future.result()  # type: ignore[attr-defined]
            acked[value] = (meta.partition, meta.offset)

    def more_acked(count: int) -> None:
        target = len(acked) + count
        wait_until(lambda: len(acked) >= target or bool(refused), 120, f"{count} more acks")
        assert not refused, refused[:3]

    def partition_0() -> tuple[int, list[int]]:
        """Partition 0's leader and ISR; (-1, []) while the broker asked does not
        know the topic yet (a broker just restarted, before the controller's
        metadata reached it)."""
        try:
            with AdminClient(bootstrap) as admin:
                found = admin.describe_topics(["drill"])[0].partitions[0]
        except AdminError as exc:
            if exc.code is not errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            return -1, []
        return found.leader, sorted(found.isr)

    def led_by_another(gone: int) -> bool:
        return partition_0()[0] not in (-1, gone)

    producing = threading.Thread(target=produce, name="drill-producer")
    producing.start()
    try:
        for _ in range(2):
            more_acked(300)
            leader, _ = partition_0()
            brokers[leader].kill()
            wait_until(partial(led_by_another, leader), 60, "a new leader")
            more_acked(300)
            brokers[leader].start()
            wait_until(lambda: partition_0()[1] == [1, 2, 3], 60, "the old leader in sync")
        more_acked(300)
    finally:
        stop.set()
        producing.join(180)
    assert not refused, refused[:3]

    with SimpleConsumer(bootstrap) as consumer:
        stored = {(p, r.offset): r.value for p in (0, 1) for r in consumer.iterate("drill", p, 0)}
    lost = [(v, at) for v, at in acked.items() if stored.get(at) != v]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost, e.g. {lost[:3]}"

    def converged() -> bool:
        return all(
            len({segment_bytes(b, "drill", p) for b in brokers.values()}) == 1 for p in (0, 1)
        )

    wait_until(converged, 60, "the three replicas byte for byte the same")


@pytest.mark.timeout(180)
def test_unclean_election_follows_the_topic_config(
    zk_connect: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    """With its ISR down to a dead leader, a partition stays offline, unless its
    topic sets unclean.leader.election.enable=true: then the out-of-sync replica
    leads (and what only the dead leader had is lost, as in Kafka)."""
    quick = {"zookeeper.session.timeout.ms": "4000"}
    brokers = {i: broker_factory(i, quick) for i in (1, 2)}
    with AdminClient(brokers[2].endpoint) as admin:
        admin.create_topic("careful", assignment={0: [1, 2]})
        admin.create_topic(
            "hasty", assignment={0: [1, 2]},
            config={"unclean.leader.election.enable": "true"},
        )  # fmt: skip
        with ZkClient(zk_connect) as zk:
            for topic in ("careful", "hasty"):  # as if broker 2 had fallen behind
                found = zk.get_partition_state(topic, 0)
                assert found is not None
                state, version = found
                zk.update_partition_state(
                    topic, 0, PartitionState(1, state.leader_epoch, (1,), state.controller_epoch),
                    version,
                )  # fmt: skip
        brokers[1].kill()

        def leader(topic: str) -> int:
            return admin.describe_topics([topic])[0].partitions[0].leader

        wait_until(lambda: leader("hasty") == 2, 60, "the unclean election")
        assert leader("careful") == -1
