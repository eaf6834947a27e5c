"""More identities for a secured local cluster (``annal cluster certificate NAME``).

``cluster up --security ssl|sasl_ssl`` keeps its CA's key in
``DIR/security/ca-key.pem``; ``issue_client`` signs a certificate for ``NAME``
with it and writes, readable by their owner only:

=============================  ================================================
``NAME.pem``                   the key and the certificate (CN ``NAME``, so the
                               principal ``User:NAME``)
``NAME.properties``            annal's CLI as ``NAME``: ``--command-config``
``NAME-kafka.properties``      Kafka's clients as ``NAME`` (librdkafka's names),
                               with ``ssl`` only: with ``sasl_ssl`` Kafka's
                               clients log in with a SCRAM password instead
=============================  ================================================

The new principal may do nothing until ACLs allow it (``annal acls --add
--allow-principal User:NAME ...``, as the admin).
"""

from __future__ import annotations

import re
from pathlib import Path

from annal.deploy.certs import Identity, issue, write_private
from annal.deploy.secure import (
    ADMIN,
    SSL,
    SecureFiles,
    annal_client_config,
    kafka_ssl_client_config,
)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class CertificateError(Exception):
    """A certificate that cannot be issued; the message says why."""


def issue_client(files: SecureFiles, name: str, security: str) -> list[Path]:
    """Issue ``name``'s certificate under the cluster's CA and write its client
    settings (see the module docstring); the files written."""
    _check_name(files, name)
    try:
        ca = Identity.from_pem(files.ca_key.read_bytes() + files.ca.read_bytes())
    except FileNotFoundError:
        raise CertificateError(
            f"{files.ca_key} is missing: only a cluster made by 'annal cluster up --security' "
            "keeps its CA's key"
        ) from None
    except ValueError as exc:
        raise CertificateError(
            f"{files.ca_key} does not hold the key of {files.ca}: {exc}"
        ) from None
    keystore = files.keystore(name)
    issue(ca, name).write_keystore(keystore)
    written = [keystore, files.directory / f"{name}.properties"]
    write_private(written[-1], annal_client_config(files, name).encode())
    if security == SSL:
        written.append(files.directory / f"{name}-kafka.properties")
        write_private(written[-1], kafka_ssl_client_config(files, name).encode())
    return written


def _check_name(files: SecureFiles, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise CertificateError(
            f"{name!r} is not a name for a certificate: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 64"
        )
    if name == ADMIN or re.fullmatch(r"broker-\d+", name):
        raise CertificateError(f"{name!r} is the cluster's own identity; pick another name")
    if files.keystore(name).exists():
        raise CertificateError(f"{files.keystore(name)} exists: {name} has a certificate already")
