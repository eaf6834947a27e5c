"""Inter-broker rpcs: the BrokerControl service, and the controller's channel to brokers.

Requests from a controller whose epoch is older than the newest this broker
has seen are refused whole with STALE_CONTROLLER_EPOCH.  Protobuf stays at
this edge: the replica manager and the controller see plain value types.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import grpc
from annal.broker.metadata_cache import LiveBroker, MetadataCache, PartitionView
from annal.broker.replica_manager import LeaderAndIsrState, ReplicaManager
from annal.controller.controller import MetadataUpdate, PartitionUpdate
from annal.storage.files import TopicPartition
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.layout import BrokerRegistration

REQUEST_TIMEOUT_S = 10.0


class ControlService(annal_pb2_grpc.BrokerControlServicer):
    """Applies controller requests through the replica manager and the metadata
    cache.  Thread-safe."""

    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        controlled_shutdown: Callable[[int], list[tuple[str, int]] | None],
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._controlled_shutdown = controlled_shutdown

    def LeaderAndIsr(
        self, request: pb.LeaderAndIsrRequest, context: grpc.ServicerContext
    ) -> pb.LeaderAndIsrResponse:
        if not self._replicas.check_controller_epoch(request.controller_epoch):
            return pb.LeaderAndIsrResponse(error=pb.STALE_CONTROLLER_EPOCH)
        states = [
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
            for s in request.partition_states
        ]
        results = self._replicas.become_leader_or_follower(states)
        return pb.LeaderAndIsrResponse(
            partition_errors=[
                pb.PartitionError(
                    topic=tp.topic, partition=tp.partition, error=pb.ErrorCode.Value(error)
                )
                for tp, error in results.items()
            ]
        )

    def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.ServicerContext
    ) -> pb.UpdateMetadataResponse:
        if not self._replicas.check_controller_epoch(request.controller_epoch):
            return pb.UpdateMetadataResponse(error=pb.STALE_CONTROLLER_EPOCH)
        self._metadata.update(
            request.controller_id,
            request.controller_epoch,
            [LiveBroker(b.id, b.host, b.port, b.rack or None) for b in request.live_brokers],
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

    def StopReplica(
        self, request: pb.StopReplicaRequest, context: grpc.ServicerContext
    ) -> pb.StopReplicaResponse:
        if not self._replicas.check_controller_epoch(request.controller_epoch):
            return pb.StopReplicaResponse(error=pb.STALE_CONTROLLER_EPOCH)
        errors = []
        for p in request.partitions:
            error = self._replicas.stop_replica(
                TopicPartition(p.topic, p.partition), p.delete_partition
            )
            errors.append(
                pb.PartitionError(
                    topic=p.topic, partition=p.partition, error=pb.ErrorCode.Value(error)
                )
            )
        return pb.StopReplicaResponse(partition_errors=errors)


    def ControlledShutdown(
        self, request: pb.ControlledShutdownRequest, context: grpc.ServicerContext
    ) -> pb.ControlledShutdownResponse:
        remaining = self._controlled_shutdown(request.broker_id)
        if remaining is None:
            return pb.ControlledShutdownResponse(error=pb.NOT_CONTROLLER)
        return pb.ControlledShutdownResponse(
            remaining_partitions=[pb.PartitionError(topic=t, partition=p) for t, p in remaining]
        )


class ControllerChannel:
    """gRPC stubs to every broker the controller talks to.  ``self._lock`` guards the cache."""

    def __init__(self, controller_id: int) -> None:
        self.controller_id = controller_id
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, annal_pb2_grpc.BrokerControlStub]] = {}

    def _stub(self, broker: BrokerRegistration) -> annal_pb2_grpc.BrokerControlStub:
        with self._lock:
            found = self._channels.get(broker.endpoint)
            if found is None:
                channel = grpc.insecure_channel(broker.endpoint)
                found = (channel, annal_pb2_grpc.BrokerControlStub(channel))
                self._channels[broker.endpoint] = found
            return found[1]

    def send_leader_and_isr(
        self,
        broker: BrokerRegistration,
        controller_epoch: int,
        updates: Sequence[PartitionUpdate],
        live: Sequence[BrokerRegistration],
    ) -> None:
        request = pb.LeaderAndIsrRequest(
            controller_id=self.controller_id,
            controller_epoch=controller_epoch,
            partition_states=[_partition_state(u) for u in updates],
            live_leaders=[pb.Broker(id=b.broker_id, host=b.host, port=b.port) for b in live],
        )
        response = self._stub(broker).LeaderAndIsr(request, timeout=REQUEST_TIMEOUT_S)
        if response.error != pb.NONE:
            error = pb.ErrorCode.Name(response.error)
            raise RuntimeError(f"broker {broker.broker_id} refused LeaderAndIsr: {error}")

    def send_update_metadata(
        self, broker: BrokerRegistration, controller_epoch: int, update: MetadataUpdate
    ) -> None:
        request = pb.UpdateMetadataRequest(
            controller_id=self.controller_id,
            controller_epoch=controller_epoch,
            partition_states=[_partition_state(u) for u in update.partitions],
            live_brokers=[
                pb.Broker(id=b.broker_id, host=b.host, port=b.port, rack=b.rack or "")
                for b in update.live
            ],
            deleted_topics=list(update.deleted_topics),
            full=update.full,
        )
        response = self._stub(broker).UpdateMetadata(request, timeout=REQUEST_TIMEOUT_S)
        if response.error != pb.NONE:
            error = pb.ErrorCode.Name(response.error)
            raise RuntimeError(f"broker {broker.broker_id} refused UpdateMetadata: {error}")

    def send_stop_replica(
        self,
        broker: BrokerRegistration,
        controller_epoch: int,
        partitions: Sequence[tuple[str, int]],
    ) -> None:
        request = pb.StopReplicaRequest(
            controller_id=self.controller_id,
            controller_epoch=controller_epoch,
            partitions=[
                pb.StopReplicaPartition(topic=t, partition=p, delete_partition=True)
                for t, p in partitions
            ],
        )
        self._stub(broker).StopReplica(request, timeout=REQUEST_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            for channel, _ in self._channels.values():
                channel.close()
            self._channels.clear()


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
