"""The client-facing gRPC service (``annal.v1.Annal``).

Metadata is answered from ZooKeeper, the source of truth in this era of
Kafka's design.  Request-level problems are gRPC statuses (INVALID_ARGUMENT
with a message); per-topic and per-partition problems are Kafka error codes
in the response.  Rpcs this broker does not serve yet answer UNIMPLEMENTED
(the generated base class does that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.layout import LayoutError, check_topic_name

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
