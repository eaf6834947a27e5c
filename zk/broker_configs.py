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

from collections.abc import Mapping

from annal.zk.entity_config import decode_entity_config, encode_entity_config
from annal.zk.layout import LayoutError

CONFIG_BROKERS = "/config/brokers"
ENTITY_TYPE = "brokers"
DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default


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
    return encode_entity_config(config)


def decode_broker_config(entity: str, raw: bytes | None) -> dict[str, str]:
    """The ``config`` object of the znode; empty for no data or ``null``."""
    return decode_entity_config(f"znode {CONFIG_BROKERS}/{entity}", raw, BrokerConfigLayoutError)
