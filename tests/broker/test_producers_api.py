"""DescribeProducers (KIP-664) on a real replica manager and logs: a leader answers
its producer state (epochs, last sequences and timestamps, coordinator epochs,
open transactions' first offsets), and refuses as Kafka's KafkaApis refuses:
illegal names, no Read on the topic, partitions not led here or nowhere."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.broker.metadata_cache import MetadataSnapshot, PartitionView
from annal.broker.producers_api import ProducersApi
from annal.broker.replication.partition import LeaderAndIsrState
from annal.broker.replication.replica_manager import ReplicaManager
from annal.broker.requests import producer_types as pt
from annal.broker.security.authorization import RequestAuthorizer
from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    ResourcePattern,
    ResourceType,
)
from annal.security.authorizer import AclCache, Authorizer
from annal.security.session import UNAUTHENTICATED, Session
from annal.storage.files import TopicPartition
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch

from annal import errors

pytestmark = pytest.mark.timeout(60)

TP = TopicPartition("t", 0)
FOLLOWED = TopicPartition("t", 1)
TS = int(time.time() * 1000)
VIEW = PartitionView(2, 1, (1, 2), (1, 2))
METADATA = MetadataSnapshot(topics={"t": {0: VIEW, 1: VIEW, 2: VIEW}})


def state(tp: TopicPartition, leader: int) -> LeaderAndIsrState:
    return LeaderAndIsrState(tp.topic, tp.partition, 1, leader, 1, (1, 2), (1, 2), 0)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([tmp_path], broker_id=1, settings=LogManagerConfig(cleaner_enable=False))
    logs.startup()
    manager = ReplicaManager(1, logs, lambda topic: {})
    manager.become_leader_or_follower([state(TP, 1), state(FOLLOWED, 2)])
    try:
        yield manager
    finally:
        logs.shutdown()


def batch(pid: int, seq: int, n: int, transactional: bool, epoch: int = 0) -> bytes:
    records = [Record(i, TS + i, None, b"v") for i in range(n)]
    return encode_batch(
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def ask(*partitions: tuple[str, list[int]]) -> pt.DescribeProducersRequest:
    return pt.DescribeProducersRequest([pt.DescribeProducersTopic(t, ps) for t, ps in partitions])


def answered(answer: pt.DescribeProducersResponse) -> list[tuple[str, pt.PartitionProducers]]:
    """Each partition's answer with its topic, in the order asked."""
    return [(t.name, p) for t in answer.topics for p in t.partitions]


def test_the_leader_describes_its_producers(replicas: ReplicaManager) -> None:
    api = ProducersApi(replicas, metadata=lambda: METADATA)
    assert replicas.append(TP, batch(5, 0, 3, False)).error is errors.NONE  # 0-2, idempotent
    assert replicas.append(TP, batch(9, 0, 2, True, epoch=4)).error is errors.NONE  # 3-4, open
    assert replicas.append(TP, batch(5, 3, 1, False)).error is errors.NONE  # 5
    ((topic, answer),) = answered(api.describe_producers(ask(("t", [0])), UNAUTHENTICATED))
    assert (topic, answer.partition_index, answer.error) == ("t", 0, errors.NONE.number)
    assert answer.active_producers == [
        pt.ProducerState(
            producer_id=5, producer_epoch=0, last_sequence=3, last_timestamp=TS,
            coordinator_epoch=-1, current_txn_start_offset=-1,
        ),
        pt.ProducerState(
            producer_id=9, producer_epoch=4, last_sequence=1, last_timestamp=TS + 1,
            coordinator_epoch=-1, current_txn_start_offset=3,
        ),
    ]  # fmt: skip
    # the marker closes the transaction and records its coordinator's epoch
    assert replicas.append_control(TP, 9, 4, False, 7).error is errors.NONE
    ((_, after),) = answered(api.describe_producers(ask(("t", [0])), UNAUTHENTICATED))
    nine = after.active_producers[1]
    assert (nine.producer_id, nine.current_txn_start_offset, nine.coordinator_epoch) == (9, -1, 7)


def test_partitions_not_led_here_are_refused(replicas: ReplicaManager) -> None:
    api = ProducersApi(replicas, metadata=lambda: METADATA)
    request = ask(("t", [1, 2, 3, -1]), ("nowhere", [0]), ("bad name!", [0]), ("t", [0]))
    response = api.describe_producers(request, UNAUTHENTICATED)
    assert [t.name for t in response.topics] == ["t", "nowhere", "bad name!", "t"]
    answer = [p for _, p in answered(response)]
    assert [(t, p.partition_index, errors.from_wire(p.error)) for t, p in answered(response)] == [
        ("t", 1, errors.NOT_LEADER_OR_FOLLOWER),  # a follower here
        ("t", 2, errors.NOT_LEADER_OR_FOLLOWER),  # led by another broker
        ("t", 3, errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", -1, errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("nowhere", 0, errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad name!", 0, errors.INVALID_TOPIC_EXCEPTION),
        ("t", 0, errors.NONE),
    ]
    assert "broker 1 does not lead t-1" in answer[0].error_message
    assert "illegal topic name" in answer[5].error_message
    # without a metadata cache, only what is hosted here is known
    bare = ProducersApi(replicas).describe_producers(ask(("t", [1, 2])), UNAUTHENTICATED)
    assert [errors.from_wire(p.error) for _, p in answered(bare)] == [
        errors.NOT_LEADER_OR_FOLLOWER,
        errors.UNKNOWN_TOPIC_OR_PARTITION,
    ]


def test_read_on_the_topic_is_needed(replicas: ReplicaManager) -> None:
    cache = AclCache()
    api = ProducersApi(replicas, RequestAuthorizer(Authorizer(cache)), lambda: METADATA)
    bob = Session(KafkaPrincipal.parse("User:bob"), "10.0.0.7", "GRPC")
    ((_, refused),) = answered(api.describe_producers(ask(("t", [0])), bob))
    assert errors.from_wire(refused.error) is errors.TOPIC_AUTHORIZATION_FAILED
    assert refused.error_message == "User:bob may not Read Topic:t"
    assert refused.active_producers == []
    cache.replace(
        ResourcePattern.literal(ResourceType.TOPIC, "t"),
        [AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)],
    )
    ((_, allowed),) = answered(api.describe_producers(ask(("t", [0])), bob))
    assert allowed.error == errors.NONE.number
