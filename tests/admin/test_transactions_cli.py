"""``annal transactions`` (kafka-transactions.sh) on a real three-broker cluster with
real ZooKeeper: an open transaction of confluent-kafka's transactional producer is
listed, described and seen in its partitions' producer state (and does not hang);
a transaction no coordinator knows, written by hand, is found by find-hanging and
aborted by its start offset, after which read_committed consumers move past it.
Under an ACL authorizer the refusals name what is missing."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck
import grpc
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.client import KafkaConnection
from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.storage.records import Record, encode_batch
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from annal.zk.layout import TopicAssignment

from annal.cli import main

pytestmark = pytest.mark.timeout(240)

PRODUCE = 0
BIN = Path(__file__).resolve().parents[2] / "bin"
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Callable[..., BrokerProcess]) -> list[BrokerProcess]:
    settings = {"transaction.state.log.num.partitions": "4"}
    return [module_broker_factory(i, settings) for i in (1, 2, 3)]


def grpc_bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.endpoint for b in cluster)


def new_topic(cluster: list[BrokerProcess]) -> str:
    """A topic of three partitions of two replicas, partition i led by broker i + 1
    and followed by the next one (1, 2, 3, 1), once every broker's metadata says so."""
    name = f"txcli{next(_names)}"
    assignment = {p: [p + 1, (p + 1) % 3 + 1] for p in range(3)}
    with AdminClient(cluster[0].endpoint) as admin:
        admin.create_topic(name, assignment=assignment)

    def led() -> bool:
        for broker in cluster:
            with grpc.insecure_channel(broker.endpoint) as channel:
                answer = annal_pb2_grpc.AnnalStub(channel).Metadata(
                    pb.MetadataRequest(topics=[name]), timeout=10
                )
            found = {p.partition: p.leader for t in answer.topics for p in t.partitions}
            if found != {p: replicas[0] for p, replicas in assignment.items()}:
                return False
        return True

    wait_until(led, 60, f"the leaders of {name}")
    return name


def transactions(
    capsys: pytest.CaptureFixture[str], *args: str, bootstrap: str
) -> tuple[int, list[list[str]], str]:
    """``annal transactions`` in this process: its exit status, its table (cells of
    each line, stripped) and its standard error."""
    code = main(["transactions", "--bootstrap-server", bootstrap, *args])
    out, err = capsys.readouterr()
    rows = [[cell.strip() for cell in line.split("\t")[:-1]] for line in out.splitlines()]
    return code, rows, err


