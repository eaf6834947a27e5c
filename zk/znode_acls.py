"""Who may change the znodes annal creates: ``zookeeper.set.acl`` (docs/security.md).

Without it every znode is created open (``world:anyone`` may do anything), as
Kafka's brokers create them by default.  With it, a broker authenticates to
ZooKeeper with the digest scheme (``zookeeper.auth.digest=user:password``;
ZooKeeper needs no set-up for it) and creates znodes as Kafka's brokers do
with ``zookeeper.set.acl=true``:

* most znodes: every permission for the creator's identity (the ``auth``
  scheme: whoever authenticated as the same digest user, so every broker
  sharing the credential), and read for everyone, so tools and monitoring can
  look;
* the users' SCRAM credentials (``/config/users`` and below): the creator
  only, as Kafka keeps its sensitive paths;
* ``/consumers``: open, since ZooKeeper-based consumers, which do not
  authenticate, create their groups' znodes under it.

Znodes that existed before are left as they are.  ``AclKazooClient`` is the
kazoo client that applies the choice to every znode it creates, by
``create``, ``ensure_path`` or a transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from . import layout, users

SENSITIVE_ROOTS = (users.CONFIG_USERS,)


def is_sensitive(path: str) -> bool:
    """Whether ``path`` (chroot-relative) holds secrets nobody else may read."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS)


def secure_acls(path: str) -> list[ACL]:
    """The ACL a broker with ``zookeeper.set.acl`` gives a znode it creates at ``path``."""
    if path.rstrip("/") == layout.CONSUMERS:
        return list(OPEN_ACL_UNSAFE)
    if is_sensitive(path):
        return list(CREATOR_ALL_ACL)
    return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)


def check_digest(credential: str) -> str:
    """``user:password`` for ZooKeeper's digest scheme; ValueError naming what is wrong."""
    user, colon, password = credential.partition(":")
    if not colon or not user or not password:
        raise ValueError("expected user:password (ZooKeeper's digest scheme)")
    return credential


AclChoice = Callable[[str], list[ACL]]


class AclKazooClient(KazooClient):  # type: ignore[misc]
    """A kazoo client that gives each znode it creates, without an ACL of its own,
    the ACL ``acl_for(path)`` chooses (``path`` relative to the chroot)."""

    def __init__(self, acl_for: AclChoice, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acl_for = acl_for

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args: Any,
                     **kwargs: Any) -> Any:  # fmt: skip
        return super().create_async(path, value, acl or self.acl_for(path), *args, **kwargs)

    def transaction(self) -> TransactionRequest:
        return _AclTransaction(self)


class _AclTransaction(TransactionRequest):  # type: ignore[misc]
    def create(self, path: str, value: bytes = b"", acl: Any = None, *args: Any,
               **kwargs: Any) -> Any:  # fmt: skip
        return super().create(path, value, acl or self.client.acl_for(path), *args, **kwargs)
