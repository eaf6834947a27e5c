"""Options of the ``annal`` Spark data source, named as Spark's built-in Kafka
source names them, parsed and checked once on the driver.

Reading: ``bootstrap.servers`` (or ``kafka.bootstrap.servers``), exactly one of
``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex) and
``assign`` (JSON ``{"topic": [0, 1]}``); ``startingOffsets`` and
``endingOffsets`` (``earliest``, ``latest`` or JSON ``{"topic": {"0": 23}}``
with -2 for earliest and -1 for latest); ``maxOffsetsPerTrigger``;
``failOnDataLoss`` (true).  Writing: ``bootstrap.servers`` and ``topic`` (else
each row's ``topic`` column).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)


class OptionError(ValueError):
    """An option that is missing, unknown or malformed; the message names it."""


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, list[int]] | None = None


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscription: Subscription
    starting: str | dict[str, dict[str, int]]
    ending: str | dict[str, dict[str, int]]
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark treats option names case-insensitively; so does this module."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def bootstrap(options: Mapping[str, str]) -> str:
    options = _lower(options)
    value = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
    if not value:
        raise OptionError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
    return value


def read_options(given_options: Mapping[str, str], streaming: bool) -> ReadOptions:
    options = _lower(given_options)
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
    given = [names[k] for k in names if options.get(k)]
    if len(given) != 1:
        raise OptionError(
            "give exactly one of the options subscribe, subscribePattern and assign"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        subscription = Subscription(topics=topics)
    elif given[0] == "subscribePattern":
        try:
            re.compile(options["subscribepattern"])
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a regex: {exc}") from None
        subscription = Subscription(pattern=options["subscribepattern"])
    else:
        subscription = Subscription(assign=_assign(options["assign"]))
    if streaming and "endingoffsets" in options:
        raise OptionError("option endingOffsets is for batch queries only")
    max_per_trigger = options.get("maxoffsetspertrigger")
    try:
        limit = int(max_per_trigger) if max_per_trigger is not None else None
    except ValueError:
        raise OptionError(
            f"option maxOffsetsPerTrigger is not a number: {max_per_trigger}"
        ) from None
    if limit is not None and limit < 1:
        raise OptionError("option maxOffsetsPerTrigger must be at least 1")
    fail = options.get("failondataloss", "true").strip().lower()
    if fail not in ("true", "false"):
        raise OptionError(f"option failOnDataLoss must be true or false, not {fail!r}")
    return ReadOptions(
        bootstrap(options),
        subscription,
        _offsets(
            "startingOffsets",
            options.get("startingoffsets", "latest" if streaming else "earliest"),
        ),
        _offsets("endingOffsets", options.get("endingoffsets", "latest")),
        limit,
        fail == "true",
    )


def _assign(text: str) -> dict[str, list[int]]:
    try:
        raw = json.loads(text)
        return {str(t): [int(p) for p in ps] for t, ps in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option assign must be JSON like {{"topic": [0, 1]}}, not {text!r}'
        ) from None


def _offsets(name: str, text: str) -> str | dict[str, dict[str, int]]:
    value = text.strip()
    if value in ("earliest", "latest"):
        return value
    try:
        raw = json.loads(value)
        return {str(t): {str(p): int(o) for p, o in ps.items()} for t, ps in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option {name} must be earliest, latest or JSON like {{"topic": {{"0": 23}}}}, '
            f"not {text!r}"
        ) from None
