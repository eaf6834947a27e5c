"""Controlled shutdown: a stopping broker hands its leaderships to in-sync replicas first."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from annal.zk.layout import PartitionState

FAST = {"controlled.shutdown.max.retries": "1", "controlled.shutdown.retry.backoff.ms": "100"}


def controlled_shutdown(broker: BrokerProcess, broker_id: int) -> pb.ControlledShutdownResponse:
    with grpc.insecure_channel(broker.endpoint) as channel:
        return annal_pb2_grpc.BrokerControlStub(channel).ControlledShutdown(
            pb.ControlledShutdownRequest(broker_id=broker_id), timeout=30
        )


@pytest.mark.timeout(240)
def test_leaderships_move_before_the_broker_stops(
    zk_connect: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    brokers = {i: broker_factory(i, settings=FAST) for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        controller = zk.get_controller()
        assert controller in brokers
        other = 3 - controller
        assert controlled_shutdown(brokers[other], other).error == pb.NOT_CONTROLLER

        with AdminClient(brokers[1].endpoint) as admin:
            admin.create_topic("moving", assignment={0: [other, controller]})
            admin.create_topic("stuck", assignment={0: [controller, other]})
            admin.create_topic("single", assignment={0: [other]})
        found = zk.get_partition_state("moving", 0)
        assert found is not None and sorted(found[0].isr) == sorted((other, controller))
        # as if the follower of "stuck" had fallen behind: its leader alone in sync
        stuck = zk.get_partition_state("stuck", 0)
        assert stuck is not None
        zk.update_partition_state(
            "stuck", 0, PartitionState(controller, 0, (controller,), stuck[0].controller_epoch),
            stuck[1],
        )  # fmt: skip

        # the stopping broker leads "moving" (replicated, in sync elsewhere) and
        # "single" (one replica): only the first can and must move
        answer = controlled_shutdown(brokers[controller], other)
        assert answer.error == pb.NONE and list(answer.remaining_partitions) == []
        moved = zk.get_partition_state("moving", 0)
        assert moved is not None
        assert (moved[0].leader, moved[0].leader_epoch, moved[0].isr) == (
            controller,
            1,
            (controller,),
        )

        # "stuck" has no other in-sync replica: the broker retries, then stops anyway
        assert brokers[controller].stop() == 0
        log = brokers[controller].log_path.read_text()
        assert "attempt 1 of 2: still leading" in log and "stuck-0" in log
        assert "stopping without a complete controlled shutdown" in log
        wait_until(lambda: zk.get_controller() == other, 60, "the other broker takes over")
        assert brokers[other].stop() == 0
        assert (
            f"controlled shutdown of broker {other} complete" in brokers[other].log_path.read_text()
        )
