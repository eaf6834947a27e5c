"""The gRPC edge's admin adapters (broker/requests/grpc_admin.py): every field of
annal.proto's messages reaches the admin path's own types and comes back."""

from __future__ import annotations

import dataclasses
from typing import Any

from annal.broker.metadata_cache import LiveBroker, live_broker
from annal.broker.requests import admin_types as at
from annal.broker.requests import grpc_admin
from annal.v1 import annal_pb2 as pb
from annal.zk.layout import Endpoint
from google.protobuf.message import Message

# An own field whose protobuf counterpart has another shape: (own type, field) -> pb fields.
RESHAPED = {(at.BrokerConfigEntry, "value"): ("value", "has_value")}


def same(own: Any, message: Message) -> None:
    """``own`` holds what ``message`` holds, field by field, and ``message`` has no
    field that ``own`` lacks."""
    names = {f.name for f in dataclasses.fields(own)}
    covered = set(names)
    for name in names:
        covered.update(RESHAPED.get((type(own), name), ()))
        mine, theirs = getattr(own, name), getattr(message, name)
        if (type(own), name) == (at.BrokerConfigEntry, "value"):
            assert isinstance(message, pb.BrokerConfigEntry)
            assert mine == (message.value if message.has_value else None)
        elif isinstance(mine, list) and mine and dataclasses.is_dataclass(mine[0]):
            assert len(mine) == len(theirs), name
            for a, b in zip(mine, theirs, strict=True):
                same(a, b)
        elif isinstance(mine, list) and mine and isinstance(mine[0], list):
            assert mine == [list(r.brokers) for r in theirs], name
        elif isinstance(mine, dict) and mine and isinstance(next(iter(mine.values())), list):
            assert mine == {k: list(v.brokers) for k, v in theirs.items()}, name
        elif isinstance(mine, list | dict):
            assert mine == type(mine)(theirs), name
        elif isinstance(mine, str | None) and isinstance(theirs, str):
            assert (mine or "") == theirs, name
        else:
            assert mine == theirs, name
    assert {f.name for f in message.DESCRIPTOR.fields} <= covered, type(own)


def test_metadata() -> None:
    request = pb.MetadataRequest(topics=["a", "b"], allow_auto_topic_creation=True)
    same(grpc_admin.metadata_request(request), request)
    endpoint = Endpoint("SASL_SSL", "k1", 9094, "SASL_SSL")
    answer = at.MetadataResponse(
        brokers=[LiveBroker(1, "h1", 9092, "r1", "k1", 9093, (endpoint,)), LiveBroker(2, "h2", 1)],
        cluster_id="cid",
        controller_id=2,
        topics=[
            at.TopicMetadata("a", 0, [at.PartitionMetadata(0, 5, 1, 7, [1, 2], [1], [2])], True),
            at.TopicMetadata("b", 3),
        ],
    )
    response = grpc_admin.metadata_response(answer)
    assert [live_broker(b) for b in response.brokers] == answer.brokers
    assert response.cluster_id == "cid" and response.controller_id == 2
    for own, message in zip(answer.topics, response.topics, strict=True):
        same(own, message)


def test_topics_and_partitions() -> None:
    request = pb.CreateTopicsRequest(
        topics=[
            pb.CreatableTopic(
                name="t",
                num_partitions=3,
                replication_factor=2,
                assignment={0: pb.ReplicaList(brokers=[1, 2]), 1: pb.ReplicaList(brokers=[2])},
                configs={"retention.ms": "1"},
            ),
            pb.CreatableTopic(name="u", num_partitions=-1, replication_factor=-1),
        ],
        timeout_ms=500,
        validate_only=True,
    )
    same(grpc_admin.create_topics_request(request), request)
    results = [at.TopicResult("t"), at.TopicResult("u", 36, "exists")]
    same(
        at.CreateTopicsResponse(results),
        grpc_admin.create_topics_response(at.CreateTopicsResponse(results)),
    )
    grow = pb.CreatePartitionsRequest(
        topics=[
            pb.CreatePartitionsTopic(
                name="t", count=4, assignment=[pb.ReplicaList(brokers=[1, 3])]
            ),
            pb.CreatePartitionsTopic(name="u", count=2),
        ],
        timeout_ms=9,
        validate_only=True,
    )
    same(grpc_admin.create_partitions_request(grow), grow)
    grown = at.CreatePartitionsResponse(results)
    same(grown, grpc_admin.create_partitions_response(grown))
    delete = pb.DeleteTopicsRequest(topics=["t", "u"], timeout_ms=7)
    same(grpc_admin.delete_topics_request(delete), delete)
    deleted = at.DeleteTopicsResponse(results)
    same(deleted, grpc_admin.delete_topics_response(deleted))


