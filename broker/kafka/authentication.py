"""Who is on a Kafka connection: TLS and SASL on a listener (docs/security.md).

A listener's security protocol (``broker/listeners.py``) decides:

1. **TLS** (``SSL``, ``SASL_SSL``): the listener accepts TCP, then runs the
   TLS handshake itself (``start_tls``), so that a failed handshake is logged
   with the client and the reason.  A client certificate, when the listener
   asks for one, names the principal (``User:<CN>``).
2. **SASL** (``SASL_PLAINTEXT``, ``SASL_SSL``; KIP-152): until the client has
   authenticated, a connection may send only ApiVersions, SaslHandshake (the
   mechanism) and SaslAuthenticate (the mechanism's messages, one request
   each).  After a SaslHandshake v0 (Kafka 0.10's form, which librdkafka's
   feature check still asks for) the mechanism's messages come as bare
   size-prefixed tokens instead, and are answered the same way.  Anything else
   closes the connection, as does a failed exchange (after its answer, which
   says why), an unsupported mechanism (after the answer listing the enabled
   ones), or not finishing within ``AUTHENTICATION_TIMEOUT_S``.
   A completed exchange makes the principal ``User:<name>``.
3. Otherwise (``PLAINTEXT``) the principal is ``User:ANONYMOUS``.

The SASL requests are answered on the connection's reader, before it reads
the next frame, so a request that follows a successful SaslAuthenticate
already runs as the new principal.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` above 0, a
SaslAuthenticate that completes answers that session lifetime, and the
session expires after it.  Before then the client may authenticate again on
the same connection (SaslHandshake v1, then SaslAuthenticate), with the same
mechanism and as the same principal; requests keep flowing meanwhile under
the session they started with.  A request that arrives after the session
expired closes the connection, whatever the client supports, as Kafka's
broker does.  With 0 (the default) sessions never expire, and a second
SaslHandshake is answered ILLEGAL_SASL_STATE.

Thread safety: one ``ConnectionAuthenticator`` per connection, on the
broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from annal.broker.kafka.apis import KafkaApis
from annal.broker.listeners import PLAINTEXT, KafkaListenerConfig, TlsSettings
from annal.kafkaproto.wire import API_VERSIONS_KEY, Request
from annal.security.acl import ANONYMOUS, USER_TYPE, KafkaPrincipal
from annal.security.sasl import (
    CredentialLookup,
    IllegalSaslState,
    SaslError,
    SaslServer,
    SaslServerFactory,
)
from annal.security.session import Session, principal_from_certificate

from annal import errors

logger = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
AUTHENTICATION_TIMEOUT_S = 10.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
Values = Mapping[str, Any]


class AuthenticationFailed(Exception):
    """The connection must close after its answers; the message says why."""


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How one Kafka listener secures its connections."""

    name: str = PLAINTEXT
    protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslServerFactory | None = None
    max_reauth_ms: int = 0  # connections.max.reauth.ms: a SASL session's lifetime; 0 none


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A TLS server context from a listener's PEM files (read now)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.keystore)
    if tls.truststore:
        context.load_verify_locations(tls.truststore)
    context.verify_mode = {
        "required": ssl.CERT_REQUIRED,
        "requested": ssl.CERT_OPTIONAL,
    }.get(tls.client_auth, ssl.CERT_NONE)
    return context


