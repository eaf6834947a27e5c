"""The gRPC edge's adapters for the group and producer services
(``broker/requests/grpc_groups.py``, ``grpc_producers.py``): a message of
annal.proto made into the services' own type and back is the same message,
every field kept (the samples set every field, which ``filled`` checks)."""

from __future__ import annotations

from typing import cast

import pytest
from annal.broker.requests import group_types as gt
from annal.broker.requests import grpc_groups, grpc_producers
from annal.broker.requests import producer_types as pt
from annal.v1 import annal_pb2 as pb
from google.protobuf.message import Message

AUTH = pb.TOPIC_AUTHORIZATION_FAILED


def _code(number: int) -> pb.ErrorCode.ValueType:
    return cast(pb.ErrorCode.ValueType, number)


def filled(message: Message) -> None:
    """Every field of ``message`` and of the messages in it is set (not its default)."""
    assert len(message.ListFields()) == len(message.DESCRIPTOR.fields), message
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        for inner in value if descriptor.is_repeated else [value]:
            filled(inner)


def commit_topics() -> list[pb.OffsetCommitTopic]:
    return [
        pb.OffsetCommitTopic(
            name="orders",
            partitions=[
                pb.OffsetCommitPartition(partition=3, offset=42, leader_epoch=7, metadata="m"),
                pb.OffsetCommitPartition(partition=1, offset=9, leader_epoch=2, metadata="n"),
            ],
        ),
        pb.OffsetCommitTopic(
            name="audit",
            partitions=[
                pb.OffsetCommitPartition(partition=5, offset=1, leader_epoch=1, metadata="x")
            ],
        ),
    ]


def _commit_back(topics: list[gt.OffsetCommitTopic]) -> list[pb.OffsetCommitTopic]:
    return [
        pb.OffsetCommitTopic(
            name=t.name,
            partitions=[
                pb.OffsetCommitPartition(
                    partition=p.partition_index,
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch,
                    metadata=p.committed_metadata,
                )
                for p in t.partitions
            ],
        )
        for t in topics
    ]


# -- requests: pb -> own -> pb ------------------------------------------------------------


def test_find_coordinator_request() -> None:
    sent = pb.FindCoordinatorRequest(group="g", key_type=1)
    filled(sent)
    own = grpc_groups.find_coordinator_request(sent)
    assert own == gt.FindCoordinatorRequest("g", gt.TRANSACTION_KEY)
    assert pb.FindCoordinatorRequest(group=own.key, key_type=own.key_type) == sent


def test_offset_commit_request() -> None:
    sent = pb.OffsetCommitRequest(group="g", topics=commit_topics(), timeout_ms=5000)
    filled(sent)
    own = grpc_groups.offset_commit_request(sent)
    assert own.topics[0].partitions[0] == gt.OffsetCommitPartition(3, 42, 7, "m")
    back = pb.OffsetCommitRequest(
        group=own.group_id, topics=_commit_back(own.topics), timeout_ms=own.timeout_ms
    )
    assert back == sent


@pytest.mark.parametrize("instance", ["static-1", ""])
def test_txn_offset_commit_request(instance: str) -> None:
    sent = pb.TxnOffsetCommitRequest(
        transactional_id="tx", group="g", producer_id=11, producer_epoch=3,
        topics=commit_topics(), member_id="m-1", generation_id=4, group_instance_id=instance,
    )  # fmt: skip
    if instance:
        filled(sent)
    own = grpc_groups.txn_offset_commit_request(sent)
    assert own.group_instance_id == (instance or None)
    back = pb.TxnOffsetCommitRequest(
        transactional_id=own.transactional_id,
        group=own.group_id,
        producer_id=own.producer_id,
        producer_epoch=own.producer_epoch,
        topics=_commit_back(own.topics),
        member_id=own.member_id,
        generation_id=own.generation_id,
        group_instance_id=own.group_instance_id or "",
    )
    assert back == sent


def test_offset_fetch_request() -> None:
    sent = pb.OffsetFetchRequest(
        group="g",
        topics=[
            pb.TopicPartitions(topic="orders", partitions=[0, 2]),
            pb.TopicPartitions(topic="audit", partitions=[1]),
        ],
    )
    filled(sent)
    own = grpc_groups.offset_fetch_request(sent)
    assert not own.require_stable  # annal.proto's OffsetFetch asks for no stability
    back = pb.OffsetFetchRequest(
        group=own.group_id,
        topics=[
            pb.TopicPartitions(topic=t.name, partitions=t.partition_indexes) for t in own.topics
        ],
    )
    assert back == sent


