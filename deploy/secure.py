"""A local cluster secured by one flag (``annal cluster up --security sasl_ssl``,
or ``--security ssl``).

What ``make_secure_files`` writes under the cluster directory (``security/``),
all readable by their owner only:

=========================  ===================================================
``ca.pem``                 the CA made for this cluster (trust it to connect)
``ca-key.pem``             its key, for ``annal cluster certificate`` to issue
                           more certificates (``make_secure_files`` only: the
                           brokers never read it)
``broker-<id>.pem``        each broker's key and certificate (CN ``broker-<id>``)
``admin.pem``              the super user's key and certificate (CN ``admin``)
``admin.properties``       for annal's CLI: ``--command-config`` (gRPC, TLS
                           with the admin certificate)
``admin-kafka.properties`` the same super user for Kafka's clients: with
                           ``sasl_ssl``, SASL_SSL, SCRAM-SHA-512, user ``admin``
                           and its password; with ``ssl``, SSL with the admin
                           certificate (``admin.pem`` as both
                           ``ssl.certificate.location`` and ``ssl.key.location``)
=========================  ===================================================

``ensure_secure_files`` writes the ``sasl_ssl`` files into a directory of its
own and keeps whatever is there and still good (the CA, each certificate, the
admin's password), so that running it again changes nothing; ``python -m
annal.deploy.secure`` runs it and ``store_admin``, as docker-compose.secure.yml's
``security-init`` service does before the brokers start.

The brokers then serve gRPC over TLS with client certificates required
(``GRPCS://``: annal's clients and the brokers themselves, who prove they are
brokers with their certificates), with the ACL authorizer on,
``allow.everyone.if.no.acl.found=false``, and ``super.users`` the brokers and
``admin``.  Kafka's protocol is served

* with ``sasl_ssl``, on ``SASL_SSL://`` (SCRAM-SHA-512, SCRAM-SHA-256 and
  PLAIN, no client certificate needed).  The admin's SCRAM credential is
  stored in ZooKeeper before the brokers start; its password is made here and
  kept only in ``admin-kafka.properties``;
* with ``ssl``, on ``SSL://`` with ``ssl.client.auth=required``: a Kafka client
  proves who it is with a certificate the cluster's CA signed, its principal
  ``User:<CN>``.  No password is made and nothing is stored in ZooKeeper.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from annal.client.security import SSL as TLS
from annal.client.security import Security
from annal.deploy.certs import VALID_DAYS, Identity, issue, make_ca, write_private
from annal.security.scram import SCRAM_SHA_512, make_credential
from annal.zk.client import ZkClient, ZkError
from cryptography import x509

SASL_SSL = "sasl_ssl"
SSL = "ssl"  # Kafka's clients prove who they are with certificates
PLAINTEXT = "plaintext"
SECURITY_CHOICES = (PLAINTEXT, SSL, SASL_SSL)
# Kafka's security protocol of the Kafka listener, by choice
KAFKA_PROTOCOL = {PLAINTEXT: "PLAINTEXT", SSL: "SSL", SASL_SSL: "SASL_SSL"}
ADMIN = "admin"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
# A kept certificate must stay valid at least this long; else it is issued anew.
RENEW_DAYS = 7
# sasl_ssl's Kafka listener: clients authenticate with SASL, not with certificates
_SASL_LISTENER = {
    "listener.name.sasl_ssl.ssl.client.auth": "none",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
}


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
    def ca_key(self) -> Path:
        """The CA's key, kept by ``cluster up`` so that ``cluster certificate`` can
        issue more (the brokers never read it)."""
        return self.directory / "ca-key.pem"

    @property
    def admin_config(self) -> Path:
        return self.directory / "admin.properties"

    @property
    def kafka_admin_config(self) -> Path:
        return self.directory / "admin-kafka.properties"

    def admin_security(self) -> Security:
        """How annal's own tools reach the brokers as the super user."""
        admin = str(self.keystore(ADMIN))
        return Security(TLS, str(self.ca), admin, admin)

    def broker_settings(
        self,
        broker_id: int,
        brokers: int,
        port: int,
        kafka_port: int,
        host: str = "127.0.0.1",
        security: str = SASL_SSL,
    ) -> dict[str, str]:
        """A broker's settings: its listeners (bound to ``host``), TLS files, how
        Kafka's clients authenticate (``security``: SASL or certificates) and the
        authorizer."""
        protocol = _kafka_protocol(security)
        super_users = [f"User:broker-{i}" for i in range(1, brokers + 1)] + [f"User:{ADMIN}"]
        return {
            "listeners": f"GRPCS://{host}:{port},{protocol}://{host}:{kafka_port}",
            "ssl.keystore.location": str(self.keystore(f"broker-{broker_id}")),
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "required",
            **(_SASL_LISTENER if security == SASL_SSL else {}),
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(super_users),
        }


