"""SCRAM credentials (RFC 5802, RFC 7677) in the form Kafka keeps them.

A broker never holds a SCRAM user's password, only what SCRAM needs to check a
proof: a random salt, an iteration count and two keys derived from the
password (RFC 5802, section 3)::

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    StoredKey      = H(HMAC-H(SaltedPassword, "Client Key"))
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

with H = SHA-256 for ``SCRAM-SHA-256`` and SHA-512 for ``SCRAM-SHA-512`` (the
two mechanisms Kafka offers; 32- and 64-byte keys).  Kafka accepts between
4096 and 16384 iterations and uses 4096 unless told otherwise.

In ZooKeeper mode a user's credentials live in its config znode,
``/config/users/<user>``, one entry per mechanism, each value a comma list of
four ``name=value`` fields in this order (base64 is the standard alphabet with
padding)::

    {"version":1,"config":{"SCRAM-SHA-512":
        "salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=4096"}}

``format_credential`` writes such a value and ``parse_credential`` reads one.

Operators set credentials with ``kafka-configs.sh --entity-type users``; its
``--add-config`` takes one bracketed group per mechanism, ``iterations=N``
optional and first, ``password=`` last (the password runs to the closing
``]``, so it may hold ',' and '=' but not '[' or ']')::

    SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]

and ``--delete-config SCRAM-SHA-512`` names mechanisms to drop.
``parse_add_config`` and ``parse_delete_config`` read those two spellings.

Passwords are hashed as their UTF-8 bytes, as Kafka's clients do: Kafka skips
the SASLprep normalization (RFC 4013) that RFC 5802 asks for, while scramp,
which makes the keys here, applies it.  The two agree exactly when SASLprep
leaves a password unchanged, so ``make_credential`` refuses any other password
rather than store keys a Kafka client could never match.

Secrets never reach a ``repr`` or an error message: credentials show only
their iteration count, upsertions their mechanism and iteration count.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]
from scramp.utils import h as scramp_h  # type: ignore[import-untyped]
from scramp.utils import hi as scramp_hi
from scramp.utils import hmac as scramp_hmac

from annal import errors

SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
MECHANISMS: Final[tuple[str, ...]] = (SCRAM_SHA_256, SCRAM_SHA_512)
"""The SCRAM mechanisms Kafka (and annal) support, by their SASL names."""

MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
DEFAULT_ITERATIONS: Final = 4096

KEY_SIZES: Final[Mapping[str, int]] = {SCRAM_SHA_256: 32, SCRAM_SHA_512: 64}
"""Bytes in a stored or server key: the digest size of the mechanism's hash."""

_FIELDS: Final = ("salt", "stored_key", "server_key", "iterations")
_NAME_LIKE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_FIELD_LIKE = re.compile(r"[a-z_]{1,20}")  # echoed in errors; base64 key material is not


class ScramConfigError(errors.AnnalError):
    """A SCRAM credential, mechanism name or kafka-configs spelling that is not
    valid; the message names the bad part and never holds key material or a
    password."""

    code = errors.INVALID_CONFIG


def _shown(name: str) -> str:
    """``name`` quoted for an error message when it looks like a name, else a
    neutral placeholder (so a stray secret is never echoed)."""
    return repr(name) if _NAME_LIKE.fullmatch(name) else "(an unrecognised name)"


def parse_mechanism(name: str) -> str:
    """``name`` if it is a SCRAM mechanism annal supports (exact, like Kafka)."""
    if name in MECHANISMS:
        return name
    raise ScramConfigError(
        f"unknown SCRAM mechanism {_shown(name)}: supported are {', '.join(MECHANISMS)}"
    )


def _check_iterations(iterations: object, where: str = "") -> int:
    if type(iterations) is not int:
        raise ScramConfigError(f"{where}iterations must be an int, not {type(iterations).__name__}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramConfigError(
            f"{where}iterations {iterations} is outside Kafka's bounds "
            f"[{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
        )
    return iterations


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a broker keeps of one user's password for one mechanism.  Its repr
    shows only ``iterations``."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def __post_init__(self) -> None:
        for name in ("salt", "stored_key", "server_key"):
            value = getattr(self, name)
            if not isinstance(value, bytes):
                raise ScramConfigError(f"{name} must be bytes, not {type(value).__name__}")
            if not value:
                raise ScramConfigError(f"{name} is empty")
        _check_iterations(self.iterations)

    def check_mechanism(self, mechanism: str) -> None:
        """Raise unless both keys have the size ``mechanism``'s hash gives."""
        size = KEY_SIZES[parse_mechanism(mechanism)]
        for name in ("stored_key", "server_key"):
            length = len(getattr(self, name))
            if length != size:
                raise ScramConfigError(
                    f"{name} is {length} bytes but {mechanism} keys are {size} bytes"
                )