def test_an_open_transaction_is_listed_described_and_not_hanging(
    cluster: list[BrokerProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topic = new_topic(cluster)
    bootstrap = grpc_bootstrap(cluster)
    tid = f"cli-app-{next(_names)}"
    producer = ck.Producer({
        "bootstrap.servers": ",".join(b.kafka_endpoint for b in cluster),
        "transactional.id": tid, "transaction.timeout.ms": 300_000,
    })  # fmt: skip
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    try:
        code, rows, err = transactions(capsys, "--list", bootstrap=bootstrap)
        assert code == 0, err
        assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        (mine,) = [r for r in rows[1:] if r[0] == tid]
        assert mine[3] == "Ongoing" and int(mine[1]) in (1, 2, 3)
        pid = mine[2]

        # Kafka's listener as the bootstrap server, and --command-config
        properties = tmp_path / "client.properties"
        properties.write_text("security.protocol=PLAINTEXT\n")
        kafka = cluster[1].kafka_endpoint
        code, rows, err = transactions(
            capsys, "describe", "--transactional-id", tid, "--command-config", str(properties),
            bootstrap=kafka,
        )  # fmt: skip
        assert code == 0, err
        assert len(rows) == 2 and rows[0][0] == "CoordinatorId"
        row = dict(zip(rows[0], rows[1], strict=True))
        assert row["CoordinatorId"] == mine[1] and row["TransactionalId"] == tid
        assert (row["ProducerId"], row["TransactionState"]) == (pid, "Ongoing")
        assert row["TransactionTimeoutMs"] == "300000"
        started = int(row["CurrentTransactionStartTimeMs"])
        assert abs(started - time.time() * 1000) < 120_000
        assert int(row["TransactionDurationMs"]) >= 0
        assert row["TopicPartitions"] == f"{topic}-0,{topic}-1"
        epoch = row["ProducerEpoch"]

        code, rows, err = transactions(
            capsys, "describe-producers", "--topic", topic, "--partition", "1", bootstrap=bootstrap
        )
        assert code == 0, err
        assert rows[0] == [
            "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
            "LastTimestamp", "CurrentTransactionStartOffset",
        ]  # fmt: skip
        assert rows[1][:4] == [pid, epoch, "-1", "1"]
        assert rows[1][5] == "0"  # its first record of the partition opened the transaction

        # the coordinator holds it Ongoing on both partitions: nothing hangs
        code, rows, err = transactions(
            capsys, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0",
            bootstrap=bootstrap,
        )  # fmt: skip
        assert (code, rows[1:]) == (0, []), err
        assert rows[0][-1] == "Duration(min)"
    finally:
        producer.abort_transaction(60)

    def state() -> list[str]:
        return [r[3] for r in transactions(capsys, "list", bootstrap=bootstrap)[1] if r[0] == tid]

    wait_until(lambda: state() == ["CompleteAbort"], 30, "the abort complete")

    def producers() -> list[str]:
        args = ("describe-producers", "--topic", topic, "--partition", "1")
        return transactions(capsys, *args, bootstrap=bootstrap)[1][1]

    wait_until(lambda: producers()[5] == "None", 30, "the ABORT marker on the partition")
    assert int(producers()[2]) >= 0  # the marker's coordinator epoch


def hand_made_transaction(cluster: list[BrokerProcess], topic: str, partition: int) -> int:
    """A transactional batch of a producer id no transactional id has (an idempotent
    producer's, from InitProducerId), sent with Kafka's Produce as transactional id
    ``by-hand`` to the partition's leader, then a plain record after it; the
    producer id."""
    leader = cluster[partition]  # new_topic: partition i is led by broker i + 1
    with grpc.insecure_channel(leader.endpoint) as channel:
        answer = annal_pb2_grpc.AnnalStub(channel).InitProducerId(
            pb.InitProducerIdRequest(), timeout=15
        )
    pid = answer.producer_id
    now = int(time.time() * 1000)
    hanging = encode_batch(
        [Record(0, now, None, b"never-decided")],
        producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True,
    )  # fmt: skip
    after = encode_batch([Record(0, now, None, b"after")])
    connection = KafkaConnection(leader.kafka_endpoint, 30)
    try:
        for records, transactional_id in ((hanging, "by-hand"), (after, None)):
            sent = connection.exchange(PRODUCE, 8, {
                "transactional_id": transactional_id, "acks": -1, "timeout": 10_000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": partition, "records": records}]}],
            })  # fmt: skip
            assert sent.responses[0].partition_responses[0].error_code == 0
    finally:
        connection.close()
    return pid


def read_committed(cluster: list[BrokerProcess], topic: str, partition: int) -> list[bytes]:
    """What a read_committed consumer of the partition reads within a few seconds."""
    consumer = ck.Consumer({
        "bootstrap.servers": ",".join(b.kafka_endpoint for b in cluster),
        "group.id": f"g{next(_names)}", "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })  # fmt: skip
    consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    return seen


def test_a_hanging_transaction_is_found_and_aborted(
    cluster: list[BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(cluster)
    bootstrap = grpc_bootstrap(cluster)
    pid = hand_made_transaction(cluster, topic, 2)
    assert read_committed(cluster, topic, 2) == []  # held back at the transaction

    # younger than the largest transaction timeout (15 minutes): not yet hanging
    code, rows, err = transactions(capsys, "--find-hanging", "--topic", topic, bootstrap=bootstrap)
    assert (code, len(rows)) == (0, 1), err
    for scope in (["--topic", topic], ["--topic", topic, "--partition", "2"], ["--broker-id", "1"]):
        code, rows, err = transactions(
            capsys, "find-hanging", *scope, "--max-transaction-timeout", "0", bootstrap=bootstrap
        )
        assert code == 0, err
        assert rows[0] == [
            "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
            "StartOffset", "LastTimestamp", "Duration(min)",
        ]  # fmt: skip
        assert [r[:6] for r in rows[1:]] == [[topic, "2", str(pid), "0", "-1", "0"]], scope
    # as Kafka's script, in its own process, through a Kafka listener
    script = subprocess.run(
        [str(BIN / "kafka-transactions.sh"), "--bootstrap-server", cluster[0].kafka_endpoint,
         "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ANNAL": f"{sys.executable} -m annal"},
    )  # fmt: skip
    assert script.returncode == 0, script.stderr
    cells = [cell.strip() for cell in script.stdout.splitlines()[1].split("\t")]
    assert cells[:3] == [topic, "2", str(pid)]
    code, rows, err = transactions(
        capsys, "find-hanging", "--broker-id", "2", "--max-transaction-timeout", "0",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert code == 0, err
    assert [r for r in rows[1:] if r[0] == topic] == []  # broker 2 holds no replica of it
    code, rows, err = transactions(
        capsys, "abort", "--topic", topic, "--partition", "2", "--start-offset", "1",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert code == 1
    assert f"no open transaction starts at offset 1 of {topic}-2" in err
    assert "hint: annal transactions describe-producers" in err

    code, rows, err = transactions(
        capsys, "--abort", "--topic", topic, "--partition", "2", "--start-offset", "0",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert code == 0, err
    assert read_committed(cluster, topic, 2) == [b"after"]
    code, rows, err = transactions(
        capsys, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert (code, rows[1:]) == (0, []), err
    code, rows, err = transactions(
        capsys, "describe-producers", "--topic", topic, "--partition", "2", bootstrap=bootstrap
    )
    assert [r[:3] + r[5:] for r in rows[1:]] == [[str(pid), "0", "0", "None"]]
    # by producer id: a marker of a newer epoch is one more marker (as in Kafka); older
    # producer or coordinator epochs than the partition's last are refused

    def abort(epoch: int, coordinator_epoch: int) -> tuple[int, str]:
        code, _, err = transactions(
            capsys, "abort", "--topic", topic, "--partition", "2", "--producer-id", str(pid),
            "--producer-epoch", str(epoch), "--coordinator-epoch", str(coordinator_epoch),
            bootstrap=bootstrap,
        )  # fmt: skip
        return code, err

    assert abort(1, 3) == (0, "")
    code, rows, err = transactions(
        capsys, "describe-producers", "--topic", topic, "--partition", "2", bootstrap=bootstrap
    )
    assert [r[:3] for r in rows[1:]] == [[str(pid), "1", "3"]]
    code, err = abort(0, 3)
    assert code == 1
    assert "INVALID_PRODUCER_EPOCH" in err and "hint: the partition has seen a newer epoch" in err
    code, err = abort(1, 2)
    assert code == 1
    assert "TRANSACTION_COORDINATOR_FENCED" in err and "LatestCoordinatorEpoch" in err


def test_describe_of_an_unknown_id_and_partition(
    cluster: list[BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = grpc_bootstrap(cluster)
    code, _, err = transactions(
        capsys, "describe", "--transactional-id", "nobody", bootstrap=bootstrap
    )
    assert code == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in err and "annal transactions list" in err
    code, _, err = transactions(
        capsys, "describe-producers", "--topic", "no-such-topic", "--partition", "0",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION: topic 'no-such-topic' does not exist" in err


GUARDED = "guarded"


def anonymous(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> tuple[ResourcePattern, list[AccessControlEntry]]:
    """An ACL of User:ANONYMOUS, as ``ZkClient.add_acls`` takes it."""
    entry = AccessControlEntry("User:ANONYMOUS", "*", operation, permission)
    return ResourcePattern.literal(resource_type, name), [entry]


def test_refusals_under_an_authorizer_are_clear(
    zk_connect: str,
    broker_factory: Callable[..., BrokerProcess],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Plaintext gRPC callers are User:ANONYMOUS, here no super user: it may talk as a
    broker (ClusterAction, which the controller's requests need) and Describe the
    topic, nothing else."""
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        zk.add_acls(*anonymous(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION))
        zk.add_acls(*anonymous(ResourceType.TOPIC, GUARDED, AclOperation.DESCRIBE))
    settings = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }
    broker = broker_factory(1, settings)
    with ZkClient(zk_connect) as zk:
        zk.create_topic(GUARDED, TopicAssignment({0: (1,)}))
    wait_until(lambda: (broker.log_dir / f"{GUARDED}-0").is_dir(), 30, "the topic's log")
    bootstrap = broker.endpoint

    def producers() -> tuple[int, str]:
        code, _, err = transactions(
            capsys, "describe-producers", "--topic", GUARDED, "--partition", "0",
            bootstrap=bootstrap,
        )  # fmt: skip
        return code, err

    wait_until(lambda: "TOPIC_AUTHORIZATION_FAILED" in producers()[1], 30, "a refusal")
    code, err = producers()
    assert code == 1
    assert "User:ANONYMOUS may not Read Topic:guarded" in err
    assert "needs Read on its topic" in err
    code, _, err = transactions(capsys, "describe", "--transactional-id", "x", bootstrap=bootstrap)
    assert code == 1
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in err
    assert "Describe on the TransactionalId" in err
    code, rows, err = transactions(capsys, "list", bootstrap=bootstrap)
    assert (code, rows[1:]) == (0, []), err  # only the ids it may describe

    with ZkClient(zk_connect) as zk:
        denied = AclPermissionType.DENY
        cluster_action = AclOperation.CLUSTER_ACTION
        zk.add_acls(*anonymous(ResourceType.CLUSTER, "kafka-cluster", cluster_action, denied))

    def abort() -> tuple[int, str]:
        code, _, err = transactions(
            capsys, "abort", "--topic", GUARDED, "--partition", "0", "--producer-id", "7",
            "--producer-epoch", "0", "--coordinator-epoch", "0", bootstrap=bootstrap,
        )  # fmt: skip
        return code, err

    wait_until(lambda: "CLUSTER_AUTHORIZATION_FAILED" in abort()[1], 30, "the abort refused")
    code, err = abort()
    assert code == 1
    assert "ClusterAction on the cluster" in err
