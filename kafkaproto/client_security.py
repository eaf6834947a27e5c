"""How annal's own Kafka-protocol connections prove who they are: TLS and SASL, client side.

A follower fetching from its leader's ``SASL_SSL://`` listener, or a Spark
reader fetching from one, is a Kafka client like any other: it connects,
runs the TLS handshake (``SSL``, ``SASL_SSL``), then authenticates with SASL
(``SASL_PLAINTEXT``, ``SASL_SSL``) before its first request, as KIP-152
describes: SaslHandshake v1 names the mechanism, then one SaslAuthenticate
v1 request carries each of the mechanism's client messages.

* ``PLAIN`` (RFC 4616): one message, ``\\0user\\0password``.
* ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802/7677): client-first,
  server-first, client-final, server-final; ``scramp`` computes the proofs
  and checks the server's signature, so a broker that does not hold the
  user's credential cannot pass itself off as one that does.

``ConnectionSecurity`` says which of these a connection does.  It is
immutable and hides the password from ``repr``.  ``login_steps`` is the
SASL exchange as a generator of requests, driven by the connection
(``kafkaproto/client.py``), so that this module does no I/O.

TLS: the server's certificate is checked against ``cafile`` (the system's
CAs without one) and, unless ``check_hostname`` is off (Kafka's
``ssl.endpoint.identification.algorithm`` set empty), against the host
connected to.  ``certfile``/``keyfile`` present this side's certificate
(a broker's keystore) to listeners that ask for one.
"""

from __future__ import annotations

import ssl
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import scramp  # type: ignore[import-untyped]

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE = (17, 1)  # api key, version
SASL_AUTHENTICATE = (36, 1)


class LoginRefused(Exception):
    """The broker refused this side's SASL login, or its answers do not prove it
    holds the user's credential; the message says which and why."""


@dataclass(frozen=True, slots=True)
class SaslLogin:
    """Who a SASL connection logs in as."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r}: expected one of {MECHANISMS}")


@dataclass(frozen=True, slots=True)
class ConnectionSecurity:
    """See the module docstring."""

    protocol: str = PLAINTEXT
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    login: SaslLogin | None = None
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security protocol {self.protocol!r}: expected one of {PROTOCOLS}")
        if self.sasl != (self.login is not None):
            raise ValueError(
                f"security protocol {self.protocol} needs a SASL login"
                if self.sasl
                else f"a SASL login given with security protocol {self.protocol}"
            )

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context, the files read now (``ssl.SSLError`` or OSError
        when they cannot be used)."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile or None)
        return context


# what a step yields: (api key, version, request values); it is sent the answer's body
Step = tuple[int, int, dict[str, Any]]


def login_steps(login: SaslLogin) -> Generator[Step, Any, None]:
    """The SASL exchange for ``login``: each request to send, each answer sent
    back in.  LoginRefused when the broker says no, or cannot prove itself."""
    handshake = yield (*SASL_HANDSHAKE, {"mechanism": login.mechanism})
    if handshake.error_code.value != 0:
        offered = ", ".join(str(m) for m in handshake.mechanisms) or "none"
        raise LoginRefused(
            f"the broker does not offer SASL mechanism {login.mechanism} (it offers {offered})"
        )
    if login.mechanism == "PLAIN":
        message = b"\0" + login.username.encode() + b"\0" + login.password.encode()
        yield from _authenticate(message)
        return
    client = scramp.ScramClient([login.mechanism], login.username, login.password)
    server_first = yield from _authenticate(client.get_client_first().encode())
    try:
        client.set_server_first(server_first.decode())
        final = client.get_client_final()
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise LoginRefused(f"{login.mechanism}: the broker's first message: {exc}") from None
    server_final = yield from _authenticate(final.encode())
    try:
        client.set_server_final(server_final.decode())
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise LoginRefused(
            f"{login.mechanism}: the broker's signature does not match (does it hold "
            f"{login.username}'s credential?): {exc}"
        ) from None


def _authenticate(message: bytes) -> Generator[Step, Any, bytes]:
    answer = yield (*SASL_AUTHENTICATE, {"auth_bytes": message})
    if answer.error_code.value != 0:
        raise LoginRefused(answer.error_message or f"SASL error {answer.error_code.value}")
    return bytes(answer.auth_bytes)