def format_credential(credential: ScramCredential) -> str:
    """The value Kafka stores under a mechanism's name in ``/config/users/<user>``."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def parse_credential(text: str, mechanism: str | None = None) -> ScramCredential:
    """Read a value written by ``format_credential`` (or by Kafka).  With
    ``mechanism``, the keys must also have that mechanism's size."""
    if not isinstance(text, str):
        raise ScramConfigError(f"a SCRAM credential must be a str, not {type(text).__name__}")
    fields: dict[str, str] = {}
    for position, part in enumerate(text.split(","), 1):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq:
            raise ScramConfigError(f"SCRAM credential field #{position} has no '='")
        if name not in _FIELDS:
            raise ScramConfigError(
                f"SCRAM credential has an unknown field "
                f"{repr(name) if _FIELD_LIKE.fullmatch(name) else '(not shown)'} (#{position}); "
                f"expected {', '.join(_FIELDS)}"
            )
        if name in fields:
            raise ScramConfigError(f"SCRAM credential has field {name!r} twice")
        fields[name] = value.strip()
    missing = [name for name in _FIELDS if name not in fields]
    if missing:
        raise ScramConfigError(f"SCRAM credential is missing {', '.join(missing)}")

    decoded: dict[str, bytes] = {}
    for name in ("salt", "stored_key", "server_key"):
        if not fields[name]:
            raise ScramConfigError(f"SCRAM credential field {name!r} is empty")
        try:
            decoded[name] = base64.b64decode(fields[name], validate=True)
        except (binascii.Error, ValueError):
            raise ScramConfigError(f"SCRAM credential field {name!r} is not valid base64") from None
    raw_iterations = fields["iterations"]
    if not (raw_iterations.isascii() and raw_iterations.isdigit()):
        raise ScramConfigError("SCRAM credential field 'iterations' is not a decimal integer")
    credential = ScramCredential(
        salt=decoded["salt"],
        stored_key=decoded["stored_key"],
        server_key=decoded["server_key"],
        iterations=int(raw_iterations),
    )
    if mechanism is not None:
        credential.check_mechanism(mechanism)
    return credential


