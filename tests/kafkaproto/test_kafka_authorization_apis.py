"""Every Kafka API beyond Produce and Fetch asks the authorizer what Kafka 2.x's
broker asks (docs/security.md, "Which operation each API needs"), judged over
SASL_PLAINTEXT as User:alice against one broker with an ACL authorizer:

* each API, one test each: refused with its AUTHORIZATION_FAILED code while
  alice has no ACL, then answered as usual once she is given exactly the
  operation the table names (and no more: for APIs that check two resources,
  the first ACL alone still leaves the second refusal);
* Metadata lists only the topics she may describe, and auto-creation needs
  Create;
* an unauthorized DeleteTopics leaves the topic's files where they were;
* a confluent-kafka consumer group works end to end with Read on the group and
  the topic, and is refused GROUP_AUTHORIZATION_FAILED without the group's;
* annal's own gRPC admin client, as User:ANONYMOUS (a super user here), is
  served everything.

Set-up goes through User:ANONYMOUS (the PLAINTEXT and gRPC listeners) as a super
user; ACLs are given and taken back through the same broker, whose cache
holds its own changes at once."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
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
from annal.security.scram import ScramCredentialUpsertion, make_credential
from annal.zk.client import ZkClient
from confluent_kafka import admin as ck_admin

from annal import errors
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(90)

SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",  # set-up goes through PLAINTEXT and gRPC
    "sasl.enabled.mechanisms": "PLAIN",
    "offsets.topic.num.partitions": "3",
}

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
Op = AclOperation

NONE = errors.NONE.number
TOPIC_DENIED = errors.TOPIC_AUTHORIZATION_FAILED.number
GROUP_DENIED = errors.GROUP_AUTHORIZATION_FAILED.number
CLUSTER_DENIED = errors.CLUSTER_AUTHORIZATION_FAILED.number
TXN_DENIED = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.number


def allow(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourcePattern.literal(resource_type, name),
        AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW),
    )


class Cluster:
    def __init__(self, broker: BrokerProcess, sasl_port: int) -> None:
        self.broker = broker
        self.sasl_port = sasl_port

    def admin(self) -> AdminClient:
        """annal's admin client over gRPC, as User:ANONYMOUS (a super user here)."""
        return AdminClient(self.broker.endpoint)

    def alice(self) -> KafkaConnection:
        """A Kafka connection logged in as alice (SASL PLAIN)."""
        connection = KafkaConnection(f"127.0.0.1:{self.sasl_port}", 30)
        assert connection.exchange(17, 1, {"mechanism": "PLAIN"}).error_code == NONE
        login = connection.exchange(36, 0, {"auth_bytes": b"\0alice\0alice-secret"})
        assert login.error_code == NONE, login.error_message
        return connection

    def client(self) -> dict[str, Any]:
        """confluent-kafka's settings for alice."""
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }

    @contextmanager
    def granted(self, bindings: list[AclBinding]) -> Iterator[None]:
        """The ACLs exist inside the block (their broker's cache holds its own
        changes at once) and are taken back after it."""
        with self.admin() as admin:
            admin.create_acls(bindings)
        try:
            yield
        finally:
            with self.admin() as admin:
                admin.delete_acls([b.to_filter() for b in bindings])

    def commit_as_super_user(self, group: str, topic: str, offset: int = 5) -> None:
        """A standalone commit of partition 0, over PLAINTEXT."""
        connection = KafkaConnection(self.broker.kafka_endpoint, 30)
        try:

            def committed() -> bool:
                answer = connection.exchange(8, 7, _commit(group, topic, offset))
                return bool(answer.topics[0].partitions[0].error_code == NONE)

            wait_until(committed, 30, f"offsets of {group} committed")
        finally:
            connection.close()


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> Cluster:
    broker = module_broker_factory(1, SETTINGS, extra_listeners="SASL_PLAINTEXT://127.0.0.1:0")
    port = broker.listener_port("SASL_PLAINTEXT")
    with ZkClient(broker.zookeeper_connect) as zk:
        credential = make_credential("SCRAM-SHA-512", "alice-secret")
        zk.upsert_scram_credential("alice", "SCRAM-SHA-512", credential)
    connection = KafkaConnection(broker.kafka_endpoint, 30)
    try:  # the offsets topic, created by the first FindCoordinator, has its leaders
        wait_until(
            lambda: connection.exchange(10, 2, {"key": "g", "key_type": 0}).error_code == NONE,
            60,
            "a group coordinator",
        )
    finally:
        connection.close()
    return Cluster(broker, port)