def test_list_delete_describe_requests() -> None:
    assert grpc_groups.list_groups_request(pb.ListGroupsRequest()) == gt.ListGroupsRequest()
    deleted = grpc_groups.delete_group_request(pb.DeleteGroupRequest(group="g"))
    assert pb.DeleteGroupRequest(group=deleted.group_id) == pb.DeleteGroupRequest(group="g")
    described = grpc_groups.describe_group_request(pb.DescribeGroupRequest(group="h"))
    assert pb.DescribeGroupRequest(group=described.group_id) == pb.DescribeGroupRequest(group="h")


@pytest.mark.parametrize(
    "sent",
    [
        pb.InitProducerIdRequest(
            transactional_id="tx", transaction_timeout_ms=60_000, producer_id=8, producer_epoch=2
        ),
        pb.InitProducerIdRequest(transactional_id="", transaction_timeout_ms=0),
        pb.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1, producer_id=4),
    ],
)
def test_init_producer_id_request(sent: pb.InitProducerIdRequest) -> None:
    own = grpc_producers.init_producer_id_request(sent)
    back = pb.InitProducerIdRequest(
        transactional_id=own.transactional_id, transaction_timeout_ms=own.transaction_timeout_ms
    )
    if own.producer_id != pt.NO_PRODUCER_ID:
        back.producer_id = own.producer_id
        # an epoch left unset beside an id is annal.proto's 0, as the service reads it
        assert own.producer_epoch == sent.producer_epoch
        if sent.HasField("producer_epoch"):
            back.producer_epoch = own.producer_epoch
    else:
        assert own.producer_epoch == pt.NO_PRODUCER_EPOCH
    assert back == sent


def test_describe_producers_request() -> None:
    sent = pb.DescribeProducersRequest(
        topics=[
            pb.TopicPartitions(topic="t", partitions=[0, 1]),
            pb.TopicPartitions(topic="u", partitions=[2]),
            pb.TopicPartitions(topic="t", partitions=[3]),
        ]
    )
    filled(sent)
    own = grpc_producers.describe_producers_request(sent)
    back = pb.DescribeProducersRequest(
        topics=[
            pb.TopicPartitions(topic=t.name, partitions=t.partition_indexes) for t in own.topics
        ]
    )
    assert back == sent


# -- answers: pb -> own -> pb -------------------------------------------------------------


def test_find_coordinator_response() -> None:
    found = pb.FindCoordinatorResponse(
        error=pb.NONE, error_message="", coordinator=pb.Broker(id=2, host="b2", port=9092)
    )
    refused = pb.FindCoordinatorResponse(
        error=pb.COORDINATOR_NOT_AVAILABLE, error_message="ask again"
    )
    for sent in (found, refused):
        c = sent.coordinator
        own = gt.FindCoordinatorResponse(
            sent.error,
            sent.error_message,
            gt.Coordinator(c.id, c.host, c.port) if sent.HasField("coordinator") else None,
        )
        back = grpc_groups.find_coordinator_response(own)
        assert back == sent
        assert back.HasField("coordinator") == sent.HasField("coordinator")


def test_offset_commit_response() -> None:
    sent = pb.OffsetCommitResponse(
        topics=[
            pb.OffsetCommitTopicResult(
                name="orders",
                partitions=[
                    pb.PartitionResult(partition=3, error=AUTH, error_message="no"),
                    pb.PartitionResult(
                        partition=1, error=pb.REQUEST_TIMED_OUT, error_message="slow"
                    ),
                ],
            )
        ]
    )
    filled(sent)
    own = gt.OffsetCommitResponse(
        [
            gt.OffsetCommitTopicResponse(
                t.name,
                [
                    gt.OffsetCommitPartitionResponse(p.partition, p.error, p.error_message)
                    for p in t.partitions
                ],
            )
            for t in sent.topics
        ]
    )
    assert grpc_groups.offset_commit_response(own) == sent


