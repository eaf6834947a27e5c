"""Who sent a request: the principal its connection proved, the host it came
from and the listener it reached.  Both protocols' edges build one per
connection (Kafka's listener) or per call (gRPC); the authorizer reads it.

``principal_from_certificate`` is Kafka's default mapping of a TLS client
certificate to a principal as annal applies it: ``User:<CN>`` of the subject
(Kafka's default builder takes the whole distinguished name; annal keeps the
common name alone, as Kafka does with
``ssl.principal.mapping.rules=RULE:^CN=(.*?),.*$/$1/``).  A connection
without a certificate is ``User:ANONYMOUS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from annal.security.acl import ANONYMOUS, USER_TYPE, KafkaPrincipal


@dataclass(frozen=True, slots=True)
class Session:
    """Immutable; one per connection (a SASL login makes a new one)."""

    principal: KafkaPrincipal
    client_host: str  # the peer's address without its port ("127.0.0.1")
    listener: str  # the listener's name (PLAINTEXT, SASL_SSL, GRPC, ...)

    @property
    def user(self) -> str:
        return str(self.principal)


# A request whose connection proved nothing (and in-process callers): asked about
# as User:ANONYMOUS, so it is never allowed more than an unauthenticated client.
UNAUTHENTICATED = Session(ANONYMOUS, "", "")


def principal_from_certificate(peercert: Mapping[str, Any] | None) -> KafkaPrincipal:
    """``User:<CN>`` from ``ssl``'s decoded peer certificate, or ANONYMOUS."""
    if not peercert:
        return ANONYMOUS
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return KafkaPrincipal(USER_TYPE, str(value))
    return ANONYMOUS


def principal_from_common_name(common_name: str | bytes | None) -> KafkaPrincipal:
    """``User:<CN>`` from a common name gRPC's auth context gives, or ANONYMOUS."""
    if isinstance(common_name, bytes):
        common_name = common_name.decode("utf-8", "replace")
    return KafkaPrincipal(USER_TYPE, common_name) if common_name else ANONYMOUS
