"""The idempotent producer: its settings, and its producer id, epochs and sequence
numbers as a real broker stores them."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from annal.producer.producer import Producer
from annal.storage.batch import iter_batches
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

UNREACHABLE = "127.0.0.1:1"  # nothing is sent in the settings tests


def test_idempotence_is_on_by_default_with_kafka_3_defaults() -> None:
    with Producer(UNREACHABLE) as producer:
        assert producer.idempotent and producer.acks == -1
        assert producer.retries > 0 and producer.max_in_flight <= 5
    with Producer(UNREACHABLE, acks="all", enable_idempotence=True) as producer:
        assert producer.idempotent


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"acks": 1}, "acks=1"),
        ({"acks": "0"}, "acks='0'"),
        ({"retries": 0}, "retries=0"),
        ({"max_in_flight": 6}, "max_in_flight=6"),
    ],
)
def test_settings_that_rule_idempotence_out(settings: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=f"enable_idempotence=True cannot go with {named}"):
        Producer(UNREACHABLE, enable_idempotence=True, **settings)  # type: ignore[arg-type]
    # left at its default, idempotence gives way to what was asked for, as in Kafka 3.x
    with Producer(UNREACHABLE, **settings) as producer:  # type: ignore[arg-type]
        assert not producer.idempotent
    with Producer(UNREACHABLE, enable_idempotence=False, **settings) as producer:  # type: ignore[arg-type]
        assert not producer.idempotent


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    process = broker_factory()
    with AdminClient(process.endpoint) as admin:
        admin.create_topic("idem", partitions=2)
    return process


def read_batches(endpoint: str, partition: int) -> list[tuple[int, int, int, int, int]]:
    """(base offset, producer id, epoch, base sequence, count) of every batch."""
    stub = annal_pb2_grpc.AnnalStub(grpc.insecure_channel(endpoint))
    request = pb.FetchRequest(
        replica_id=-1,
        max_bytes=1 << 22,
        topics=[
            pb.TopicFetchData(
                name="idem",
                partitions=[
                    pb.PartitionFetchData(
                        partition=partition, fetch_offset=0, partition_max_bytes=1 << 22
                    )
                ],
            )
        ],
    )
    data = stub.Fetch(request, timeout=15).topics[0].partitions[0].records
    return [
        (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
        for h in iter_batches(data)
    ]


@pytest.mark.timeout(120)
def test_batches_carry_the_producer_id_and_gapless_sequences(broker: BrokerProcess) -> None:
    with (
        Producer(broker.endpoint, linger_ms=2, batch_size=512) as first,
        Producer(broker.endpoint) as second,
    ):
        futures = [first.send("idem", value=b"v%d" % i, partition=i % 2) for i in range(300)]
        second.send("idem", value=b"other", partition=0).result(30)
        first.flush(60)
        assert [f.result().offset for f in futures[0::2]] == sorted(
            f.result().offset for f in futures[0::2]
        )
        assert first.producer_id >= 0 and second.producer_id not in (-1, first.producer_id)
        pid = first.producer_id
    for partition in (0, 1):
        mine = [b for b in read_batches(broker.endpoint, partition) if b[1] == pid]
        assert len(mine) > 1 and all(epoch == 0 for _, _, epoch, _, _ in mine)
        expected = 0
        for _, _, _, sequence, count in mine:
            assert sequence == expected
            expected += count
        assert expected == 150


@pytest.mark.timeout(120)
def test_a_sequence_gap_bumps_the_epoch_and_the_batch_is_sent_again(
    broker: BrokerProcess,
) -> None:
    with Producer(broker.endpoint) as producer:
        producer.send("idem", value=b"a", partition=0).result(30)
        pid = producer.producer_id
        # the partition now holds sequences 1..2 from this producer id, which the
        # producer never sent: its next batch (sequence 1) is out of order there
        stray = encode_batch(
            [Record(i, 1_700_000_000_000, None, b"stray") for i in range(2)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=1,
        )
        stub = annal_pb2_grpc.AnnalStub(grpc.insecure_channel(broker.endpoint))
        answer = stub.Produce(
            pb.ProduceRequest(
                acks=-1,
                timeout_ms=10_000,
                topics=[
                    pb.TopicProduceData(
                        name="idem",
                        partitions=[pb.PartitionProduceData(partition=0, records=stray)],
                    )
                ],
            ),
            timeout=15,
        )
        assert answer.topics[0].partitions[0].error == pb.NONE
        producer.send("idem", value=b"b", partition=0).result(30)
        producer.send("idem", value=b"c", partition=0).result(30)
        producer.send("idem", value=b"d", partition=1).result(30)
        assert producer.producer_epoch == 1
    assert [(epoch, sequence) for _, p, epoch, sequence, _ in read_batches(broker.endpoint, 0)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert [(e, s) for _, _, e, s, _ in read_batches(broker.endpoint, 1)] == [(1, 0)]
