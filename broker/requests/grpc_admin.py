"""The gRPC edge's adapters for the admin path: annal.proto's Metadata, topic,
partition, config, election, reassignment, DeleteRecords and DescribeLogDirs
messages to and from the admin path's own types (``admin_types.py``)."""

from __future__ import annotations

from typing import cast

from annal.broker.metadata_cache import broker_message
from annal.broker.requests import admin_types as at
from annal.broker.requests.grpc_data import wire_code
from annal.v1 import annal_pb2 as pb

# -- Metadata --------------------------------------------------------------------------


def metadata_request(request: pb.MetadataRequest) -> at.MetadataRequest:
    return at.MetadataRequest(list(request.topics), request.allow_auto_topic_creation)


def metadata_response(answer: at.MetadataResponse) -> pb.MetadataResponse:
    return pb.MetadataResponse(
        brokers=[broker_message(b) for b in answer.brokers],
        cluster_id=answer.cluster_id,
        controller_id=answer.controller_id,
        topics=[
            pb.TopicMetadata(
                name=t.name,
                error=wire_code(t.error),
                is_internal=t.is_internal,
                partitions=[
                    pb.PartitionMetadata(
                        partition=p.partition,
                        error=wire_code(p.error),
                        leader=p.leader,
                        leader_epoch=p.leader_epoch,
                        replicas=p.replicas,
                        isr=p.isr,
                        offline_replicas=p.offline_replicas,
                    )
                    for p in t.partitions
                ],
            )
            for t in answer.topics
        ],
    )


# -- CreateTopics, CreatePartitions, DeleteTopics ---------------------------------------


def create_topics_request(request: pb.CreateTopicsRequest) -> at.CreateTopicsRequest:
    return at.CreateTopicsRequest(
        [
            at.CreatableTopic(
                t.name,
                t.num_partitions,
                t.replication_factor,
                {p: list(r.brokers) for p, r in t.assignment.items()},
                dict(t.configs),
            )
            for t in request.topics
        ],
        request.timeout_ms,
        request.validate_only,
    )


def create_topics_response(answer: at.CreateTopicsResponse) -> pb.CreateTopicsResponse:
    return pb.CreateTopicsResponse(topics=_topic_results(answer.topics))


def create_partitions_request(request: pb.CreatePartitionsRequest) -> at.CreatePartitionsRequest:
    return at.CreatePartitionsRequest(
        [
            at.CreatePartitionsTopic(t.name, t.count, [list(r.brokers) for r in t.assignment])
            for t in request.topics
        ],
        request.timeout_ms,
        request.validate_only,
    )


def create_partitions_response(answer: at.CreatePartitionsResponse) -> pb.CreatePartitionsResponse:
    return pb.CreatePartitionsResponse(topics=_topic_results(answer.topics))


def delete_topics_request(request: pb.DeleteTopicsRequest) -> at.DeleteTopicsRequest:
    return at.DeleteTopicsRequest(list(request.topics), request.timeout_ms)


def delete_topics_response(answer: at.DeleteTopicsResponse) -> pb.DeleteTopicsResponse:
    return pb.DeleteTopicsResponse(topics=_topic_results(answer.topics))


# -- DescribeConfigs, AlterConfigs ----------------------------------------------------------


def describe_configs_request(request: pb.DescribeConfigsRequest) -> at.DescribeConfigsRequest:
    return at.DescribeConfigsRequest(
        list(request.topics),
        request.include_defaults,
        list(request.brokers),
        request.include_synonyms,
    )


def describe_configs_response(answer: at.DescribeConfigsResponse) -> pb.DescribeConfigsResponse:
    return pb.DescribeConfigsResponse(
        topics=[
            pb.TopicConfigs(
                name=t.name,
                error=wire_code(t.error),
                error_message=t.error_message,
                entries=[
                    pb.ConfigEntry(name=e.name, value=e.value, is_default=e.is_default)
                    for e in t.entries
                ],
            )
            for t in answer.topics
        ],
        brokers=[
            pb.BrokerConfigs(
                name=b.name,
                error=wire_code(b.error),
                error_message=b.error_message,
                entries=[
                    pb.BrokerConfigEntry(
                        name=e.name,
                        value=e.value or "",
                        has_value=e.value is not None,
                        source=_source(e.source),
                        read_only=e.read_only,
                        sensitive=e.sensitive,
                        synonyms=[
                            pb.ConfigSynonym(
                                name=s.name, value=s.value or "", source=_source(s.source)
                            )
                            for s in e.synonyms
                        ],
                    )
                    for e in b.entries
                ],
            )
            for b in answer.brokers
        ],
    )