def test_offset_fetch_response() -> None:
    sent = pb.OffsetFetchResponse(
        error=pb.COORDINATOR_LOAD_IN_PROGRESS,
        error_message="loading",
        topics=[
            pb.OffsetFetchTopic(
                name="orders",
                partitions=[
                    pb.OffsetFetchPartition(
                        partition=4, offset=5, leader_epoch=1, metadata="m", error=AUTH
                    )
                ],
            )
        ],
    )
    filled(sent)
    own = gt.OffsetFetchResponse(
        sent.error,
        sent.error_message,
        [
            gt.OffsetFetchTopicResponse(
                t.name,
                [
                    gt.OffsetFetchPartitionResponse(
                        p.partition, p.offset, p.leader_epoch, p.metadata, p.error
                    )
                    for p in t.partitions
                ],
            )
            for t in sent.topics
        ],
    )
    assert grpc_groups.offset_fetch_response(own) == sent


def test_list_and_delete_group_responses() -> None:
    listed = pb.ListGroupsResponse(
        groups=[pb.GroupListing(group="g", protocol_type="consumer", state="Stable")]
    )
    filled(listed)
    own = gt.ListGroupsResponse(
        groups=[gt.ListedGroup(g.group, g.protocol_type, g.state) for g in listed.groups]
    )
    assert grpc_groups.list_groups_response(own) == listed
    deleted = pb.DeleteGroupResponse(error=pb.NON_EMPTY_GROUP, error_message="live members")
    filled(deleted)
    own_deleted = gt.DeleteGroupResponse(deleted.error, deleted.error_message)
    assert grpc_groups.delete_group_response(own_deleted) == deleted


def test_describe_group_response() -> None:
    sent = pb.DescribeGroupResponse(
        error=pb.COORDINATOR_LOAD_IN_PROGRESS, error_message="loading", state="Stable",
        protocol_type="consumer", protocol="range",
        members=[
            pb.GroupMemberInfo(
                member_id="m-1", group_instance_id="static", client_id="c", client_host="/h",
                assignment=[pb.TopicPartitions(topic="t", partitions=[0, 2])],
            ),
            pb.GroupMemberInfo(member_id="m-2", client_id="d", client_host="/i"),
        ],
    )  # fmt: skip
    filled(sent.members[0])
    own = gt.DescribeGroupResponse(
        sent.error,
        sent.error_message,
        sent.state,
        sent.protocol_type,
        sent.protocol,
        [
            gt.DescribedGroupMember(
                m.member_id,
                m.group_instance_id or None,
                m.client_id,
                m.client_host,
                [gt.AssignedPartitions(a.topic, list(a.partitions)) for a in m.assignment],
            )
            for m in sent.members
        ],
    )
    assert grpc_groups.describe_group_response(own) == sent


def test_init_producer_id_response() -> None:
    sent = pb.InitProducerIdResponse(
        error=pb.PRODUCER_FENCED, producer_id=7, producer_epoch=3, error_message="fenced"
    )
    filled(sent)
    own = pt.InitProducerIdResponse(
        sent.error, sent.producer_id, sent.producer_epoch, sent.error_message
    )
    assert grpc_producers.init_producer_id_response(own) == sent


def test_describe_producers_response() -> None:
    state = pb.ProducerState(
        producer_id=5, producer_epoch=1, last_sequence=9, last_timestamp_ms=1_700_000_000_000,
        coordinator_epoch=2, current_txn_start_offset=40,
    )  # fmt: skip
    sent = pb.DescribeProducersResponse(
        partitions=[
            pb.PartitionProducers(
                topic="t", partition=0, error=pb.NONE, error_message="", producers=[state]
            ),
            pb.PartitionProducers(
                topic="t", partition=1, error=pb.NOT_LEADER_OR_FOLLOWER, error_message="elsewhere"
            ),
            pb.PartitionProducers(topic="u", partition=0, error=AUTH, error_message="no Read"),
        ]
    )
    filled(state)
    own = pt.DescribeProducersResponse()
    for p in sent.partitions:  # grouped under the request's topics, in its order
        if not own.topics or own.topics[-1].name != p.topic:
            own.topics.append(pt.TopicProducers(p.topic))
        own.topics[-1].partitions.append(
            pt.PartitionProducers(
                p.partition,
                p.error,
                p.error_message,
                [
                    pt.ProducerState(
                        s.producer_id,
                        s.producer_epoch,
                        s.last_sequence,
                        s.last_timestamp_ms,
                        s.coordinator_epoch,
                        s.current_txn_start_offset,
                    )
                    for s in p.producers
                ],
            )
        )
    assert [t.name for t in own.topics] == ["t", "u"]
    assert grpc_producers.describe_producers_response(own) == sent
    assert _code(own.topics[0].partitions[1].error) == pb.NOT_LEADER_OR_FOLLOWER