async def start_tls(
    security: ListenerSecurity, writer: asyncio.StreamWriter, client: str
) -> Mapping[str, Any] | None:
    """The TLS handshake on an accepted connection; the client's certificate (None
    without one).  AuthenticationFailed, naming the reason, when it fails."""
    assert security.ssl_context is not None
    try:
        await writer.start_tls(security.ssl_context, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
    except (ssl.SSLError, ConnectionError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        if isinstance(exc, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(exc):
            reason = "not TLS (a plaintext client on a TLS listener?)"
        raise AuthenticationFailed(f"TLS handshake failed: {reason}") from None
    peercert: Mapping[str, Any] | None = writer.get_extra_info("peercert")
    return peercert


class ConnectionAuthenticator:
    """The authentication state of one connection (see the module docstring)."""

    def __init__(
        self,
        security: ListenerSecurity,
        client_host: str,
        peercert: Mapping[str, Any] | None = None,
    ) -> None:
        self._security = security
        principal = principal_from_certificate(peercert) if security.ssl_context else ANONYMOUS
        self.session = Session(principal, client_host, security.name)
        self._server: SaslServer | None = None
        self.authenticated = security.sasl is None
        self.bare_tokens = False  # after a SaslHandshake v0 (see the module docstring)
        self._expires_at: float | None = None  # the session's end (monotonic), if it has one
        self._reauthenticating = False  # a SaslHandshake after authentication (KIP-368)
        self.reauthentications = 0

    def intercepts(self, api_key: int) -> bool:
        """Whether this connection's reader answers the request itself (SASL)."""
        if api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            return False
        if not self.authenticated or self._reauthenticating:
            return True
        # a new exchange on an authenticated connection: re-authentication
        return api_key == SASL_HANDSHAKE_KEY and self._security.max_reauth_ms > 0

    def check_allowed(self, api_key: int, api_name: str) -> None:
        """AuthenticationFailed for a request a connection may not send now:
        before authentication, or after its session expired."""
        if not self.authenticated and api_key != API_VERSIONS_KEY:
            raise AuthenticationFailed(
                f"a {api_name} request before SASL authentication (listener "
                f"{self._security.name} is {self._security.protocol})"
            )
        if self._expires_at is not None and time.monotonic() >= self._expires_at:
            raise AuthenticationFailed(
                f"a {api_name} request after the SASL session of {self.session.principal} "
                f"expired (connections.max.reauth.ms={self._security.max_reauth_ms}; the "
                "client did not re-authenticate)"
            )

    async def answer(self, request: Request) -> tuple[Values, str | None]:
        """The answer to a SASL request, and why the connection must close after
        it (None to go on)."""
        if request.head.api_key == SASL_HANDSHAKE_KEY:
            return self._handshake(request)
        return await self._authenticate(request)

    def _handshake(self, request: Request) -> tuple[Values, str | None]:
        factory = self._security.sasl
        assert factory is not None
        mechanism = str(request.body.mechanism)
        enabled = list(factory.enabled_mechanisms)
        if self.authenticated:  # re-authentication (intercepts let only that through)
            assert self._server is not None
            if request.head.api_version < 1 or mechanism != self._server.mechanism:
                return self._handshake_error(
                    errors.ILLEGAL_SASL_STATE, enabled,
                    f"re-authentication needs SaslHandshake v1 with the same mechanism "
                    f"({self._server.mechanism}), got v{request.head.api_version} {mechanism}",
                )  # fmt: skip
            self._reauthenticating = True
        elif self._server is not None:
            return self._handshake_error(errors.ILLEGAL_SASL_STATE, enabled,
                                         "a second SaslHandshake")  # fmt: skip
        try:
            self._server = factory(mechanism)
        except SaslError as exc:
            return self._handshake_error(exc.code, enabled, str(exc))
        self.bare_tokens = request.head.api_version == 0
        return {"error_code": errors.NONE.number, "mechanisms": enabled}, None

    async def bare_token(self, token: bytes) -> tuple[bytes, str | None]:
        """The answer to a size-prefixed SASL token (after a SaslHandshake v0), framed,
        and why the connection must close (None to go on)."""
        server = self._server
        assert server is not None
        try:
            challenge = await asyncio.to_thread(server.evaluate, token)
            if server.complete:
                self._logged_in(server)
        except SaslError as exc:
            return b"", f"SASL authentication failed: {exc}"
        return len(challenge).to_bytes(4, "big") + challenge, None

    def _logged_in(self, server: SaslServer) -> None:
        principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
        if self._reauthenticating:
            self._reauthenticating = False
            if principal != self.session.principal:
                raise SaslError(
                    errors.SASL_AUTHENTICATION_FAILED,
                    f"re-authentication as {principal} on a connection of "
                    f"{self.session.principal}",
                )
            self.reauthentications += 1
            logger.debug("%s re-authenticated on %s", principal, self._security.name)
        else:
            logger.debug("%s authenticated on %s", principal, self._security.name)
        self.authenticated = True
        self.bare_tokens = False
        self.session = Session(principal, self.session.client_host, self.session.listener)
        lifetime_ms = self._security.max_reauth_ms
        self._expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None

    @staticmethod
    def _handshake_error(
        code: errors.ErrorCode, enabled: list[str], reason: str
    ) -> tuple[Values, str | None]:
        return {"error_code": code.number, "mechanisms": enabled}, f"SASL handshake: {reason}"

    async def _authenticate(self, request: Request) -> tuple[Values, str | None]:
        server = self._server
        try:
            if server is None:
                raise IllegalSaslState("SaslAuthenticate before SaslHandshake")
            # PLAIN derives a key from the password (thousands of hash rounds):
            # off the event loop
            challenge = await asyncio.to_thread(server.evaluate, bytes(request.body.auth_bytes))
            if server.complete:
                self._logged_in(server)
        except SaslError as exc:
            values = {
                "error_code": exc.code.number,
                "error_message": str(exc),
                "auth_bytes": b"",
                "session_lifetime": 0,
            }
            return values, f"SASL authentication failed: {exc}"
        values = {
            "error_code": errors.NONE.number,
            "error_message": None,
            "auth_bytes": challenge,
            # told once the exchange completes (KIP-368); 0: the session does not expire
            "session_lifetime": self._security.max_reauth_ms if server.complete else 0,
        }
        return values, None


def plaintext_mistake(prefix: bytes) -> str | None:
    """What a frame's first bytes say a client got wrong, when they are not Kafka's:
    a TLS handshake or an HTTP/2 (gRPC) preface sent to a plaintext listener."""
    if prefix[:1] == b"\x16" and prefix[1:2] == b"\x03":
        return "a TLS handshake on a plaintext listener (is the client set to SSL?)"
    if prefix == b"PRI ":
        return "an HTTP/2 preface: a gRPC client on the Kafka listener (use the GRPC:// port)"
    if prefix in (b"GET ", b"POST", b"HEAD"):
        return "an HTTP request on the Kafka listener"
    return None


def listener_security(
    config: KafkaListenerConfig, lookup: CredentialLookup, max_reauth_ms: int = 0
) -> ListenerSecurity:
    """A listener's security from its settings: its TLS context (the files read
    now; ``ssl.SSLError`` or OSError when they cannot be used), its SASL
    mechanisms, checked against ``lookup``'s credentials, and its sessions'
    lifetime (``connections.max.reauth.ms``)."""
    context = None if config.tls is None else server_ssl_context(config.tls)
    sasl = SaslServerFactory(config.sasl_mechanisms, lookup) if config.sasl else None
    lifetime = max_reauth_ms if sasl is not None else 0
    return ListenerSecurity(config.name, config.security_protocol, context, sasl, lifetime)


def register_sasl_apis(apis: KafkaApis) -> None:
    """SaslHandshake v0-v1 and SaslAuthenticate v0-v2 in the API table (so ApiVersions
    offers them).  A SASL listener answers them before authentication itself;
    what reaches these handlers came on a listener without SASL, or after it,
    and gets ILLEGAL_SASL_STATE (Kafka's answer; re-authentication is not offered)."""
    apis.add(SASL_HANDSHAKE_KEY, "SaslHandshake", (0, 1), _no_sasl_handshake)
    apis.add(SASL_AUTHENTICATE_KEY, "SaslAuthenticate", (0, 2), _no_sasl_authenticate)


async def _no_sasl_handshake(request: Request) -> Values:
    return {"error_code": errors.ILLEGAL_SASL_STATE.number, "mechanisms": []}


async def _no_sasl_authenticate(request: Request) -> Values:
    return {
        "error_code": errors.ILLEGAL_SASL_STATE.number,
        "error_message": f"no SASL exchange on listener {request.session.listener} now",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
