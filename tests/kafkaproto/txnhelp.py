"""Transactions written by hand for the partition-leader tests (KIP-98): a producer id
from InitProducerId, transactional batches sent with Kafka's Produce and a
transactional id, markers written by the leader's BrokerControl.WriteTxnMarkers
(as a transaction coordinator writes them)."""

from __future__ import annotations

import time
from typing import Any

import grpc
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors

PRODUCE, WRITE_TXN_MARKERS = 0, 27


def now_ms() -> int:
    return int(time.time() * 1000)


def client(broker: BrokerProcess) -> annal_pb2_grpc.AnnalStub:
    return annal_pb2_grpc.AnnalStub(grpc.insecure_channel(broker.endpoint))


def leader_of(brokers: list[BrokerProcess], topic: str, partition: int = 0) -> BrokerProcess:
    """The partition's leader, once every live broker's metadata names a live one."""
    by_id = {b.broker_id: b for b in brokers if b.alive}
    found: list[BrokerProcess] = []

    def named() -> bool:
        leaders = set()
        for broker in by_id.values():
            try:
                answer = client(broker).Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
            except grpc.RpcError:
                return False
            parts = {p.partition: p.leader for t in answer.topics for p in t.partitions}
            leaders.add(parts.get(partition, -1))
        if len(leaders) == 1 and (leader := leaders.pop()) in by_id:
            found[:] = [by_id[leader]]
            return True
        return False

    wait_until(named, 60, f"a leader of {topic}-{partition}")
    return found[0]


def plain_batch(*values: bytes) -> bytes:
    return encode_batch([Record(i, now_ms(), None, v) for i, v in enumerate(values)])


def kafka_produce(
    broker: BrokerProcess,
    topic: str,
    records: bytes,
    transactional_id: str | None = None,
    connection: KafkaConnection | None = None,
    version: int = 8,
) -> Any:
    """One Kafka Produce (acks=-1) of ``records`` to partition 0; its only answer."""
    own = connection is None
    connection = connection or KafkaConnection(broker.kafka_endpoint, 30)
    try:
        answer = connection.exchange(PRODUCE, version, {
            "transactional_id": transactional_id, "acks": -1, "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        })  # fmt: skip
    finally:
        if own:
            connection.close()
    return answer.responses[0].partition_responses[0]


def markers(
    pid: int, commit: bool, topic: str, partitions: list[int], epoch: int = 0
) -> pb.WriteTxnMarkersRequest:
    request = pb.WriteTxnMarkersRequest()
    marker = request.markers.add(
        producer_id=pid, producer_epoch=epoch, commit=commit, coordinator_epoch=0
    )
    marker.topics.add(topic=topic, partitions=partitions)
    return request


def write_markers(broker: BrokerProcess, request: pb.WriteTxnMarkersRequest) -> list[int]:
    """WriteTxnMarkers on ``broker``'s BrokerControl (no authorizer: anyone may);
    the error of each partition."""
    with grpc.insecure_channel(broker.endpoint) as channel:
        answer = annal_pb2_grpc.BrokerControlStub(channel).WriteTxnMarkers(request, timeout=35)
    return [int(p.error) for m in answer.markers for p in m.partitions]


class TxnProducer:
    """One transactional producer of partition 0 of ``topic``."""

    def __init__(self, brokers: list[BrokerProcess], topic: str, transactional_id: str) -> None:
        self.brokers = brokers
        self.topic = topic
        self.transactional_id = transactional_id
        answer = client(brokers[0]).InitProducerId(pb.InitProducerIdRequest(), timeout=15)
        assert answer.error == pb.NONE, answer
        self.pid = answer.producer_id
        self.sequence = 0

    def send(self, *values: bytes) -> int:
        """A transactional batch of ``values``; its first offset."""
        records = [Record(i, now_ms(), None, v) for i, v in enumerate(values)]
        data = encode_batch(
            records,
            producer_id=self.pid,
            producer_epoch=0,
            base_sequence=self.sequence,
            is_transactional=True,
        )
        leader = leader_of(self.brokers, self.topic)
        answer = kafka_produce(leader, self.topic, data, self.transactional_id)
        assert answer.error_code == errors.NONE.number, answer
        self.sequence += len(values)
        return int(answer.base_offset)

    def end(self, commit: bool) -> None:
        leader = leader_of(self.brokers, self.topic)
        request = markers(self.pid, commit, self.topic, [0])
        assert write_markers(leader, request) == [errors.NONE.number]


def fetch(
    broker: BrokerProcess, topic: str, offset: int = 0, isolation: int = 1, **more: int
) -> pb.PartitionFetchResponse:
    request = pb.FetchRequest(
        replica_id=-1,
        max_wait_ms=more.get("max_wait_ms", 0),
        min_bytes=more.get("min_bytes", 1),
        max_bytes=1 << 20,
        isolation_level=isolation,
    )
    request.topics.add(name=topic).partitions.add(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    return client(broker).Fetch(request, timeout=30).topics[0].partitions[0]


def latest(broker: BrokerProcess, topic: str, isolation: int = 1) -> int:
    request = pb.ListOffsetsRequest(replica_id=-1, isolation_level=isolation)
    request.topics.add(name=topic).partitions.add(partition=0, timestamp=-1)
    answer = client(broker).ListOffsets(request, timeout=15).topics[0].partitions[0]
    assert answer.error == pb.NONE, answer
    return int(answer.offset)
