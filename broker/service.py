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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from annal.broker import request_checks as checks
from annal.broker.coordinator import OFFSETS_TOPIC, CommitEntry
from annal.broker.metadata_cache import MetadataSnapshot
from annal.broker.request_checks import Refusal
from annal.storage.config import LogConfig
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import StaleVersionError
from annal.zk.layout import TopicAssignment

if TYPE_CHECKING:
    from annal.broker.server import BrokerServer

logger = logging.getLogger(__name__)


DEFAULT_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class _Awaited:
    """An acks=-1 append waiting for its ISR: where its answer is in the response."""

    tp: TopicPartition
    last_offset: int
    topic_slot: int
    partition_slot: int


def _code(name: str) -> pb.ErrorCode.ValueType:
    return pb.ErrorCode.Value(name)


class AnnalService(annal_pb2_grpc.AnnalServicer):
    """Thread-safe: handlers share nothing but the broker's ZooKeeper client.

    Every handler checks the request's fields first (``request_checks``):
    request-level ones raise ``InvalidRequest`` (INVALID_ARGUMENT, by the
    ``RequestGuard`` interceptor), per-topic and per-partition ones are answered
    in the response with Kafka's error codes."""

    def __init__(self, broker: BrokerServer) -> None:
        self._broker = broker

    def Metadata(
        self, request: pb.MetadataRequest, context: grpc.ServicerContext
    ) -> pb.MetadataResponse:
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
            if checks.topic_name(name):
                response.topics.append(
                    pb.TopicMetadata(name=name, error=pb.INVALID_TOPIC_EXCEPTION)
                )
                continue
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
        checks.check_timeout_ms(request.timeout_ms)
        refused_acks = checks.acks(request.acks)
        replicas = self._broker.replicas
        response = pb.ProduceResponse()
        waiting: list[_Awaited] = []
        for topic in request.topics:
            out = pb.TopicProduceResponse(name=topic.name)
            for data in topic.partitions:
                refusal = refused_acks or checks.produce_partition(topic.name, data.partition)
                if refusal is not None:
                    out.partitions.append(
                        pb.PartitionProduceResponse(
                            partition=data.partition,
                            error=_code(refusal.error),
                            base_offset=-1,
                            log_append_time_ms=-1,
                            log_start_offset=-1,
                            error_message=refusal.message,
                        )
                    )
                    continue
                tp = TopicPartition(topic.name, data.partition)
                result = replicas.append(tp, data.records, request.acks)
                if request.acks == -1 and result.error == "NONE":
                    # where its answer will be: response.topics gets a copy of ``out``
                    waiting.append(
                        _Awaited(tp, result.last_offset, len(response.topics), len(out.partitions))
                    )
                out.partitions.append(
                    pb.PartitionProduceResponse(
                        partition=data.partition,
                        error=_code(result.error),
                        base_offset=result.base_offset,
                        log_append_time_ms=result.log_append_time_ms,
                        log_start_offset=result.log_start_offset,
                        error_message=result.message,
                    )
                )
            response.topics.append(out)
        if waiting:
            wait_ms = _wait_ms(request.timeout_ms, context)
            self._await_replication(response, waiting, wait_ms)
        return response

    def _await_replication(
        self, response: pb.ProduceResponse, waiting: list[_Awaited], wait_ms: int
    ) -> None:
        """acks=-1: answer each appended partition once the ISR holds it, or with
        the reason it does not (the records stay appended, as in Kafka)."""
        last: dict[TopicPartition, int] = {}
        for awaited in waiting:  # a partition named twice waits for its later append
            last[awaited.tp] = max(last.get(awaited.tp, -1), awaited.last_offset)
        outcomes = self._broker.replicas.await_replication(last, wait_ms)
        for awaited in waiting:
            error, message = outcomes[awaited.tp]
            if error != "NONE":
                answer = response.topics[awaited.topic_slot].partitions[awaited.partition_slot]
                answer.error = _code(error)
                answer.error_message = message

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> pb.FetchResponse:
        checks.check_replica_id(request.replica_id)
        checks.check_fetch_limits(request.max_wait_ms, request.min_bytes, request.max_bytes)
        response = self._fetch_once(request)
        if request.max_wait_ms > 0 and _size(response) < max(request.min_bytes, 1):
            self._broker.replicas.wait_for_data(
                lambda: self._available(request) >= max(request.min_bytes, 1),
                _wait_ms(request.max_wait_ms, context),
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
                epoch = p.current_leader_epoch if p.HasField("current_leader_epoch") else -1
                refusal = checks.fetch_partition(
                    topic.name,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    epoch,
                    p.log_start_offset,
                )
                if refusal is not None:
                    out.partitions.append(
                        pb.PartitionFetchResponse(
                            partition=p.partition,
                            error=_code(refusal.error),
                            high_watermark=-1,
                            log_start_offset=-1,
                            log_end_offset=-1,
                            error_message=refusal.message,
                        )
                    )
                    continue
                limit = min(p.partition_max_bytes or budget, budget)
                result = replicas.read(
                    TopicPartition(topic.name, p.partition),
                    p.fetch_offset,
                    max(limit, 1),
                    epoch,
                    request.replica_id,
                    p.log_start_offset,
                )
                records = result.records
                budget = max(budget - len(records), 0)
                out.partitions.append(
                    pb.PartitionFetchResponse(
                        partition=p.partition,
                        error=_code(result.error),
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
        checks.check_replica_id(request.replica_id)
        response = pb.ListOffsetsResponse()
        for topic in request.topics:
            out = pb.TopicListOffsetsResponse(name=topic.name)
            for p in topic.partitions:
                refusal = checks.list_offsets_partition(
                    topic.name, p.partition, p.timestamp, p.current_leader_epoch
                )
                if refusal is not None:
                    error, timestamp, offset, epoch = refusal.error, -1, -1, -1
                else:
                    error, timestamp, offset, epoch = self._broker.replicas.list_offset(
                        TopicPartition(topic.name, p.partition), p.timestamp
                    )
                out.partitions.append(
                    pb.PartitionListOffsetsResponse(
                        partition=p.partition,
                        error=_code(error),
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
        checks.check_replica_id(request.replica_id)
        response = pb.OffsetsForLeaderEpochResponse()
        for topic in request.topics:
            out = pb.TopicEpochEnds(name=topic.name)
            for p in topic.partitions:
                refusal = checks.epoch_partition(
                    topic.name, p.partition, p.current_leader_epoch, p.leader_epoch
                )
                if refusal is not None:
                    error, epoch, end_offset = refusal.error, -1, -1
                else:
                    error, epoch, end_offset = self._broker.replicas.end_offset_for_epoch(
                        TopicPartition(topic.name, p.partition),
                        p.current_leader_epoch,
                        p.leader_epoch,
                    )
                out.partitions.append(
                    pb.PartitionEpochEnd(
                        partition=p.partition,
                        error=_code(error),
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
        checks.check_timeout_ms(request.timeout_ms)
        repeated = checks.repeated(t.name for t in request.topics)
        response = pb.CreateTopicsResponse()
        created: list[tuple[str, int]] = []
        for topic in request.topics:
            if topic.name in repeated:
                refusal = checks.repeated_refusal(topic.name)
                error, message, partitions = _code(refusal.error), refusal.message, 0
            else:
                error, message, partitions = self._create_topic(topic, request.validate_only)
            response.topics.append(
                pb.TopicResult(name=topic.name, error=error, error_message=message)
            )
            if error == pb.NONE and not request.validate_only:
                created.append((topic.name, partitions))
        self._await_leaders(created, _wait_ms(request.timeout_ms, context))
        return response

    def _await_leaders(self, wanted: list[tuple[str, int]], wait_ms: int) -> None:
        """Wait (bounded) until this broker's metadata cache knows a live leader for
        every partition of ``wanted`` (topic, partition count), as Kafka's
        delayed CreateTopics/CreatePartitions do; then clients asking this broker
        find the leaders."""
        if not wanted:
            return

        def led(cache: MetadataSnapshot) -> bool:
            return all(cache.leader_of(t, p) >= 0 for t, n in wanted for p in range(n))

        self._broker.metadata.wait_until(led, wait_ms / 1000)

    def _create_topic(
        self, topic: pb.CreatableTopic, validate_only: bool
    ) -> tuple[pb.ErrorCode.ValueType, str, int]:
        """(error, message, partition count) for one topic of CreateTopics, checked in
        Kafka's order: the name, whether it exists, its configs, then its partitions
        and replicas."""
        config = self._broker.config
        zk = self._broker.zk
        refusal = checks.topic_name(topic.name)
        if refusal is None and zk.get_topic_assignment(topic.name) is not None:
            refusal = Refusal("TOPIC_ALREADY_EXISTS", f"topic {topic.name!r} already exists")
        refusal = refusal or checks.topic_configs(dict(topic.configs))
        if refusal is not None:
            return _code(refusal.error), refusal.message, 0
        planned = checks.new_topic_assignment(
            topic.num_partitions,
            topic.replication_factor,
            {p: list(r.brokers) for p, r in topic.assignment.items()},
            [b.broker_id for b in zk.get_brokers()],
            config.num_partitions,
            config.default_replication_factor,
        )
        if isinstance(planned, Refusal):
            return _code(planned.error), planned.message, 0
        if validate_only:
            return pb.NONE, "", len(planned)
        if not zk.create_topic(topic.name, TopicAssignment(planned), dict(topic.configs)):
            return pb.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists", 0
        return pb.NONE, "", len(planned)

    def ElectLeaders(
        self, request: pb.ElectLeadersRequest, context: grpc.ServicerContext
    ) -> pb.ElectLeadersResponse:
        """Preferred leader election: asks the controller through
        ``/admin/preferred_replica_election`` (as kafka-preferred-replica-election.sh
        did) and answers once this broker's cache shows the new leaders."""
        checks.check_timeout_ms(request.timeout_ms)
        deadline = time.monotonic() + _wait_ms(request.timeout_ms, context) / 1000
        cache = self._broker.metadata.snapshot()
        outcome: dict[tuple[str, int], tuple[pb.ErrorCode.ValueType, str]] = {}
        asked: list[tuple[str, int]] = []
        if request.topic_partitions:
            for entry in request.topic_partitions:
                if refusal := checks.topic_name(entry.topic):
                    for partition in list(entry.partitions) or [-1]:
                        outcome[(entry.topic, partition)] = (_code(refusal.error), refusal.message)
                    continue
                known = cache.topics.get(entry.topic, {})
                for partition in list(entry.partitions) or sorted(known):
                    if refusal := checks.partition_index(entry.topic, partition):
                        outcome[(entry.topic, partition)] = (_code(refusal.error), refusal.message)
                    else:
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
            refusal = checks.topic_partition(wanted.topic, wanted.partition)
            if refusal is None and cache.topics.get(wanted.topic, {}).get(wanted.partition) is None:
                refusal = Refusal(
                    "UNKNOWN_TOPIC_OR_PARTITION",
                    f"unknown partition {wanted.topic}-{wanted.partition}",
                )
            refusal = refusal or checks.reassignment(
                wanted.topic, wanted.partition, list(wanted.replicas), list(cache.brokers)
            )
            if refusal is None:
                targets[(wanted.topic, wanted.partition)] = tuple(wanted.replicas)
            results.append(
                pb.ReassignmentResult(
                    topic=wanted.topic,
                    partition=wanted.partition,
                    error=_code(refusal.error) if refusal else pb.NONE,
                    error_message=refusal.message if refusal else "",
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
        checks.check_timeout_ms(request.timeout_ms)
        response = pb.DeleteRecordsResponse()
        for wanted in request.partitions:
            refusal = checks.delete_records_partition(wanted.topic, wanted.partition, wanted.offset)
            if refusal is not None:
                error, low_watermark, message = refusal.error, -1, refusal.message
            else:
                error, low_watermark, message = self._broker.replicas.delete_records(
                    TopicPartition(wanted.topic, wanted.partition),
                    wanted.offset,
                    _wait_ms(request.timeout_ms, context),
                )
            response.results.append(
                pb.DeleteRecordsResult(
                    topic=wanted.topic,
                    partition=wanted.partition,
                    low_watermark=low_watermark,
                    error=_code(error),
                    error_message=message,
                )
            )
        return response

    def _topic_refusal(self, name: str) -> Refusal | None:
        """Why an existing topic named ``name`` cannot be acted on: an illegal name,
        or ZooKeeper does not hold it; None when it does."""
        if refusal := checks.topic_name(name):
            return refusal
        if self._broker.zk.get_topic_assignment(name) is None:
            return Refusal("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        return None

    def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        zk = self._broker.zk
        defaults = self._broker.config.log_config()
        response = pb.DescribeConfigsResponse()
        for name in request.topics:
            if refusal := self._topic_refusal(name):
                response.topics.append(
                    pb.TopicConfigs(
                        name=name, error=_code(refusal.error), error_message=refusal.message
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
            if refusal := self._topic_refusal(change.name):
                result.error = _code(refusal.error)
                result.error_message = refusal.message
                continue
            overrides = zk.get_topic_config(change.name)
            missing = sorted(set(change.delete) - set(overrides))
            overrides.update(change.set)
            for key in change.delete:
                overrides.pop(key, None)
            if missing:
                refusal = Refusal(
                    "INVALID_CONFIG", f"cannot delete {missing}: not set on {change.name}"
                )
            else:
                refusal = checks.topic_configs(overrides)
            if refusal is not None:
                result.error = _code(refusal.error)
                result.error_message = refusal.message
                continue
            if not request.validate_only:
                zk.set_topic_config(change.name, overrides)
        return response

    def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        """The leader of the group's offsets partition; the offsets topic is
        created on first use (COORDINATOR_NOT_AVAILABLE until it has leaders)."""
        if refusal := checks.group_id(request.group):
            return pb.FindCoordinatorResponse(
                error=_code(refusal.error), error_message=refusal.message
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
        checks.check_timeout_ms(request.timeout_ms)
        group_refusal = checks.group_id(request.group)
        outcome: dict[tuple[str, int], tuple[str, str]] = {}
        entries = []
        for t in request.topics:
            for p in t.partitions:
                refusal = group_refusal or checks.commit_partition(
                    t.name, p.partition, p.offset, p.leader_epoch
                )
                if refusal is not None:
                    outcome[(t.name, p.partition)] = (refusal.error, refusal.message)
                else:
                    entries.append(
                        CommitEntry(t.name, p.partition, p.offset, p.leader_epoch, p.metadata)
                    )
        if entries:
            outcome.update(
                self._broker.coordinator.commit(
                    request.group, entries, _wait_ms(request.timeout_ms, context)
                )
            )
        response = pb.OffsetCommitResponse()
        for t in request.topics:
            out = response.topics.add(name=t.name)
            for p in t.partitions:
                error, message = outcome[(t.name, p.partition)]
                out.partitions.add(partition=p.partition, error=_code(error), error_message=message)
        return response

    def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: grpc.ServicerContext
    ) -> pb.OffsetFetchResponse:
        """The group's committed offsets; the response has one error field, so a
        refused group id, topic name or partition answers the whole request."""
        refusal = checks.group_id(request.group)
        for t in request.topics:
            refusal = refusal or checks.topic_name(t.topic)
            for p in t.partitions:
                refusal = refusal or checks.partition_index(t.topic, p)
        if refusal is not None:
            return pb.OffsetFetchResponse(error=_code(refusal.error), error_message=refusal.message)
        wanted = [(t.topic, p) for t in request.topics for p in t.partitions] or None
        error, found = self._broker.coordinator.fetch(request.group, wanted)
        response = pb.OffsetFetchResponse(error=_code(error))
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
        checks.check_timeout_ms(request.timeout_ms)
        repeated = checks.repeated(t.name for t in request.topics)
        response = pb.CreatePartitionsResponse()
        grown: list[tuple[str, int]] = []
        for topic in request.topics:
            if topic.name in repeated:
                refusal: Refusal | None = checks.repeated_refusal(topic.name)
            else:
                refusal = self._create_partitions(topic, request.validate_only)
            response.topics.append(
                pb.TopicResult(
                    name=topic.name,
                    error=_code(refusal.error) if refusal else pb.NONE,
                    error_message=refusal.message if refusal else "",
                )
            )
            if refusal is None and not request.validate_only:
                grown.append((topic.name, topic.count))
        self._await_leaders(grown, _wait_ms(request.timeout_ms, context))
        return response

    def _create_partitions(
        self, topic: pb.CreatePartitionsTopic, validate_only: bool
    ) -> Refusal | None:
        """Extend the topic's assignment in ZooKeeper; the controller's watch on
        the topic brings the new partitions online."""
        zk = self._broker.zk
        name = topic.name
        if refusal := self._topic_refusal(name):
            return refusal
        if name in zk.topics_to_delete():
            return Refusal("INVALID_TOPIC_EXCEPTION", f"topic {name!r} is queued for deletion")
        found = zk.get_topic_assignment(name)
        if found is None:
            return Refusal("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        assignment, version = found
        new = checks.added_partitions_assignment(
            name,
            topic.count,
            assignment.partitions,
            [list(r.brokers) for r in topic.assignment],
            [b.broker_id for b in zk.get_brokers()],
        )
        if isinstance(new, Refusal):
            return new
        if validate_only:
            return None
        grown = TopicAssignment(
            {**assignment.partitions, **new},
            assignment.adding_replicas,
            assignment.removing_replicas,
        )
        try:
            zk.update_topic_assignment(name, grown, version)
        except StaleVersionError as exc:
            return Refusal("INVALID_REQUEST", f"{exc}: changed concurrently, try again")
        return None

    def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        checks.check_timeout_ms(request.timeout_ms)
        repeated = checks.repeated(request.topics)
        zk = self._broker.zk
        response = pb.DeleteTopicsResponse()
        marked = []
        for name in request.topics:
            refusal = checks.repeated_refusal(name) if name in repeated else None
            if refusal := refusal or self._topic_refusal(name):
                response.topics.append(
                    pb.TopicResult(
                        name=name, error=_code(refusal.error), error_message=refusal.message
                    )
                )
                continue
            zk.mark_topic_for_deletion(name)
            marked.append(name)
            response.topics.append(pb.TopicResult(name=name))
        if marked:
            self._broker.metadata.wait_until(
                lambda cache: not any(t in cache.topics for t in marked),
                _wait_ms(request.timeout_ms, context) / 1000,
            )
        return response


def _wait_ms(timeout_ms: int, context: grpc.ServicerContext) -> int:
    """A request's wait: its timeout (0 for the default), cut at the caller's deadline."""
    return checks.bounded_wait_ms(timeout_ms, DEFAULT_TIMEOUT_MS, context.time_remaining())


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
