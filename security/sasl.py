"""The broker's side of SASL PLAIN and SCRAM, one message at a time, with no I/O.

Kafka carries SASL inside its own protocol (KIP-152): a client first sends
SaslHandshake naming a mechanism, and the broker refuses a mechanism it has
not enabled (UNSUPPORTED_SASL_MECHANISM, listing the enabled ones).  Then
each SaslAuthenticate request carries the mechanism's next client message in
``auth_bytes`` and its answer carries the server's reply; the connection is
authenticated once the mechanism says it is complete.  ``new_server`` picks
the server object for a handshake and each object's ``evaluate`` turns one
client message into one reply.

PLAIN (RFC 4616), one step: the client sends ``authzid NUL authcid NUL
password`` in UTF-8 and gets an empty reply.  As in Kafka, the authorization
id must be empty or equal to the user name.  The password is checked against
the user's SCRAM credentials (``annal.security.scram``): it is accepted when
it recomputes the stored key of any of them.  Only use PLAIN over TLS.

SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), two steps, done by
scramp with Kafka's rules checked first:

1. client-first ``n,,n=<user>,r=<client nonce>`` -> server-first
   ``r=<client nonce + server nonce>,s=<salt>,i=<iterations>``.  The GS2
   header must be ``n,,`` (``y,,`` is also taken: RFC 5802 lets a client that
   could bind to the channel say so to a server that cannot).  Kafka binds no
   channel, so ``p=...`` is refused, as are an authorization id (``a=``),
   mandatory extensions (``m=``), Kafka's delegation-token extension
   ``tokenauth=true`` (KIP-48) and any other multi-letter extension.  In the
   user name, ',' and '=' travel as ``=2C`` and ``=3D``.
2. client-final ``c=<base64 GS2 header>,r=<nonce>,p=<proof>`` -> server-final
   ``v=<server signature>``; the exchange is then complete and the user name
   is the authorization id.

A user with no credential for the mechanism gets a server-first message like
anyone else's (a salt derived from the name under a per-process secret, so
it is the same each time, and the default iterations); the exchange then fails
at the proof, exactly as a wrong password does, with the same message.

Every failure raises one of three errors, which the broker answers with their
codes: ``SaslAuthenticationError`` (SASL_AUTHENTICATION_FAILED) for a refused
login or a malformed message, the text saying which part was wrong (never a
password, and never whether the user exists); ``IllegalSaslState``
(ILLEGAL_SASL_STATE) for a message that comes out of turn (a client-final
message first, anything after completion or after a failure); and
``UnsupportedSaslMechanism`` (UNSUPPORTED_SASL_MECHANISM).  An exchange that
failed stays failed.  Errors raised by the credential ``lookup`` itself (a
store that cannot be read) are not the client's fault and propagate unchanged.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from annal.security.scram import (
    DEFAULT_ITERATIONS,
    KEY_SIZES,
    MECHANISMS,
    SCRAM_SHA_512,
    ScramCredential,
    make_credential,
    verify_password,
)
from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]

from annal import errors

PLAIN: Final = "PLAIN"
SUPPORTED_MECHANISMS: Final[tuple[str, ...]] = (PLAIN, *MECHANISMS)
"""The SASL mechanisms annal implements, by their SASL names."""

AUTHENTICATION_FAILED: Final = "Authentication failed: invalid username or password"
"""The one message for a wrong password and an unknown user alike."""

CredentialLookup = Callable[[str], Mapping[str, ScramCredential]]
"""A user name -> that user's SCRAM credentials by mechanism (empty if no such user)."""

_SCRAMP_MIN_SALT: Final = 12  # scramp refuses shorter salts
_FAKE_SALT_SECRET: Final = secrets.token_bytes(32)
_NAME_LIKE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_SASLNAME = re.compile(r"(?:[^=,]|=2C|=3D)+")
_ESCAPED = re.compile(r"=(2C|3D)")


class SaslError(errors.AnnalError):
    """Base of the errors of a SASL exchange; never raised itself."""


class SaslAuthenticationError(SaslError):
    """The client is not authenticated: wrong credentials or a malformed message."""

    code = errors.SASL_AUTHENTICATION_FAILED


class IllegalSaslState(SaslError):
    """A message that does not fit where the exchange is."""

    code = errors.ILLEGAL_SASL_STATE


class UnsupportedSaslMechanism(SaslError):
    """A mechanism the broker has not enabled (or annal does not implement)."""

    code = errors.UNSUPPORTED_SASL_MECHANISM


