"""The gRPC edge's adapters for the group services: annal.proto's FindCoordinator,
OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups, DeleteGroup and
DescribeGroup messages to and from the group services' own types
(``group_types.py``)."""

from __future__ import annotations

from annal.broker.requests import group_types as gt
from annal.broker.requests.grpc_data import wire_code
from annal.v1 import annal_pb2 as pb

# -- FindCoordinator -------------------------------------------------------------------


def find_coordinator_request(request: pb.FindCoordinatorRequest) -> gt.FindCoordinatorRequest:
    return gt.FindCoordinatorRequest(request.group, request.key_type)


def find_coordinator_response(answer: gt.FindCoordinatorResponse) -> pb.FindCoordinatorResponse:
    response = pb.FindCoordinatorResponse(
        error=wire_code(answer.error), error_message=answer.error_message
    )
    found = answer.coordinator
    if found is not None:
        response.coordinator.CopyFrom(pb.Broker(id=found.node_id, host=found.host, port=found.port))
    return response


# -- OffsetCommit and TxnOffsetCommit ----------------------------------------------------


def _commit_topics(topics: list[pb.OffsetCommitTopic]) -> list[gt.OffsetCommitTopic]:
    return [
        gt.OffsetCommitTopic(
            t.name,
            [
                gt.OffsetCommitPartition(p.partition, p.offset, p.leader_epoch, p.metadata)
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def offset_commit_request(request: pb.OffsetCommitRequest) -> gt.OffsetCommitRequest:
    return gt.OffsetCommitRequest(
        request.group, _commit_topics(list(request.topics)), request.timeout_ms
    )


def txn_offset_commit_request(request: pb.TxnOffsetCommitRequest) -> gt.TxnOffsetCommitRequest:
    return gt.TxnOffsetCommitRequest(
        request.transactional_id,
        request.group,
        request.producer_id,
        request.producer_epoch,
        _commit_topics(list(request.topics)),
        request.member_id,
        request.generation_id,
        request.group_instance_id or None,
    )


def offset_commit_response(answer: gt.OffsetCommitResponse) -> pb.OffsetCommitResponse:
    response = pb.OffsetCommitResponse()
    for t in answer.topics:
        out = response.topics.add(name=t.name)
        for p in t.partitions:
            out.partitions.add(
                partition=p.partition_index, error=wire_code(p.error), error_message=p.error_message
            )
    return response


# -- OffsetFetch -----------------------------------------------------------------------


def offset_fetch_request(request: pb.OffsetFetchRequest) -> gt.OffsetFetchRequest:
    return gt.OffsetFetchRequest(
        request.group,
        [gt.OffsetFetchTopic(t.topic, list(t.partitions)) for t in request.topics],
    )


def offset_fetch_response(answer: gt.OffsetFetchResponse) -> pb.OffsetFetchResponse:
    response = pb.OffsetFetchResponse(
        error=wire_code(answer.error), error_message=answer.error_message
    )
    for t in answer.topics:
        out = response.topics.add(name=t.name)
        for p in t.partitions:
            out.partitions.add(
                partition=p.partition_index,
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch,
                metadata=p.metadata,
                error=wire_code(p.error),
            )
    return response


# -- ListGroups, DeleteGroup, DescribeGroup ----------------------------------------------


def list_groups_request(request: pb.ListGroupsRequest) -> gt.ListGroupsRequest:
    return gt.ListGroupsRequest()  # annal.proto's ListGroups filters no states


def list_groups_response(answer: gt.ListGroupsResponse) -> pb.ListGroupsResponse:
    return pb.ListGroupsResponse(
        groups=[
            pb.GroupListing(group=g.group_id, protocol_type=g.protocol_type, state=g.group_state)
            for g in answer.groups
        ]
    )


def delete_group_request(request: pb.DeleteGroupRequest) -> gt.DeleteGroupRequest:
    return gt.DeleteGroupRequest(request.group)


def delete_group_response(answer: gt.DeleteGroupResponse) -> pb.DeleteGroupResponse:
    return pb.DeleteGroupResponse(error=wire_code(answer.error), error_message=answer.error_message)


def describe_group_request(request: pb.DescribeGroupRequest) -> gt.DescribeGroupRequest:
    return gt.DescribeGroupRequest(request.group)


def describe_group_response(answer: gt.DescribeGroupResponse) -> pb.DescribeGroupResponse:
    return pb.DescribeGroupResponse(
        error=wire_code(answer.error),
        error_message=answer.error_message,
        state=answer.group_state,
        protocol_type=answer.protocol_type,
        protocol=answer.protocol_data,
        members=[
            pb.GroupMemberInfo(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id or "",
                client_id=m.client_id,
                client_host=m.client_host,
                assignment=[
                    pb.TopicPartitions(topic=a.topic, partitions=a.partitions) for a in m.assignment
                ],
            )
            for m in answer.members
        ],
    )
