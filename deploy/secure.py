"""A local cluster secured by one flag (``annal cluster up --security sasl_ssl``).

What ``make_secure_files`` writes under the cluster directory (``security/``),
all readable by their owner only:

=========================  ===================================================
``ca.pem``                 the CA made for this cluster (trust it to connect)
``broker-<id>.pem``        each broker's key and certificate (CN ``broker-<id>``)
``admin.pem``              the super user's key and certificate (CN ``admin``)
``admin.properties``       for annal's CLI: ``--command-config`` (gRPC, TLS
                           with the admin certificate)
``admin-kafka.properties`` the same super user for Kafka's clients: SASL_SSL,
                           SCRAM-SHA-512, user ``admin`` and its password
=========================  ===================================================

The brokers then serve gRPC over TLS with client certificates required
(``GRPCS://``: annal's clients and the brokers themselves, who prove they are
brokers with their certificates) and Kafka's protocol on ``SASL_SSL://``
(SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN, no client certificate needed), with
the ACL authorizer on, ``allow.everyone.if.no.acl.found=false``, and
``super.users`` the brokers and ``admin``.  The admin's SCRAM credential is
stored in ZooKeeper before the brokers start; its password is made here and
kept only in ``admin-kafka.properties``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from annal.client.security import SSL, Security
from annal.deploy.certs import issue, make_ca
from annal.security.scram import SCRAM_SHA_512, make_credential
from annal.zk.client import ZkClient

SASL_SSL = "sasl_ssl"
PLAINTEXT = "plaintext"
SECURITY_CHOICES = (PLAINTEXT, SASL_SSL)
ADMIN = "admin"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """Where a secured cluster's files are (see the module docstring)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def keystore(self, who: str) -> Path:
        return self.directory / f"{who}.pem"

    @property
    def admin_config(self) -> Path:
        return self.directory / "admin.properties"

    @property
    def kafka_admin_config(self) -> Path:
        return self.directory / "admin-kafka.properties"

    def admin_security(self) -> Security:
        """How annal's own tools reach the brokers as the super user."""
        admin = str(self.keystore(ADMIN))
        return Security(SSL, str(self.ca), admin, admin)

    def broker_settings(
        self, broker_id: int, brokers: int, port: int, kafka_port: int
    ) -> dict[str, str]:
        """A broker's settings: its listeners, TLS files, SASL and the authorizer."""
        super_users = [f"User:broker-{i}" for i in range(1, brokers + 1)] + [f"User:{ADMIN}"]
        return {
            "listeners": f"GRPCS://127.0.0.1:{port},SASL_SSL://127.0.0.1:{kafka_port}",
            "ssl.keystore.location": str(self.keystore(f"broker-{broker_id}")),
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "required",
            # Kafka's clients authenticate with SASL, not with certificates
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(super_users),
        }


def make_secure_files(cluster_dir: Path, brokers: int) -> tuple[SecureFiles, str]:
    """A CA, the brokers' and the admin's certificates, and the admin's client
    settings; the admin's SCRAM password (to store with ``store_admin``)."""
    files = SecureFiles(cluster_dir / "security")
    files.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca = make_ca("annal local cluster CA")
    _private(files.ca, ca.cert_pem())
    for who in [f"broker-{i}" for i in range(1, brokers + 1)] + [ADMIN]:
        issue(ca, who).write_keystore(files.keystore(who))
    password = secrets.token_urlsafe(18)
    _private(
        files.admin_config,
        (
            "# annal's CLI as the cluster's super user: --command-config this file\n"
            "security.protocol=SSL\n"
            f"ssl.truststore.location={files.ca}\n"
            f"ssl.keystore.location={files.keystore(ADMIN)}\n"
        ).encode(),
    )
    _private(
        files.kafka_admin_config,
        (
            "# Kafka's clients as the cluster's super user (librdkafka's names; Java\n"
            "# clients take ssl.truststore.location and sasl.jaas.config instead)\n"
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.username={ADMIN}\n"
            f"sasl.password={password}\n"
            f"ssl.ca.location={files.ca}\n"
        ).encode(),
    )
    return files, password


def store_admin(zookeeper_connect: str, password: str) -> None:
    """The admin's SCRAM-SHA-512 credential, in ZooKeeper before any broker starts."""
    with ZkClient(zookeeper_connect) as zk:
        zk.ensure_persistent_paths()
        zk.upsert_scram_credential(ADMIN, SCRAM_SHA_512, make_credential(SCRAM_SHA_512, password))


def _private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600)
    path.write_bytes(data)
