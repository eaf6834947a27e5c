"""Inter-broker rpcs: the BrokerControl service, and the controller's channel to brokers.

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
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from annal.broker import request_checks as checks
from annal.broker.authorization import ALLOW_ALL, RequestAuthorizer
from annal.broker.data_api import code
from annal.broker.listeners import PLAINTEXT
from annal.broker.metadata_cache import (
    MetadataCache,
    PartitionView,
    broker_message,
    live_broker,
)
from annal.broker.partition import LeaderAndIsrState
from annal.broker.replica_manager import ReplicaManager
from annal.broker.service import grpc_session
from annal.client.security import Security
from annal.controller.controller import MetadataUpdate, PartitionUpdate
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.layout import BrokerRegistration

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0

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
    ) -> None:
        self._replica_listener = replica_listener  # the leaders' listener followers fetch over
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
        errors = []
        for p in request.partitions:
            if refusal := checks.topic_partition(p.topic, p.partition):
                error = refusal.error
            else:
                error = self._replicas.stop_replica(
                    TopicPartition(p.topic, p.partition), p.delete_partition
                )
            errors.append(_partition_error(p.topic, p.partition, error))
        return pb.StopReplicaResponse(partition_errors=errors)

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
    return pb.PartitionError(topic=topic, partition=partition, error=code(error))


class ControllerChannel:
    """The controller's requests to brokers, as Kafka's ControllerChannelManager
    sends them: one queue and one sender thread per broker, so a broker gets
    its requests in order and a slow or unreachable broker holds up no other
    (and not the controller's event loop).  A request that fails because the
    broker cannot be reached is tried again, with a growing backoff, as long
    as that registration of the broker lasts (or for up to ``retry_for_s``
    when given): a broker that registers anew (restarted) gets a fresh
    channel and thread, and the old ones stop.  A refusal (a stale controller
    epoch) is logged and dropped.  ``close`` lets the queues drain for a
    bounded time.

    It is the controller's ``RequestGate``: ``hold`` (its ZooKeeper session is
    suspended) keeps every sender from sending until ``release``; ``discard``
    (it resigned) drops every request queued so far, and any being retried.

    Thread safety: ``self._lock`` guards the senders; ``self._gate`` (a
    condition) the hold and the discard generation; each sender thread owns
    its channel."""

    def __init__(
        self,
        controller_id: int,
        retry_for_s: float | None = None,
        max_backoff_s: float = 1.0,
        security: Security | None = None,
    ) -> None:
        self.controller_id = controller_id
        self.security = security or Security()
        self.retry_for_s = retry_for_s
        self.max_backoff_s = max_backoff_s
        self._lock = threading.Lock()
        self._senders: dict[int, _BrokerSender] = {}
        self._closed = False
        self._gate = threading.Condition()
        self._held = False
        self._generation = 0  # requests queued before the last discard are dropped

    def hold(self) -> None:
        """Queued requests wait until ``release``; never blocks (called from the
        ZooKeeper session listener)."""
        with self._gate:
            self._held = True

    def release(self) -> None:
        with self._gate:
            self._held = False
            self._gate.notify_all()

    def discard(self) -> None:
        """Drop every request queued so far (and stop retrying the ones in flight)."""
        with self._gate:
            self._generation += 1
            self._gate.notify_all()

    def _may_send(self, generation: int, stopping: threading.Event) -> bool:
        """Wait while held; False when the request was discarded (or the sender stops)."""
        with self._gate:
            while self._held and generation == self._generation and not stopping.is_set():
                self._gate.wait()
            return generation == self._generation and not stopping.is_set()

    def _wake(self) -> None:
        with self._gate:
            self._gate.notify_all()

    def _enqueue(self, broker: BrokerRegistration, what: str, call: _Call) -> None:
        with self._lock:
            if self._closed:
                return
            sender = self._senders.get(broker.broker_id)
            if sender is None or (sender.endpoint, sender.registered_ms) != (
                broker.endpoint,
                broker.timestamp_ms,
            ):
                # The broker registered anew (restarted, perhaps at another address
                # behind the same name): a fresh channel, as Kafka's controller
                # makes one for a broker that starts up.  The old sender may still
                # be retrying the dead process: stopping it ends that.
                if sender is not None:
                    sender.stop(0)
                sender = _BrokerSender(self, broker.broker_id, broker.endpoint, broker.timestamp_ms)
                self._senders[broker.broker_id] = sender
            with self._gate:
                generation = self._generation
            sender.queue.put((what, call, generation))

    def send_leader_and_isr(
        self,
        broker: BrokerRegistration,
        controller_epoch: int,
        updates: Sequence[PartitionUpdate],
        live: Sequence[BrokerRegistration],
        on_storage_errors: Callable[[int, list[TopicPartition]], None] | None = None,
    ) -> None:
        """``on_storage_errors(broker id, partitions)`` hears of the partitions the
        broker answered KAFKA_STORAGE_ERROR (replicas on an offline log dir)."""
        request = pb.LeaderAndIsrRequest(
            controller_id=self.controller_id,
            controller_epoch=controller_epoch,
            partition_states=[_partition_state(u) for u in updates],
            live_leaders=[broker_message(b) for b in live],
            broker_epoch=broker.epoch,
        )

        def call(stub: annal_pb2_grpc.BrokerControlStub) -> pb.ErrorCode.ValueType:
            response = stub.LeaderAndIsr(request, timeout=REQUEST_TIMEOUT_S)
            failed = [
                TopicPartition(e.topic, e.partition)
                for e in response.partition_errors
                if e.error == pb.KAFKA_STORAGE_ERROR
            ]
            if failed and on_storage_errors is not None:
                on_storage_errors(broker.broker_id, failed)
            error: pb.ErrorCode.ValueType = response.error
            return error

        self._enqueue(broker, "LeaderAndIsr", call)

    def send_update_metadata(
        self, broker: BrokerRegistration, controller_epoch: int, update: MetadataUpdate
    ) -> None:
        request = pb.UpdateMetadataRequest(
            controller_id=self.controller_id,
            controller_epoch=controller_epoch,
            partition_states=[_partition_state(u) for u in update.partitions],
            live_brokers=[broker_message(b) for b in update.live],
            deleted_topics=list(update.deleted_topics),
            full=update.full,
            broker_epoch=broker.epoch,
        )
        self._enqueue(
            broker,
            "UpdateMetadata",
            lambda stub: stub.UpdateMetadata(request, timeout=REQUEST_TIMEOUT_S).error,
        )

    def send_stop_replica(
        self,
        broker: BrokerRegistration,
        controller_epoch: int,
        partitions: Sequence[TopicPartition],
        delete: bool = True,
    ) -> None:
        request = pb.StopReplicaRequest(
            controller_id=self.controller_id,
            controller_epoch=controller_epoch,
            partitions=[
                pb.StopReplicaPartition(topic=t, partition=p, delete_partition=delete)
                for t, p in partitions
            ],
            broker_epoch=broker.epoch,
        )
        self._enqueue(
            broker,
            "StopReplica",
            lambda stub: stub.StopReplica(request, timeout=REQUEST_TIMEOUT_S).error,
        )

    def close(self, drain_s: float = 5.0) -> None:
        """Stop taking requests, give the queued ones ``drain_s`` to go out, then stop."""
        with self._lock:
            self._closed = True
            senders = list(self._senders.values())
            self._senders.clear()
        deadline = time.monotonic() + drain_s
        for sender in senders:
            sender.stop(max(deadline - time.monotonic(), 0))


# a request to one broker: returns the response's error code
_Call = Callable[[annal_pb2_grpc.BrokerControlStub], "pb.ErrorCode.ValueType"]


class _BrokerSender:
    """One broker's queue and the thread that sends it in order (see ControllerChannel)."""

    def __init__(
        self,
        owner: ControllerChannel,
        broker_id: int,
        endpoint: str,
        registered_ms: int,
    ) -> None:
        self.owner = owner
        self.broker_id = broker_id
        self.endpoint = endpoint
        self.registered_ms = registered_ms  # when the broker registered (its znode's timestamp)
        self.queue: queue.Queue[tuple[str, _Call, int] | None] = queue.Queue()
        self._stopping = threading.Event()
        self._draining = False
        # its own subchannels: a channel made for a broker that came back must
        # not pick up the old channel's connection to the process that died
        self._channel = owner.security.channel(
            endpoint, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self._stub = annal_pb2_grpc.BrokerControlStub(self._channel)
        self._thread = threading.Thread(
            target=self._run, name=f"controller-to-{broker_id}", daemon=True
        )
        self._thread.start()

    def stop(self, drain_s: float) -> None:
        """Send what is queued for up to ``drain_s`` (no more retries), then give
        up the rest."""
        self._draining = True
        self.queue.put(None)
        self._thread.join(drain_s)
        self._stopping.set()
        self.owner._wake()  # a sender held by the gate
        self._channel.close()  # ends a call still in flight
        self._thread.join(REQUEST_TIMEOUT_S)

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None or self._stopping.is_set():
                return
            self._send(*item)

    def _send(self, what: str, call: _Call, generation: int) -> None:
        retry_for_s = self.owner.retry_for_s
        deadline = None if retry_for_s is None else time.monotonic() + retry_for_s
        backoff_s = 0.05
        failing = False
        while True:
            if not self.owner._may_send(generation, self._stopping):
                logger.info("%s to broker %d dropped (resigned or stopping)", what, self.broker_id)
                return
            try:
                error = call(self._stub)
            except grpc.RpcError as exc:
                failed = errors.transport_error(exc)
                if (
                    not failed.retriable
                    or self._draining
                    or (deadline is not None and time.monotonic() + backoff_s > deadline)
                ):
                    logger.warning(
                        "%s to broker %d at %s failed: %s",
                        what,
                        self.broker_id,
                        self.endpoint,
                        failed,
                    )
                    return
                if not failing:
                    failing = True
                    logger.warning(
                        "%s to broker %d at %s: %s; trying again until it answers",
                        what,
                        self.broker_id,
                        self.endpoint,
                        failed,
                    )
                if self._stopping.wait(backoff_s):
                    return
                backoff_s = min(backoff_s * 2, self.owner.max_backoff_s)
                continue
            if error != pb.NONE:
                logger.warning(
                    "broker %d refused %s: %s", self.broker_id, what, errors.from_wire(error)
                )
            return


def _partition_state(update: PartitionUpdate) -> pb.PartitionState:
    return pb.PartitionState(
        topic=update.topic,
        partition=update.partition,
        controller_epoch=update.state.controller_epoch,
        leader=update.state.leader,
        leader_epoch=update.state.leader_epoch,
        isr=list(update.state.isr),
        zk_version=update.zk_version,
        replicas=list(update.replicas),
    )
