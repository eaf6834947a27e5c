"""annal's own clients prove a user with its password over gRPC (TLS only): the
broker checks it against the user's SCRAM credentials, the call runs as
``User:<name>`` under the ACLs, a wrong password or a password over plaintext
is refused (UNAUTHENTICATED) and never logged, and --command-config takes
Kafka's ``sasl.jaas.config``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.client.security import PASSWORD_HEADER, USER_HEADER, Security
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.producer.producer import Producer
from annal.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from annal.security.scram import make_credential
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from runcli import annal
from tls_certs import issue, make_ca

from annal.errors import AnnalError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def tls_broker(zk_connect: str, tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    """One broker on GRPCS:// without client certificates, the ACL authorizer on,
    users admin (a super user), alice and bob; its CA file."""
    ca = make_ca("annal test CA")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem())
    with ZkClient(zk_connect) as zk:
        zk.ensure_persistent_paths()
        for name in ("admin", "alice", "bob", "carol"):
            credential = make_credential("SCRAM-SHA-512", f"{name}-secret")
            zk.upsert_scram_credential(name, "SCRAM-SHA-512", credential)
        # the broker's own calls to itself carry no certificate here (none is asked)
        cluster = ResourcePattern.literal(ResourceType.CLUSTER, "kafka-cluster")
        allow = AclPermissionType.ALLOW
        zk.add_acls(cluster, [AccessControlEntry("User:ANONYMOUS", "*",
                                                 AclOperation.CLUSTER_ACTION, allow)])  # fmt: skip
        topic = ResourcePattern.literal(ResourceType.TOPIC, "pw")
        zk.add_acls(topic, [AccessControlEntry("User:alice", "*", AclOperation.WRITE, allow),
                            AccessControlEntry("User:bob", "*", AclOperation.DESCRIBE, allow)])
    broker = BrokerProcess(1, zk_connect, tmp_path)
    broker.settings.update(
        {
            "listeners": "GRPCS://127.0.0.1:0",
            "ssl.keystore.location": issue(ca, "broker-1").write_keystore(tmp_path / "b.pem"),
            "ssl.truststore.location": str(ca_file),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        }
    )
    broker.start()
    try:
        admin = Security("SASL_SSL", str(ca_file), sasl_username="admin",
                         sasl_password="admin-secret")  # fmt: skip
        wait_until(lambda: metadata_lists(broker.endpoint, [1], security=admin), 60, "serving")
        yield broker, str(ca_file)
    finally:
        broker.kill()


def user(ca: str, name: str, password: str | None = None) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": ca,
        "sasl_plain_username": name,
        "sasl_plain_password": password or f"{name}-secret",
    }


def test_a_user_proves_itself_with_its_password_and_acls_apply(
    tls_broker: tuple[BrokerProcess, str], tmp_path: Path
) -> None:
    broker, ca = tls_broker
    endpoint = f"127.0.0.1:{broker.port}"
    with AdminClient(endpoint, **user(ca, "admin")) as admin:
        admin.create_topic("pw", 1, 1)
    with Producer(endpoint, **user(ca, "alice")) as producer:
        assert producer.send("pw", b"by alice", partition=0).result(30).offset == 0
    with (
        Producer(endpoint, retries=0, **user(ca, "bob")) as producer,
        pytest.raises(AnnalError, match="TOPIC_AUTHORIZATION_FAILED"),
    ):
        producer.send("pw", b"by bob", partition=0).result(30)  # bob may Describe it
    with (  # carol has no ACL at all: Metadata refuses her the topic
        Producer(endpoint, max_block_ms=60_000, **user(ca, "carol")) as producer,
        pytest.raises(AnnalError, match="TOPIC_AUTHORIZATION_FAILED.*Describe is needed"),
    ):
        started = time.monotonic()
        producer.send("pw", b"by carol", partition=0)
    assert time.monotonic() - started < 10  # at once, not after max.block.ms
    with pytest.raises(AnnalError), AdminClient(endpoint, **user(ca, "alice", "wrong")) as admin:
        admin.list_topics()
    config = tmp_path / "alice.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={ca}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="admin-secret";\n'
    )
    listed = annal("topics", "list", "--bootstrap-server", endpoint, "--command-config",
                   str(config))  # fmt: skip
    assert listed.returncode == 0 and "pw" in listed.stdout, listed.stderr
    log = broker.log_path.read_text()
    assert "authentication of user 'alice' failed" in log
    assert "wrong" not in log.replace("wrong version", "") and "alice-secret" not in log


def test_a_password_over_plaintext_grpc_is_refused(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(1)
    with grpc.insecure_channel(broker.endpoint) as channel:
        metadata = ((USER_HEADER, "alice"), (PASSWORD_HEADER, "alice-secret"))
        with pytest.raises(grpc.RpcError) as refused:
            annal_pb2_grpc.AnnalStub(channel).Metadata(
                pb.MetadataRequest(), metadata=metadata, timeout=10
            )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "use the GRPCS:// listener" in (refused.value.details() or "")
