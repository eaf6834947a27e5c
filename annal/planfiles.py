"""The JSON files of the partition tools (reassign-partitions, delete-records):
``{"version": 1, "partitions": [{"topic": ..., "partition": ..., ...}]}``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from annal.topic_partition import TopicPartition

T = TypeVar("T")


def read_partition_file(
    path: Path, example: str, field: str, parse: Callable[[Any], T]
) -> dict[TopicPartition, T]:
    """(topic, partition) → ``parse(entry[field])`` for each entry of the file's
    "partitions" list; ValueError naming the file and what is wrong."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    entries = raw.get("partitions") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'{path} has no "partitions" list; expected e.g. {example}')
    out: dict[TopicPartition, T] = {}
    for n, entry in enumerate(entries):
        try:
            key = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            value = parse(entry[field])
        except (KeyError, TypeError, ValueError) as exc:
            detail = f": {exc}" if isinstance(exc, ValueError) and str(exc) else ""
            raise ValueError(
                f"{path}: partitions[{n}] needs topic, partition and {field}{detail}"
            ) from None
        if key in out:
            raise ValueError(f"{path}: partition {key[0]}-{key[1]} is listed twice")
        out[key] = value
    return out
