"""The control plane is for brokers only: with the ACL authorizer on and brokers
proving themselves with TLS certificates (GRPCS://, ssl.client.auth=required),
a client that is not a broker cannot stop a replica, make a leader, rewrite
metadata or fetch as a follower, and a request for an older registration of a
broker (KIP-380's broker epoch) is refused even from a broker; nothing changes
on disk or in ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.client.security import SSL, Security
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from tls_certs import issue, make_ca

pytestmark = pytest.mark.timeout(180)


class Secured:
    def __init__(self, brokers: list[BrokerProcess], files: dict[str, str]) -> None:
        self.brokers = brokers
        self.files = files

    def security(self, who: str) -> Security:
        """TLS as ``who`` (a keystore of files)."""
        return Security(SSL, self.files["ca"], self.files[who], self.files[who])

    def control(self, broker: BrokerProcess, who: str) -> tuple[grpc.Channel, object]:
        channel = self.security(who).channel(broker.endpoint)
        return channel, annal_pb2_grpc.BrokerControlStub(channel)


@pytest.fixture
def secured(zk_connect: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Secured]:
    ca = make_ca("annal test CA")
    files = {"ca": str(tmp_path / "ca.pem")}
    Path(files["ca"]).write_bytes(ca.cert_pem())
    for who in ("admin", "broker-1", "broker-2", "mallory"):
        files[who] = issue(ca, who).write_keystore(tmp_path / f"{who}.pem")
    brokers = []
    for broker_id in (1, 2):
        broker = BrokerProcess(broker_id, zk_connect, tmp_path)
        broker.settings.update(
            {
                "listeners": "GRPCS://127.0.0.1:0",
                "ssl.keystore.location": files[f"broker-{broker_id}"],
                "ssl.truststore.location": files["ca"],
                "ssl.client.auth": "required",
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:broker-1;User:broker-2;User:admin",
                "zookeeper.session.timeout.ms": "6000",
            }
        )
        brokers.append(broker)
        broker.start()
    try:
        with ZkClient(zk_connect) as zk:
            wait_until(lambda: len(zk.get_brokers()) == 2, 60, "both brokers registered")
            wait_until(lambda: zk.get_controller() is not None, 60, "a controller")
        yield Secured(brokers, files)
    finally:
        report = getattr(request.node, "rep_call", None)
        for broker in brokers:
            broker.kill()
            if report is not None and report.failed:
                print(f"\n--- broker {broker.broker_id} ---\n{broker.tail_log()}")


def as_admin(secured: Secured) -> dict[str, str]:
    return {
        "security_protocol": "SSL",
        "ssl_cafile": secured.files["ca"],
        "ssl_certfile": secured.files["admin"],
        "ssl_keyfile": secured.files["admin"],
    }


def test_forged_control_requests_and_replica_fetches_are_refused(
    secured: Secured, zk_connect: str
) -> None:
    bootstrap = ",".join(b.endpoint for b in secured.brokers)
    with AdminClient(bootstrap, **as_admin(secured)) as admin:
        wait_until(lambda: len(admin.cluster.refresh([]).brokers) == 2, 60, "both brokers")
        admin.create_topic("kept", assignment={0: [1, 2]})
    with Producer(bootstrap, acks=-1, **as_admin(secured)) as producer:
        for i in range(20):
            producer.send("kept", f"v{i}".encode(), partition=0)
        producer.flush(60)
    with ZkClient(zk_connect) as zk:  # the brokers replicate: they are brokers
        wait_until(lambda: zk.get_partition_state("kept", 0)[0].isr == (1, 2), 60, "ISR 1, 2")
        state_before = zk.get_partition_state("kept", 0)
        controller_epoch = zk.get_controller_epoch()
        epoch_2 = zk.get_broker(2).epoch
    victim = secured.brokers[1]
    files_before = {p.name: p.read_bytes() for p in (victim.log_dir / "kept-0").iterdir()}
    channel, stub = secured.control(victim, "mallory")  # a certificate, but not a broker's
    with channel:
        stop = pb.StopReplicaRequest(
            controller_id=1, controller_epoch=controller_epoch.epoch,
            partitions=[pb.StopReplicaPartition(topic="kept", partition=0, delete_partition=True)],
        )  # fmt: skip
        assert stub.StopReplica(stop, timeout=10).error == pb.CLUSTER_AUTHORIZATION_FAILED
        leader = pb.LeaderAndIsrRequest(
            controller_id=1, controller_epoch=controller_epoch.epoch,
            partition_states=[pb.PartitionState(
                topic="kept", partition=0, leader=2, leader_epoch=99, isr=[2], replicas=[1, 2],
            )],
        )  # fmt: skip
        assert stub.LeaderAndIsr(leader, timeout=10).error == pb.CLUSTER_AUTHORIZATION_FAILED
        update = pb.UpdateMetadataRequest(controller_id=1, controller_epoch=controller_epoch.epoch)
        assert stub.UpdateMetadata(update, timeout=10).error == pb.CLUSTER_AUTHORIZATION_FAILED
        shutdown = pb.ControlledShutdownRequest(broker_id=2)
        answer = stub.ControlledShutdown(shutdown, timeout=10)
        assert answer.error == pb.CLUSTER_AUTHORIZATION_FAILED
        fetch = pb.FetchRequest(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
        fetch.topics.add(name="kept").partitions.add(partition=0, fetch_offset=0)
        data = annal_pb2_grpc.AnnalStub(channel).Fetch(fetch, timeout=10)
        assert data.topics[0].partitions[0].error == pb.CLUSTER_AUTHORIZATION_FAILED
    # a broker's own certificate, but a request for an older registration of broker 2
    channel, stub = secured.control(victim, "broker-1")
    with channel:
        stale = pb.StopReplicaRequest()
        stale.CopyFrom(stop)
        stale.broker_epoch = epoch_2 - 1
        assert stub.StopReplica(stale, timeout=10).error == pb.STALE_BROKER_EPOCH
    with ZkClient(zk_connect) as zk:
        assert zk.get_partition_state("kept", 0) == state_before
    files_after = {p.name: p.read_bytes() for p in (victim.log_dir / "kept-0").iterdir()}
    assert files_after == files_before
    log = victim.log_path.read_text()
    assert "refused StopReplica from User:mallory" in log
    assert "refused StopReplica for broker epoch" in log
