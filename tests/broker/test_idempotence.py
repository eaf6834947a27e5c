"""Idempotent producers on real brokers: producer ids from ZooKeeper blocks, a retried
batch stored once (also by a new leader), and no duplicate when a leader dies
under an idempotent producer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer, RecordMetadata
from annal.storage.records import Record, encode_batch, iter_records
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc


def stub(broker: BrokerProcess) -> annal_pb2_grpc.AnnalStub:
    return annal_pb2_grpc.AnnalStub(grpc.insecure_channel(broker.endpoint))


def leader_of(client: annal_pb2_grpc.AnnalStub, topic: str, partition: int) -> int:
    metadata = client.Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
    for p in metadata.topics[0].partitions:
        if p.partition == partition:
            return p.leader
    return -1


def produce(
    client: annal_pb2_grpc.AnnalStub, topic: str, data: bytes
) -> pb.PartitionProduceResponse:
    request = pb.ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topics=[
            pb.TopicProduceData(
                name=topic, partitions=[pb.PartitionProduceData(partition=0, records=data)]
            )
        ],
    )
    return client.Produce(request, timeout=15).topics[0].partitions[0]


def fetch_values(client: annal_pb2_grpc.AnnalStub, topic: str) -> list[bytes | None]:
    request = pb.FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            pb.TopicFetchData(
                name=topic,
                partitions=[
                    pb.PartitionFetchData(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    answer = client.Fetch(request, timeout=15).topics[0].partitions[0]
    return [r.value for r in iter_records(answer.records)]


def idempotent_batch(producer_id: int, sequence: int, n: int = 3) -> bytes:
    records = [Record(i, 1_700_000_000_000, None, b"s%d" % (sequence + i)) for i in range(n)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)


@pytest.mark.timeout(240)
def test_a_retried_batch_is_stored_once_also_by_a_new_leader(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = {i: broker_factory(i) for i in (1, 2, 3)}
    ids = [
        stub(brokers[i]).InitProducerId(pb.InitProducerIdRequest(), timeout=15) for i in (1, 1, 2)
    ]
    assert all(r.error == pb.NONE and r.producer_epoch == 0 for r in ids)
    assert ids[1].producer_id == ids[0].producer_id + 1  # the same block
    assert ids[2].producer_id // 1000 != ids[0].producer_id // 1000  # another broker's block
    # a transactional id is the transaction coordinator's: a timeout of 0 is refused
    refused = stub(brokers[1]).InitProducerId(
        pb.InitProducerIdRequest(transactional_id="tx"), timeout=15
    )
    assert refused.error in (pb.INVALID_TRANSACTION_TIMEOUT, pb.NOT_COORDINATOR)
    assert refused.producer_id == -1

    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic(
            "idem", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"}
        )
    pid = ids[0].producer_id
    first, second = idempotent_batch(pid, 0), idempotent_batch(pid, 3)
    client = stub(brokers[1])
    wait_until(lambda: leader_of(client, "idem", 0) in brokers, 30, "a leader")
    leader = brokers[leader_of(client, "idem", 0)]
    answers: list[pb.PartitionProduceResponse] = []

    def accepted(data: bytes, to: BrokerProcess) -> Callable[[], bool]:
        def attempt() -> bool:
            answers.append(produce(stub(to), "idem", data))
            return answers[-1].error == pb.NONE

        return attempt

    wait_until(accepted(first, leader), 30, "the first batch accepted")
    assert answers[-1].base_offset == 0
    again = produce(stub(leader), "idem", first)  # the retry of a batch already stored
    assert (again.error, again.base_offset) == (pb.NONE, 0)
    wait_until(accepted(second, leader), 30, "the second batch accepted")
    assert answers[-1].base_offset == 3
    gap = produce(stub(leader), "idem", idempotent_batch(pid, 9))
    assert gap.error == pb.OUT_OF_ORDER_SEQUENCE_NUMBER, gap

    # acks=all: every replica holds both batches, and with them the producer's state
    leader.kill()
    survivors = [b for b in brokers.values() if b is not leader]
    wait_until(
        lambda: leader_of(stub(survivors[0]), "idem", 0) in {b.broker_id for b in survivors},
        60,
        "a new leader",
    )
    new_leader = brokers[leader_of(stub(survivors[0]), "idem", 0)]
    wait_until(accepted(second, new_leader), 60, "the retry accepted by the new leader")
    assert answers[-1].base_offset == 3  # its original offset: not stored again
    wait_until(accepted(idempotent_batch(pid, 6), new_leader), 30, "the next batch")
    assert answers[-1].base_offset == 6
    values = fetch_values(stub(new_leader), "idem")
    assert values == [b"s%d" % i for i in range(9)]


@pytest.mark.timeout(300)
def test_no_duplicate_when_the_leader_dies_under_an_idempotent_producer(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Three brokers, replication factor 3, min.insync.replicas 2; an idempotent
    producer (acks=all) writes to two partitions while the leader of both is
    SIGKILLed.  Requests in flight then end without an answer and are sent
    again to the new leader, which may already hold them: every acknowledged
    record must be there exactly once, in send order per partition."""
    quick = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "4000"}
    brokers = {i: broker_factory(i, quick) for i in (1, 2, 3)}
    bootstrap = ",".join(b.endpoint for b in brokers.values())
    with AdminClient(bootstrap) as admin:
        admin.create_topic(
            "exactly",
            assignment={0: [1, 2, 3], 1: [1, 3, 2]},
            config={"min.insync.replicas": "2"},
        )
    acked: dict[bytes, RecordMetadata] = {}
    refused: list[BaseException] = []
    stop = threading.Event()
    producers: list[Producer] = []

    def note(value: bytes, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is not None:
            refused.append(error)
        else:
            acked[value] = future.result()

    def produce() -> None:
        with Producer(bootstrap, retries=1000, retry_backoff_ms=50, linger_ms=1) as producer:
            producers.append(producer)
            i = 0
            while not stop.is_set():
                value = b"r%07d" % i
                future = producer.send("exactly", value=value, partition=i % 2)
                future.add_done_callback(partial(note, value))  # type: ignore[arg-type]
                i += 1
                if i % 50 == 0:
                    producer.flush(120)
            producer.flush(120)

    def more_acked(count: int) -> None:
        target = len(acked) + count
        wait_until(lambda: len(acked) >= target or bool(refused), 120, f"{count} more acks")
        assert not refused, refused[:3]

    def leader() -> int:
        with AdminClient(bootstrap) as admin:
            return admin.describe_topics(["exactly"])[0].partitions[0].leader

    producing = threading.Thread(target=produce, name="idempotent-producer")
    producing.start()
    try:
        more_acked(400)
        killed = leader()
        brokers[killed].kill()  # mid-stream: requests in flight lose their answers
        wait_until(lambda: leader() not in (-1, killed), 60, "a new leader")
        more_acked(400)
    finally:
        stop.set()
        producing.join(180)
    assert not refused, refused[:3]
    assert producers[0].idempotent

    survivors = ",".join(b.endpoint for i, b in brokers.items() if i != killed)
    with SimpleConsumer(survivors) as consumer:
        stored = {p: list(consumer.iterate("exactly", p, 0)) for p in (0, 1)}
    for partition, records in stored.items():
        values = [r.value for r in records]
        assert len(values) == len(set(values)), f"duplicates in partition {partition}"
        assert values == sorted(values), f"partition {partition} out of send order"
    at = {(p, r.offset): r.value for p, records in stored.items() for r in records}
    lost = [(v, m) for v, m in acked.items() if at.get((m.partition, m.offset)) != v]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records not where acked: {lost[:3]}"
