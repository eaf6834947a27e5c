"""Certificates made on the spot: a CA, certificates it signs (for 127.0.0.1,
localhost and any other host names given), and PEM files as brokers and clients
read them.  A secured local cluster (``annal cluster up --security sasl_ssl``),
the secured Compose file (docker-compose.secure.yml) and the tests use them; a
real deployment brings certificates of its own."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 30


@dataclass
class Identity:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write_keystore(self, path: Path) -> str:
        """One PEM file with the private key and the certificate (Kafka's PEM keystore),
        readable by its owner only."""
        write_private(path, self.key_pem() + self.cert_pem())
        return str(path)

    @classmethod
    def from_pem(cls, data: bytes) -> Identity:
        """A key and its certificate from PEM (a keystore as ``write_keystore``
        writes it); ValueError when either is missing or they do not belong together."""
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("not an elliptic-curve private key")
        cert = x509.load_pem_x509_certificate(data)
        if cert.public_key() != key.public_key():
            raise ValueError("the certificate is not the key's")
        return cls(key, cert)

    def common_name(self) -> str:
        names = self.cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""

    def host_names(self) -> set[str]:
        """The DNS names and IP addresses the certificate is valid for."""
        try:
            sans = self.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except x509.ExtensionNotFound:
            return set()
        return {str(n) for n in sans.value.get_values_for_type(x509.DNSName)} | {
            str(a) for a in sans.value.get_values_for_type(x509.IPAddress)
        }

    @staticmethod
    def valid_cert(cert: x509.Certificate, days: float) -> bool:
        """True if ``cert`` is valid now and for ``days`` more."""
        now = datetime.datetime.now(datetime.UTC)
        return (
            cert.not_valid_before_utc <= now
            and cert.not_valid_after_utc >= now + datetime.timedelta(days=days)
        )

    def issued_by(self, ca: x509.Certificate) -> bool:
        """True if ``ca`` signed this certificate."""
        try:
            self.cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def write_private(path: Path, data: bytes) -> None:
    """``data`` in ``path``, readable by its owner only before anything is written."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def make_ca(common: str, valid_days: int = VALID_DAYS) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Identity(key, cert)


LOCAL_HOSTS = ("localhost", "127.0.0.1")


def issue(
    ca: Identity, common: str, hosts: Sequence[str] = (), valid_days: int = VALID_DAYS
) -> Identity:
    """A certificate for ``common``, valid for 127.0.0.1, localhost and ``hosts``
    (DNS names or IP addresses), signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names = list(dict.fromkeys([*LOCAL_HOSTS, *hosts]))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(
            x509.SubjectAlternativeName([_general_name(name) for name in names]),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Identity(key, cert)


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)
