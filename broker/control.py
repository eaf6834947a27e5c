"""Inter-broker rpcs: the BrokerControl service (the controller's channel to brokers is
``controller/channel.py``).

Only brokers may call it: with an authorizer, every request needs ClusterAction
on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise, logged, nothing
applied); brokers prove who they are with their TLS certificates (GRPCS://,
docs/security.md).  Each request carries the receiving broker's epoch as the
controller knows it, the zxid that created its registration (KIP-380): one
for an older registration of this broker is refused with STALE_BROKER_EPOCH,
and so is a ControlledShutdown from an older registration of its sender.
Requests from a controller whose epoch is older than the newest this broker
has seen are refused whole with STALE_CONTROLLER_EPOCH.  The port is the
clients' port too, so the fields are checked (``request_checks``) before
anything is applied: a malformed request-level field is INVALID_ARGUMENT and
moves no epoch; a partition with an illegal topic name or a negative index
is refused alone (INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION) before
a log is opened for it.
Protobuf stays at this edge: the replica manager and the controller see
plain value types.

WriteTxnMarkers is the transaction coordinators' (KIP-98): the markers that end
a transaction, written by each partition's leader (``txn_markers.py``; Kafka's
API 27 on the Kafka listener answers from the same code).  It runs on the
event loop, as a produce does, and answers once the ISR holds the markers; a
caller without ClusterAction has every partition answered
CLUSTER_AUTHORIZATION_FAILED.

The service runs on the broker's event loop, but applying a controller
request can open logs and read topic configs from ZooKeeper, so each one is
applied on the broker's single control thread (``run``), in the order the
requests came.  ControlledShutdown, which waits for the controller, runs on
the admin pool (``run_admin``), so that the controller's own LeaderAndIsr to
this broker is never queued behind it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from annal.broker.listeners import PLAINTEXT
from annal.broker.metadata_cache import (
    MetadataCache,
    PartitionView,
    live_broker,
)
from annal.broker.replication.partition import LeaderAndIsrState
from annal.broker.replication.replica_manager import ReplicaManager
from annal.broker.requests import grpc_txn
from annal.broker.requests import request_checks as checks
from annal.broker.requests import txn_types as tt
from annal.broker.requests.grpc_data import wire_code
from annal.broker.requests.service import grpc_session
from annal.broker.security.authorization import ALLOW_ALL, RequestAuthorizer
from annal.broker.transactions.leader_markers import (
    DEFAULT_TIMEOUT_MS,
    AwaitReplication,
    MarkerWritten,
    TxnMarkerWriter,
    refused_markers,
)
from annal.security.session import Session
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

T = TypeVar("T")


class StaleBrokerEpoch(Exception):
    """A request for (or from) an older registration of a broker (KIP-380)."""


# Runs a blocking callable off the event loop and gives its result.
Runner = Callable[[Callable[[], T]], Awaitable[T]]


class ControlService(annal_pb2_grpc.BrokerControlServicer):
    """Applies controller requests through the replica manager and the metadata
    cache.  The handlers run on the event loop; the ``_..._now`` methods on the
    control thread (or, for ControlledShutdown, the admin pool)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        controlled_shutdown: Callable[[int, int], list[TopicPartition] | None],
        run: Runner[Any],
        run_admin: Runner[Any],
        authorizer: RequestAuthorizer = ALLOW_ALL,
        broker_epoch: Callable[[], int] = lambda: -1,
        replica_listener: str = PLAINTEXT,
        *,
        await_replication: AwaitReplication | None = None,
        txn_marker_written: MarkerWritten | None = None,
    ) -> None:
        """``await_replication`` waits for the ISR to hold appends (the data path's,
        for WriteTxnMarkers); ``txn_marker_written(partition index, producer id,
        commit)`` is told of each marker durably written to __consumer_offsets."""
        self._replica_listener = replica_listener  # the leaders' listener followers fetch over
        self._markers = TxnMarkerWriter(replicas, await_replication, txn_marker_written)
        self._replicas = replicas
        self._metadata = metadata
        self._controlled_shutdown = controlled_shutdown
        self._run = run
        self._run_admin = run_admin
        self._authorizer = authorizer
        self._broker_epoch = broker_epoch

    def _refused(
        self, what: str, context: grpc.aio.ServicerContext, epoch: int
    ) -> pb.ErrorCode.ValueType | None:
        """The error refusing a request whole, or None to apply it."""
        session = grpc_session(context)
        if not self._authorizer.cluster_action(session):
            logger.warning(
                "refused %s from %s at %s: ClusterAction on the cluster is not allowed",
                what,
                session.principal,
                session.client_host,
            )
            return pb.CLUSTER_AUTHORIZATION_FAILED
        mine = self._broker_epoch()
        if epoch > 0 and mine > 0 and epoch < mine:
            logger.warning(
                "refused %s for broker epoch %d: this broker registered at epoch %d",
                what,
                epoch,
                mine,
            )
            return pb.STALE_BROKER_EPOCH
        return None

    async def LeaderAndIsr(
        self, request: pb.LeaderAndIsrRequest, context: grpc.aio.ServicerContext
    ) -> pb.LeaderAndIsrResponse:
        if (error := self._refused("LeaderAndIsr", context, request.broker_epoch)) is not None:
            return pb.LeaderAndIsrResponse(error=error)
        response: pb.LeaderAndIsrResponse = await self._run(
            functools.partial(self._leader_and_isr_now, request)
        )
        return response

    async def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateMetadataResponse:
        if (error := self._refused("UpdateMetadata", context, request.broker_epoch)) is not None:
            return pb.UpdateMetadataResponse(error=error)
        response: pb.UpdateMetadataResponse = await self._run(
            functools.partial(self._update_metadata_now, request)
        )
        return response

    async def StopReplica(
        self, request: pb.StopReplicaRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopReplicaResponse:
        if (error := self._refused("StopReplica", context, request.broker_epoch)) is not None:
            return pb.StopReplicaResponse(error=error)
        response: pb.StopReplicaResponse = await self._run(
            functools.partial(self._stop_replica_now, request)
        )
        return response

    async def ControlledShutdown(
        self, request: pb.ControlledShutdownRequest, context: grpc.aio.ServicerContext
    ) -> pb.ControlledShutdownResponse:
        if (error := self._refused("ControlledShutdown", context, -1)) is not None:
            return pb.ControlledShutdownResponse(error=error)
        response: pb.ControlledShutdownResponse = await self._run_admin(
            functools.partial(self._controlled_shutdown_now, request)
        )
        return response

    async def WriteTxnMarkers(
        self, request: pb.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteTxnMarkersResponse:
        timeout_ms = checks.bounded_wait_ms(0, DEFAULT_TIMEOUT_MS, context.time_remaining())
        answer = await self.write_txn_markers(
            grpc_txn.markers_request(request), grpc_session(context), timeout_ms
        )
        return grpc_txn.markers_response(answer)

    async def write_txn_markers(
        self,
        request: tt.WriteTxnMarkersRequest,
        session: Session,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> tt.WriteTxnMarkersResponse:
        """WriteTxnMarkers from ``session`` (either listener): ClusterAction on the
        cluster, then each marker written by this leader (``txn_markers.py``)."""
        if not self._authorizer.cluster_action(session):
            logger.warning(
                "refused WriteTxnMarkers from %s at %s: ClusterAction on the cluster is not "
                "allowed",
                session.principal,
                session.client_host,
            )
            return refused_markers(request, errors.CLUSTER_AUTHORIZATION_FAILED)
        return await self._markers.write(request, timeout_ms)

    def _leader_and_isr_now(self, request: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        checks.require_at_least("controller_id", request.controller_id, 0)
        for i, b in enumerate(request.live_leaders):
            checks.check_broker_endpoint(f"live_leaders[{i}]", b.id, b.port)
        if not self._replicas.check_controller_epoch(request.controller_epoch):
            return pb.LeaderAndIsrResponse(error=pb.STALE_CONTROLLER_EPOCH)
        refused: list[pb.PartitionError] = []
        states = []
        for s in request.partition_states:
            refusal = checks.partition_state(
                s.topic, s.partition, s.leader, s.leader_epoch, s.isr, s.replicas
            )
            if refusal is not None:
                logger.warning("LeaderAndIsr: refused %s", refusal.message)
                refused.append(_partition_error(s.topic, s.partition, refusal.error))
                continue
            states.append(
                LeaderAndIsrState(
                    s.topic,
                    s.partition,
                    s.controller_epoch,
                    s.leader,
                    s.leader_epoch,
                    tuple(s.isr),
                    tuple(s.replicas),
                    s.zk_version,
                )
            )
        leaders = {b.id: f"{b.host}:{b.port}" for b in request.live_leaders}
        kafka_leaders = {
            b.id: endpoint
            for b in request.live_leaders
            if (endpoint := self._replica_endpoint(b)) is not None
        }
        results = self._replicas.become_leader_or_follower(states, leaders, kafka_leaders)
        return pb.LeaderAndIsrResponse(
            partition_errors=refused
            + [_partition_error(tp.topic, tp.partition, error) for tp, error in results.items()]
        )

    def _replica_endpoint(self, leader: pb.Broker) -> str | None:
        """The leader's listener named by inter.broker.listener.name, if it has one."""
        for e in leader.kafka_endpoints:
            if e.listener_name == self._replica_listener:
                return f"{e.host}:{e.port}"
        if not leader.kafka_endpoints and self._replica_listener == PLAINTEXT and leader.kafka_port:
            return f"{leader.kafka_host}:{leader.kafka_port}"  # a controller naming no endpoints
        return None

    def _update_metadata_now(self, request: pb.UpdateMetadataRequest) -> pb.UpdateMetadataResponse:
        checks.require_at_least("controller_id", request.controller_id, 0)
        for i, b in enumerate(request.live_brokers):
            checks.check_broker_endpoint(f"live_brokers[{i}]", b.id, b.port)
        for i, s in enumerate(request.partition_states):
            refusal = checks.partition_state(
                s.topic, s.partition, s.leader, s.leader_epoch, s.isr, s.replicas
            )
            if refusal is not None:  # the response has no room for one partition's error
                raise checks.InvalidRequest(
                    f"partition_states[{i}]", s.topic, reason=refusal.message
                )
        for i, name in enumerate(request.deleted_topics):
            if refusal := checks.topic_name(name):
                raise checks.InvalidRequest(f"deleted_topics[{i}]", name, reason=refusal.message)
        if not self._replicas.check_controller_epoch(request.controller_epoch):
            return pb.UpdateMetadataResponse(error=pb.STALE_CONTROLLER_EPOCH)
        self._metadata.update(
            request.controller_id,
            request.controller_epoch,
            [live_broker(b) for b in request.live_brokers],
            [
                (
                    s.topic,
                    s.partition,
                    PartitionView(s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas)),
                )
                for s in request.partition_states
            ],
            request.deleted_topics,
            full=request.full,
        )
        return pb.UpdateMetadataResponse()

    def _stop_replica_now(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        checks.require_at_least("controller_id", request.controller_id, 0)
        if not self._replicas.check_controller_epoch(request.controller_epoch):
            return pb.StopReplicaResponse(error=pb.STALE_CONTROLLER_EPOCH)
        refused: dict[TopicPartition, ErrorCode] = {}
        wanted: dict[bool, list[TopicPartition]] = {False: [], True: []}
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if refusal := checks.topic_partition(p.topic, p.partition):
                refused[tp] = refusal.error
            else:
                wanted[p.delete_partition].append(tp)
        stopped: dict[TopicPartition, ErrorCode] = {}
        for delete, tps in wanted.items():
            if tps:  # all at once: the fetchers let go of them in one pass
                stopped.update(self._replicas.stop_replicas(tps, delete))
        answers = []
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            answers.append(_partition_error(*tp, refused[tp] if tp in refused else stopped[tp]))
        return pb.StopReplicaResponse(partition_errors=answers)

    def _controlled_shutdown_now(
        self, request: pb.ControlledShutdownRequest
    ) -> pb.ControlledShutdownResponse:
        checks.require_at_least("broker_id", request.broker_id, 0)
        try:
            remaining = self._controlled_shutdown(request.broker_id, request.broker_epoch)
        except StaleBrokerEpoch as exc:
            logger.warning("refused ControlledShutdown: %s", exc)
            return pb.ControlledShutdownResponse(error=pb.STALE_BROKER_EPOCH)
        if remaining is None:
            return pb.ControlledShutdownResponse(error=pb.NOT_CONTROLLER)
        return pb.ControlledShutdownResponse(
            remaining_partitions=[pb.PartitionError(topic=t, partition=p) for t, p in remaining]
        )


def _partition_error(topic: str, partition: int, error: ErrorCode) -> pb.PartitionError:
    return pb.PartitionError(topic=topic, partition=partition, error=wire_code(error.number))
