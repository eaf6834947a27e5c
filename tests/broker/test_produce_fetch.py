"""Topics, produce, fetch and offsets through real broker processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from annal.deploy.runner import BrokerProcess, wait_until
from annal.storage.records import Record, encode_batch, iter_records
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient


@pytest.fixture
def cluster(
    zk_connect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[list[BrokerProcess]]:
    brokers = [BrokerProcess(i, zk_connect, tmp_path) for i in (1, 2, 3)]
    for broker in brokers:
        broker.start()
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: len(zk.get_brokers()) == 3, 60, "three brokers registered")
        wait_until(lambda: zk.get_controller() is not None, 30, "a controller elected")
    yield brokers
    report = getattr(request.node, "rep_call", None)
    for broker in brokers:
        broker.kill()
        if report is not None and report.failed:
            print(f"\n--- broker {broker.broker_id} ({broker.log_path}) ---\n{broker.tail_log()}")


def stub(broker: BrokerProcess) -> annal_pb2_grpc.AnnalStub:
    return annal_pb2_grpc.AnnalStub(grpc.insecure_channel(broker.endpoint))


def leaders(client: annal_pb2_grpc.AnnalStub, topic: str) -> dict[int, int]:
    metadata = client.Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
    return {p.partition: p.leader for p in metadata.topics[0].partitions}


def produce(
    client: annal_pb2_grpc.AnnalStub, topic: str, partition: int, data: bytes, acks: int = 1
) -> pb.PartitionProduceResponse:
    request = pb.ProduceRequest(
        acks=acks,
        timeout_ms=10_000,
        topics=[
            pb.TopicProduceData(
                name=topic, partitions=[pb.PartitionProduceData(partition=partition, records=data)]
            )
        ],
    )
    return client.Produce(request, timeout=10).topics[0].partitions[0]


def produce_until_accepted(
    client: annal_pb2_grpc.AnnalStub, topic: str, partition: int, data: bytes
) -> pb.PartitionProduceResponse:
    results: list[pb.PartitionProduceResponse] = []

    def accepted() -> bool:
        results.append(produce(client, topic, partition, data))
        return results[-1].error == pb.NONE

    wait_until(accepted, 30, f"{topic}-{partition} accepting writes")
    return results[-1]


def fetch(
    client: annal_pb2_grpc.AnnalStub, topic: str, partition: int, offset: int, **kw: int
) -> pb.PartitionFetchResponse:
    request = pb.FetchRequest(
        replica_id=-1,
        max_wait_ms=kw.get("max_wait_ms", 0),
        min_bytes=kw.get("min_bytes", 1),
        max_bytes=1 << 20,
        topics=[
            pb.TopicFetchData(
                name=topic,
                partitions=[
                    pb.PartitionFetchData(
                        partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    return client.Fetch(request, timeout=30).topics[0].partitions[0]


@pytest.mark.timeout(240)
def test_topics_produce_fetch_and_failover(zk_connect: str, cluster: list[BrokerProcess]) -> None:
    by_id = {b.broker_id: b for b in cluster}
    client = stub(cluster[0])
    created = client.CreateTopics(
        pb.CreateTopicsRequest(
            topics=[pb.CreatableTopic(name="events", num_partitions=6, replication_factor=1)],
            timeout_ms=30_000,
        ),
        timeout=40,
    )
    assert created.topics[0].error == pb.NONE, created
    again = client.CreateTopics(
        pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="events", num_partitions=6)]),
        timeout=40,
    )
    assert again.topics[0].error == pb.TOPIC_ALREADY_EXISTS
    placement = leaders(client, "events")
    assert sorted(placement) == list(range(6)) and set(placement.values()) == {1, 2, 3}
    # every broker answers from its metadata cache, which the controller keeps current
    for broker in cluster:
        wait_until(
            lambda b=broker: leaders(stub(b), "events") == placement,
            30,
            f"broker {broker.broker_id}'s metadata cache",
        )

    # produce a batch to every partition leader, read it back byte-identical
    sent = {}
    for partition, leader in placement.items():
        records = [Record(i, 1000 + i, b"k%d" % i, b"p%d-v%d" % (partition, i)) for i in range(50)]
        data = encode_batch(records)
        # the leader learns of its partition from the controller's LeaderAndIsr:
        # like a producer, retry the retriable errors until it has
        result = produce_until_accepted(stub(by_id[leader]), "events", partition, data)
        assert result.base_offset == 0, result
        sent[partition] = data
    for partition, leader in placement.items():
        got = fetch(stub(by_id[leader]), "events", partition, 0)
        assert got.error == pb.NONE and got.high_watermark == 50
        assert [r.value for r in iter_records(got.records)] == [
            b"p%d-v%d" % (partition, i) for i in range(50)
        ]
        assert got.records[16:] == sent[partition][16:]  # only offset, length, epoch patched

    # wrong broker, unknown topic, corrupt bytes, out of range
    other = next(b for b in cluster if b.broker_id != placement[0])
    assert produce(stub(other), "events", 0, sent[0]).error == pb.NOT_LEADER_OR_FOLLOWER
    assert produce(client, "nope", 0, sent[0]).error == pb.UNKNOWN_TOPIC_OR_PARTITION
    leader0 = stub(by_id[placement[0]])
    broken = bytearray(sent[0])
    broken[-1] ^= 0xFF
    bad = produce(leader0, "events", 0, bytes(broken))
    assert bad.error == pb.CORRUPT_MESSAGE and "CRC mismatch" in bad.error_message
    assert fetch(leader0, "events", 0, 51).error == pb.OFFSET_OUT_OF_RANGE
    offsets = leader0.ListOffsets(
        pb.ListOffsetsRequest(
            topics=[
                pb.TopicListOffsets(
                    name="events",
                    partitions=[
                        pb.PartitionListOffsets(partition=0, timestamp=-2),
                    ],
                )
            ]
        ),
        timeout=10,
    )
    assert offsets.topics[0].partitions[0].offset == 0

    # a long poll wakes up when data arrives
    fetched: list[pb.PartitionFetchResponse] = []
    waiter = threading.Thread(
        target=lambda: fetched.append(
            fetch(leader0, "events", 0, 50, max_wait_ms=10_000, min_bytes=1)
        )
    )
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    assert (
        produce(leader0, "events", 0, encode_batch([Record(0, 1, None, b"late")])).base_offset == 50
    )
    waiter.join(15)
    assert fetched and [r.value for r in iter_records(fetched[0].records)] == [b"late"]
    assert time.monotonic() - started < 5

    # kill the controller's broker: another takes over, and topics can still be created
    with ZkClient(zk_connect) as zk:
        controller = zk.get_controller()
        assert controller is not None
        by_id[controller].kill()
        wait_until(
            lambda: zk.get_controller() not in (None, controller), 60, "a new controller elected"
        )
        survivor = stub(next(b for b in cluster if b.broker_id != controller))
        wait_until(
            lambda: (
                controller
                not in {b.id for b in survivor.Metadata(pb.MetadataRequest(), timeout=10).brokers}
            ),
            30,
            "the dead broker gone from the survivors' metadata",
        )
        created = survivor.CreateTopics(
            pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="after", num_partitions=2, replication_factor=1)],
                timeout_ms=30_000,
            ),
            timeout=40,
        )
        assert created.topics[0].error == pb.NONE
        assert set(leaders(survivor, "after").values()) <= {1, 2, 3} - {controller}
        # the dead broker's partitions (RF 1) are offline until it returns
        offline = [p for p, leader in placement.items() if leader == controller]
        wait_until(
            lambda: all(leaders(survivor, "events")[p] == -1 for p in offline),
            30,
            "the dead broker's partitions offline",
        )
        by_id[controller].start()
        wait_until(
            lambda: all(leaders(survivor, "events")[p] == controller for p in offline),
            60,
            "the partitions back with their broker",
        )
