"""Users and passwords on gRPC (docs/security.md).

annal's own clients may prove a user instead of presenting a certificate: each
call carries ``annal-sasl-username`` and ``annal-sasl-password`` in its
metadata, over TLS only.  ``PasswordGuard``, a server interceptor, checks the
pair against the user's SCRAM credentials before the call reaches a handler:

* a wrong password, an unknown user, or a password on a plaintext listener
  ends the call with UNAUTHENTICATED, logged without the password;
* a checked pair is remembered as a keyed hash (never the password) together
  with the credentials it was checked against, so the next call from the same
  client costs a dictionary lookup, not a key derivation of thousands of
  rounds; a changed or removed credential is a new object, so the next call
  is checked again.

``grpc_session`` then names the call's principal ``User:<name>``.

Thread safety: runs on the broker's event loop; the cache is only touched
there.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from annal.client.security import PASSWORD_HEADER, USER_HEADER
from annal.security.scram import ScramCredential, verify_password

logger = logging.getLogger(__name__)

CredentialLookup = Callable[[str], Mapping[str, ScramCredential]]
MAX_REMEMBERED = 10_000


def metadata_value(metadata: Any, key: str) -> str | None:
    for name, value in metadata or ():
        if name == key:
            return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
    return None


class PasswordCheck:
    """Whether a user's password matches its SCRAM credentials (cached)."""

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._key = secrets.token_bytes(32)
        self._checked: dict[tuple[str, bytes], Mapping[str, ScramCredential]] = {}

    def __call__(self, user: str, password: str) -> bool:
        credentials = self._lookup(user)
        if not credentials:
            return False
        digest = hashlib.blake2b(password.encode("utf-8"), key=self._key).digest()
        if self._checked.get((user, digest)) is credentials:
            return True
        if not any(verify_password(m, c, password) for m, c in credentials.items()):
            return False
        if len(self._checked) >= MAX_REMEMBERED:
            self._checked.clear()
        self._checked[(user, digest)] = credentials
        return True


class PasswordGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """See the module docstring.  ``tls``: whether the listener is GRPCS://."""

    def __init__(self, check: PasswordCheck, tls: bool) -> None:
        self._check = check
        self._tls = tls

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata
        user = metadata_value(metadata, USER_HEADER)
        if handler is None or handler.unary_unary is None or user is None:
            return handler
        password = metadata_value(metadata, PASSWORD_HEADER) or ""
        refusal = None
        if not self._tls:
            refusal = "a password over plaintext gRPC is refused: use the GRPCS:// listener"
        elif not self._check(user, password):
            refusal = f"authentication of user {user!r} failed: invalid username or password"
        if refusal is None:
            return handler
        logger.warning("refused %s: %s", handler_call_details.method, refusal)

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

        return grpc.unary_unary_rpc_method_handler(
            refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