class SaslConfigError(SaslError):
    """Enabled mechanisms that annal cannot serve."""

    code = errors.INVALID_CONFIG


class SaslServer(Protocol):
    """The server half of one SASL exchange."""

    mechanism: str

    def evaluate(self, response: bytes) -> bytes:
        """The reply to the client's next message (``b""`` when there is none)."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the client is authenticated."""
        ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name; only once ``complete``."""
        ...


class _Step(enum.Enum):
    FIRST = "waiting for the first client message"
    FINAL = "waiting for the client-final message"
    COMPLETE = "complete"
    FAILED = "failed"


class _Exchange:
    """The state every mechanism shares: steps, completion, failure."""

    mechanism: str

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._step = _Step.FIRST
        self._user: str | None = None

    @property
    def complete(self) -> bool:
        return self._step is _Step.COMPLETE

    @property
    def authorization_id(self) -> str:
        if self._step is not _Step.COMPLETE or self._user is None:
            raise IllegalSaslState(
                f"{self.mechanism} exchange is not complete: no authorization id yet"
            )
        return self._user

    def evaluate(self, response: bytes) -> bytes:
        if self._step is _Step.COMPLETE:
            raise IllegalSaslState(f"{self.mechanism} exchange is already complete")
        if self._step is _Step.FAILED:
            raise IllegalSaslState(f"{self.mechanism} exchange has failed; start a new one")
        try:
            return self._evaluate(response)
        except BaseException:
            self._step = _Step.FAILED
            raise

    def _evaluate(self, response: bytes) -> bytes:
        raise NotImplementedError


def _decode(response: object, what: str) -> str:
    if isinstance(response, bytearray | memoryview):
        response = bytes(response)
    if not isinstance(response, bytes):
        raise SaslAuthenticationError(f"{what} must be bytes, not {type(response).__name__}")
    try:
        return response.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError(f"{what} is not valid UTF-8") from None


def _shown(name: str) -> str:
    return repr(name) if _NAME_LIKE.fullmatch(name) else "(an unrecognised name)"


# -- PLAIN --------------------------------------------------------------------------------------


@functools.cache
def _decoy_credential() -> ScramCredential:
    """A credential no password matches, checked for unknown users so that they
    take about as long as known ones."""
    return make_credential(SCRAM_SHA_512, secrets.token_hex(16))


class PlainServer(_Exchange):
    """SASL/PLAIN (RFC 4616) checked against SCRAM credentials."""

    def __init__(self, lookup: CredentialLookup) -> None:
        super().__init__(PLAIN)
        self._lookup = lookup

    def _evaluate(self, response: bytes) -> bytes:
        text = _decode(response, "SASL/PLAIN message")
        fields = text.split("\0")
        if len(fields) != 3:
            raise SaslAuthenticationError(
                "invalid SASL/PLAIN message: expected authzid NUL username NUL password "
                f"(3 fields), got {len(fields)} field(s)"
            )
        authzid, username, password = fields
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: client requested an authorization id that is "
                "different from username"
            )
        credentials = self._lookup(username)
        if not _password_matches(credentials, password):
            raise SaslAuthenticationError(AUTHENTICATION_FAILED)
        self._user = username
        self._step = _Step.COMPLETE
        return b""


def _password_matches(credentials: Mapping[str, ScramCredential], password: str) -> bool:
    usable = [(m, c) for m, c in credentials.items() if m in MECHANISMS]
    if not usable:
        verify_password(SCRAM_SHA_512, _decoy_credential(), password)
        return False
    return any(verify_password(m, c, password) for m, c in usable)


# -- SCRAM --------------------------------------------------------------------------------------


def _client_first_user(text: str) -> str:
    """Kafka's rules for a client-first message; the (unescaped) user name."""
    if not text:
        raise SaslAuthenticationError("the SCRAM client-first message is empty")
    flag, comma, rest = text.partition(",")
    authzid, second_comma, bare = rest.partition(",")
    if not comma or not second_comma:
        raise SaslAuthenticationError(
            "invalid SCRAM client-first message: it must start with the GS2 header 'n,,'"
        )
    if flag.startswith("p="):
        raise SaslAuthenticationError(
            "SCRAM channel binding is not supported: the client asked for it (GS2 flag "
            "'p='), but Kafka's SCRAM binds no channel (GS2 header 'n,,')"
        )
    if flag not in ("n", "y"):
        raise SaslAuthenticationError(
            "invalid SCRAM client-first message: the GS2 channel-binding flag must be 'n'"
        )
    if authzid.startswith("a="):
        raise SaslAuthenticationError(
            "an authorization id (a=) in the SCRAM GS2 header is not supported"
        )
    if authzid:
        raise SaslAuthenticationError(
            "invalid SCRAM client-first message: the GS2 header holds something other "
            "than an authorization id between its commas"
        )
    attributes = bare.split(",")
    if attributes[0].startswith("m="):
        raise SaslAuthenticationError("mandatory SCRAM extensions (m=) are not supported")
    if len(attributes) < 2 or not attributes[0].startswith("n=") or attributes[1][:2] != "r=":
        raise SaslAuthenticationError(
            "invalid SCRAM client-first message: expected n=<user>,r=<nonce> after the GS2 header"
        )
    for extension in attributes[2:]:
        key, _, value = extension.partition("=")
        if key == "tokenauth" and value.lower() == "true":
            raise SaslAuthenticationError(
                "delegation tokens are not supported (the client sent tokenauth=true)"
            )
        if len(key) != 1:
            raise SaslAuthenticationError(f"unsupported SCRAM extension {_shown(key)}")
    saslname = attributes[0][2:]
    if not saslname:
        raise SaslAuthenticationError("invalid SCRAM client-first message: the user name is empty")
    if not _SASLNAME.fullmatch(saslname):
        raise SaslAuthenticationError(
            "invalid SCRAM client-first message: in the user name, '=' must start "
            "'=2C' (for ',') or '=3D' (for '=')"
        )
    return _ESCAPED.sub(lambda m: "," if m.group(1) == "2C" else "=", saslname)


