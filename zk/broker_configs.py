"""Where Kafka (ZooKeeper mode) keeps dynamic broker configs (KIP-226).

Names and encodings only; ``ZkClient`` reads and writes the znodes::

    /config/brokers/<id>          {"version":1,"config":{"log.retention.ms":"1000"}}
    /config/brokers/<default>     {"version":1,"config":{...}}   the cluster-wide defaults

A broker's own znode overrides the cluster default, which overrides the broker's
``server.properties`` (broker/dynamic_config.py).  After a change the writer leaves
a sequential ``/config/changes/config_change_<seq>`` holding
``{"version":2,"entity_path":"brokers/<id>"}`` (or ``brokers/<default>``), as for
topics and users (zk/layout.py); every broker re-reads the entity named, and a
broker ignores the znodes of other brokers' ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from annal.zk.layout import LayoutError

CONFIG_BROKERS = "/config/brokers"
ENTITY_TYPE = "brokers"
DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default
CONFIG_VERSION = 1


class BrokerConfigLayoutError(LayoutError):
    """A broker config znode or entity name that is not in Kafka's format."""


def entity_name(broker_id: int | None) -> str:
    """The znode name of a broker's configs; None: the cluster default."""
    if broker_id is None:
        return DEFAULT_ENTITY
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise BrokerConfigLayoutError(f"a broker id is an integer >= 0, not {broker_id!r}")
    return str(broker_id)


def check_entity(entity: str) -> str:
    """``entity`` when it names a broker config znode: ``<default>`` or a broker id."""
    if entity != DEFAULT_ENTITY and not (entity.isascii() and entity.isdigit()):
        raise BrokerConfigLayoutError(
            f"a broker config entity is a broker id or {DEFAULT_ENTITY}, not {entity!r}"
        )
    return entity


def broker_config_path(entity: str) -> str:
    """``/config/brokers/<id>`` or ``/config/brokers/<default>``."""
    return f"{CONFIG_BROKERS}/{check_entity(entity)}"


def broker_entity_path(entity: str) -> str:
    """What a change notification names: ``brokers/<id>`` or ``brokers/<default>``."""
    return f"{ENTITY_TYPE}/{check_entity(entity)}"


def entity_of_change(entity_path: str) -> str | None:
    """The broker entity a notification's ``entity_path`` names (``"1"``,
    ``"<default>"``); None for another entity type or a malformed name."""
    kind, slash, name = entity_path.partition("/")
    if kind != ENTITY_TYPE or not slash:
        return None
    try:
        return check_entity(name.strip())
    except BrokerConfigLayoutError:
        return None


def encode_broker_config(config: Mapping[str, str]) -> bytes:
    """The znode's data: Kafka's ``{"version":1,"config":{...}}``, keys sorted."""
    body = {"version": CONFIG_VERSION, "config": dict(sorted(config.items()))}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_broker_config(entity: str, raw: bytes | None) -> dict[str, str]:
    """The ``config`` object of the entity's znode; empty for no data or ``null``."""
    where = f"znode {CONFIG_BROKERS}/{entity}"
    try:
        text = (raw or b"").decode("utf-8")
        obj = json.loads(text) if text.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BrokerConfigLayoutError(f"{where} does not hold JSON: {exc}") from None
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise BrokerConfigLayoutError(f"{where} holds {type(obj).__name__}, not a JSON object")
    config = obj.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise BrokerConfigLayoutError(f"{where} field 'config' is not a JSON object")
    # Kafka writes every value as a string; anything else is kept as its text
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
