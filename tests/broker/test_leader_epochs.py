"""OffsetsForLeaderEpoch: where each leader epoch ends, across a real leader change."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from annal.admin.client import AdminClient, AdminError
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.producer.producer import Producer
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

QUICK_SESSION = {"zookeeper.session.timeout.ms": "4000"}


def epoch_end(
    broker: BrokerProcess, topic: str, epoch: int, current: int = -1
) -> tuple[str, int, int]:
    request = pb.OffsetsForLeaderEpochRequest(
        replica_id=2,
        topics=[
            pb.TopicEpochs(
                name=topic,
                partitions=[
                    pb.PartitionEpoch(partition=0, current_leader_epoch=current, leader_epoch=epoch)
                ],
            )
        ],
    )
    with grpc.insecure_channel(broker.endpoint) as channel:
        answer = annal_pb2_grpc.AnnalStub(channel).OffsetsForLeaderEpoch(request, timeout=10)
    p = answer.topics[0].partitions[0]
    return pb.ErrorCode.Name(p.error), p.leader_epoch, p.end_offset


def produce(broker: BrokerProcess, topic: str, count: int) -> None:
    with Producer(broker.endpoint, retries=20) as producer:
        for i in range(count):
            producer.send(topic, value=b"%d" % i).result(60)


@pytest.mark.timeout(180)
def test_epoch_ends_across_a_leader_change(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    leader = broker_factory(1, settings=QUICK_SESSION)
    other = broker_factory(2, settings=QUICK_SESSION)
    with AdminClient(other.endpoint) as admin:
        admin.create_topic("epochs", assignment={0: [1]})
    produce(leader, "epochs", 3)
    assert epoch_end(leader, "epochs", 0) == ("NONE", 0, 3)
    assert epoch_end(leader, "epochs", 7) == ("NONE", -1, -1)  # unknown epoch
    assert epoch_end(leader, "epochs", 0, current=5)[0] == "UNKNOWN_LEADER_EPOCH"
    assert epoch_end(other, "epochs", 0)[0] == "NOT_LEADER_OR_FOLLOWER"
    assert epoch_end(leader, "nope", 0)[0] == "UNKNOWN_TOPIC_OR_PARTITION"

    # the leader crashes: the partition goes offline (epoch 1), then returns (epoch 2)
    leader.kill()
    with AdminClient(other.endpoint) as admin:

        def state() -> tuple[int, int]:
            try:
                (p,) = admin.describe_topics(["epochs"])[0].partitions
            except AdminError:
                return (-2, -2)
            return p.leader, p.leader_epoch

        wait_until(lambda: state() == (-1, 1), 60, "the partition offline at epoch 1")
        leader.start()
        wait_until(lambda: metadata_lists(leader.endpoint, [1, 2]), 60, "broker 1 back")
        wait_until(lambda: state() == (1, 2), 60, "broker 1 leading again at epoch 2")
    produce(leader, "epochs", 2)
    assert epoch_end(leader, "epochs", 0) == ("NONE", 0, 3)
    assert epoch_end(leader, "epochs", 1) == ("NONE", 0, 3)  # the largest epoch <= 1
    assert epoch_end(leader, "epochs", 2) == ("NONE", 2, 5)
    assert epoch_end(leader, "epochs", 2, current=0)[0] == "FENCED_LEADER_EPOCH"
