"""A broker's listeners under Kafka's names (docs/security.md).

``listeners`` is a comma-separated list of ``NAME://host:port``.  One of them
serves annal's gRPC protocol: ``GRPC://`` (plaintext) or ``GRPCS://`` (TLS).
Every other name is a listener of Kafka's binary protocol, and its security
protocol comes from ``listener.security.protocol.map`` (``NAME:PROTOCOL``
pairs; by default each of Kafka's four protocols maps to itself):

========================  ==============  =====================================
security protocol         transport       who the client is (its principal)
========================  ==============  =====================================
``PLAINTEXT``             TCP             ``User:ANONYMOUS``
``SSL``                   TLS             ``User:<CN>`` of its certificate, or
                                          ``User:ANONYMOUS`` without one
``SASL_PLAINTEXT``        TCP             ``User:<name>`` it proved with SASL
``SASL_SSL``              TLS             ``User:<name>`` it proved with SASL
========================  ==============  =====================================

TLS listeners read ``ssl.keystore.location`` (a PEM file: the broker's key and
certificate chain), ``ssl.truststore.location`` (CA certificates, for client
certificates) and ``ssl.client.auth``; SASL listeners offer the mechanisms of
``sasl.enabled.mechanisms``.  Each of these may be set for one listener alone
with Kafka's prefix ``listener.name.<name lowercased>.`` (for example
``listener.name.internal.ssl.client.auth=required``).

Names are case-insensitive and kept upper-case, as Kafka normalises them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from annal.security.sasl import SUPPORTED_MECHANISMS

GRPC = "GRPC"
GRPCS = "GRPCS"  # gRPC over TLS (ssl.* settings)
PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
LISTENER_PREFIX = "listener.name."
# settings a listener may override with listener.name.<name>.<setting>
PER_LISTENER = (
    "ssl.keystore.location",
    "ssl.truststore.location",
    "ssl.client.auth",
    "sasl.enabled.mechanisms",
)
_NAME = re.compile(r"[A-Za-z0-9_]+")


class ListenerError(ValueError):
    """A listener setting that cannot work; the message names it (a ConfigError to
    the broker's settings)."""


@dataclass(frozen=True, slots=True)
class Listener:
    """One endpoint: ``NAME://host:port``.  ``protocol`` is the listener's name:
    GRPC or GRPCS for annal's protocol, else a Kafka listener's name."""

    host: str
    port: int
    protocol: str = GRPC

    def __str__(self) -> str:
        return f"{self.protocol}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A TLS listener's files (Kafka's names): ``ssl.keystore.location``, a PEM
    file with the broker's private key and certificate chain (its identity to
    clients and, as a client, to other brokers); ``ssl.truststore.location``, the
    CA certificates it trusts (for client certificates and other brokers);
    ``ssl.client.auth``: whether clients must present a certificate."""

    keystore: str
    truststore: str | None
    client_auth: str


@dataclass(frozen=True, slots=True)
class KafkaListenerConfig:
    """One listener of Kafka's protocol: where it binds, what it advertises, and
    how a connection to it is secured."""

    name: str
    bind: Listener
    advertised: Listener
    security_protocol: str
    tls: TlsSettings | None = None  # SSL and SASL_SSL
    sasl_mechanisms: tuple[str, ...] = ()  # SASL_PLAINTEXT and SASL_SSL

    @property
    def sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)


def parse_listener(name: str, text: str) -> Listener:
    scheme, sep, rest = text.strip().partition("://")
    if not sep or not _NAME.fullmatch(scheme):
        raise ListenerError(
            f"{name}={text!r}: expected NAME://host:port (GRPC, GRPCS, PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL or a name of listener.security.protocol.map)"
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenerError(f"{name}={text!r}: expected {scheme}://host:port with a port 0-65535")
    return Listener(host.strip("[]"), int(port), scheme.upper())


def parse_listeners(name: str, text: str) -> dict[str, Listener]:
    """A comma-separated listener list: name → listener, each name once (GRPC and
    GRPCS count as one: gRPC is served plain or over TLS, not both)."""
    found: dict[str, Listener] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        listener = parse_listener(name, item)
        key = GRPC if listener.protocol == GRPCS else listener.protocol
        if key in found:
            raise ListenerError(
                f"{name}={text!r}: names {listener.protocol} and {found[key].protocol}"
                if listener.protocol != found[key].protocol
                else f"{name}={text!r}: names {listener.protocol} twice"
            )
        found[key] = listener
    return found


def parse_protocol_map(name: str, text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: listener name → security protocol."""
    mapping: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        listener, colon, protocol = item.strip().partition(":")
        if not colon or not _NAME.fullmatch(listener.strip()):
            raise ListenerError(f"{name}={text!r}: expected NAME:PROTOCOL pairs, got {item!r}")
        if protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ListenerError(
                f"{name}={text!r}: {protocol.strip()!r} is not a security protocol "
                f"(expected one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        mapping[listener.strip().upper()] = protocol.strip().upper()
    return mapping


def listener_setting(values: Mapping[str, Any], raw: Mapping[str, str], listener: str,
                     setting: str, parse: Callable[[str, str], Any]) -> Any:  # fmt: skip
    """``setting`` for one listener: its ``listener.name.<l>.`` override if given."""
    key = f"{LISTENER_PREFIX}{listener.lower()}.{setting}"
    return parse(key, raw[key]) if key in raw else values[setting]


def is_sensitive(setting: str) -> bool:
    """Whether a setting's value is a secret (a JAAS line, a password): never shown
    by DescribeConfigs or logged, as Kafka's PASSWORD-typed settings."""
    return setting.endswith(("sasl.jaas.config", ".password", "zookeeper.auth.digest"))


def check_per_listener_keys(raw: Mapping[str, str], names: set[str]) -> None:
    """Every ``listener.name.*`` setting names a listener and a setting annal reads
    per listener (a typo is an error, as for any other setting)."""
    for key in raw:
        if not key.startswith(LISTENER_PREFIX):
            continue
        listener, _, setting = key.removeprefix(LISTENER_PREFIX).partition(".")
        if listener.upper() not in names:
            raise ListenerError(
                f"{key}: no listener named {listener.upper()} (listeners: {sorted(names)})"
            )
        mechanism, _, jaas = setting.partition(".")
        if jaas == "sasl.jaas.config" and mechanism.upper() in SUPPORTED_MECHANISMS:
            continue  # this broker's own login on that listener (broker/inter_broker.py)
        if setting not in PER_LISTENER:
            raise ListenerError(
                f"{key}: {setting!r} is not set per listener here (only "
                f"{', '.join(PER_LISTENER)} and <mechanism>.sasl.jaas.config)"
            )


def tls_settings(where: str, keystore: str, truststore: str, client_auth: str) -> TlsSettings:
    """The TLS files of ``where`` (a listener), checked to exist."""
    if not keystore:
        raise ListenerError(
            f"{where}: a TLS listener needs ssl.keystore.location "
            "(a PEM file with the broker's private key and certificate chain)"
        )
    for name, path in (
        ("ssl.keystore.location", keystore),
        ("ssl.truststore.location", truststore),
    ):
        if path and not Path(path).is_file():
            raise ListenerError(f"{name}={path!r}: no such file")
    if client_auth != "none" and not truststore:
        raise ListenerError(
            f"ssl.client.auth={client_auth} needs ssl.truststore.location (the CA certificates "
            "that signed the clients' certificates)"
        )
    return TlsSettings(keystore, truststore or None, client_auth)
