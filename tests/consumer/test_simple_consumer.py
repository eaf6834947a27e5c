"""The simple consumer against a real broker: fetch, multi-fetch, offsets, iteration, errors."""

from __future__ import annotations

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import EARLIEST, LATEST, OffsetOutOfRangeError, SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.storage.records import Header, Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc


def produce(endpoint: str, topic: str, partition: int, records: list[Record]) -> None:
    stub = annal_pb2_grpc.AnnalStub(grpc.insecure_channel(endpoint))
    request = pb.ProduceRequest(
        acks=1,
        timeout_ms=5000,
        topics=[
            pb.TopicProduceData(
                name=topic,
                partitions=[
                    pb.PartitionProduceData(partition=partition, records=encode_batch(records))
                ],
            )
        ],
    )

    def accepted() -> bool:
        return stub.Produce(request, timeout=10).topics[0].partitions[0].error == pb.NONE

    wait_until(accepted, 30, f"{topic}-{partition} accepting writes")


@pytest.mark.timeout(180)
def test_simple_consumer(broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("logs", partitions=2)
    for batch in range(5):
        produce(
            broker.endpoint,
            "logs",
            0,
            [
                Record(i, 1000 * batch + i, b"k", b"%d-%d" % (batch, i), (Header("n", b"1"),))
                for i in range(10)
            ],
        )
    produce(broker.endpoint, "logs", 1, [Record(0, 5, None, b"only")])
    with SimpleConsumer(broker.endpoint, max_wait_ms=10) as consumer:
        first = consumer.fetch("logs", 0, 13, max_bytes=1)  # one batch even if larger
        assert [r.offset for r in first.records] == list(range(13, 20))
        assert first.next_offset == 20 and first.high_watermark == 50
        assert first.records[0].headers == (Header("n", b"1"),)
        everything = list(consumer.iterate("logs", 0, 0))
        assert [r.value for r in everything][:3] == [b"0-0", b"0-1", b"0-2"]
        assert len(everything) == 50
        both = consumer.multi_fetch({("logs", 0): 45, ("logs", 1): 0})
        assert [r.offset for r in both[("logs", 0)].records] == [45, 46, 47, 48, 49]
        assert [r.value for r in both[("logs", 1)].records] == [b"only"]
        assert consumer.offsets_before("logs", 0, EARLIEST) == 0
        assert consumer.offsets_before("logs", 0, LATEST) == 50
        assert consumer.offsets_before("logs", 0, 3003) == 33
        assert consumer.offsets_before("logs", 0, 10**12) == -1
        with pytest.raises(
            OffsetOutOfRangeError, match=r"offset 99 of logs-0 is outside \[0, 50\]"
        ):
            consumer.fetch("logs", 0, 99)
        assert consumer.fetch("logs", 0, 50).records == []  # at the end: nothing yet


@pytest.mark.timeout(180)
def test_stream_reads_ahead_in_order(broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("ahead", partitions=3)
    for partition in range(3):
        for batch in range(20):
            produce(
                broker.endpoint,
                "ahead",
                partition,
                [Record(i, 1000, None, b"%d-%d-%d" % (partition, batch, i)) for i in range(50)],
            )
    with SimpleConsumer(broker.endpoint, max_wait_ms=50) as consumer:
        seen: dict[int, list[bytes | None]] = {0: [], 1: [], 2: []}
        # start partition 1 mid-batch: the records before its offset are skipped
        rounds = consumer.stream({("ahead", 0): 0, ("ahead", 1): 25, ("ahead", 2): 0}, 4096)
        for results in rounds:
            for (_, partition), result in results.items():
                seen[partition].extend(r.value for r in result.records)
            if sum(map(len, seen.values())) >= 3 * 1000 - 25:
                break
        rounds.close()  # cancels the round already on its way
    for partition in range(3):
        expected = [b"%d-%d-%d" % (partition, b, i) for b in range(20) for i in range(50)]
        assert seen[partition] == (expected[25:] if partition == 1 else expected)
    with SimpleConsumer(broker.endpoint) as consumer, pytest.raises(OffsetOutOfRangeError):
        next(consumer.stream({("ahead", 0): 5000}))
