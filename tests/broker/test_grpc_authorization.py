"""The authorizer on annal's gRPC service: a plaintext gRPC caller is User:ANONYMOUS,
and with an ACL authorizer where ANONYMOUS is no super user, annal's AdminClient
(and every other rpc) gets Kafka's authorization errors, and nothing changes; ACLs
given to ANONYMOUS (written to ZooKeeper, followed by the broker) let it through.
Also ``delete.topic.enable=false``: DeleteTopics is refused on both protocols.

(The same rpcs with User:ANONYMOUS as a super user are in
tests/kafkaproto/test_kafka_authorization_apis.py.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from annal.admin.client import AdminClient, AdminError
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.security.scram import ScramCredentialUpsertion
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from annal.zk.layout import TopicAssignment

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(90)

SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",  # not ANONYMOUS: plaintext gRPC callers are ANONYMOUS
    "offsets.topic.num.partitions": "3",
}
TOPIC = "guarded"
Op = AclOperation


def brokers_may_talk(zk: ZkClient) -> None:
    """The controller talks to brokers over plaintext gRPC, as ANONYMOUS too: that
    needs ClusterAction on the cluster (and gives nothing else)."""
    binding = anonymous(ResourceType.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)
    zk.add_acls(binding.pattern, [binding.entry])


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> Iterator[BrokerProcess]:
    """One broker and a topic made in ZooKeeper, since ANONYMOUS may not create one."""
    process = module_broker_factory(1, SETTINGS, prepare=brokers_may_talk)
    with ZkClient(process.zookeeper_connect) as zk:
        zk.create_topic(TOPIC, TopicAssignment({0: (1,)}))
        wait_until(lambda: (process.log_dir / f"{TOPIC}-0").is_dir(), 30, "the topic's log")
    yield process


@pytest.fixture
def stub(broker: BrokerProcess) -> Iterator[annal_pb2_grpc.AnnalStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield annal_pb2_grpc.AnnalStub(channel)


def refused(call: Callable[[], Any]) -> ErrorCode:
    """The code AdminClient raises (AssertionError when it raises nothing)."""
    try:
        call()
    except AdminError as exc:
        return exc.code
    raise AssertionError("served")


def anonymous(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourcePattern.literal(resource_type, name),
        AccessControlEntry("User:ANONYMOUS", "*", operation, AclPermissionType.ALLOW),
    )


def test_admin_client_gets_the_authorization_errors(broker: BrokerProcess) -> None:
    topic_denied = errors.TOPIC_AUTHORIZATION_FAILED
    cluster_denied = errors.CLUSTER_AUTHORIZATION_FAILED
    with AdminClient(broker.endpoint) as admin:
        assert admin.list_topics() == []  # it exists, but ANONYMOUS may not describe it
        assert refused(lambda: admin.delete_topic(TOPIC)) == topic_denied
        assert refused(lambda: admin.create_topic("new-one", 1, 1)) == topic_denied
        assert refused(lambda: admin.create_partitions(TOPIC, 2)) == topic_denied
        assert refused(lambda: admin.describe_configs(TOPIC)) == topic_denied
        assert refused(lambda: admin.alter_configs(TOPIC, {"retention.ms": "1"})) == topic_denied
        assert refused(lambda: admin.elect_preferred_leaders({TOPIC: [0]})) == cluster_denied
        assert refused(lambda: admin.elect_preferred_leaders()) == cluster_denied  # all of them
        assert refused(lambda: admin.describe_topics([TOPIC])) == topic_denied
        moved = admin.reassign_partitions({TopicPartition(TOPIC, 0): [1]})
        assert [o.error for o in moved] == [cluster_denied]
        assert "ANONYMOUS may not Alter Cluster:kafka-cluster" in moved[0].message
        assert admin.describe_log_dirs() == []  # as Kafka 2.x answers
        assert admin.list_groups() == []
        acl = anonymous(ResourceType.TOPIC, TOPIC, Op.READ)
        assert refused(lambda: admin.create_acls([acl])) == cluster_denied
        assert refused(lambda: admin.describe_acls()) == cluster_denied
        assert refused(lambda: admin.delete_acls([acl.to_filter()])) == cluster_denied
        assert refused(lambda: admin.describe_user_scram_credentials()) == cluster_denied
        upsertion = ScramCredentialUpsertion("SCRAM-SHA-256", "pw-carol")
        assert (
            refused(lambda: admin.alter_user_scram_credentials("carol", [upsertion]))
            == cluster_denied
        )
    assert (broker.log_dir / f"{TOPIC}-0").is_dir()
    with ZkClient(broker.zookeeper_connect) as zk:
        assert zk.get_topic_assignment(TOPIC) is not None
        assert TOPIC not in zk.topics_to_delete()
        assert zk.get_topic_assignment("new-one") is None
        assert zk.get_topic_config(TOPIC) == {}
        assert zk.scram_users() == [] and len(zk.all_acls()) == 1  # the brokers' ACL


def test_the_other_rpcs_are_refused_too(stub: annal_pb2_grpc.AnnalStub) -> None:
    named = stub.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=30)
    assert [t.error for t in named.topics] == [pb.TOPIC_AUTHORIZATION_FAILED]
    offsets = stub.ListOffsets(
        pb.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                pb.TopicListOffsets(name=TOPIC, partitions=[{"partition": 0, "timestamp": -1}])
            ],
        ),
        timeout=30,
    )
    assert offsets.topics[0].partitions[0].error == pb.TOPIC_AUTHORIZATION_FAILED
    epochs = stub.OffsetsForLeaderEpoch(
        pb.OffsetsForLeaderEpochRequest(
            replica_id=-1,
            topics=[pb.TopicEpochs(name=TOPIC, partitions=[{"partition": 0, "leader_epoch": 0}])],
        ),
        timeout=30,
    )
    # ClusterAction on the cluster (the brokers' grant above) admits any partition
    assert epochs.topics[0].partitions[0].error == pb.NONE
    records = stub.DeleteRecords(
        pb.DeleteRecordsRequest(partitions=[{"topic": TOPIC, "partition": 0, "offset": 0}]),
        timeout=30,
    )
    assert records.results[0].error == pb.TOPIC_AUTHORIZATION_FAILED
    idempotent = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=30)
    assert idempotent.error == pb.CLUSTER_AUTHORIZATION_FAILED
    transactional = stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="tx"))
    assert transactional.error == pb.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    coordinator = stub.FindCoordinator(pb.FindCoordinatorRequest(group="g"), timeout=30)
    assert coordinator.error == pb.GROUP_AUTHORIZATION_FAILED
    assert "User:ANONYMOUS may not Describe Group:g" in coordinator.error_message
    commit = stub.OffsetCommit(
        pb.OffsetCommitRequest(
            group="g", topics=[pb.OffsetCommitTopic(name=TOPIC, partitions=[{"offset": 1}])]
        ),
        timeout=30,
    )
    assert commit.topics[0].partitions[0].error == pb.GROUP_AUTHORIZATION_FAILED
    fetched = stub.OffsetFetch(pb.OffsetFetchRequest(group="g"), timeout=30)
    assert fetched.error == pb.GROUP_AUTHORIZATION_FAILED
    described = stub.DescribeGroup(pb.DescribeGroupRequest(group="g"), timeout=30)
    assert described.error == pb.GROUP_AUTHORIZATION_FAILED
    deleted = stub.DeleteGroup(pb.DeleteGroupRequest(group="g"), timeout=30)
    assert deleted.error == pb.GROUP_AUTHORIZATION_FAILED
    everything = stub.ElectLeaders(pb.ElectLeadersRequest(), timeout=30)  # every partition
    assert (everything.error, list(everything.results)) == (pb.CLUSTER_AUTHORIZATION_FAILED, [])


def test_acls_given_to_anonymous_let_it_through(
    broker: BrokerProcess, stub: annal_pb2_grpc.AnnalStub
) -> None:
    opened = "opened"
    grants = [
        AclBinding(
            ResourcePattern.prefixed(ResourceType.TOPIC, opened),
            AccessControlEntry("User:ANONYMOUS", "*", Op.ALL, AclPermissionType.ALLOW),
        ),
        anonymous(ResourceType.CLUSTER, "kafka-cluster", Op.CREATE),
        anonymous(ResourceType.CLUSTER, "kafka-cluster", Op.ALTER),
        anonymous(ResourceType.GROUP, "opened-group", Op.READ),
        anonymous(ResourceType.TRANSACTIONAL_ID, "tx-opened", Op.WRITE),
    ]
    with ZkClient(broker.zookeeper_connect) as zk:
        for binding in grants:
            zk.add_acls(binding.pattern, [binding.entry])
    try:
        served_once_granted(broker, stub, opened)
    finally:  # the module's other tests see ANONYMOUS without these again
        with ZkClient(broker.zookeeper_connect) as zk:
            for binding in grants:
                zk.update_acls(binding.pattern, lambda now, gone=binding.entry: now - {gone})
        with AdminClient(broker.endpoint) as admin:
            wait_until(lambda: admin.describe_log_dirs() == [], 30, "the grants taken back")


def served_once_granted(broker: BrokerProcess, stub: annal_pb2_grpc.AnnalStub, opened: str) -> None:
    with AdminClient(broker.endpoint) as admin:

        def created() -> bool:  # once the broker has followed the ACL changes
            try:
                admin.create_topic(f"{opened}-topic", 1, 1)
            except AdminError as exc:
                return exc.code is errors.TOPIC_ALREADY_EXISTS
            return True

        wait_until(created, 30, "ANONYMOUS may create topics")
        assert admin.list_topics() == [f"{opened}-topic"]  # not the guarded one
        admin.alter_configs(f"{opened}-topic", {"retention.ms": "3600000"})
        assert ("retention.ms", "3600000", False) in admin.describe_configs(f"{opened}-topic")
        admin.create_partitions(f"{opened}-topic", 2)
        elected = admin.elect_preferred_leaders({f"{opened}-topic": [0]})
        assert [o.error for o in elected] == [errors.ELECTION_NOT_NEEDED]
        assert [d.path for d in admin.describe_log_dirs()] == [str(broker.log_dir)]
        assert admin.describe_acls()  # Alter on the cluster implies Describe
        admin.delete_topic(f"{opened}-topic")
        assert admin.list_topics() == []
    transactional = stub.InitProducerId(
        pb.InitProducerIdRequest(transactional_id="tx-opened", transaction_timeout_ms=0)
    )
    assert transactional.error == pb.INVALID_TRANSACTION_TIMEOUT  # allowed, then checked
    coordinator = stub.FindCoordinator(pb.FindCoordinatorRequest(group="opened-group"))
    assert coordinator.error in (pb.NONE, pb.COORDINATOR_NOT_AVAILABLE)


def test_delete_topic_enable_false_refuses_every_deletion(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """No authorizer here: the setting alone refuses, on both protocols (Kafka's
    DeleteTopics before v3 has no TOPIC_DELETION_DISABLED: INVALID_REQUEST)."""
    kept = broker_factory(1, {"delete.topic.enable": "false"})
    with AdminClient(kept.endpoint) as admin:
        admin.create_topic("kept", 1, 1)
        assert refused(lambda: admin.delete_topic("kept")) == errors.TOPIC_DELETION_DISABLED
        connection = KafkaConnection(kept.kafka_endpoint, 30)
        try:
            for version, code in ((4, errors.TOPIC_DELETION_DISABLED), (2, errors.INVALID_REQUEST)):
                answer = connection.exchange(
                    20, version, {"topic_names": ["kept"], "timeout": 30_000}
                )
                assert answer.responses[0].error_code == code.number
        finally:
            connection.close()
        assert admin.list_topics() == ["kept"]
    with ZkClient(kept.zookeeper_connect) as zk:
        assert zk.topics_to_delete() == []
    assert (kept.log_dir / "kept-0").is_dir()
