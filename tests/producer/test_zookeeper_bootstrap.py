"""Clients and console tools that find the cluster through ZooKeeper (``zookeeper_connect=``,
``--zookeeper``) instead of bootstrap servers, against a real ZooKeeper and real brokers."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.client.bootstrap import parse_zookeeper_connect, servers_from_zookeeper
from annal.client.cluster import ClientError
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess
from annal.deploy.zookeeper import free_port
from annal.producer.producer import Producer
from annal.zk import layout
from annal.zk.client import ZkClient
from kazoo.client import KazooClient
from runcli import annal


@pytest.mark.timeout(180)
def test_admin_client_finds_every_registered_broker(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str
) -> None:
    first, second = broker_factory(1), broker_factory(2)
    with ZkClient(zk_connect) as zk:  # a registration that is not JSON is skipped
        zk.kazoo.create(layout.broker_path(99), b"not json", ephemeral=True)
        assert servers_from_zookeeper(zk_connect, 10) == f"{first.endpoint},{second.endpoint}"
    with AdminClient(zookeeper_connect=zk_connect) as admin:
        assert admin.cluster.bootstrap == [first.endpoint, second.endpoint]
        admin.create_topic("zk-admin", partitions=2, replication_factor=2)
        assert "zk-admin" in admin.list_topics()


@pytest.mark.timeout(180)
def test_produce_and_consume_through_zookeeper(broker: BrokerProcess, zk_connect: str) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("zk-events", partitions=2)
    with Producer(zookeeper_connect=zk_connect, linger_ms=5) as producer:
        futures = [producer.send("zk-events", value=f"v{i}", key=f"k{i}") for i in range(200)]
        producer.flush(60)
        assert all(f.result(30).offset >= 0 for f in futures)
    with SimpleConsumer(zookeeper_connect=zk_connect) as consumer:
        partitions = consumer.partitions_for("zk-events")
        assert partitions == [0, 1]
        read = [r.value for p in partitions for r in consumer.iterate("zk-events", p, 0)]
    assert sorted(read) == sorted(b"v%d" % i for i in range(200))


@pytest.mark.timeout(180)
def test_console_tools_with_zookeeper(broker: BrokerProcess, zk_connect: str) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("zk-lines", partitions=1)
    zk = ["--zookeeper", zk_connect]
    sent = annal("console-producer", *zk, "--topic", "zk-lines", stdin="one\ntwo\nthree\n")
    assert sent.returncode == 0, sent.stderr
    read = annal("console-consumer", *zk, "--topic", "zk-lines", "--from-beginning",
                 "--max-messages", "3")  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == ["one", "two", "three"]
    both = annal("console-consumer", *zk, "--bootstrap-server", broker.endpoint, "--topic", "x")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    neither = annal("console-producer", "--topic", "x")
    assert neither.returncode == 2
    assert "one of the arguments --bootstrap-server/--broker-list --zookeeper is required" in (
        neither.stderr
    )
    malformed = annal("console-consumer", "--zookeeper", "zk-without-port", "--topic", "x")
    assert malformed.returncode == 2 and "is not host:port" in malformed.stderr
    hosts = zk_connect.partition("/")[0]
    empty = annal("console-consumer", "--zookeeper", f"{hosts}/no-such-chroot", "--topic", "x")
    assert empty.returncode == 1
    assert "BROKER_NOT_AVAILABLE" in empty.stderr and "/no-such-chroot" in empty.stderr
    assert "Traceback" not in empty.stderr


@pytest.mark.timeout(30)
@pytest.mark.parametrize("client", [Producer, SimpleConsumer, AdminClient])
def test_both_or_neither_option_is_a_value_error(client: Callable[..., object]) -> None:
    with pytest.raises(ValueError, match="bootstrap_servers or zookeeper_connect.*neither"):
        client()
    with pytest.raises(ValueError, match="bootstrap_servers or zookeeper_connect, not both"):
        client("127.0.0.1:9092", zookeeper_connect="127.0.0.1:2181")


@pytest.mark.timeout(60)
def test_chroot_without_brokers_is_a_clear_error(zk_connect: str) -> None:
    hosts, chroot = parse_zookeeper_connect(zk_connect)
    with pytest.raises(
        ClientError, match=f"BROKER_NOT_AVAILABLE: .*chroot {chroot} does not exist"
    ):
        servers_from_zookeeper(zk_connect, 10)
    raw = KazooClient(hosts)
    raw.start(10)
    try:
        assert raw.exists(chroot) is None  # a client creates nothing, not even the chroot
    finally:
        raw.stop()
        raw.close()
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()  # what a cluster whose brokers are all down leaves
    with pytest.raises(ClientError, match=f"chroot {chroot}: /brokers/ids is empty") as caught:
        Producer(zookeeper_connect=zk_connect, request_timeout_ms=10_000)
    assert caught.value.error == "BROKER_NOT_AVAILABLE"
    with pytest.raises(ClientError, match="no chroot: /brokers/ids is empty"):
        servers_from_zookeeper(hosts, 10)  # the root of the test server has no brokers


@pytest.mark.timeout(30)
def test_unreachable_zookeeper_is_a_quick_clear_error() -> None:
    connect = f"127.0.0.1:{free_port()}/annal"
    started = time.monotonic()
    with pytest.raises(ClientError, match=f"cannot reach ZooKeeper at {connect} within 1 s"):
        servers_from_zookeeper(connect, 1.0)
    with pytest.raises(ClientError, match="NETWORK_EXCEPTION") as caught:
        SimpleConsumer(zookeeper_connect=connect, timeout_s=1.0)
    assert connect in str(caught.value)
    assert time.monotonic() - started < 10


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("connect", "message"),
    [
        ("", "names no host:port"),
        ("/annal", "names no host:port"),
        ("zk1/annal", "'zk1' in 'zk1/annal' is not host:port"),
        ("zk1:2181,zk2:x", "'zk2:x'"),
        ("zk1:2181//annal", "empty path element"),
    ],
)
def test_malformed_connect_string_is_a_value_error(connect: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        servers_from_zookeeper(connect, 1.0)


@pytest.mark.timeout(10)
def test_connect_string_parts() -> None:
    assert parse_zookeeper_connect("zk1:2181,zk2:2181/annal/") == ("zk1:2181,zk2:2181", "/annal")
    assert parse_zookeeper_connect("zk1:2181") == ("zk1:2181", "")
