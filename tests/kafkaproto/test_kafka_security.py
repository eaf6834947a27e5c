"""Kafka's listener secured: several listeners per broker, each with its security
protocol (docs/security.md); TLS with Kafka's own clients; each client told the
brokers' endpoints of the listener it came in on; clients of the wrong kind
refused with a clear log line."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka as ck
import confluent_kafka.admin
import kafka
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.deploy.zookeeper import ZooKeeperServer
from annal.kafkaproto.client import ConnectionFailed, KafkaConnection
from annal.kafkaproto.client_security import (
    ConnectionSecurity,
    LoginRefused,
    SaslLogin,
    login_steps,
)
from annal.kafkaproto.wire import millis
from annal.security.scram import make_credential
from annal.zk.client import ZkClient
from environment import require_command
from tls_certs import issue, make_ca
from zkproxy import ZkProxy

pytestmark = pytest.mark.timeout(180)

# ApiVersions v0: size, api key 18, version 0, correlation id 7, null client id
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)


class Tls:
    """A CA and the PEM files a broker and its clients read."""

    def __init__(self, directory: Path) -> None:
        self.ca = make_ca("annal-test-ca")
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.ca.cert_pem())
        self.directory = directory

    def keystore(self, common: str) -> str:
        return issue(self.ca, common).write_keystore(self.directory / f"{common}.pem")


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    return Tls(tmp_path)


def start_secured(
    broker_factory: Callable[..., BrokerProcess], tls: Tls, listeners: str, **settings: str
) -> BrokerProcess:
    return broker_factory(
        1,
        settings={
            "ssl.keystore.location": tls.keystore("broker-1"),
            "ssl.truststore.location": str(tls.ca_file),
            **settings,
        },
        extra_listeners=listeners,
    )


def test_kafka_clients_produce_and_consume_over_tls_and_see_the_tls_endpoints(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    broker = start_secured(broker_factory, tls, "SSL://127.0.0.1:0")
    port = broker.listener_port("SSL")
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("secret", 1, 1)
    common = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca_file),
    }
    metadata = ck.admin.AdminClient(common).list_topics(timeout=30)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", port)]
    producer = ck.Producer(common)
    for i in range(10):
        producer.produce("secret", f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**common, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition("secret", 0, 0)])
    seen: list[bytes] = []
    while len(seen) < 10:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        seen.append(message.value())
    consumer.close()
    assert seen == [f"v{i}".encode() for i in range(10)]
    # the PLAINTEXT listener still answers with its own endpoints
    plain = ck.admin.AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    brokers = plain.list_topics(timeout=30).brokers.values()
    assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", broker.kafka_port)]


def test_the_wrong_kind_of_client_is_closed_with_a_line_saying_why(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    broker = start_secured(broker_factory, tls, "SSL://127.0.0.1:0")
    port = broker.listener_port("SSL")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain_on_tls:
        plain_on_tls.sendall(API_VERSIONS_V0)
        assert plain_on_tls.recv(100) == b""  # closed
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    with (
        socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
    ):
        context.wrap_socket(raw, server_hostname="127.0.0.1")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as grpc_port:
        grpc_port.sendall(b"x")  # a stray byte on gRPC's port: none of our business
    wait_until(
        lambda: "TLS handshake failed: not TLS" in broker.log_path.read_text()
        and "a TLS handshake on a plaintext listener" in broker.log_path.read_text(),
        30,
        "both mistakes logged",
    )


def test_a_client_certificate_is_required_where_ssl_client_auth_says(
    broker_factory: Callable[..., BrokerProcess], tls: Tls, tmp_path: Path
) -> None:
    broker = start_secured(
        broker_factory, tls, "SSL://127.0.0.1:0", **{"ssl.client.auth": "required"}
    )
    port = broker.listener_port("SSL")
    common = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca_file),
    }
    without = ck.admin.AdminClient(common)
    with pytest.raises(ck.KafkaException):
        without.list_topics(timeout=5)
    alice = issue(tls.ca, "alice")
    (tmp_path / "alice.key").write_bytes(alice.key_pem())
    (tmp_path / "alice.crt").write_bytes(alice.cert_pem())
    with_cert = ck.admin.AdminClient({
        **common,
        "ssl.key.location": str(tmp_path / "alice.key"),
        "ssl.certificate.location": str(tmp_path / "alice.crt"),
    })  # fmt: skip
    assert with_cert.list_topics(timeout=30).brokers
    assert "TLS handshake failed" in broker.log_path.read_text()


# -- SASL --------------------------------------------------------------------------


def add_user(broker: BrokerProcess, user: str, password: str, mechanism: str) -> None:
    with ZkClient(broker.zookeeper_connect) as zk:
        zk.upsert_scram_credential(user, mechanism, make_credential(mechanism, password))


def sasl_broker(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> tuple[BrokerProcess, int, int]:
    """A broker with SASL_SSL and SASL_PLAINTEXT listeners offering PLAIN and SCRAM."""
    broker = start_secured(
        broker_factory,
        tls,
        "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"},
    )
    ssl_port, plain_port = broker.listener_port("SASL_SSL"), broker.listener_port("SASL_PLAINTEXT")
    add_user(broker, "alice", "alice-secret", "SCRAM-SHA-512")
    add_user(broker, "alice", "alice-secret", "SCRAM-SHA-256")
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("sasl", 1, 1)
    return broker, ssl_port, plain_port


def confluent(port: int, tls: Tls, mechanism: str, password: str = "alice-secret") -> dict:  # type: ignore[type-arg]
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(tls.ca_file),
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_over_sasl_ssl(
    broker_factory: Callable[..., BrokerProcess], tls: Tls, mechanism: str
) -> None:
    _broker, ssl_port, _ = sasl_broker(broker_factory, tls)
    config = confluent(ssl_port, tls, mechanism)
    producer = ck.Producer(config)
    for i in range(5):
        producer.produce("sasl", f"{mechanism}-{i}".encode())
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**config, "group.id": "readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["sasl"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 5 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    assert seen == [f"{mechanism}-{i}".encode() for i in range(5)]


def test_kafka_python_and_aiokafka_over_sasl_scram(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    _broker, ssl_port, plain_port = sasl_broker(broker_factory, tls)
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{ssl_port}", security_protocol="SASL_SSL",
        ssl_context=context, sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice", sasl_plain_password="alice-secret",
    )  # fmt: skip
    producer.send("sasl", b"from kafka-python").get(timeout=30)
    producer.close()

    async def aio() -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(
            "sasl", bootstrap_servers=f"127.0.0.1:{plain_port}",
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice", sasl_plain_password="alice-secret",
            auto_offset_reset="earliest",
        )  # fmt: skip
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), 30)
            return [message.value]
        finally:
            await consumer.stop()

    assert asyncio.run(aio()) == [b"from kafka-python"]


def test_kcat_over_sasl_ssl(broker_factory: Callable[..., BrokerProcess], tls: Tls) -> None:
    kcat = require_command("kcat")
    _broker, ssl_port, _ = sasl_broker(broker_factory, tls)
    common = [kcat, "-b", f"127.0.0.1:{ssl_port}", "-X", "security.protocol=SASL_SSL",
              "-X", f"ssl.ca.location={tls.ca_file}", "-X", "sasl.mechanisms=SCRAM-SHA-512",
              "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]  # fmt: skip
    done = subprocess.run([*common, "-P", "-t", "sasl"], input="one\ntwo\n", text=True,
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*common, "-C", "-t", "sasl", "-o", "beginning", "-e", "-q"],
                          text=True, capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["one", "two"], done.stderr


def test_wrong_passwords_unknown_users_and_anonymous_clients_are_refused(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    broker, ssl_port, plain_port = sasl_broker(broker_factory, tls)
    for mechanism, password in [("SCRAM-SHA-512", "wrong"), ("PLAIN", "wrong")]:
        admin = ck.admin.AdminClient(confluent(ssl_port, tls, mechanism, password))
        with pytest.raises(ck.KafkaException):
            admin.list_topics(timeout=5)
    stranger = {**confluent(ssl_port, tls, "SCRAM-SHA-512"), "sasl.username": "mallory"}
    with pytest.raises(ck.KafkaException):
        ck.admin.AdminClient(stranger).list_topics(timeout=5)
    # a client that skips SASL: its Metadata request closes the connection
    with socket.create_connection(("127.0.0.1", plain_port), timeout=10) as anonymous:
        anonymous.sendall(struct.pack(">ihhihi", 10, 3, 0, 9, -1, -1)[:14])
        assert anonymous.recv(100) == b""
    text = broker.log_path.read_text()
    assert "SASL authentication failed: Authentication failed" in text
    assert "a Metadata request before SASL authentication" in text
    assert "alice-secret" not in text and "wrong" not in text.replace("wrong version", "")


def test_a_removed_user_is_refused_on_its_next_connection(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    broker, ssl_port, _ = sasl_broker(broker_factory, tls)
    config = confluent(ssl_port, tls, "SCRAM-SHA-512")
    assert ck.admin.AdminClient(config).list_topics(timeout=30).brokers
    with ZkClient(broker.zookeeper_connect) as zk:
        zk.delete_scram_credential("alice", "SCRAM-SHA-512")
    with pytest.raises(ck.KafkaException):
        ck.admin.AdminClient(config).list_topics(timeout=5)


def test_half_open_sasl_handshakes_do_not_slow_other_clients(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    """500 connections that send a SaslHandshake and stop, and 100 that send
    garbage where the SASL bytes go: a SCRAM client still logs in at once, and the
    stalled ones are closed once the authentication timeout passes."""
    broker, _ssl_port, plain_port = sasl_broker(broker_factory, tls)
    handshake = frame(17, 1, struct.pack(">h", 13) + b"SCRAM-SHA-512")
    stalled = []
    for _ in range(500):
        sock = socket.create_connection(("127.0.0.1", plain_port), timeout=10)
        sock.sendall(handshake)
        stalled.append(sock)
    garbage = []
    for i in range(100):
        sock = socket.create_connection(("127.0.0.1", plain_port), timeout=10)
        sock.sendall(handshake + frame(36, 0, struct.pack(">i", 7) + bytes([i]) * 7))
        garbage.append(sock)
    started = time.monotonic()
    config = {**confluent(plain_port, tls, "SCRAM-SHA-512"), "security.protocol": "SASL_PLAINTEXT"}
    assert ck.admin.AdminClient(config).list_topics(timeout=30).brokers
    assert time.monotonic() - started < 5
    for sock in garbage:  # each got its handshake answer, then a refusal, then EOF
        assert read_until_closed(sock) > 0
        sock.close()
    for sock in stalled[:20]:
        assert read_until_closed(sock) > 0  # the handshake's answer, then EOF at the timeout
    for sock in stalled:
        sock.close()
    assert "not authenticated within 10 s" in broker.log_path.read_text()


def frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def read_until_closed(sock: socket.socket) -> int:
    sock.settimeout(30)
    total = 0
    while chunk := sock.recv(65536):
        total += len(chunk)
    return total


@pytest.mark.timeout(120)
def test_scram_logins_go_on_while_the_broker_is_cut_off_from_zookeeper(
    zookeeper: ZooKeeperServer, zk_connect: str, tmp_path: Path, tls: Tls
) -> None:
    """The broker reads a user's credentials from ZooKeeper at each login; while
    ZooKeeper cannot answer it uses its cache, so clients still get in."""
    chroot = "/" + zk_connect.split("/", 1)[1]
    with ZkProxy(zookeeper.host, zookeeper.port) as proxy:
        broker = BrokerProcess(1, proxy.connect_string(chroot), tmp_path, settings={
            "ssl.keystore.location": tls.keystore("broker-1"),
            "ssl.truststore.location": str(tls.ca_file),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "zookeeper.session.timeout.ms": "6000",
        }, extra_listeners="SASL_SSL://127.0.0.1:0")  # fmt: skip
        with ZkClient(zk_connect) as zk:
            zk.ensure_persistent_paths()
            zk.upsert_scram_credential(
                "alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "alice-secret")
            )
        broker.start()
        try:
            wait_until(lambda: metadata_lists(broker.endpoint, [1]), 60, "serving")
            port = broker.listener_port("SASL_SSL")
            config = confluent(port, tls, "SCRAM-SHA-512")
            assert ck.admin.AdminClient(config).list_topics(timeout=30).brokers
            proxy.pause()
            wait_until(lambda: "Connection time-out" in broker.log_path.read_text(), 30,
                       "the broker noticing it is cut off")  # fmt: skip
            assert ck.admin.AdminClient(config).list_topics(timeout=30).brokers
            wrong = confluent(port, tls, "SCRAM-SHA-512", password="wrong")
            with pytest.raises(ck.KafkaException):
                ck.admin.AdminClient(wrong).list_topics(timeout=5)
        finally:
            proxy.resume()
            broker.kill()
            print(broker.tail_log())


def test_sessions_expire_unless_the_client_re_authenticates(
    broker_factory: Callable[..., BrokerProcess], tls: Tls
) -> None:
    """KIP-368: with connections.max.reauth.ms the broker tells each session's
    lifetime; a client that logs in again on its connection (librdkafka does)
    goes on, one that does not is closed at its next request."""
    broker = start_secured(broker_factory, tls, "SASL_SSL://127.0.0.1:0",
                           **{"sasl.enabled.mechanisms": "SCRAM-SHA-512",
                              "connections.max.reauth.ms": "1500"})  # fmt: skip
    port = broker.listener_port("SASL_SSL")
    add_user(broker, "alice", "alice-secret", "SCRAM-SHA-512")
    add_user(broker, "mallory", "mallory-secret", "SCRAM-SHA-512")
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("sasl", 1, 1)
    login = SaslLogin("SCRAM-SHA-512", "alice", "alice-secret")
    security = ConnectionSecurity("SASL_SSL", str(tls.ca_file), login=login)
    metadata = {"topics": None, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}  # fmt: skip

    def log_in_again(connection: KafkaConnection, who: SaslLogin) -> Any:
        steps = login_steps(who)
        request, answer = next(steps), None
        try:
            while True:
                answer = connection.exchange(*request)
                request = steps.send(answer)
        except StopIteration:
            return answer

    keeping = KafkaConnection(f"127.0.0.1:{port}", 10, security=security)
    lapsing = KafkaConnection(f"127.0.0.1:{port}", 10, security=security)
    started = time.monotonic()
    keeping.exchange(3, 9, metadata)
    lapsing.exchange(3, 9, metadata)
    while time.monotonic() - started < 4:  # two lifetimes and more
        assert millis(log_in_again(keeping, login).session_lifetime) == 1500
        keeping.exchange(3, 9, metadata)
        time.sleep(0.5)
    with pytest.raises(ConnectionFailed):
        lapsing.exchange(3, 9, metadata)
    expired = "after the SASL session of User:alice expired"
    wait_until(lambda: expired in broker.log_path.read_text(), 10, "the expired session logged")
    # another principal on the same connection is refused, and the connection closed
    with pytest.raises(LoginRefused, match="re-authentication as User:mallory"):
        log_in_again(keeping, SaslLogin("SCRAM-SHA-512", "mallory", "mallory-secret"))
    keeping.close()

    # librdkafka re-authenticates by itself: a producer outlives several sessions
    config = {**confluent(port, tls, "SCRAM-SHA-512"), "debug": "security"}
    producer = ck.Producer(config, logger=_Collect())
    failures: list[object] = []
    started = time.monotonic()
    while time.monotonic() - started < 4:
        producer.produce("sasl", b"v", on_delivery=lambda e, _m: e and failures.append(e))
        producer.flush(10)
        time.sleep(0.2)
    assert not failures
    assert any("reauth" in line.lower() for line in _Collect.lines), _Collect.lines[-5:]


class _Collect:
    """librdkafka's log lines (its debug output names each re-authentication)."""

    lines: list[str] = []

    def log(self, level: int, msg: str, *args: object) -> None:
        _Collect.lines.append(msg % args if args else msg)
