"""The JSON files of the partition tools (reassign-partitions, delete-records):
``{"version": 1, "partitions": [{"topic": ..., "partition": ..., ...}]}``.

Each file is checked against a JSON Schema (the ``jsonschema`` library) before
anything is read from it: version 1, a non-empty list of partitions, each with a
topic name, a whole non-negative partition number and the tool's own field, as
Kafka's tools require.  ``0.9``, ``true`` or ``"3"`` where a number belongs is
refused, naming where it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import jsonschema

from annal.topic_partition import TopicPartition

T = TypeVar("T")

BROKER_LIST: dict[str, Any] = {
    "type": "array", "minItems": 1, "uniqueItems": True,
    "items": {"type": "integer", "minimum": 0},
}  # fmt: skip
OFFSET: dict[str, Any] = {"type": "integer", "minimum": -1}


def _schema(field: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["partitions"],
        "properties": {
            "version": {"const": 1},
            "partitions": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["topic", "partition", field],
                    "properties": {
                        "topic": {"type": "string", "minLength": 1},
                        "partition": {"type": "integer", "minimum": 0},
                        field: value,
                    },
                },
            },
        },
    }


def read_partition_file(
    path: Path,
    example: str,
    field: str,
    value_schema: dict[str, Any],
    parse: Callable[[Any], T],
) -> dict[TopicPartition, T]:
    """(topic, partition) → ``parse(entry[field])`` for each entry of the file's
    "partitions" list, once the file matches the schema; ValueError naming the
    file, where and what is wrong."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    validator = jsonschema.Draft202012Validator(_schema(field, value_schema))
    problem = jsonschema.exceptions.best_match(validator.iter_errors(raw))
    if problem is not None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem.absolute_path)
        where = where.lstrip(".") or "the file"
        raise ValueError(f"{path}: {where}: {_wording(problem)}; expected e.g. {example}")
    out: dict[TopicPartition, T] = {}
    for entry in raw["partitions"]:
        key = TopicPartition(entry["topic"], int(entry["partition"]))  # 2.0 is 2
        if key in out:
            raise ValueError(f"{path}: partition {key[0]}-{key[1]} is listed twice")
        out[key] = parse(entry[field])
    return out


def _wording(problem: jsonschema.ValidationError) -> str:
    """jsonschema's message, in the tool's words where they are plainer."""
    shown = json.dumps(problem.instance)
    if problem.validator == "type" and problem.validator_value == "integer":
        return f"{shown} is not a whole number"
    if problem.validator == "const":
        return f"version {shown} is not 1"
    if problem.validator == "required":
        fields: list[str] = list(problem.validator_value)  # type: ignore[arg-type]
        given: dict[str, Any] = problem.instance  # type: ignore[assignment]
        missing = [f for f in fields if f not in given]
        return f"has no {', '.join(repr(f) for f in missing)}"
    if problem.validator == "uniqueItems":
        return f"{shown} lists an entry twice"
    return problem.message
