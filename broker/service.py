"""The client-facing gRPC service (``annal.v1.Annal``).

Metadata is answered from ZooKeeper, the source of truth in this era of
Kafka's design.  Request-level problems are gRPC statuses (INVALID_ARGUMENT
with a message); per-topic and per-partition problems are Kafka error codes
in the response.  Record data passes through as raw batch bytes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc
from annal.controller.election import assign_replicas
from annal.storage.config import LogConfig
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.layout import LayoutError, TopicAssignment, check_topic_name

if TYPE_CHECKING:
    from annal.broker.server import BrokerServer


class AnnalService(annal_pb2_grpc.AnnalServicer):
    """Thread-safe: handlers share nothing but the broker's ZooKeeper client."""

    def __init__(self, broker: BrokerServer) -> None:
        self._broker = broker

    def Metadata(
        self, request: pb.MetadataRequest, context: grpc.ServicerContext
    ) -> pb.MetadataResponse:
        zk = self._broker.zk
        for requested in request.topics:
            try:
                check_topic_name(requested)
            except LayoutError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        brokers = zk.get_brokers()
        live = {b.broker_id for b in brokers}
        controller = zk.get_controller()
        response = pb.MetadataResponse(
            brokers=[
                pb.Broker(id=b.broker_id, host=b.host, port=b.port, rack=b.rack or "")
                for b in brokers
            ],
            cluster_id=self._broker.cluster_id or "",
            controller_id=-1 if controller is None else controller,
        )
        names = list(request.topics) or zk.get_topics()
        for name in names:
            found = zk.get_topic_assignment(name)
            if (
                found is None
                and request.allow_auto_topic_creation
                and self._broker.config.auto_create_topics_enable
            ):
                # auto.create.topics.enable: create with the broker defaults; leaders
                # follow shortly (clients see LEADER_NOT_AVAILABLE meanwhile and retry)
                self._create_topic(
                    pb.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1), False
                )
                found = zk.get_topic_assignment(name)
            if found is None:
                response.topics.append(
                    pb.TopicMetadata(name=name, error=pb.UNKNOWN_TOPIC_OR_PARTITION)
                )
                continue
            assignment, _ = found
            topic = pb.TopicMetadata(name=name, is_internal=name.startswith("__"))
            for partition, replicas in sorted(assignment.partitions.items()):
                state = zk.get_partition_state(name, partition)
                meta = pb.PartitionMetadata(
                    partition=partition,
                    replicas=list(replicas),
                    offline_replicas=[r for r in replicas if r not in live],
                    leader=-1,
                )
                if state is not None:
                    meta.leader = state[0].leader
                    meta.leader_epoch = state[0].leader_epoch
                    meta.isr.extend(state[0].isr)
                if meta.leader not in live:
                    meta.leader = -1
                    meta.error = pb.LEADER_NOT_AVAILABLE
                topic.partitions.append(meta)
            response.topics.append(topic)
        return response

    # -- produce, fetch, offsets -------------------------------------------------

    def Produce(
        self, request: pb.ProduceRequest, context: grpc.ServicerContext
    ) -> pb.ProduceResponse:
        replicas = self._broker.replicas
        response = pb.ProduceResponse()
        for topic in request.topics:
            out = pb.TopicProduceResponse(name=topic.name)
            for data in topic.partitions:
                if request.acks not in (-1, 0, 1):
                    out.partitions.append(
                        pb.PartitionProduceResponse(
                            partition=data.partition,
                            error=pb.INVALID_REQUIRED_ACKS,
                            base_offset=-1,
                            error_message=f"acks must be -1, 0 or 1, not {request.acks}",
                        )
                    )
                    continue
                result = replicas.append(TopicPartition(topic.name, data.partition), data.records)
                out.partitions.append(
                    pb.PartitionProduceResponse(
                        partition=data.partition,
                        error=pb.ErrorCode.Value(result.error),
                        base_offset=result.base_offset,
                        log_append_time_ms=result.log_append_time_ms,
                        log_start_offset=result.log_start_offset,
                        error_message=result.message,
                    )
                )
            response.topics.append(out)
        return response

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> pb.FetchResponse:
        if request.max_bytes < 0 or request.min_bytes < 0 or request.max_wait_ms < 0:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "max_bytes, min_bytes and max_wait_ms must be >= 0",
            )
        response = self._fetch_once(request)
        if request.max_wait_ms > 0 and _size(response) < max(request.min_bytes, 1):
            self._broker.replicas.wait_for_data(
                lambda: self._available(request) >= max(request.min_bytes, 1), request.max_wait_ms
            )
            response = self._fetch_once(request)
        return response

    def _fetch_once(self, request: pb.FetchRequest) -> pb.FetchResponse:
        replicas = self._broker.replicas
        budget = request.max_bytes or 50 * 1024 * 1024
        response = pb.FetchResponse()
        for topic in request.topics:
            out = pb.TopicFetchResponse(name=topic.name)
            for p in topic.partitions:
                limit = min(p.partition_max_bytes or budget, budget)
                result = replicas.read(
                    TopicPartition(topic.name, p.partition),
                    p.fetch_offset,
                    max(limit, 1),
                    p.current_leader_epoch if p.HasField("current_leader_epoch") else -1,
                )
                records = bytes(result.records)
                budget = max(budget - len(records), 0)
                out.partitions.append(
                    pb.PartitionFetchResponse(
                        partition=p.partition,
                        error=pb.ErrorCode.Value(result.error),
                        high_watermark=result.high_watermark,
                        log_start_offset=result.log_start_offset,
                        log_end_offset=result.log_end_offset,
                        records=records,
                        error_message=result.message,
                    )
                )
            response.topics.append(out)
        return response

    def _available(self, request: pb.FetchRequest) -> int:
        """Bytes that could be returned now, without reading them (high watermark moved)."""
        total = 0
        for topic in request.topics:
            for p in topic.partitions:
                partition = self._broker.replicas.partition(TopicPartition(topic.name, p.partition))
                if partition is None:
                    return 1 << 30  # an error to report: answer now
                if partition.log.high_watermark > p.fetch_offset:
                    total += partition.log.size  # an upper bound is enough to wake up
        return total

    def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.ServicerContext
    ) -> pb.ListOffsetsResponse:
        response = pb.ListOffsetsResponse()
        for topic in request.topics:
            out = pb.TopicListOffsetsResponse(name=topic.name)
            for p in topic.partitions:
                error, timestamp, offset, epoch = self._broker.replicas.list_offset(
                    TopicPartition(topic.name, p.partition), p.timestamp
                )
                out.partitions.append(
                    pb.PartitionListOffsetsResponse(
                        partition=p.partition,
                        error=pb.ErrorCode.Value(error),
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            response.topics.append(out)
        return response

    # -- topic admin --------------------------------------------------------------

    def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.ServicerContext
    ) -> pb.CreateTopicsResponse:
        response = pb.CreateTopicsResponse()
        created: list[tuple[str, int]] = []
        for topic in request.topics:
            error, message, partitions = self._create_topic(topic, request.validate_only)
            response.topics.append(
                pb.TopicResult(name=topic.name, error=error, error_message=message)
            )
            if error == pb.NONE and not request.validate_only:
                created.append((topic.name, partitions))
        deadline = time.monotonic() + (request.timeout_ms or 30_000) / 1000
        zk = self._broker.zk
        for name, partitions in created:
            while time.monotonic() < deadline:
                states = [zk.get_partition_state(name, p) for p in range(partitions)]
                if all(s is not None and s[0].leader >= 0 for s in states):
                    break
                time.sleep(0.05)
        return response

    def _create_topic(
        self, topic: pb.CreatableTopic, validate_only: bool
    ) -> tuple[pb.ErrorCode.ValueType, str, int]:
        config = self._broker.config
        try:
            check_topic_name(topic.name)
        except LayoutError as exc:
            return pb.INVALID_TOPIC_EXCEPTION, str(exc), 0
        try:
            LogConfig.from_properties(dict(topic.configs))
        except ValueError as exc:
            return pb.INVALID_CONFIG, str(exc), 0
        live = [b.broker_id for b in self._broker.zk.get_brokers()]
        if topic.assignment:
            assignment = {p: tuple(r.brokers) for p, r in topic.assignment.items()}
            if sorted(assignment) != list(range(len(assignment))):
                return pb.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1", 0
        else:
            partitions = topic.num_partitions if topic.num_partitions > 0 else config.num_partitions
            factor = (
                topic.replication_factor
                if topic.replication_factor > 0
                else config.default_replication_factor
            )
            if topic.num_partitions == 0 or topic.num_partitions < -1:
                return (
                    pb.INVALID_PARTITIONS,
                    f"partition count {topic.num_partitions} is not valid",
                    0,
                )
            try:
                assignment = assign_replicas(partitions, factor, live)
            except ValueError as exc:
                return pb.INVALID_REPLICATION_FACTOR, str(exc), 0
        if validate_only:
            return pb.NONE, "", len(assignment)
        if not self._broker.zk.create_topic(
            topic.name, TopicAssignment(assignment), dict(topic.configs)
        ):
            return pb.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists", 0
        return pb.NONE, "", len(assignment)

    def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        zk = self._broker.zk
        response = pb.DeleteTopicsResponse()
        marked = []
        for name in request.topics:
            if zk.get_topic_assignment(name) is None:
                response.topics.append(
                    pb.TopicResult(
                        name=name,
                        error=pb.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"topic {name!r} does not exist",
                    )
                )
                continue
            zk.mark_topic_for_deletion(name)
            marked.append(name)
            response.topics.append(pb.TopicResult(name=name))
        deadline = time.monotonic() + (request.timeout_ms or 30_000) / 1000
        while marked and time.monotonic() < deadline:
            marked = [t for t in marked if zk.get_topic_assignment(t) is not None]
            time.sleep(0.05)
        return response


def _size(response: pb.FetchResponse) -> int:
    return sum(len(p.records) for t in response.topics for p in t.partitions)