def scram_credentials(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's config map (the ``"config"`` object of
    ``/config/users/<user>``), by mechanism; other entries (quotas) are skipped."""
    return {
        mechanism: parse_credential(value, mechanism)
        for mechanism, value in config.items()
        if mechanism in MECHANISMS
    }


_PROBE_SALT: Final = b"annal-saslprep-probe"
_UNNORMALIZED: Final = (
    "the password changes under SASLprep (RFC 4013) normalization, and Kafka's clients "
    "hash it unnormalized: use its normalized (NFKC) form"
)


def _scramp_keys(
    mechanism: str, password: str, iterations: int, salt: bytes | None
) -> tuple[bytes, bytes, bytes]:
    """Salt, stored key and server key as scramp makes them (it SASLpreps the
    password first)."""
    try:
        made = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=salt
        )
    except ScramException as exc:
        reason = exc.args[0] if exc.args else type(exc).__name__
        raise ScramConfigError(
            f"the password holds characters SASLprep (RFC 4013) forbids ({reason})"
        ) from None
    made_salt, stored_key, server_key, _ = made
    return bytes(made_salt), bytes(stored_key), bytes(server_key)


def _stored_key(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes | None:
    """StoredKey over the password's UTF-8 bytes, as Kafka's clients derive it
    (scramp's RFC 5802 primitives); None for a str that is not encodable."""
    try:
        secret = password.encode("utf-8")
    except UnicodeError:  # lone surrogates: no client can send them
        return None
    hash_function = ScramMechanism(mechanism).hf
    salted: bytes = scramp_hi(hash_function, secret, salt, iterations)
    client_key: bytes = scramp_hmac(hash_function, salted, b"Client Key")
    stored_key: bytes = scramp_h(hash_function, client_key)
    return stored_key


def check_password(password: str) -> str:
    """``password`` if it can be made into a credential Kafka's clients match:
    a non-empty str that SASLprep (RFC 4013) accepts and leaves as it is.  (The
    test: scramp's keys, made from the prepared password, equal those made from
    the password's own bytes.)"""
    if not isinstance(password, str):
        raise ScramConfigError(f"a password must be a str, not {type(password).__name__}")
    if not password:
        raise ScramConfigError("the password is empty")
    _, stored_key, _ = _scramp_keys(SCRAM_SHA_256, password, MIN_ITERATIONS, _PROBE_SALT)
    if _stored_key(SCRAM_SHA_256, password, _PROBE_SALT, MIN_ITERATIONS) != stored_key:
        raise ScramConfigError(_UNNORMALIZED)
    return password


def make_credential(
    mechanism: str,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` (a random salt unless one is given,
    at least 12 bytes as scramp requires), refused for a password that SASLprep
    (RFC 4013) would change (see the module's docstring)."""
    mechanism = parse_mechanism(mechanism)
    _check_iterations(iterations)
    if not isinstance(password, str):
        raise ScramConfigError(f"a password must be a str, not {type(password).__name__}")
    if not password:
        raise ScramConfigError("the password is empty")
    if salt is not None and (not isinstance(salt, bytes) or len(salt) < 12):
        raise ScramConfigError("a salt must be bytes, at least 12 of them")
    made_salt, stored_key, server_key = _scramp_keys(mechanism, password, iterations, salt)
    if _stored_key(mechanism, password, made_salt, iterations) != stored_key:
        raise ScramConfigError(_UNNORMALIZED)
    return ScramCredential(made_salt, stored_key, server_key, iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from: its stored
    key is recomputed from the password's UTF-8 bytes with the credential's salt
    and iterations, and compared in constant time."""
    stored_key = _stored_key(
        parse_mechanism(mechanism), password, credential.salt, credential.iterations
    )
    return stored_key is not None and hmac.compare_digest(stored_key, credential.stored_key)


# -- kafka-configs.sh --add-config / --delete-config ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramCredentialUpsertion:
    """One mechanism's credential to set from ``--add-config`` (KIP-554's name
    for it); the repr leaves out the password."""

    mechanism: str
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS

    def __post_init__(self) -> None:
        parse_mechanism(self.mechanism)
        _check_iterations(self.iterations, f"{self.mechanism}: ")
        try:
            check_password(self.password)
        except ScramConfigError as exc:
            raise ScramConfigError(f"{self.mechanism}: {exc}") from None

    def credential(self, salt: bytes | None = None) -> ScramCredential:
        """The credential to store for this upsertion (a fresh salt by default)."""
        return make_credential(self.mechanism, self.password, self.iterations, salt)


def parse_add_config(text: str) -> list[ScramCredentialUpsertion]:
    """The credentials named by a ``--add-config`` value for a user, in order.

    Each entry is ``<mechanism>=[iterations=N,password=<password>]`` with
    ``iterations`` optional; entries are joined by commas.  The password is
    everything from ``password=`` to the next ``]``.
    """
    upsertions: list[ScramCredentialUpsertion] = []
    seen: set[str] = set()
    position = 0
    end = len(text)
    if not text.strip():
        raise ScramConfigError("--add-config is empty: expected <mechanism>=[password=...]")
    while True:
        equals = text.find("=", position)
        if equals < 0:
            raise ScramConfigError(
                f"--add-config entry #{len(upsertions) + 1} has no '=': "
                "expected <mechanism>=[password=...]"
            )
        mechanism = parse_mechanism(text[position:equals].strip())
        if mechanism in seen:
            raise ScramConfigError(f"--add-config names {mechanism} twice")
        seen.add(mechanism)
        position = equals + 1
        while position < end and text[position].isspace():
            position += 1
        if position >= end or text[position] != "[":
            raise ScramConfigError(
                f"{mechanism}: expected '[' after '=' ({mechanism}=[password=...])"
            )
        upsertion, position = _parse_bracket(text, position + 1, mechanism)
        upsertions.append(upsertion)
        while position < end and text[position].isspace():
            position += 1
        if position == end:
            return upsertions
        if text[position] != ",":
            raise ScramConfigError(
                f"{mechanism}: unexpected text after the ']' closing its settings "
                "(a password cannot hold ']')"
            )
        position += 1


def _parse_bracket(
    text: str, position: int, mechanism: str
) -> tuple[ScramCredentialUpsertion, int]:
    """The settings inside ``[...]`` from ``position`` (just after '['): the
    upsertion and the position after the closing ']'."""
    close = text.find("]", position)
    if close < 0:
        raise ScramConfigError(f"{mechanism}: no ']' closes its settings")
    iterations: int | None = None
    while True:
        equals = text.find("=", position, close)
        if equals < 0:
            raise ScramConfigError(
                f"{mechanism}: expected key=value inside [...], and password=... last"
            )
        key = text[position:equals].strip()
        if key == "password":
            password = text[equals + 1 : close]
            if "[" in password:
                raise ScramConfigError(f"{mechanism}: a password cannot hold '[' or ']'")
            if password != password.strip():
                raise ScramConfigError(
                    f"{mechanism}: the password starts or ends with whitespace, "
                    "which kafka-configs.sh would trim"
                )
            kept = DEFAULT_ITERATIONS if iterations is None else iterations
            return ScramCredentialUpsertion(mechanism, password, kept), close + 1
        if key != "iterations":
            raise ScramConfigError(
                f"{mechanism}: unknown setting {_shown(key)}: expected "
                "iterations=N (optional) then password=..."
            )
        if iterations is not None:
            raise ScramConfigError(f"{mechanism}: iterations given twice")
        comma = text.find(",", equals + 1, close)
        if comma < 0:
            raise ScramConfigError(f"{mechanism}: no password=... after iterations")
        value = text[equals + 1 : comma].strip()
        if not (value.isascii() and value.isdigit()):
            raise ScramConfigError(f"{mechanism}: iterations must be a decimal integer")
        iterations = _check_iterations(int(value), f"{mechanism}: ")
        position = comma + 1


def parse_delete_config(text: str) -> list[str]:
    """The mechanisms a ``--delete-config`` value names (comma list), in order,
    each once."""
    mechanisms: list[str] = []
    for position, part in enumerate(text.split(","), 1):
        name = part.strip()
        if not name:
            raise ScramConfigError(f"--delete-config item #{position} is empty")
        mechanism = parse_mechanism(name)
        if mechanism not in mechanisms:
            mechanisms.append(mechanism)
    return mechanisms