def _fake_auth_info(mechanism: str, username: str) -> tuple[bytes, bytes, bytes, int]:
    """What an unknown user gets: a salt that is stable per name (so asking twice
    reveals nothing) and keys that no proof can match."""
    message = f"{mechanism}\0{username}".encode()
    salt = hmac.new(_FAKE_SALT_SECRET, message, hashlib.sha256).digest()
    size = KEY_SIZES[mechanism]
    return salt, secrets.token_bytes(size), secrets.token_bytes(size), DEFAULT_ITERATIONS


def _server_error(exc: Exception) -> str:
    """The RFC 5802 ``server-error-value`` scramp attached to ``exc``, if any
    (an enum in scramp 1.5, a plain str before)."""
    value = getattr(exc, "server_error", None)
    return str(getattr(value, "value", value) or "")


def _scramp_reason(exc: Exception) -> str:
    """scramp's own explanation (its messages hold no secrets), or nothing for
    an error that is not a refusal of scramp's."""
    if isinstance(exc, ScramException) and exc.args and isinstance(exc.args[0], str):
        return f": {exc.args[0]}"
    return ""


def _first_error(exc: Exception) -> str:
    return f"invalid SCRAM client-first message{_scramp_reason(exc)}"


def _final_error(exc: Exception) -> str:
    server_error = _server_error(exc)
    if server_error == "invalid-proof":
        return AUTHENTICATION_FAILED
    if server_error == "channel-bindings-dont-match":
        return (
            "invalid SCRAM client-final message: its channel binding (c=) does not repeat "
            "the GS2 header of the client-first message"
        )
    if isinstance(exc, ScramException) and exc.args == ("Server nonce doesn't match.",):
        return "invalid SCRAM client-final message: its nonce (r=) is not the one the server sent"
    return f"invalid SCRAM client-final message{_scramp_reason(exc)}"


