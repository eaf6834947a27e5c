"""Where Kafka (ZooKeeper mode) keeps users' configs, SCRAM credentials among them.

Names and encodings only; ``ZkClient`` reads and writes the znodes.

A user's znode
--------------

Every user with a config has one znode under ``/config/users``, named by the user
name *sanitized* the way Kafka's ``Sanitizer`` does it: percent-encoded UTF-8 except
for ``A-Z a-z 0-9 . _ -`` (so ``CN=app,O=corp`` becomes ``CN%3Dapp%2CO%3Dcorp``).
That keeps every user name a legal, single znode name, whatever characters
certificates or SASL put into it, and makes annal's znodes the ones Kafka writes::

    /config/users/alice    {"version":1,"config":{
        "SCRAM-SHA-512":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

The ``config`` object maps names to strings.  The SCRAM mechanisms' names hold the
credentials (``annal.security.scram`` reads and writes the values); anything else
there (Kafka keeps client quotas such as ``producer_byte_rate`` in the same object)
is carried over untouched by every change annal makes.

Change notifications
--------------------

After a change, the writer leaves a sequential ``/config/changes/config_change_<seq>``
holding ``{"version":2,"entity_path":"users/<sanitized name>"}``, exactly as for a
topic (``zk/layout.py``); brokers re-read the named user's znode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

from annal.security.scram import MECHANISMS, ScramCredential, format_credential
from annal.zk.entity_config import decode_entity_config, encode_entity_config
from annal.zk.layout import LayoutError

CONFIG_USERS = "/config/users"
ENTITY_TYPE = "users"


class UserLayoutError(LayoutError):
    """A user's znode or name that is not in Kafka's format."""


def sanitize(user: str) -> str:
    """The znode name of ``user``: Kafka's ``Sanitizer.sanitize`` (Java's URLEncoder,
    then ``*`` as ``%2A`` and a space as ``%20``), so only ``A-Za-z0-9._-`` stay."""
    return quote(user, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """The user name a znode name stands for (the inverse of ``sanitize``)."""
    return unquote(name)


def check_user(user: str) -> str:
    """``user`` when it can name a user's znode: a non-empty str."""
    if not isinstance(user, str) or not user:
        raise UserLayoutError(f"a user name must be a non-empty string, not {user!r}")
    return user


def user_config_path(user: str) -> str:
    """``/config/users/<sanitized user>``."""
    return f"{CONFIG_USERS}/{sanitize(check_user(user))}"


def user_entity_path(user: str) -> str:
    """What a change notification names: ``users/<sanitized user>``."""
    return f"{ENTITY_TYPE}/{sanitize(check_user(user))}"


def user_of_entity(entity_path: str) -> str | None:
    """The user a notification's ``entity_path`` names; None for another entity type."""
    kind, slash, name = entity_path.partition("/")
    if kind != ENTITY_TYPE or not slash or not name or "/" in name:
        return None
    return desanitize(name)


# -- the znode's JSON ------------------------------------------------------------------


def encode_user_config(config: Mapping[str, str]) -> bytes:
    """The znode's data: Kafka's ``{"version":1,"config":{...}}``, keys sorted."""
    return encode_entity_config(config)


def decode_user_config(user: str, raw: bytes | None) -> dict[str, str]:
    """The ``config`` object of the znode; empty for no data or ``null``."""
    return decode_entity_config(f"znode {CONFIG_USERS}/{sanitize(user)}", raw, UserLayoutError)


def has_scram_credential(config: Mapping[str, str]) -> bool:
    return any(mechanism in config for mechanism in MECHANISMS)


def altered_config(
    config: Mapping[str, str],
    upsertions: Mapping[str, ScramCredential],
    deletions: Iterable[str],
) -> dict[str, str]:
    """``config`` with the mechanisms of ``deletions`` removed, then ``upsertions`` set;
    every other entry unchanged."""
    altered = dict(config)
    for mechanism in deletions:
        altered.pop(mechanism, None)
    for mechanism, credential in upsertions.items():
        altered[mechanism] = format_credential(credential)
    return altered