def _kafka_protocol(security: str) -> str:
    """The Kafka listener's security protocol of a secured cluster; ValueError
    for a choice that is not one (plaintext, or unknown)."""
    if security not in (SSL, SASL_SSL):
        raise ValueError(f"security {security!r}: expected {SSL} or {SASL_SSL}")
    return KAFKA_PROTOCOL[security]


def make_secure_files(
    cluster_dir: Path, brokers: int, security: str = SASL_SSL
) -> tuple[SecureFiles, str | None]:
    """A CA, the brokers' and the admin's certificates, and the admin's client
    settings for ``security`` (``sasl_ssl`` or ``ssl``); the admin's SCRAM
    password (to store with ``store_admin``) with ``sasl_ssl``, None with ``ssl``."""
    _kafka_protocol(security)  # a secured choice, before anything is written
    files = SecureFiles(cluster_dir / "security")
    files.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca = make_ca("annal local cluster CA")
    write_private(files.ca, ca.cert_pem())
    write_private(files.ca_key, ca.key_pem())
    for who in [f"broker-{i}" for i in range(1, brokers + 1)] + [ADMIN]:
        issue(ca, who).write_keystore(files.keystore(who))
    password = secrets.token_urlsafe(18) if security == SASL_SSL else None
    _write_admin_configs(files, password)
    return files, password