def alter_configs_request(request: pb.AlterConfigsRequest) -> at.AlterConfigsRequest:
    return at.AlterConfigsRequest(
        [at.ConfigChange(c.name, dict(c.set), list(c.delete)) for c in request.topics],
        request.validate_only,
        [at.ConfigChange(c.name, dict(c.set), list(c.delete)) for c in request.brokers],
    )


def alter_configs_response(answer: at.AlterConfigsResponse) -> pb.AlterConfigsResponse:
    return pb.AlterConfigsResponse(
        topics=_topic_results(answer.topics), brokers=_topic_results(answer.brokers)
    )


# -- ElectLeaders, AlterPartitionReassignments -------------------------------------------


def elect_leaders_request(request: pb.ElectLeadersRequest) -> at.ElectLeadersRequest:
    return at.ElectLeadersRequest(
        [at.TopicPartitions(e.topic, list(e.partitions)) for e in request.topic_partitions],
        request.timeout_ms,
    )


def elect_leaders_response(answer: at.ElectLeadersResponse) -> pb.ElectLeadersResponse:
    return pb.ElectLeadersResponse(
        results=[
            pb.ElectionResult(
                topic=r.topic,
                partition=r.partition,
                error=wire_code(r.error),
                error_message=r.error_message,
            )
            for r in answer.results
        ],
        error=wire_code(answer.error),
        error_message=answer.error_message,
    )


def reassignments_request(
    request: pb.AlterPartitionReassignmentsRequest,
) -> at.AlterPartitionReassignmentsRequest:
    return at.AlterPartitionReassignmentsRequest(
        [
            at.ReassignablePartition(p.topic, p.partition, list(p.replicas))
            for p in request.partitions
        ]
    )


def reassignments_response(
    answer: at.AlterPartitionReassignmentsResponse,
) -> pb.AlterPartitionReassignmentsResponse:
    return pb.AlterPartitionReassignmentsResponse(
        results=[
            pb.ReassignmentResult(
                topic=r.topic,
                partition=r.partition,
                error=wire_code(r.error),
                error_message=r.error_message,
            )
            for r in answer.results
        ]
    )


# -- DeleteRecords, DescribeLogDirs -------------------------------------------------------


def delete_records_request(request: pb.DeleteRecordsRequest) -> at.DeleteRecordsRequest:
    return at.DeleteRecordsRequest(
        [at.DeleteRecordsPartition(p.topic, p.partition, p.offset) for p in request.partitions],
        request.timeout_ms,
    )


def delete_records_response(answer: at.DeleteRecordsResponse) -> pb.DeleteRecordsResponse:
    return pb.DeleteRecordsResponse(
        results=[
            pb.DeleteRecordsResult(
                topic=r.topic,
                partition=r.partition,
                low_watermark=r.low_watermark,
                error=wire_code(r.error),
                error_message=r.error_message,
            )
            for r in answer.results
        ]
    )


def log_dirs_request(request: pb.DescribeLogDirsRequest) -> at.DescribeLogDirsRequest:
    return at.DescribeLogDirsRequest(list(request.topics))


def log_dirs_response(answer: at.DescribeLogDirsResponse) -> pb.DescribeLogDirsResponse:
    return pb.DescribeLogDirsResponse(
        log_dirs=[
            pb.LogDirDescription(
                path=d.path,
                error=wire_code(d.error),
                total_bytes=d.total_bytes,
                usable_bytes=d.usable_bytes,
                partitions=[
                    pb.LogDirPartition(
                        topic=p.topic,
                        partition=p.partition,
                        size=p.size,
                        offset_lag=p.offset_lag,
                        is_future=p.is_future,
                    )
                    for p in d.partitions
                ],
            )
            for d in answer.log_dirs
        ]
    )


def _topic_results(results: list[at.TopicResult]) -> list[pb.TopicResult]:
    return [
        pb.TopicResult(name=r.name, error=wire_code(r.error), error_message=r.error_message)
        for r in results
    ]



def _source(number: int) -> pb.ConfigSource.ValueType:
    """``annal.v1.ConfigSource`` numbers are Kafka's."""
    return cast(pb.ConfigSource.ValueType, number)
