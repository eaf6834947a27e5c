"""The client-facing gRPC service (``annal.v1.Annal``).

Metadata is answered from the broker's metadata cache, which the controller
keeps current with UpdateMetadata; topic admin writes ZooKeeper (the source
of truth in this era of Kafka's design) and waits for the cache to show the
result.  Request-level problems are gRPC statuses (INVALID_ARGUMENT
with a message); per-topic and per-partition problems are Kafka error codes
in the response.  Record data passes through as raw batch bytes.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import grpc
from annal.broker.coordinator import OFFSETS_TOPIC, CommitEntry
from annal.broker.metadata_cache import MetadataSnapshot
from annal.controller.election import assign_replicas
from annal.storage.config import LogConfig
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import StaleVersionError
from annal.zk.layout import LayoutError, TopicAssignment, check_topic_name

if TYPE_CHECKING:
    from annal.broker.server import BrokerServer

logger = logging.getLogger(__name__)


# acks=-1: (last offset appended, the topic's slot in the response, the partition's in it)
_Awaited = tuple[int, int, int]


class AnnalService(annal_pb2_grpc.AnnalServicer):
    """Thread-safe: handlers share nothing but the broker's ZooKeeper client."""

    def __init__(self, broker: BrokerServer) -> None:
        self._broker = broker

    def Metadata(
        self, request: pb.MetadataRequest, context: grpc.ServicerContext
    ) -> pb.MetadataResponse:
        for requested in request.topics:
            try:
                check_topic_name(requested)
            except LayoutError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        cache = self._broker.metadata.snapshot()
        response = pb.MetadataResponse(
            brokers=[
                pb.Broker(id=b.broker_id, host=b.host, port=b.port, rack=b.rack or "")
                for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
            ],
            cluster_id=self._broker.cluster_id or "",
            controller_id=cache.controller_id,
        )
        for name in list(request.topics) or sorted(cache.topics):
            partitions = cache.topics.get(name)
            if partitions is None:
                response.topics.append(self._unknown_topic(name, request))
                continue
            topic = pb.TopicMetadata(name=name, is_internal=name.startswith("__"))
            for partition, view in sorted(partitions.items()):
                leader = cache.leader_of(name, partition)
                topic.partitions.append(
                    pb.PartitionMetadata(
                        partition=partition,
                        leader=leader,
                        leader_epoch=view.leader_epoch,
                        replicas=list(view.replicas),
                        isr=list(view.isr),
                        offline_replicas=[r for r in view.replicas if r not in cache.brokers],
                        error=pb.NONE if leader >= 0 else pb.LEADER_NOT_AVAILABLE,
                    )
                )
            response.topics.append(topic)
        return response

    def _unknown_topic(self, name: str, request: pb.MetadataRequest) -> pb.TopicMetadata:
        """A topic the cache does not know: created when auto-creation is on and
        asked for (its partitions have no leader yet: clients retry), else unknown."""
        if request.allow_auto_topic_creation and self._broker.config.auto_create_topics_enable:
            # auto.create.topics.enable: create with the broker defaults
            self._create_topic(
                pb.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1), False
            )
            found = self._broker.zk.get_topic_assignment(name)
            if found is not None:
                return pb.TopicMetadata(
                    name=name,
                    partitions=[
                        pb.PartitionMetadata(
                            partition=p,
                            leader=-1,
                            replicas=list(replicas),
                            error=pb.LEADER_NOT_AVAILABLE,
                        )
                        for p, replicas in sorted(found[0].partitions.items())
                    ],
                )
        return pb.TopicMetadata(name=name, error=pb.UNKNOWN_TOPIC_OR_PARTITION)

    # -- produce, fetch, offsets -------------------------------------------------

    def Produce(
        self, request: pb.ProduceRequest, context: grpc.ServicerContext
    ) -> pb.ProduceResponse:
        replicas = self._broker.replicas
        response = pb.ProduceResponse()
        waiting: dict[TopicPartition, _Awaited] = {}  # acks=-1: last offset, where to answer
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
                tp = TopicPartition(topic.name, data.partition)
                result = replicas.append(tp, data.records, request.acks)
                if request.acks == -1 and result.error == "NONE":
                    # where its answer will be: response.topics gets a copy of ``out``
                    waiting[tp] = (result.last_offset, len(response.topics), len(out.partitions))
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
        if waiting:
            self._await_replication(request, response, waiting)
        return response

    def _await_replication(
        self,
        request: pb.ProduceRequest,
        response: pb.ProduceResponse,
        waiting: dict[TopicPartition, _Awaited],
    ) -> None:
        """acks=-1: answer each appended partition once the ISR holds it, or with
        the reason it does not (the records stay appended, as in Kafka)."""
        outcomes = self._broker.replicas.await_replication(
            {tp: last for tp, (last, _, _) in waiting.items()}, request.timeout_ms or 30_000
        )
        for tp, (_, topic, slot) in waiting.items():
            error, message = outcomes[tp]
            if error != "NONE":
                answer = response.topics[topic].partitions[slot]
                answer.error = pb.ErrorCode.Value(error)
                answer.error_message = message

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
                    request.replica_id,
                    p.log_start_offset,
                )
                records = result.records
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
                log = partition.log
                end = log.log_end_offset if request.replica_id >= 0 else log.high_watermark
                if request.replica_id >= 0 and 0 <= p.log_start_offset < log.log_start_offset:
                    total += max(request.min_bytes, 1)  # the follower must delete records too
                if end > p.fetch_offset:
                    total += log.size  # an upper bound is enough to wake up
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

    def OffsetsForLeaderEpoch(
        self, request: pb.OffsetsForLeaderEpochRequest, context: grpc.ServicerContext
    ) -> pb.OffsetsForLeaderEpochResponse:
        """Where each asked-for leader epoch ends on this leader (KIP-101/279): what
        a follower truncates to before it fetches."""
        response = pb.OffsetsForLeaderEpochResponse()
        for topic in request.topics:
            out = pb.TopicEpochEnds(name=topic.name)
            for p in topic.partitions:
                error, epoch, end_offset = self._broker.replicas.end_offset_for_epoch(
                    TopicPartition(topic.name, p.partition),
                    p.current_leader_epoch,
                    p.leader_epoch,
                )
                out.partitions.append(
                    pb.PartitionEpochEnd(
                        partition=p.partition,
                        error=pb.ErrorCode.Value(error),
                        leader_epoch=epoch,
                        end_offset=end_offset,
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
        self._await_leaders(created, request.timeout_ms)
        return response

    def _await_leaders(self, wanted: list[tuple[str, int]], timeout_ms: int) -> None:
        """Wait (bounded) until this broker's metadata cache knows a live leader for
        every partition of ``wanted`` (topic, partition count), as Kafka's
        delayed CreateTopics/CreatePartitions do; then clients asking this broker
        find the leaders."""

        def led(cache: MetadataSnapshot) -> bool:
            return all(cache.leader_of(t, p) >= 0 for t, n in wanted for p in range(n))

        self._broker.metadata.wait_until(led, (timeout_ms or 30_000) / 1000)

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

    def ElectLeaders(
        self, request: pb.ElectLeadersRequest, context: grpc.ServicerContext
    ) -> pb.ElectLeadersResponse:
        """Preferred leader election: asks the controller through
        ``/admin/preferred_replica_election`` (as kafka-preferred-replica-election.sh
        did) and answers once this broker's cache shows the new leaders."""
        deadline = time.monotonic() + (request.timeout_ms or 30_000) / 1000
        cache = self._broker.metadata.snapshot()
        outcome: dict[tuple[str, int], tuple[pb.ErrorCode.ValueType, str]] = {}
        asked: list[tuple[str, int]] = []
        if request.topic_partitions:
            for entry in request.topic_partitions:
                known = cache.topics.get(entry.topic, {})
                for partition in list(entry.partitions) or sorted(known):
                    asked.append((entry.topic, partition))
                if not known and not entry.partitions:
                    outcome[(entry.topic, -1)] = (
                        pb.UNKNOWN_TOPIC_OR_PARTITION,
                        f"unknown topic {entry.topic}",
                    )
        else:
            asked = [(t, p) for t, ps in sorted(cache.topics.items()) for p in sorted(ps)]
        pending = []
        for key in asked:
            verdict = _preferred_verdict(cache, *key)
            if verdict is None:
                pending.append(key)
            else:
                outcome[key] = verdict
        if pending:
            self._request_preferred_election(pending, deadline)

            def settled(snapshot: MetadataSnapshot) -> bool:
                return all(
                    _preferred_verdict(snapshot, *key, after=True) is not None for key in pending
                )

            self._broker.metadata.wait_until(settled, max(deadline - time.monotonic(), 0))
            final = self._broker.metadata.snapshot()
            for key in pending:
                outcome[key] = _preferred_verdict(final, *key, after=True) or (
                    pb.REQUEST_TIMED_OUT,
                    f"the controller did not move {key[0]}-{key[1]} in time",
                )
        return pb.ElectLeadersResponse(
            results=[
                pb.ElectionResult(topic=t, partition=p, error=error, error_message=message)
                for (t, p), (error, message) in outcome.items()
            ]
        )

    def AlterPartitionReassignments(
        self, request: pb.AlterPartitionReassignmentsRequest, context: grpc.ServicerContext
    ) -> pb.AlterPartitionReassignmentsResponse:
        """Checks each target and writes ``/admin/reassign_partitions`` for the
        controller; answers at once (a move takes as long as copying the data)."""
        cache = self._broker.metadata.snapshot()
        results: list[pb.ReassignmentResult] = []
        targets: dict[tuple[str, int], tuple[int, ...]] = {}
        for wanted in request.partitions:
            error, message = _check_reassignment(cache, wanted)
            if error == pb.NONE:
                targets[(wanted.topic, wanted.partition)] = tuple(wanted.replicas)
            results.append(
                pb.ReassignmentResult(
                    topic=wanted.topic,
                    partition=wanted.partition,
                    error=error,
                    error_message=message,
                )
            )
        if targets and not self._broker.zk.request_reassignments(targets):
            for result in results:
                if result.error == pb.NONE:
                    result.error = pb.REASSIGNMENT_IN_PROGRESS
                    result.error_message = "another reassignment is still running"
        return pb.AlterPartitionReassignmentsResponse(results=results)

    def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: grpc.ServicerContext
    ) -> pb.DeleteRecordsResponse:
        response = pb.DeleteRecordsResponse()
        for wanted in request.partitions:
            tp = TopicPartition(wanted.topic, wanted.partition)
            error, low_watermark, message = self._broker.replicas.delete_records(
                tp, wanted.offset, request.timeout_ms or 30_000
            )
            response.results.append(
                pb.DeleteRecordsResult(
                    topic=wanted.topic,
                    partition=wanted.partition,
                    low_watermark=low_watermark,
                    error=pb.ErrorCode.Value(error),
                    error_message=message,
                )
            )
        return response

    def _missing_topic(self, name: str) -> str | None:
        """The error message for a topic ZooKeeper does not hold; None when it does."""
        if self._broker.zk.get_topic_assignment(name) is None:
            return f"topic {name!r} does not exist"
        return None

    def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        zk = self._broker.zk
        defaults = self._broker.config.log_config()
        response = pb.DescribeConfigsResponse()
        for name in request.topics:
            if missing := self._missing_topic(name):
                response.topics.append(
                    pb.TopicConfigs(
                        name=name, error=pb.UNKNOWN_TOPIC_OR_PARTITION, error_message=missing
                    )
                )
                continue
            overrides = zk.get_topic_config(name)
            shown = dict(overrides)
            if request.include_defaults:
                effective = LogConfig.from_properties(overrides, defaults).to_properties()
                shown = {**effective, **overrides}
            response.topics.append(
                pb.TopicConfigs(
                    name=name,
                    entries=[
                        pb.ConfigEntry(name=k, value=v, is_default=k not in overrides)
                        for k, v in sorted(shown.items())
                    ],
                )
            )
        return response

    def AlterConfigs(
        self, request: pb.AlterConfigsRequest, context: grpc.ServicerContext
    ) -> pb.AlterConfigsResponse:
        """Validate each topic's new overrides as a whole, then write them (the
        brokers hosting it follow ``/config/changes``)."""
        zk = self._broker.zk
        response = pb.AlterConfigsResponse()
        for change in request.topics:
            result = response.topics.add(name=change.name)  # add(): append() would copy
            if absent := self._missing_topic(change.name):
                result.error = pb.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = absent
                continue
            overrides = zk.get_topic_config(change.name)
            missing = sorted(set(change.delete) - set(overrides))
            overrides.update(change.set)
            for key in change.delete:
                overrides.pop(key, None)
            try:
                if missing:
                    raise ValueError(f"cannot delete {missing}: not set on {change.name}")
                LogConfig.from_properties(overrides)
            except ValueError as exc:
                result.error = pb.INVALID_CONFIG
                result.error_message = str(exc)
                continue
            if not request.validate_only:
                zk.set_topic_config(change.name, overrides)
        return response

    def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        """The leader of the group's offsets partition; the offsets topic is
        created on first use (COORDINATOR_NOT_AVAILABLE until it has leaders)."""
        if not request.group:
            return pb.FindCoordinatorResponse(
                error=pb.INVALID_GROUP_ID, error_message="the group id is empty"
            )
        cache = self._broker.metadata.snapshot()
        if OFFSETS_TOPIC not in cache.topics:
            self._create_offsets_topic(len(cache.brokers))
            return pb.FindCoordinatorResponse(
                error=pb.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{OFFSETS_TOPIC} is being created; ask again",
            )
        index = self._broker.coordinator.partition_of(request.group)
        leader = cache.leader_of(OFFSETS_TOPIC, index)
        if leader < 0:
            return pb.FindCoordinatorResponse(
                error=pb.COORDINATOR_NOT_AVAILABLE,
                error_message=f"{OFFSETS_TOPIC}-{index} has no leader now",
            )
        broker = cache.brokers[leader]
        return pb.FindCoordinatorResponse(
            coordinator=pb.Broker(id=broker.broker_id, host=broker.host, port=broker.port)
        )

    def _create_offsets_topic(self, live_brokers: int) -> None:
        config = self._broker.config
        topic = pb.CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=max(1, min(config.offsets_topic_replication_factor, live_brokers)),
            configs={"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
        )
        error, message, _ = self._create_topic(topic, validate_only=False)
        if error not in (pb.NONE, pb.TOPIC_ALREADY_EXISTS):
            logger.warning("cannot create %s: %s", OFFSETS_TOPIC, message)

    def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: grpc.ServicerContext
    ) -> pb.OffsetCommitResponse:
        entries = [
            CommitEntry(t.name, p.partition, p.offset, p.leader_epoch, p.metadata)
            for t in request.topics
            for p in t.partitions
        ]
        if not request.group:
            outcome = {(e.topic, e.partition): ("INVALID_GROUP_ID", "empty group") for e in entries}
        else:
            outcome = self._broker.coordinator.commit(
                request.group, entries, request.timeout_ms or 30_000
            )
        response = pb.OffsetCommitResponse()
        for t in request.topics:
            out = response.topics.add(name=t.name)
            for p in t.partitions:
                error, message = outcome[(t.name, p.partition)]
                out.partitions.add(
                    partition=p.partition, error=pb.ErrorCode.Value(error), error_message=message
                )
        return response

    def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: grpc.ServicerContext
    ) -> pb.OffsetFetchResponse:
        if not request.group:
            return pb.OffsetFetchResponse(
                error=pb.INVALID_GROUP_ID, error_message="the group id is empty"
            )
        wanted = [(t.topic, p) for t in request.topics for p in t.partitions] or None
        error, found = self._broker.coordinator.fetch(request.group, wanted)
        response = pb.OffsetFetchResponse(error=pb.ErrorCode.Value(error))
        by_topic: dict[str, pb.OffsetFetchTopic] = {}
        for (topic, partition), value in sorted(found.items()):
            out = by_topic.get(topic)
            if out is None:
                out = by_topic[topic] = response.topics.add(name=topic)
            if value is None:
                out.partitions.add(partition=partition, offset=-1, leader_epoch=-1)
            else:
                out.partitions.add(
                    partition=partition,
                    offset=value.offset,
                    leader_epoch=value.leader_epoch,
                    metadata=value.metadata,
                )
        return response

    def _request_preferred_election(
        self, partitions: list[tuple[str, int]], deadline: float
    ) -> None:
        """Write the request znode, waiting (bounded) for an earlier one to be taken."""
        zk = self._broker.zk
        while not zk.request_preferred_election(partitions):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)  # another election is being handled; it takes milliseconds

    def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        response = pb.CreatePartitionsResponse()
        grown: list[tuple[str, int]] = []
        for topic in request.topics:
            error, message = self._create_partitions(topic, request.validate_only)
            response.topics.append(
                pb.TopicResult(name=topic.name, error=error, error_message=message)
            )
            if error == pb.NONE and not request.validate_only:
                grown.append((topic.name, topic.count))
        self._await_leaders(grown, request.timeout_ms)
        return response

    def _create_partitions(
        self, topic: pb.CreatePartitionsTopic, validate_only: bool
    ) -> tuple[pb.ErrorCode.ValueType, str]:
        """Extend the topic's assignment in ZooKeeper; the controller's watch on
        the topic brings the new partitions online."""
        zk = self._broker.zk
        name = topic.name
        found = zk.get_topic_assignment(name)
        if found is None:
            return pb.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        if name in zk.topics_to_delete():
            return pb.INVALID_TOPIC_EXCEPTION, f"topic {name!r} is queued for deletion"
        assignment, version = found
        current = len(assignment.partitions)
        if topic.count <= current:
            return (
                pb.INVALID_PARTITIONS,
                f"topic {name!r} has {current} partitions; the count can only grow "
                f"(asked for {topic.count})",
            )
        factor = len(assignment.partitions[0])
        live = [b.broker_id for b in zk.get_brokers()]
        added = topic.count - current
        if topic.assignment:
            if len(topic.assignment) != added:
                return (
                    pb.INVALID_REPLICA_ASSIGNMENT,
                    f"{len(topic.assignment)} replica lists given for {added} new partitions",
                )
            new = {current + i: tuple(r.brokers) for i, r in enumerate(topic.assignment)}
            for partition, replicas in new.items():
                if len(replicas) != factor or len(set(replicas)) != factor:
                    return (
                        pb.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {partition} needs {factor} distinct replicas, "
                        f"not {list(replicas)}",
                    )
                unknown = sorted(set(replicas) - set(live))
                if unknown:
                    return (
                        pb.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {partition}: brokers {unknown} are not live",
                    )
        else:
            try:
                spread = assign_replicas(added, factor, live, start=current)
            except ValueError as exc:
                return pb.INVALID_REPLICATION_FACTOR, str(exc)
            new = {current + p: replicas for p, replicas in spread.items()}
        if validate_only:
            return pb.NONE, ""
        grown = TopicAssignment(
            {**assignment.partitions, **new},
            assignment.adding_replicas,
            assignment.removing_replicas,
        )
        try:
            zk.update_topic_assignment(name, grown, version)
        except StaleVersionError as exc:
            return pb.INVALID_REQUEST, f"{exc}: changed concurrently, try again"
        return pb.NONE, ""

    def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        zk = self._broker.zk
        response = pb.DeleteTopicsResponse()
        marked = []
        for name in request.topics:
            if missing := self._missing_topic(name):
                response.topics.append(
                    pb.TopicResult(
                        name=name, error=pb.UNKNOWN_TOPIC_OR_PARTITION, error_message=missing
                    )
                )
                continue
            zk.mark_topic_for_deletion(name)
            marked.append(name)
            response.topics.append(pb.TopicResult(name=name))
        self._broker.metadata.wait_until(
            lambda cache: not any(t in cache.topics for t in marked),
            (request.timeout_ms or 30_000) / 1000,
        )
        return response