def ensure_secure_files(
    directory: Path,
    brokers: int,
    broker_host: str = "",
    ca_key: Path | None = None,
    valid_days: int = VALID_DAYS,
) -> tuple[SecureFiles, str, list[str]]:
    """``make_secure_files``' files in ``directory`` itself, keeping what is there
    and still good; the admin's password and a line for what was done to each file.

    ``broker_host``: one more host name in each broker's certificate, besides
    localhost and 127.0.0.1, ``{id}`` standing for the broker's id (``broker-{id}``).
    ``ca_key``: where the CA's private key is kept (a place the brokers do not
    read), so that a certificate missing or about to expire can be issued
    again under the same CA; without it, or when the CA itself is missing or
    about to expire, a new CA is made and every certificate issued anew.  A
    kept certificate must have the right common name and host names, be
    signed by the CA and stay valid for ``RENEW_DAYS`` more days."""
    files = SecureFiles(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    hosts = {
        f"broker-{i}": [broker_host.replace("{id}", str(i))] if broker_host else []
        for i in range(1, brokers + 1)
    }
    hosts[ADMIN] = []
    done: list[str] = []
    trusted = _read_cert(files.ca)
    ca = _read_ca(files.ca, ca_key)
    good = {
        who: trusted is not None and _good_keystore(files.keystore(who), who, names, trusted)
        for who, names in hosts.items()
    }
    if ca is None and not (
        trusted is not None and Identity.valid_cert(trusted, RENEW_DAYS) and all(good.values())
    ):
        ca = make_ca("annal cluster CA", valid_days)
        write_private(files.ca, ca.cert_pem())
        if ca_key is not None:
            ca_key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_private(ca_key, ca.key_pem())
        good = dict.fromkeys(hosts, False)
        done.append(f"{files.ca}: a new CA (every certificate is issued anew)")
    else:
        done.append(f"{files.ca}: kept")
    for who, names in hosts.items():
        path = files.keystore(who)
        if good[who]:
            done.append(f"{path}: kept")
            continue
        assert ca is not None  # a missing or bad keystore means a CA to issue it with
        issue(ca, who, names, valid_days).write_keystore(path)
        done.append(f"{path}: issued for {', '.join(['CN=' + who, *names])}")
    password = _kept_password(files.kafka_admin_config)
    done.append(f"{files.kafka_admin_config}: {'kept the' if password else 'a new'} password")
    password = password or secrets.token_urlsafe(18)
    _write_admin_configs(files, password)
    return files, password, done


def _read_cert(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None


def _read_ca(cert: Path, key: Path | None) -> Identity | None:
    """The CA, when its key is kept, matches its certificate and stays valid."""
    if key is None:
        return None
    try:
        ca = Identity.from_pem(key.read_bytes() + cert.read_bytes())
    except (OSError, ValueError):
        return None
    return ca if Identity.valid_cert(ca.cert, RENEW_DAYS) else None


def _good_keystore(path: Path, who: str, hosts: Sequence[str], ca: x509.Certificate) -> bool:
    try:
        found = Identity.from_pem(path.read_bytes())
    except (OSError, ValueError):
        return False
    return (
        found.common_name() == who
        and set(hosts) <= found.host_names()
        and found.issued_by(ca)
        and Identity.valid_cert(found.cert, RENEW_DAYS)
    )


def _kept_password(kafka_admin_config: Path) -> str | None:
    try:
        lines = kafka_admin_config.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "sasl.password" and value.strip():
            return value.strip()
    return None


def _write_admin_configs(files: SecureFiles, password: str | None) -> None:
    """annal's and Kafka's client settings of the admin: Kafka's with SASL_SSL
    and ``password``, or, when it is None, with SSL and the admin's certificate."""
    write_private(files.admin_config, annal_client_config(files, ADMIN).encode())
    kafka = (
        kafka_ssl_client_config(files, ADMIN)
        if password is None
        else _kafka_sasl_config(files, password)
    )
    write_private(files.kafka_admin_config, kafka.encode())


def _kafka_sasl_config(files: SecureFiles, password: str) -> str:
    return (
        "# Kafka's clients as the cluster's super user (librdkafka's names; Java\n"
        "# clients take ssl.truststore.location and sasl.jaas.config instead)\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={ADMIN}\n"
        f"sasl.password={password}\n"
        f"ssl.ca.location={files.ca}\n"
    )


def annal_client_config(files: SecureFiles, who: str) -> str:
    """annal's CLI as ``who`` (``--command-config``): TLS with its certificate."""
    return (
        f"# annal's CLI as User:{who}: --command-config this file\n"
        "security.protocol=SSL\n"
        f"ssl.truststore.location={files.ca}\n"
        f"ssl.keystore.location={files.keystore(who)}\n"
    )


def kafka_ssl_client_config(files: SecureFiles, who: str) -> str:
    """Kafka's clients as ``who``, proven by its certificate (librdkafka's names)."""
    keystore = files.keystore(who)  # one PEM file: the key, then the certificate
    return (
        f"# Kafka's clients as User:{who}, proven by its certificate\n"
        "# (librdkafka's names; Java clients take ssl.truststore.location and\n"
        "# ssl.keystore.location with ssl.keystore.type=PEM instead)\n"
        "security.protocol=SSL\n"
        f"ssl.ca.location={files.ca}\n"
        f"ssl.certificate.location={keystore}\n"
        f"ssl.key.location={keystore}\n"
    )


def store_admin(zookeeper_connect: str, password: str) -> None:
    """The admin's SCRAM-SHA-512 credential, in ZooKeeper before any broker starts."""
    with ZkClient(zookeeper_connect) as zk:
        zk.ensure_persistent_paths()
        zk.upsert_scram_credential(ADMIN, SCRAM_SHA_512, make_credential(SCRAM_SHA_512, password))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m annal.deploy.secure",
        description="Make a secured cluster's CA, broker and admin certificates and the "
        "admin's client settings in DIR, keeping what is already there and still good, "
        "then store the admin's SCRAM credential in ZooKeeper: what "
        "docker-compose.secure.yml's security-init service runs before the brokers start. "
        "Running it again changes nothing.",
    )
    parser.add_argument("--dir", type=Path, required=True, help="where the files go")
    parser.add_argument("--brokers", type=int, required=True, metavar="N",
                        help="certificates for broker-1 ... broker-N")  # fmt: skip
    parser.add_argument(
        "--broker-host", default="", metavar="NAME",
        help="one more host name in each broker's certificate, besides localhost and "
        "127.0.0.1; {id} stands for the broker's id (broker-{id}: Compose's service names)",
    )  # fmt: skip
    parser.add_argument(
        "--ca-key", type=Path, metavar="FILE",
        help="keep the CA's private key here (somewhere the brokers do not read), so that "
        "a missing or expiring certificate is issued again under the same CA",
    )  # fmt: skip
    parser.add_argument(
        "--zookeeper-connect", metavar="HOST:PORT[/CHROOT]",
        help="store the admin's SCRAM-SHA-512 credential in this ZooKeeper",
    )  # fmt: skip
    parser.add_argument("--valid-days", type=int, default=VALID_DAYS, metavar="DAYS",
                        help=f"validity of new certificates (default {VALID_DAYS})")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    if args.valid_days <= RENEW_DAYS:
        parser.error(f"--valid-days must be more than {RENEW_DAYS}")
    try:
        _, password, done = ensure_secure_files(
            args.dir, args.brokers, args.broker_host, args.ca_key, args.valid_days
        )
    except OSError as exc:
        print(f"cannot write the security files: {exc}", file=sys.stderr)
        return 1
    print("\n".join(done))
    if args.zookeeper_connect:
        try:
            store_admin(args.zookeeper_connect, password)
        except ZkError as exc:
            print(f"cannot store the admin's credential: {exc}", file=sys.stderr)
            return 1
        print(f"user {ADMIN}: SCRAM-SHA-512 credential stored in {args.zookeeper_connect}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
