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


# -- writing ----------------------------------------------------------------------

# producer settings the sink takes, as ``kafka.<name>``, and how each is parsed
_PRODUCER_SETTINGS = {
    "acks": str,
    "compression.type": str,
    "batch.size": int,
    "linger.ms": int,
    "request.timeout.ms": int,
    "delivery.timeout.ms": int,
    "retries": int,
    "max.in.flight.requests.per.connection": int,
    "enable.idempotence": str,
}
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    checkpoint: str | None  # streaming: where the sink keeps its exactly-once state
    acks: str = "all"
    compression: str = "none"
    batch_size: int = 1 << 20
    linger_ms: int = 5
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    retries: int | None = None
    max_in_flight: int | None = None
    idempotence: bool | None = None


def write_options(given_options: Mapping[str, str], streaming: bool) -> WriteOptions:
    """The sink's options: ``bootstrap.servers``, ``topic`` (else each row's topic
    column), ``checkpointLocation`` (streaming) and the producer settings above
    as ``kafka.<setting>``; any other option is refused, naming it."""
    options = _lower(given_options)
    settings: dict[str, object] = {}
    for name, value in options.items():
        if name in ("bootstrap.servers", "kafka.bootstrap.servers", "topic", "checkpointlocation"):
            continue
        setting = name.removeprefix("kafka.")
        parse = _PRODUCER_SETTINGS.get(setting) if name.startswith("kafka.") else None
        if parse is None:
            known = ", ".join(f"kafka.{s}" for s in _PRODUCER_SETTINGS)
            raise OptionError(
                f"option {name} is not one the annal sink knows (it takes bootstrap.servers, "
                f"topic, checkpointLocation and {known})"
            )
        try:
            settings[setting] = parse(value.strip())
        except ValueError:
            raise OptionError(f"option kafka.{setting} is not a number: {value!r}") from None
    acks = str(settings.get("acks", "all")).lower()
    acks = "all" if acks == "-1" else acks
    if acks not in ("all", "0", "1"):
        raise OptionError(f"option kafka.acks must be all, -1, 0 or 1, not {acks!r}")
    if streaming and acks != "all":
        raise OptionError(
            f"option kafka.acks={acks} cannot go with the exactly-once streaming sink, "
            "which needs acks=all"
        )
    compression = str(settings.get("compression.type", "none")).lower()
    if compression not in COMPRESSION_TYPES:
        raise OptionError(
            f"option kafka.compression.type must be one of {', '.join(COMPRESSION_TYPES)}, "
            f"not {compression!r}"
        )
    idempotence = settings.get("enable.idempotence")
    if idempotence is not None and str(idempotence).lower() not in ("true", "false"):
        raise OptionError(
            f"option kafka.enable.idempotence must be true or false, not {idempotence!r}"
        )
    checkpoint = options.get("checkpointlocation")
    if streaming and not checkpoint:
        raise OptionError(
            "the annal streaming sink keeps its exactly-once state under the query's "
            "checkpoint: set the option checkpointLocation on writeStream"
        )
    numbers = {k: v for k, v in settings.items() if isinstance(v, int)}
    for name, number in numbers.items():
        if number < (0 if name in ("linger.ms", "retries") else 1):
            raise OptionError(f"option kafka.{name} must be positive, not {number}")
    return WriteOptions(
        bootstrap(options),
        options.get("topic") or None,
        checkpoint,
        acks=acks,
        compression=compression,
        batch_size=numbers.get("batch.size", 1 << 20),
        linger_ms=numbers.get("linger.ms", 5),
        request_timeout_ms=numbers.get("request.timeout.ms", 30_000),
        delivery_timeout_ms=numbers.get("delivery.timeout.ms", 120_000),
        retries=numbers.get("retries"),
        max_in_flight=numbers.get("max.in.flight.requests.per.connection"),
        idempotence=None if idempotence is None else str(idempotence).lower() == "true",
    )
