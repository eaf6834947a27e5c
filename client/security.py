"""How a client reaches brokers: plaintext gRPC, or gRPC over TLS.

``Security("SSL", cafile, certfile, keyfile)`` is kafka-python's
``security_protocol="SSL"`` with ``ssl_cafile`` (the CA certificates that
signed the brokers', PEM), ``ssl_certfile`` and ``ssl_keyfile`` (this
client's certificate chain and private key, PEM, for brokers that require
client certificates: mutual TLS).  The same files may hold both: a PEM
"keystore" with the key and the chain, as Kafka's ``ssl.keystore.type=PEM``.

Command-line tools read the same from a ``--command-config`` properties
file, in Kafka's names (``security.protocol``, ``ssl.truststore.location``,
``ssl.keystore.location``) or librdkafka's (``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``).

``Security("SASL_SSL", cafile, sasl_username="alice", sasl_password=...)``
proves a user instead, with the password the broker checks against the
user's SCRAM credentials (docs/security.md): gRPC over TLS, the user and
password in each call's metadata (``annal-sasl-username``,
``annal-sasl-password``), never over plaintext.  Properties files take Kafka's
``sasl.username``/``sasl.password`` or ``sasl.jaas.config``.

Brokers use it too, towards each other: with a ``GRPCS://`` listener they
speak TLS to every broker, presenting their own certificate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import grpc
from annal.client.properties import PropertiesError, read_properties
from annal.security.jaas import jaas_login
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_SSL = "SASL_SSL"
USER_HEADER = "annal-sasl-username"
PASSWORD_HEADER = "annal-sasl-password"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# --command-config keys: Kafka's (Java) names, then librdkafka's
_CA_KEYS = ("ssl.truststore.location", "ssl.ca.location")
_CERT_KEYS = ("ssl.keystore.location", "ssl.certificate.location")
_KEY_KEYS = ("ssl.keystore.location", "ssl.key.location")
_KNOWN_KEYS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.truststore.type",
    "ssl.keystore.type",
    "ssl.endpoint.identification.algorithm",
    "ssl.key.password",
    *_CA_KEYS,
    *_CERT_KEYS,
    *_KEY_KEYS,
}
PROPERTY_NAMES = frozenset(_KNOWN_KEYS)
"""The settings ``Security.from_properties`` reads."""


class ClientSecurityArgs(TypedDict, total=False):
    """kafka-python's keyword arguments, as every annal client takes them
    (none given: the process's default security)."""

    security_protocol: str
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    sasl_mechanism: str
    sasl_plain_username: str | None
    sasl_plain_password: str | None


class SecurityConfigError(ValueError):
    """Security settings that cannot work; the message says which and why."""


def read_pem(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SecurityConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise SecurityConfigError(f"{what} {path} is not PEM (no -----BEGIN line)")
    return data


def pem_certificates(data: bytes, path: str) -> bytes:
    """Every certificate of a PEM file (a chain, or a keystore with its key), read
    by ``cryptography`` and written back as PEM; an error naming ``path`` when
    there is none or one does not parse."""
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise SecurityConfigError(f"{path} holds no certificate that can be read (PEM)") from None
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def pem_private_key(data: bytes, path: str, password: str | None = None) -> bytes:
    """The private key of a PEM file (PKCS#8 or the traditional formats, encrypted
    ones with ``password``: Kafka's ``ssl.key.password``), as unencrypted PKCS#8
    PEM for TLS; an error naming ``path`` and what is wrong."""
    secret = password.encode() if password is not None else None
    try:
        key = serialization.load_pem_private_key(data, secret)
    except TypeError:
        if password is None:
            raise SecurityConfigError(
                f"the private key in {path} is encrypted: give its password as ssl.key.password"
            ) from None
        raise SecurityConfigError(
            f"the private key in {path} is not encrypted, but ssl.key.password is set"
        ) from None
    except ValueError:
        wrong = " or ssl.key.password is wrong" if password is not None else ""
        raise SecurityConfigError(
            f"{path} holds no private key that can be read (PEM){wrong}"
        ) from None
    except UnsupportedAlgorithm as exc:
        raise SecurityConfigError(f"the private key in {path}: {exc}") from None
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True, slots=True)
class Security:
    """See the module docstring.  Immutable; channels are made per endpoint."""

    protocol: str = PLAINTEXT
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_mechanism: str = "SCRAM-SHA-512"  # what the password is checked against
    key_password: str | None = field(default=None, repr=False)  # ssl.key.password

    def __post_init__(self) -> None:
        if self.protocol not in (PLAINTEXT, SSL, SASL_SSL):
            raise SecurityConfigError(
                f"security_protocol {self.protocol!r}: expected PLAINTEXT, SSL or SASL_SSL "
                "(annal's gRPC clients send passwords over TLS only)"
            )
        if self.protocol == PLAINTEXT and (self.cafile or self.certfile or self.keyfile):
            raise SecurityConfigError(
                "ssl files given with security_protocol PLAINTEXT: set security_protocol='SSL'"
            )
        if (self.protocol == SASL_SSL) != bool(self.sasl_username):
            raise SecurityConfigError(
                "security_protocol SASL_SSL needs sasl_plain_username and sasl_plain_password"
                if self.protocol == SASL_SSL
                else "a SASL user is given: set security_protocol='SASL_SSL' (TLS)"
            )
        if self.protocol == SASL_SSL and self.sasl_password is None:
            raise SecurityConfigError(f"no sasl password for user {self.sasl_username!r}")
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise SecurityConfigError(
                f"sasl_mechanism {self.sasl_mechanism!r}: expected one of {SASL_MECHANISMS}"
            )
        for what, path in (("ssl_cafile", self.cafile), ("ssl_certfile", self.certfile),
                           ("ssl_keyfile", self.keyfile)):  # fmt: skip
            if path and not Path(path).is_file():
                raise SecurityConfigError(f"{what} {path}: no such file")
        if bool(self.certfile) != bool(self.keyfile):
            raise SecurityConfigError(
                "a client certificate needs both ssl_certfile and ssl_keyfile "
                "(the same file when it holds both)"
            )
        self._pem_files()  # read now, so that what is wrong shows before a request

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    def _pem_files(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(CA certificates, private key, certificate chain) as PEM, read from the
        files now; None for those not given."""
        ca = None
        if self.cafile:
            ca = pem_certificates(read_pem(self.cafile, "ssl CA file"), self.cafile)
        key = chain = None
        if self.certfile and self.keyfile:
            chain = pem_certificates(read_pem(self.certfile, "ssl certificate"), self.certfile)
            key = pem_private_key(
                read_pem(self.keyfile, "ssl key"), self.keyfile, self.key_password
            )
        return ca, key, chain

    def credentials(self) -> grpc.ChannelCredentials:
        """The files read now (so a renewed certificate is picked up by new channels)."""
        channel = grpc.ssl_channel_credentials(*self._pem_files())
        if self.sasl_username is None:
            return channel
        user_password = (
            (USER_HEADER, self.sasl_username),
            (PASSWORD_HEADER, self.sasl_password or ""),
        )

        def add_password(_context: Any, callback: Any) -> None:
            callback(user_password, None)

        return grpc.composite_channel_credentials(
            channel, grpc.metadata_call_credentials(add_password, name="annal-sasl")
        )

    def client_args(self) -> ClientSecurityArgs:
        """This security as a client's keyword arguments (``client_security``
        builds the same back), for code that hands it to another client."""
        return ClientSecurityArgs(
            security_protocol=self.protocol,
            ssl_cafile=self.cafile,
            ssl_certfile=self.certfile,
            ssl_keyfile=self.keyfile,
            sasl_mechanism=self.sasl_mechanism,
            sasl_plain_username=self.sasl_username,
            sasl_plain_password=self.sasl_password,
        )

    def channel(self, endpoint: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        if self.tls:
            return grpc.secure_channel(endpoint, self.credentials(), options=list(options))
        return grpc.insecure_channel(endpoint, options=list(options))

    @classmethod
    def from_properties(cls, props: Mapping[str, str], where: str, prefix: str = "") -> Security:
        """From a ``--command-config`` file's settings (see the module docstring).
        Messages name a setting as ``prefix`` + its name (Spark's ``kafka.``)."""
        unknown = sorted(prefix + k for k in props if k.startswith(("ssl.", "security.")) and
                         k not in _KNOWN_KEYS)  # fmt: skip
        if unknown:
            raise SecurityConfigError(f"{where}: unknown security settings {unknown}")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(key, "PEM").upper() != "PEM":
                raise SecurityConfigError(
                    f"{where}: {prefix}{key}={props[key]!r}: only PEM files are read"
                )
        protocol = props.get("security.protocol", PLAINTEXT).strip().upper()

        def first(keys: Sequence[str]) -> str | None:
            return next((props[k].strip() for k in keys if props.get(k, "").strip()), None)

        jaas_user, jaas_password = jaas_login(props.get("sasl.jaas.config", ""))
        user = props.get("sasl.username") or jaas_user
        password = props.get("sasl.password") or jaas_password
        if protocol == SASL_SSL and not user:
            raise SecurityConfigError(
                f"{where}: {prefix}security.protocol=SASL_SSL needs a user and its password: "
                f'{prefix}sasl.jaas.config (username="..." password="..."), or '
                f"{prefix}sasl.username and {prefix}sasl.password"
            )
        mechanism = (first(("sasl.mechanism", "sasl.mechanisms")) or "SCRAM-SHA-512").upper()
        try:
            return cls(
                protocol, first(_CA_KEYS), first(_CERT_KEYS), first(_KEY_KEYS),
                user, password, mechanism, props.get("ssl.key.password"),
            )  # fmt: skip
        except SecurityConfigError as exc:
            raise SecurityConfigError(f"{where}: {exc}") from None


_default = Security()


def default_security() -> Security:
    """What clients built without their own security settings use (PLAINTEXT,
    unless a tool's ``--command-config`` said otherwise)."""
    return _default


def set_default_security(security: Security) -> None:
    global _default
    _default = security


def client_security(
    security_protocol: str | None,
    ssl_cafile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    sasl_plain_username: str | None = None,
    sasl_plain_password: str | None = None,
    sasl_mechanism: str | None = None,
) -> Security:
    """A client's settings (kafka-python's names); the process default when none given."""
    given = (ssl_cafile, ssl_certfile, ssl_keyfile, sasl_plain_username)
    if security_protocol is None and not any(given):
        return default_security()
    return Security(
        (security_protocol or PLAINTEXT).upper(), ssl_cafile, ssl_certfile, ssl_keyfile,
        sasl_plain_username, sasl_plain_password, (sasl_mechanism or "SCRAM-SHA-512").upper(),
    )  # fmt: skip


def command_config_security(path: Path) -> Security:
    """The client settings of a ``--command-config`` file; SecurityConfigError
    naming what is wrong (the file unreadable or malformed included)."""
    try:
        props = read_properties(path, "--command-config")
    except PropertiesError as exc:
        raise SecurityConfigError(str(exc)) from None
    return Security.from_properties(props, f"--command-config {path}")