def test_configs() -> None:
    request = pb.DescribeConfigsRequest(
        topics=["t"], include_defaults=True, brokers=["", "1"], include_synonyms=True
    )
    same(grpc_admin.describe_configs_request(request), request)
    answer = at.DescribeConfigsResponse(
        topics=[
            at.TopicConfigs("t", entries=[at.ConfigEntry("retention.ms", "1", True)]),
            at.TopicConfigs("u", 3, "unknown"),
        ],
        brokers=[
            at.BrokerConfigs(
                "1",
                entries=[
                    at.BrokerConfigEntry(
                        "log.retention.ms",
                        "5",
                        2,
                        False,
                        False,
                        [at.ConfigSynonym("log.retention.ms", "5", 2)],
                    ),
                    at.BrokerConfigEntry("ssl.key.password", None, 4, True, True),
                    at.BrokerConfigEntry("empty", "", 5),
                ],
            ),
            at.BrokerConfigs("2", 42, "Unexpected broker id"),
        ],
    )
    same(answer, grpc_admin.describe_configs_response(answer))
    alter = pb.AlterConfigsRequest(
        topics=[pb.TopicConfigChange(name="t", set={"a": "1"}, delete=["b"])],
        validate_only=True,
        brokers=[pb.BrokerConfigChange(name="", set={"c": "2"}, delete=["d", "e"])],
    )
    same(grpc_admin.alter_configs_request(alter), alter)
    altered = at.AlterConfigsResponse([at.TopicResult("t", 40, "bad")], [at.TopicResult("")])
    same(altered, grpc_admin.alter_configs_response(altered))


def test_elections_and_reassignments() -> None:
    elect = pb.ElectLeadersRequest(
        topic_partitions=[
            pb.TopicPartitions(topic="t", partitions=[0, 2]),
            pb.TopicPartitions(topic="u"),
        ],
        timeout_ms=11,
    )
    same(grpc_admin.elect_leaders_request(elect), elect)
    elected = at.ElectLeadersResponse(
        [at.ElectionResult("t", 0), at.ElectionResult("t", 2, 84, "not needed")], 31, "denied"
    )
    same(elected, grpc_admin.elect_leaders_response(elected))
    move = pb.AlterPartitionReassignmentsRequest(
        partitions=[pb.ReassignablePartition(topic="t", partition=1, replicas=[3, 1])]
    )
    same(grpc_admin.reassignments_request(move), move)
    moved = at.AlterPartitionReassignmentsResponse(
        [at.ReassignmentResult("t", 1), at.ReassignmentResult("t", 2, 60, "running")]
    )
    same(moved, grpc_admin.reassignments_response(moved))


def test_records_and_log_dirs() -> None:
    delete = pb.DeleteRecordsRequest(
        partitions=[pb.DeleteRecordsPartition(topic="t", partition=1, offset=-1)], timeout_ms=3
    )
    same(grpc_admin.delete_records_request(delete), delete)
    deleted = at.DeleteRecordsResponse(
        [at.DeleteRecordsResult("t", 1, 10), at.DeleteRecordsResult("t", 2, -1, 1, "out")]
    )
    same(deleted, grpc_admin.delete_records_response(deleted))
    dirs = pb.DescribeLogDirsRequest(topics=["t"])
    same(grpc_admin.log_dirs_request(dirs), dirs)
    described = at.DescribeLogDirsResponse(
        [
            at.LogDirDescription("/a", 0, [at.LogDirPartition("t", 0, 100, 2, False)], 10, 5),
            at.LogDirDescription("/b", 56),
        ]
    )
    same(described, grpc_admin.log_dirs_response(described))