# -- the requests, as alice sends them ------------------------------------------------


@dataclass(frozen=True)
class Names:
    """The resources of one case, named after it."""

    case: str

    @property
    def topic(self) -> str:
        return f"{self.case}-topic"

    @property
    def group(self) -> str:
        return f"{self.case}-group"


Call = Callable[[KafkaConnection, Names], Any]


def _commit(group: str, topic: str, offset: int) -> dict[str, Any]:
    return {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": "",
        }]}],
    }  # fmt: skip


def metadata(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(3, 9, {
        "topics": [{"name": n.topic}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    })  # fmt: skip
    return int(answer.topics[0].error_code)


def list_offsets(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(2, 5, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    })  # fmt: skip
    return int(answer.topics[0].partitions[0].error_code)


def leader_epoch(replica_id: int) -> Call:
    def call(c: KafkaConnection, n: Names) -> int:
        answer = c.exchange(23, 3, {
            "replica_id": replica_id,
            "topics": [{"topic": n.topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}],
        })  # fmt: skip
        return int(answer.topics[0].partitions[0].error_code)

    return call


def create_topics(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(19, 5, {
        "topics": [{"name": n.topic, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout": 30_000, "validate_only": False,
    })  # fmt: skip
    return int(answer.topics[0].error_code)


def delete_topics(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(20, 4, {"topic_names": [n.topic], "timeout": 30_000})
    return int(answer.responses[0].error_code)


def create_partitions(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(37, 2, {
        "topics": [{"name": n.topic, "count": 2, "assignments": None}],
        "timeout": 30_000, "validate_only": False,
    })  # fmt: skip
    return int(answer.results[0].error_code)


def delete_records(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(21, 1, {
        "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
        "timeout": 30_000,
    })  # fmt: skip
    return int(answer.topics[0].partitions[0].error_code)


def describe_configs(resource_type: int) -> Call:
    def call(c: KafkaConnection, n: Names) -> int:
        name = n.topic if resource_type == 2 else "1"
        answer = c.exchange(32, 3, {
            "resources": [{"resource_type": resource_type, "resource_name": name,
                           "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False,
        })  # fmt: skip
        return int(answer.results[0].error_code)

    return call


def alter_configs(resource_type: int) -> Call:
    def call(c: KafkaConnection, n: Names) -> int:
        name = n.topic if resource_type == 2 else "1"
        answer = c.exchange(33, 1, {
            "resources": [{"resource_type": resource_type, "resource_name": name,
                           "configs": [{"name": "retention.ms", "value": "3600000"}]}],
            "validate_only": False,
        })  # fmt: skip
        return int(answer.responses[0].error_code)

    return call


def incremental_alter_configs(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(44, 1, {
        "resources": [{"resource_type": 2, "resource_name": n.topic, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "7200000"}]}],
        "validate_only": False,
    })  # fmt: skip
    return int(answer.responses[0].error_code)


def elect_leaders(c: KafkaConnection, n: Names) -> tuple[int, int]:
    answer = c.exchange(43, 1, {
        "election_type": 0, "topic_partitions": [{"topic": n.topic, "partitions": [0]}],
        "timeout": 30_000,
    })  # fmt: skip
    partition = answer.replica_election_results[0].partition_result[0]
    return int(answer.error_code), int(partition.error_code)


def alter_reassignments(c: KafkaConnection, n: Names) -> tuple[int, int]:
    answer = c.exchange(45, 0, {
        "timeout": 30_000,
        "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "replicas": [1]}]}],
    })  # fmt: skip
    return int(answer.error_code), int(answer.responses[0].partitions[0].error_code)


def list_reassignments(c: KafkaConnection, n: Names) -> int:
    return int(c.exchange(46, 0, {"timeout": 30_000, "topics": None}).error_code)


def describe_log_dirs(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(35, 3, {"topics": None})
    assert answer.results or answer.error_code  # no dirs only with the refusal
    return int(answer.error_code)


def init_producer_id(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(22, 2, {"transactional_id": None, "transaction_timeout": 60_000})
    return int(answer.error_code)


def find_coordinator(key_type: int) -> Call:
    def call(c: KafkaConnection, n: Names) -> int:
        key = n.group if key_type == 0 else n.case
        code = int(c.exchange(10, 2, {"key": key, "key_type": key_type}).error_code)
        # the first ask for a transaction coordinator creates __transaction_state
        return NONE if code == errors.COORDINATOR_NOT_AVAILABLE.number else code

    return call


# Past authorization, a transaction API on a transactional id nobody initialized is
# answered by the coordinator (or its absence): served, for these tests.
_COORDINATOR_ANSWERS = {
    errors.NOT_COORDINATOR.number, errors.COORDINATOR_NOT_AVAILABLE.number,
    errors.COORDINATOR_LOAD_IN_PROGRESS.number, errors.INVALID_PRODUCER_ID_MAPPING.number,
    errors.TRANSACTIONAL_ID_NOT_FOUND.number,
}  # fmt: skip


def _served(code: int) -> int:
    return NONE if code in _COORDINATOR_ANSWERS else code


def add_partitions_to_txn(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(24, 1, {
        "v3_and_below_transactional_id": n.case, "v3_and_below_producer_id": 0,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": n.topic, "partitions": [0]}],
    })  # fmt: skip
    (topic,) = answer.results_by_topic_v3_and_below
    (partition,) = topic.results_by_partition
    return _served(int(partition.partition_error_code))


def add_offsets_to_txn(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(25, 1, {
        "transactional_id": n.case, "producer_id": 0, "producer_epoch": 0, "group_id": n.group,
    })  # fmt: skip
    return _served(int(answer.error_code))


def end_txn(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(26, 1, {
        "transactional_id": n.case, "producer_id": 0, "producer_epoch": 0, "committed": False,
    })  # fmt: skip
    return _served(int(answer.error_code))


def describe_transactions(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(65, 0, {"transactional_ids": [n.case]})
    (state,) = answer.transaction_states
    return _served(int(state.error_code))


def join_group(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(11, 5, {
        "group_id": n.group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    })  # fmt: skip
    return int(answer.error_code)


def sync_group(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(14, 3, {
        "group_id": n.group, "generation_id": 1, "member_id": "m", "group_instance_id": None,
        "assignments": [],
    })  # fmt: skip
    return int(answer.error_code)


def heartbeat(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(12, 3, {
        "group_id": n.group, "generation_id": 1, "member_id": "m", "group_instance_id": None,
    })  # fmt: skip
    return int(answer.error_code)


def leave_group(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(13, 3, {
        "group_id": n.group, "members": [{"member_id": "m", "group_instance_id": None}],
    })  # fmt: skip
    return int(answer.error_code)


def offset_commit(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(8, 7, _commit(n.group, n.topic, 3))
    return int(answer.topics[0].partitions[0].error_code)


def offset_fetch(c: KafkaConnection, n: Names) -> tuple[int, Any]:
    """(the answer's error, partition 0's (error, committed offset) or None)."""
    answer = c.exchange(9, 5, {
        "group_id": n.group, "topics": [{"name": n.topic, "partition_indexes": [0]}],
    })  # fmt: skip
    found = [(p.error_code, p.committed_offset) for t in answer.topics for p in t.partitions]
    return int(answer.error_code), (found[0] if found else None)


def offset_fetch_all(c: KafkaConnection, n: Names) -> tuple[int, list[str]]:
    """(the answer's error, the topics it shows) for every partition of the group."""
    answer = c.exchange(9, 5, {"group_id": n.group, "topics": None})
    return int(answer.error_code), [t.name for t in answer.topics]


def describe_groups(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(15, 4, {"groups": [n.group], "include_authorized_operations": False})
    return int(answer.groups[0].error_code)


def list_groups(c: KafkaConnection, n: Names) -> bool:
    return n.group in [g.group_id for g in c.exchange(16, 3, {}).groups]


def delete_groups(c: KafkaConnection, n: Names) -> int:
    return int(c.exchange(42, 1, {"groups_names": [n.group]}).results[0].error_code)


def offset_delete(c: KafkaConnection, n: Names) -> tuple[int, int | None]:
    answer = c.exchange(47, 0, {
        "group_id": n.group,
        "topics": [{"name": n.topic, "partitions": [{"partition_index": 0}]}],
    })  # fmt: skip
    found = [p.error_code for t in answer.topics for p in t.partitions]
    return int(answer.error_code), (found[0] if found else None)


def create_acls(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(30, 2, {"creations": [{
        "resource_type": 2, "resource_name": n.topic, "resource_pattern_type": 3,
        "principal": "User:bob", "host": "*", "operation": 3, "permission_type": 3,
    }]})  # fmt: skip
    return int(answer.results[0].error_code)


def describe_acls(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(29, 2, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1,
    })  # fmt: skip
    return int(answer.error_code)


def delete_acls(c: KafkaConnection, n: Names) -> int:
    answer = c.exchange(31, 2, {"filters": [{
        "resource_type_filter": 2, "resource_name_filter": n.topic, "pattern_type_filter": 3,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1,
    }]})  # fmt: skip
    return int(answer.filter_results[0].error_code)


def describe_scram(c: KafkaConnection, n: Names) -> int:
    return int(c.exchange(50, 0, {"users": None}).error_code)


def alter_scram(c: KafkaConnection, n: Names) -> int:
    salt = b"s" * 24
    answer = c.exchange(51, 0, {"deletions": [], "upsertions": [{
        "name": n.case, "mechanism": 2, "iterations": 4096, "salt": salt,
        "salted_password": hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096),
    }]})  # fmt: skip
    return int(answer.results[0].error_code)


def describe_cluster(c: KafkaConnection, n: Names) -> tuple[int, bool]:
    """(the answer's error, whether Describe is among the cluster's authorized operations)."""
    answer = c.exchange(60, 0, {"include_cluster_authorized_operations": True})
    return int(answer.error_code), bool(answer.cluster_authorized_operations & (1 << 8))


# -- the cases ------------------------------------------------------------------------


Grant = tuple[ResourceType, str, AclOperation]  # "topic"/"group" stand for the case's names


@dataclass(frozen=True)
class Case:
    """``stages``: what the call answers with no ACL, then after each further grant."""

    call: Call
    stages: list[tuple[list[Grant], Any]]
    topic: bool = True  # the case's topic exists (one partition)
    offsets: bool = False  # the case's group has a committed offset of it
    after_denied: list[Callable[[Cluster, Names], None]] = field(default_factory=list)


def topic_files_stay(cluster: Cluster, n: Names) -> None:
    assert (cluster.broker.log_dir / f"{n.topic}-0").is_dir()
    with cluster.admin() as admin:
        assert n.topic in admin.list_topics()


def case(call: Call, denied: Any, grants: list[Grant], answered: Any, **kw: Any) -> Case:
    return Case(call, [([], denied), (grants, answered)], **kw)


T, G, C = "topic", "group", "kafka-cluster"

CASES: dict[str, Case] = {
    "metadata": case(metadata, TOPIC_DENIED, [(TOPIC, T, Op.DESCRIBE)], NONE),
    "list-offsets": case(list_offsets, TOPIC_DENIED, [(TOPIC, T, Op.DESCRIBE)], NONE),
    "epoch-consumer": case(leader_epoch(-1), TOPIC_DENIED, [(TOPIC, T, Op.DESCRIBE)], NONE),
    "epoch-replica": Case(
        leader_epoch(1),
        [
            ([], CLUSTER_DENIED),
            ([(TOPIC, T, Op.DESCRIBE)], CLUSTER_DENIED),  # a replica needs ClusterAction
            ([(CLUSTER, C, Op.CLUSTER_ACTION)], NONE),
        ],
    ),
    "create-topics": case(create_topics, TOPIC_DENIED, [(TOPIC, T, Op.CREATE)], NONE, topic=False),
    "create-topics-cluster": case(
        create_topics, TOPIC_DENIED, [(CLUSTER, C, Op.CREATE)], NONE, topic=False
    ),
    "delete-topics": case(
        delete_topics,
        TOPIC_DENIED,
        [(TOPIC, T, Op.DELETE)],
        NONE,
        after_denied=[topic_files_stay],
    ),
    "create-partitions": case(create_partitions, TOPIC_DENIED, [(TOPIC, T, Op.ALTER)], NONE),
    "delete-records": case(delete_records, TOPIC_DENIED, [(TOPIC, T, Op.DELETE)], NONE),
    "describe-configs": case(
        describe_configs(2), TOPIC_DENIED, [(TOPIC, T, Op.DESCRIBE_CONFIGS)], NONE
    ),
    "describe-broker-configs": case(
        describe_configs(4), CLUSTER_DENIED, [(CLUSTER, C, Op.DESCRIBE_CONFIGS)], NONE
    ),
    "alter-configs": case(alter_configs(2), TOPIC_DENIED, [(TOPIC, T, Op.ALTER_CONFIGS)], NONE),
    "alter-broker-configs": case(  # allowed, then refused as annal's are static
        alter_configs(4),
        CLUSTER_DENIED,
        [(CLUSTER, C, Op.ALTER_CONFIGS)],
        errors.INVALID_REQUEST.number,
    ),
    "incremental-alter-configs": case(
        incremental_alter_configs, TOPIC_DENIED, [(TOPIC, T, Op.ALTER_CONFIGS)], NONE
    ),
    "elect-leaders": case(
        elect_leaders,
        (CLUSTER_DENIED, CLUSTER_DENIED),
        [(CLUSTER, C, Op.ALTER)],
        (NONE, errors.ELECTION_NOT_NEEDED.number),
    ),
    "alter-reassignments": case(
        alter_reassignments,
        (CLUSTER_DENIED, CLUSTER_DENIED),
        [(CLUSTER, C, Op.ALTER)],
        (NONE, NONE),
    ),
    "list-reassignments": case(
        list_reassignments, CLUSTER_DENIED, [(CLUSTER, C, Op.DESCRIBE)], NONE, topic=False
    ),
    "describe-log-dirs": case(
        describe_log_dirs, CLUSTER_DENIED, [(CLUSTER, C, Op.DESCRIBE)], NONE, topic=False
    ),
    "init-producer-id": case(
        init_producer_id, CLUSTER_DENIED, [(CLUSTER, C, Op.IDEMPOTENT_WRITE)], NONE, topic=False
    ),
    "init-producer-id-topic-write": case(
        init_producer_id, CLUSTER_DENIED, [(TOPIC, T, Op.WRITE)], NONE
    ),
    "find-coordinator": case(
        find_coordinator(0), GROUP_DENIED, [(GROUP, G, Op.DESCRIBE)], NONE, topic=False
    ),
    "find-txn-coordinator": case(
        find_coordinator(1),
        TXN_DENIED,
        [(TXN, "find-txn-coordinator", Op.DESCRIBE)],
        NONE,
        topic=False,
    ),
    "add-partitions-to-txn": Case(
        add_partitions_to_txn,
        [
            ([], TXN_DENIED),
            ([(TXN, "add-partitions-to-txn", Op.WRITE)], TOPIC_DENIED),
            ([(TOPIC, T, Op.WRITE)], NONE),
        ],
    ),
    "add-offsets-to-txn": Case(
        add_offsets_to_txn,
        [
            ([], TXN_DENIED),
            ([(TXN, "add-offsets-to-txn", Op.WRITE)], GROUP_DENIED),
            ([(GROUP, G, Op.READ)], NONE),
        ],
        topic=False,
    ),
    "end-txn": case(end_txn, TXN_DENIED, [(TXN, "end-txn", Op.WRITE)], NONE, topic=False),
    "describe-transactions": case(
        describe_transactions,
        TXN_DENIED,
        [(TXN, "describe-transactions", Op.DESCRIBE)],
        NONE,
        topic=False,
    ),
    "join-group": case(  # allowed, then sent back for its member id (KIP-394)
        join_group,
        GROUP_DENIED,
        [(GROUP, G, Op.READ)],
        errors.MEMBER_ID_REQUIRED.number,
        topic=False,
    ),
    "sync-group": case(
        sync_group,
        GROUP_DENIED,
        [(GROUP, G, Op.READ)],
        errors.UNKNOWN_MEMBER_ID.number,
        topic=False,
    ),
    "heartbeat": case(
        heartbeat,
        GROUP_DENIED,
        [(GROUP, G, Op.READ)],
        errors.UNKNOWN_MEMBER_ID.number,
        topic=False,
    ),
    "leave-group": case(
        leave_group,
        GROUP_DENIED,
        [(GROUP, G, Op.READ)],
        errors.UNKNOWN_MEMBER_ID.number,
        topic=False,
    ),
    "offset-commit": Case(
        offset_commit,
        [
            ([], GROUP_DENIED),
            ([(GROUP, G, Op.READ)], TOPIC_DENIED),
            ([(TOPIC, T, Op.READ)], NONE),
        ],
    ),
    "offset-fetch": Case(
        offset_fetch,
        [
            ([], (GROUP_DENIED, None)),
            ([(GROUP, G, Op.DESCRIBE)], (NONE, (TOPIC_DENIED, -1))),
            ([(TOPIC, T, Op.DESCRIBE)], (NONE, (NONE, 5))),
        ],
        offsets=True,
    ),
    "offset-fetch-all": Case(
        offset_fetch_all,
        [
            ([], (GROUP_DENIED, [])),
            ([(GROUP, G, Op.DESCRIBE)], (NONE, [])),  # the topic is left out
            ([(TOPIC, T, Op.DESCRIBE)], (NONE, ["offset-fetch-all-topic"])),
        ],
        offsets=True,
    ),
    "describe-groups": case(
        describe_groups, GROUP_DENIED, [(GROUP, G, Op.DESCRIBE)], NONE, offsets=True
    ),
    "list-groups": case(list_groups, False, [(GROUP, G, Op.DESCRIBE)], True, offsets=True),
    "list-groups-cluster": case(
        list_groups, False, [(CLUSTER, C, Op.DESCRIBE)], True, offsets=True
    ),
    "delete-groups": case(delete_groups, GROUP_DENIED, [(GROUP, G, Op.DELETE)], NONE, offsets=True),
    "offset-delete": Case(
        offset_delete,
        [
            ([], (GROUP_DENIED, None)),
            ([(GROUP, G, Op.DELETE)], (NONE, TOPIC_DENIED)),
            ([(TOPIC, T, Op.READ)], (NONE, NONE)),
        ],
        offsets=True,
    ),
    "create-acls": case(create_acls, CLUSTER_DENIED, [(CLUSTER, C, Op.ALTER)], NONE, topic=False),
    "describe-acls": case(
        describe_acls, CLUSTER_DENIED, [(CLUSTER, C, Op.DESCRIBE)], NONE, topic=False
    ),
    "delete-acls": case(delete_acls, CLUSTER_DENIED, [(CLUSTER, C, Op.ALTER)], NONE, topic=False),
    "describe-scram": case(
        describe_scram, CLUSTER_DENIED, [(CLUSTER, C, Op.DESCRIBE)], NONE, topic=False
    ),
    "alter-scram": case(alter_scram, CLUSTER_DENIED, [(CLUSTER, C, Op.ALTER)], NONE, topic=False),
    "describe-cluster": case(  # never refused; the operations are told to who may Describe
        describe_cluster, (NONE, False), [(CLUSTER, C, Op.DESCRIBE)], (NONE, True), topic=False
    ),
}


def binding(grant: Grant, names: Names) -> AclBinding:
    resource_type, name, operation = grant
    name = {T: names.topic, G: names.group}.get(name, name)
    return allow(resource_type, name, operation)


@pytest.mark.parametrize("name", list(CASES))
def test_each_api_is_refused_without_its_acl_and_served_with_it(
    cluster: Cluster, name: str
) -> None:
    spec, names = CASES[name], Names(name)
    if spec.topic:
        with cluster.admin() as admin:
            admin.create_topic(names.topic, 1, 1)
    if spec.offsets:
        cluster.commit_as_super_user(names.group, names.topic)
    connection = cluster.alice()
    given: list[AclBinding] = []
    try:
        for stage, (grants, expected) in enumerate(spec.stages):
            if grants:
                bindings = [binding(g, names) for g in grants]
                with cluster.admin() as admin:
                    admin.create_acls(bindings)
                given.extend(bindings)
            assert spec.call(connection, names) == expected, f"stage {stage}: {grants}"
            if stage == 0:
                for check in spec.after_denied:
                    check(cluster, names)
    finally:
        connection.close()
        if given:
            with cluster.admin() as admin:
                admin.delete_acls([b.to_filter() for b in given])


def test_refusals_name_the_principal_and_are_logged(cluster: Cluster) -> None:
    """The message a refused request carries, and the authorizer's log line."""
    names = Names("messages")
    with cluster.admin() as admin:
        admin.create_topic(names.topic, 1, 1)
    connection = cluster.alice()
    try:
        answer = connection.exchange(37, 2, {
            "topics": [{"name": names.topic, "count": 2, "assignments": None}],
            "timeout": 30_000, "validate_only": False,
        })  # fmt: skip
        transactional = connection.exchange(
            22, 2, {"transactional_id": "tx-messages", "transaction_timeout": 60_000}
        )
    finally:
        connection.close()
    assert answer.results[0].error_message == "User:alice may not Alter Topic:messages-topic"
    assert transactional.error_code == TXN_DENIED
    log = cluster.broker.log_path.read_text()
    assert "DENIED: principal User:alice" in log and "operation Alter on resource Topic" in log
    assert "operation Write on resource TransactionalId:LITERAL:tx-messages" in log


def test_metadata_lists_only_describable_topics_and_auto_creation_needs_create(
    cluster: Cluster,
) -> None:
    with cluster.admin() as admin:
        admin.create_topic("listed-seen", 1, 1)
        admin.create_topic("listed-hidden", 1, 1)
    grants = [allow(TOPIC, "listed-seen", Op.READ), allow(TOPIC, "listed-new", Op.DESCRIBE)]
    with cluster.granted(grants):
        admin = ck_admin.AdminClient(cluster.client())
        listed = admin.list_topics(timeout=30).topics
        assert "listed-seen" in listed
        assert "listed-hidden" not in listed and "__consumer_offsets" not in listed
        named = admin.list_topics(topic="listed-hidden", timeout=30).topics["listed-hidden"]
        assert named.error is not None and named.error.code() == TOPIC_DENIED

        connection = cluster.alice()
        try:

            def auto_create(name: str, allowed: bool = True) -> int:
                answer = connection.exchange(3, 9, {
                    "topics": [{"name": name}], "allow_auto_topic_creation": allowed,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False,
                })  # fmt: skip
                return int(answer.topics[0].error_code)

            # may describe, may not create: refused (no auto-creation asked: unknown)
            unknown = errors.UNKNOWN_TOPIC_OR_PARTITION.number
            assert auto_create("listed-new", allowed=False) == unknown
            assert auto_create("listed-new") == TOPIC_DENIED
            assert auto_create("listed-unnamed") == TOPIC_DENIED  # may not even describe
            with cluster.admin() as admin_client:
                assert "listed-new" not in admin_client.list_topics()
            with cluster.granted([allow(TOPIC, "listed-new", Op.CREATE)]):
                assert auto_create("listed-new") in (NONE, errors.LEADER_NOT_AVAILABLE.number)
            with cluster.admin() as admin_client:
                wait_until(lambda: "listed-new" in admin_client.list_topics(), 30, "created")
        finally:
            connection.close()


def consume(config: dict[str, Any], topic: str, group: str, wanted: int) -> list[bytes] | int:
    """The values a subscribed consumer reads and commits, or the first error it gets."""
    consumer = ck.Consumer({
        **config, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000,
    })  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < wanted and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                return int(message.error().code())
            values.append(message.value())
        consumer.commit(asynchronous=False)
        return values
    finally:
        consumer.close()


def test_a_consumer_group_needs_read_on_the_group_and_the_topic(cluster: Cluster) -> None:
    topic, group = "grouped", "grouped-readers"
    with cluster.admin() as admin:
        admin.create_topic(topic, 1, 1)
    producer = ck.Producer({"bootstrap.servers": cluster.broker.kafka_endpoint})
    for value in (b"a", b"b", b"c"):
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    with cluster.granted([allow(TOPIC, topic, Op.READ)]):
        assert consume(cluster.client(), topic, group, 3) == GROUP_DENIED
        with cluster.granted([allow(GROUP, group, Op.READ)]):
            assert consume(cluster.client(), topic, group, 3) == [b"a", b"b", b"c"]
    connection = KafkaConnection(cluster.broker.kafka_endpoint, 30)
    try:
        answer = connection.exchange(9, 5, {
            "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
        })  # fmt: skip
    finally:
        connection.close()
    assert answer.topics[0].partitions[0].committed_offset == 3


def test_grpc_admin_is_served_to_a_super_user(cluster: Cluster) -> None:
    """User:ANONYMOUS is in super.users: annal's admin client over plaintext gRPC is
    served every administrative request."""
    with cluster.admin() as admin:
        admin.create_topic("super-topic", 1, 1)
        cluster.commit_as_super_user("super-group", "super-topic")
        admin.create_partitions("super-topic", 2)
        admin.alter_configs("super-topic", {"retention.ms": "3600000"})
        assert ("retention.ms", "3600000", False) in admin.describe_configs("super-topic")
        outcomes = admin.elect_preferred_leaders({"super-topic": [0]})
        assert [o.error for o in outcomes] == [errors.ELECTION_NOT_NEEDED]
        moved = admin.reassign_partitions({TopicPartition("super-topic", 1): [1]})
        assert [o.error for o in moved] == [errors.NONE]
        deleted = admin.delete_records({TopicPartition("super-topic", 0): 0})
        assert [d.error for d in deleted] == [errors.NONE]
        assert [d.path for d in admin.describe_log_dirs()] == [str(cluster.broker.log_dir)]
        assert "super-group" in [g for g, _, _ in admin.list_groups()]
        admin.create_acls([allow(TOPIC, "super-topic", Op.READ)])
        assert allow(TOPIC, "super-topic", Op.READ) in admin.describe_acls()
        admin.delete_acls([allow(TOPIC, "super-topic", Op.READ).to_filter()])
        admin.alter_user_scram_credentials(
            "super-user", [ScramCredentialUpsertion("SCRAM-SHA-256", "pw-super", 4096)]
        )
        assert "super-user" in [u.user for u in admin.describe_user_scram_credentials()]
        admin.delete_topic("super-topic")
        assert "super-topic" not in admin.list_topics()


def test_authorized_operations_are_reported_per_topic_group_and_cluster(
    cluster: Cluster,
) -> None:
    """KIP-430: Metadata (v8+) and DescribeGroups (v3+) report, when asked, the
    operations the caller may do on each topic and group, as confluent-kafka
    shows them (Read implies Describe)."""
    with cluster.admin() as admin:
        admin.create_topic("ops-topic", 1, 1)
    cluster.commit_as_super_user("ops-group", "ops-topic")
    grants = [allow(TOPIC, "ops-topic", Op.READ), allow(TOPIC, "ops-topic", Op.DESCRIBE_CONFIGS),
              allow(GROUP, "ops-group", Op.READ), allow(CLUSTER, C, Op.DESCRIBE)]  # fmt: skip
    with cluster.granted(grants):
        admin = ck_admin.AdminClient(cluster.client())
        topics = ck.TopicCollection(["ops-topic"])
        described = admin.describe_topics(topics, include_authorized_operations=True)
        topic = described["ops-topic"].result(30)
        assert sorted(op.name for op in topic.authorized_operations) == [
            "DESCRIBE", "DESCRIBE_CONFIGS", "READ",
        ]  # fmt: skip
        groups = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)
        group = groups["ops-group"].result(30)
        assert sorted(op.name for op in group.authorized_operations) == ["DESCRIBE", "READ"]
        connection = cluster.alice()
        try:  # Metadata v8-v10 may be asked for the cluster's too
            answer = connection.exchange(3, 10, {
                "topics": None, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": True,
                "include_topic_authorized_operations": False,
            })  # fmt: skip
        finally:
            connection.close()
        assert answer.cluster_authorized_operations == 1 << Op.DESCRIBE.value
        assert [t.topic_authorized_operations for t in answer.topics] == [-(2**31)]  # not asked