def _size(response: pb.FetchResponse) -> int:
    return sum(len(p.records) for t in response.topics for p in t.partitions)


def _preferred_verdict(
    cache: MetadataSnapshot, topic: str, partition: int, after: bool = False
) -> tuple[pb.ErrorCode.ValueType, str] | None:
    """How a preferred election of one partition ends, judged from ``cache``: None
    while it can still happen.  ``after`` the request, the preferred replica leading
    is a success rather than an election not needed."""
    view = cache.topics.get(topic, {}).get(partition)
    if view is None:
        return pb.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}"
    preferred = view.replicas[0] if view.replicas else -1
    if view.leader == preferred:
        if after:
            return pb.NONE, ""
        return pb.ELECTION_NOT_NEEDED, f"the preferred replica {preferred} leads already"
    if preferred not in cache.brokers:
        return pb.PREFERRED_LEADER_NOT_AVAILABLE, f"the preferred replica {preferred} is down"
    if preferred not in view.isr:
        return (
            pb.PREFERRED_LEADER_NOT_AVAILABLE,
            f"the preferred replica {preferred} is not in the ISR {list(view.isr)}",
        )
    return None


def _check_reassignment(
    cache: MetadataSnapshot, wanted: pb.ReassignablePartition
) -> tuple[pb.ErrorCode.ValueType, str]:
    name = f"{wanted.topic}-{wanted.partition}"
    if cache.topics.get(wanted.topic, {}).get(wanted.partition) is None:
        return pb.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {name}"
    replicas = list(wanted.replicas)
    if not replicas:
        return pb.INVALID_REPLICA_ASSIGNMENT, f"no replicas given for {name}"
    if len(set(replicas)) != len(replicas):
        return pb.INVALID_REPLICA_ASSIGNMENT, f"replicas {replicas} of {name} repeat a broker"
    absent = sorted(set(replicas) - set(cache.brokers))
    if absent:
        return pb.INVALID_REPLICA_ASSIGNMENT, f"brokers {absent} for {name} are not alive"
    return pb.NONE, ""
