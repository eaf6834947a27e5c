"""One real broker: znodes as docs/architecture.md lays them out, data kept, bad input."""

from __future__ import annotations

import json
from collections.abc import Callable

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import ConsumerError, SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(settings={"message.max.bytes": "10000"})


def znode(zk: ZkClient, path: str) -> object:
    found = zk.get(path)
    assert found is not None, path
    return json.loads(found[0])


@pytest.mark.timeout(180)
def test_znodes_restart_and_bad_input(zk_connect: str, broker: BrokerProcess) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("kept", partitions=2, config={"retention.ms": "86400000"})
    with ZkClient(zk_connect) as zk:
        top = {"brokers", "controller", "controller_epoch", "cluster", "admin", "config"}
        assert set(zk.children("/")) >= top | {"isr_change_notification", "consumers"}
        cluster = znode(zk, "/cluster/id")
        assert cluster["version"] == "1" and len(cluster["id"]) == 22  # type: ignore[index]
        assert znode(zk, "/brokers/topics/kept") == {
            "version": 2, "partitions": {"0": [1], "1": [1]},
            "adding_replicas": {}, "removing_replicas": {},
        }  # fmt: skip
        wait_until(lambda: zk.get_partition_state("kept", 1) is not None, 30, "partition state")
        assert znode(zk, "/brokers/topics/kept/partitions/0/state") == {
            "controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1],
        }  # fmt: skip
        controller = znode(zk, "/controller")
        assert controller["version"] == 1 and controller["brokerid"] == 1  # type: ignore[index]
        assert zk.get("/controller_epoch") is not None
        assert znode(zk, "/config/topics/kept") == {
            "version": 1,
            "config": {"retention.ms": "86400000"},
        }
        broker_znode = znode(zk, "/brokers/ids/1")
        assert set(broker_znode) == {  # type: ignore[arg-type]
            "version", "host", "port", "endpoints", "listener_security_protocol_map", "rack",
            "timestamp",
        }  # fmt: skip

    with Producer(broker.endpoint) as producer:
        for i in range(100):
            producer.send("kept", value=b"v%d" % i, partition=i % 2)
        producer.flush(30)

    stub = annal_pb2_grpc.AnnalStub(grpc.insecure_channel(broker.endpoint))
    too_big = encode_batch([Record(0, 0, None, b"x" * 20_000)])
    response = stub.Produce(
        pb.ProduceRequest(acks=1, topics=[pb.TopicProduceData(name="kept", partitions=[
            pb.PartitionProduceData(partition=0, records=too_big)])]),
        timeout=10,
    )  # fmt: skip
    assert response.topics[0].partitions[0].error == pb.MESSAGE_TOO_LARGE
    with pytest.raises(grpc.RpcError) as info:
        stub.Fetch(pb.FetchRequest(max_bytes=-1), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    # a clean restart keeps everything
    assert broker.stop() == 0
    broker.start()
    with SimpleConsumer(broker.endpoint) as consumer:

        def leaders_back() -> bool:
            try:
                return consumer.partitions_for("kept") == [0, 1]
            except ConsumerError:
                return False  # still starting

        wait_until(leaders_back, 60, "leaders back")
        values = sorted(r.value or b"" for p in (0, 1) for r in consumer.iterate("kept", p, 0))
    assert values == sorted(b"v%d" % i for i in range(100))


@pytest.mark.timeout(120)
def test_auto_create_on_metadata(broker: BrokerProcess) -> None:
    stub = annal_pb2_grpc.AnnalStub(grpc.insecure_channel(broker.endpoint))
    plain = stub.Metadata(pb.MetadataRequest(topics=["fresh"]), timeout=10)
    assert plain.topics[0].error == pb.UNKNOWN_TOPIC_OR_PARTITION
    created = stub.Metadata(
        pb.MetadataRequest(topics=["fresh"], allow_auto_topic_creation=True), timeout=10
    )
    assert created.topics[0].name == "fresh" and len(created.topics[0].partitions) == 1


@pytest.mark.timeout(180)
def test_an_acknowledged_record_survives_its_leaders_death(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """acks=all answers once every in-sync replica holds the records, so the
    follower elected when the leader is SIGKILLed has all of them."""
    quick = {"zookeeper.session.timeout.ms": "4000"}
    brokers = {b.broker_id: b for b in (broker_factory(1, quick), broker_factory(2, quick))}
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic("pair", partitions=1, replication_factor=2)
        (partition,) = admin.describe_topics(["pair"])[0].partitions
    assert sorted(partition.replicas) == [1, 2] and sorted(partition.isr) == [1, 2]
    with Producer(brokers[partition.leader].endpoint, acks=-1) as producer:
        sent = [producer.send("pair", value=b"v%04d" % i) for i in range(500)]
        producer.flush(60)
        assert all(future.result(0).offset == i for i, future in enumerate(sent))
    follower = brokers[3 - partition.leader]
    brokers[partition.leader].kill()
    with AdminClient(follower.endpoint) as admin:
        wait_until(
            lambda: admin.describe_topics(["pair"])[0].partitions[0].leader == follower.broker_id,
            60,
            "the follower elected",
        )
    with SimpleConsumer(follower.endpoint) as consumer:
        values = [r.value for r in consumer.iterate("pair", 0, 0)]
    assert values == [b"v%04d" % i for i in range(500)]
