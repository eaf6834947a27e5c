"""The controller's channel to brokers: one queue and one sender thread per broker.

The controller's event loop never waits on a broker: each request it makes
(one LeaderAndIsr, UpdateMetadata or StopReplica per broker per event, see
``requests.RequestBatch``) is queued here and sent by that broker's own
thread, in order, over gRPC (the brokers' BrokerControl service,
``broker/control.py``).  Protobuf stays in this module and the service.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

import grpc
from annal.broker.metadata_cache import broker_message
from annal.client.retry import Backoff
from annal.client.security import Security
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.layout import BrokerRegistration

from annal import errors
from annal.topic_partition import TopicPartition

from .requests import MetadataUpdate, PartitionUpdate

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0


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
        backoff = Backoff(self.owner.max_backoff_s)
        failing = False
        while True:
            if not self.owner._may_send(generation, self._stopping):
                logger.info("%s to broker %d dropped (resigned or stopping)", what, self.broker_id)
                return
            try:
                error = call(self._stub)
            except grpc.RpcError as exc:
                failed = errors.transport_error(exc)
                wait_s = backoff.next()
                if (
                    not failed.retriable
                    or self._draining
                    or (deadline is not None and time.monotonic() + wait_s > deadline)
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
                if self._stopping.wait(wait_s):
                    return
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
