"""The data of Kafka's ``/config/<type>/<name>`` znodes (users, brokers, topics):
``{"version":1,"config":{...}}``, every value a string (docs/architecture.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from annal.zk.layout import LayoutError

CONFIG_VERSION = 1


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    """The znode's data: Kafka's ``{"version":1,"config":{...}}``, keys sorted."""
    body = {"version": CONFIG_VERSION, "config": dict(sorted(config.items()))}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_entity_config(
    where: str, raw: bytes | None, error: type[LayoutError] = LayoutError
) -> dict[str, str]:
    """The ``config`` object of the znode ``where`` holds ``raw``; empty for no data
    or ``null``; ``error`` naming ``where`` for data that is not Kafka's layout."""
    try:
        text = (raw or b"").decode("utf-8")
        obj = json.loads(text) if text.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{where} does not hold JSON: {exc}") from None
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise error(f"{where} holds {type(obj).__name__}, not a JSON object")
    config = obj.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise error(f"{where} field 'config' is not a JSON object")
    # Kafka writes every value as a string; anything else is kept as its text
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