class ScramServer(_Exchange):
    """SASL/SCRAM-SHA-256 or -512 (RFC 5802, RFC 7677) as Kafka runs it."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        if mechanism not in MECHANISMS:
            raise UnsupportedSaslMechanism(
                f"{_shown(mechanism)} is not a SCRAM mechanism: supported are "
                f"{', '.join(MECHANISMS)}"
            )
        super().__init__(mechanism)
        self._lookup = lookup
        self._pending_user = ""
        self._lookup_error: Exception | None = None
        self._scramp = ScramMechanism(mechanism).make_server(self._auth_info)

    def _auth_info(self, _prepared_name: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's ``auth_fn``.  It looks the user up by the name as sent
        (unescaped, not SASLprep'd, like Kafka) rather than scramp's form."""
        try:
            credential = self._lookup(self._pending_user).get(self.mechanism)
        except Exception as exc:  # scramp would hide it as its own error
            self._lookup_error = exc
            raise
        # A salt scramp cannot use counts as no credential: failing like an
        # unknown user reveals nothing (Kafka's salts are 26 bytes, annal's 32).
        if credential is None or len(credential.salt) < _SCRAMP_MIN_SALT:
            return _fake_auth_info(self.mechanism, self._pending_user)
        return (
            credential.salt,
            credential.stored_key,
            credential.server_key,
            credential.iterations,
        )

    def _evaluate(self, response: bytes) -> bytes:
        if self._step is _Step.FIRST:
            reply = self._client_first(response)
            self._step = _Step.FINAL
        else:
            reply = self._client_final(response)
            self._step = _Step.COMPLETE
        return reply

    def _client_first(self, response: bytes) -> bytes:
        text = _decode(response, "SCRAM client-first message")
        if text.startswith("c="):
            raise IllegalSaslState(
                "expected the SCRAM client-first message, got what looks like the "
                "client-final message (c=...)"
            )
        self._pending_user = _client_first_user(text)
        try:
            self._scramp.set_client_first(text)
            server_first: str = self._scramp.get_server_first()
        except Exception as exc:
            if self._lookup_error is not None:
                raise self._lookup_error from None
            raise SaslAuthenticationError(_first_error(exc)) from None
        self._user = self._pending_user
        return server_first.encode("utf-8")

    def _accept_repeated_client_nonce(self, client_final: str) -> None:
        """librdkafka before 2.6.1 sends ``r=`` as its own nonce followed by the whole
        nonce of the server-first message (which already starts with it).  Kafka's
        brokers accept a final nonce that *ends with* the one they sent (Kafka
        2.x checked nothing; 3.8.1 and later check ``endsWith``), and so does annal:
        the proof is then checked over the message as the client sent it."""
        sent = self._scramp.nonce
        found = next((f[2:] for f in client_final.split(",") if f.startswith("r=")), None)
        if sent is None or found is None or not found.endswith(str(sent)):
            return
        repeated = found[: len(found) - len(str(sent))]  # the client's own nonce, again
        if repeated and str(sent).startswith(repeated):
            self._scramp.nonce = type(sent)(found)

    def _client_final(self, response: bytes) -> bytes:
        text = _decode(response, "SCRAM client-final message")
        if text.startswith(("n,", "y,", "p=")):
            raise IllegalSaslState(
                "expected the SCRAM client-final message, got what looks like a "
                "client-first message (a GS2 header)"
            )
        self._accept_repeated_client_nonce(text)
        try:
            self._scramp.set_client_final(text)
            server_final: str = self._scramp.get_server_final()
        except Exception as exc:  # scramp's refusals, or its failing on odd input
            raise SaslAuthenticationError(_final_error(exc)) from None
        return server_final.encode("utf-8")


# -- choosing a server --------------------------------------------------------------------------


def new_server(
    mechanism: str, enabled_mechanisms: Collection[str], lookup: CredentialLookup
) -> SaslServer:
    """The server for a SaslHandshake naming ``mechanism``."""
    if mechanism not in enabled_mechanisms or mechanism not in SUPPORTED_MECHANISMS:
        enabled = [m for m in SUPPORTED_MECHANISMS if m in enabled_mechanisms]
        shown = repr(mechanism[:64]) if isinstance(mechanism, str) else "(not a str)"
        raise UnsupportedSaslMechanism(
            f"SASL mechanism {shown} is not enabled: enabled are "
            f"{', '.join(enabled) if enabled else '(none)'}"
        )
    if mechanism == PLAIN:
        return PlainServer(lookup)
    return ScramServer(mechanism, lookup)


@dataclass(frozen=True, slots=True)
class SaslServerFactory:
    """A listener's ``sasl.enabled.mechanisms`` and where its credentials come
    from; calling it with a handshake's mechanism gives that exchange's server."""

    enabled_mechanisms: tuple[str, ...]
    lookup: CredentialLookup

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled_mechanisms", tuple(self.enabled_mechanisms))
        unknown = [m for m in self.enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise SaslConfigError(
                f"enabled SASL mechanisms {', '.join(map(repr, unknown))} are not "
                f"implemented: annal supports {', '.join(SUPPORTED_MECHANISMS)}"
            )

    def __call__(self, mechanism: str) -> SaslServer:
        return new_server(mechanism, self.enabled_mechanisms, self.lookup)
