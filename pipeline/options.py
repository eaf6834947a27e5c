"""Options of the ``annal`` Spark data source, named as Spark's built-in Kafka
source names them, parsed and checked once on the driver.

Reading: ``bootstrap.servers`` (or ``kafka.bootstrap.servers``), exactly one of
``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex) and
``assign`` (JSON ``{"topic": [0, 1]}``); ``startingOffsets`` and
``endingOffsets`` (``earliest``, ``latest`` or JSON ``{"topic": {"0": 23}}``
with -2 for earliest and -1 for latest), or by time: ``startingTimestamp`` /
``endingTimestamp`` (ms, every partition) and ``startingOffsetsByTimestamp``
/ ``endingOffsetsByTimestamp`` (JSON ``{"topic": {"0": ms}}``), with
``startingOffsetsByTimestampStrategy`` (``error`` or ``latest``);
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay``
(``15m``); ``minPartitions``; ``failOnDataLoss`` (true); ``includeHeaders``
(false); and the consumer settings ``kafka.request.timeout.ms``,
``kafka.default.api.timeout.ms``, ``kafka.max.partition.fetch.bytes``,
``kafka.client.id`` and ``kafka.isolation.level`` (or ``isolation.level``):
``read_uncommitted`` (the default, as Spark's Kafka source: up to the high
watermark, aborted transactions included) or ``read_committed`` (KIP-98: up
to the last stable offset, which "latest" then means, without the records
of aborted transactions).  Control records (transaction markers) are never
rows, in either level; their offsets are gaps, as in Spark's Kafka source.
Any other option is refused with an error naming it.
Writing: ``bootstrap.servers``, ``topic`` (else each row's ``topic``
column), ``checkpointLocation`` (streaming) and producer settings.

Security, for reading and writing alike, in Kafka's client setting names
with Spark's ``kafka.`` prefix (``Security.from_properties`` reads them, as
it reads a ``--command-config`` file; docs/security.md):

* ``kafka.security.protocol``: ``PLAINTEXT`` (the default), ``SSL`` or
  ``SASL_SSL`` (a user and password, over TLS);
* ``kafka.sasl.mechanism``: ``PLAIN``, ``SCRAM-SHA-256`` or
  ``SCRAM-SHA-512`` (the default);
* ``kafka.sasl.jaas.config``: Java's ``org.apache.kafka.common.security.scram.
  ScramLoginModule required username="alice" password="...";`` (PLAIN's
  login module likewise), or librdkafka's ``kafka.sasl.username`` and
  ``kafka.sasl.password``;
* ``kafka.ssl.truststore.location`` (or ``kafka.ssl.ca.location``): the CA
  certificates to trust, PEM;
* ``kafka.ssl.keystore.location`` (one PEM file with the key and the
  certificate chain), or ``kafka.ssl.certificate.location`` and
  ``kafka.ssl.key.location``: this client's certificate, for brokers that
  require one;
* ``kafka.ssl.truststore.type`` and ``kafka.ssl.keystore.type``: ``PEM``
  only.

Any other ``kafka.security.*``, ``kafka.ssl.*`` or ``kafka.sasl.*`` option
(a JKS password, a Kerberos setting) is refused, naming it.  Every client the
source and sink make, on the driver and in the executors' tasks, uses these
settings, so the files must be readable at the same paths on every
executor.  The password is never logged nor part of an error, and the parsed
options show it nowhere (their repr leaves it out).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from annal.client.security import (
    PROPERTY_NAMES,
    ClientSecurityArgs,
    Security,
    SecurityConfigError,
)
from annal.consumer.transactions import READ_UNCOMMITTED, isolation_number

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
class ByTimestamp:
    """Offsets by time: one timestamp for every partition, or one per partition
    (``{"topic": {"0": ms}}``).  ``strategy`` is what a partition with no
    record that recent gets: ``error`` or ``latest`` (ending offsets: latest)."""

    timestamps: int | dict[str, dict[str, int]]
    strategy: str = "error"

    def timestamp_for(self, topic: str, partition: int) -> int | None:
        if isinstance(self.timestamps, int):
            return self.timestamps
        return self.timestamps.get(topic, {}).get(str(partition))


OffsetSpec = str | dict[str, dict[str, int]] | ByTimestamp


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    include_headers: bool = False
    request_timeout_ms: int = 30_000
    max_partition_fetch_bytes: int = 1 << 20
    security: Security | None = None  # None: the process's default (PLAINTEXT)
    isolation_level: str = READ_UNCOMMITTED  # or read_committed (KIP-98)


# the source's options (lower case, as Spark hands them over), besides kafka.*
_READ_OPTIONS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger",
    "minoffsetspertrigger", "maxtriggerdelay", "minpartitions", "failondataloss",
    "includeheaders", "bootstrap.servers", "isolation.level",
}  # fmt: skip
# kafka.* consumer settings the source applies
_CONSUMER_SETTINGS = {
    "kafka.bootstrap.servers", "kafka.request.timeout.ms", "kafka.default.api.timeout.ms",
    "kafka.max.partition.fetch.bytes", "kafka.client.id", "kafka.isolation.level",
}  # fmt: skip
# kafka.* settings Spark's Kafka source refuses, and what to do instead
_REFUSED_SETTINGS = {
    "kafka.auto.offset.reset": "set the source option startingOffsets instead",
    "kafka.key.deserializer": "keys are always binary: cast the key column instead",
    "kafka.value.deserializer": "values are always binary: cast the value column instead",
    "kafka.enable.auto.commit": "the offsets live in Spark's checkpoint",
    "kafka.interceptor.classes": "interceptors are not supported",
    "kafka.group.id": "annal's source reads partitions directly, with no consumer group",
}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark treats option names case-insensitively; so does this module."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def bootstrap(options: Mapping[str, str]) -> str:
    options = _lower(options)
    value = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
    if not value:
        raise OptionError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
    return value


_SECURITY_PREFIXES = ("kafka.security.", "kafka.ssl.", "kafka.sasl.")
_SECURITY_OPTIONS = sorted(f"kafka.{name}" for name in PROPERTY_NAMES)


def _is_security(name: str) -> bool:
    return name.startswith(_SECURITY_PREFIXES)


def parse_security(options: Mapping[str, str]) -> Security | None:
    """The ``kafka.security.*``, ``kafka.ssl.*`` and ``kafka.sasl.*`` options
    (see the module docstring) as a ``Security``; None when none is given.
    Errors name the option, never a password."""
    given = {k.removeprefix("kafka."): v for k, v in _lower(options).items() if _is_security(k)}
    if not given:
        return None
    unknown = sorted(f"kafka.{k}" for k in given if k not in PROPERTY_NAMES)
    if unknown:
        raise OptionError(
            f"option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"{'are' if len(unknown) > 1 else 'is'} not among the security options annal "
            f"takes: {', '.join(_SECURITY_OPTIONS)} (files in PEM, keys unencrypted)"
        )
    try:
        return Security.from_properties(given, "security options", prefix="kafka.")
    except SecurityConfigError as exc:
        raise OptionError(str(exc)) from None


def client_args(security: Security | None) -> ClientSecurityArgs:
    """The keyword arguments that give a client ``security`` (none for None)."""
    return ClientSecurityArgs() if security is None else security.client_args()


def _check_known(options: Mapping[str, str]) -> None:
    for name in options:
        if name in _REFUSED_SETTINGS:
            raise OptionError(f"option {name} is not supported: {_REFUSED_SETTINGS[name]}")
        if name not in _READ_OPTIONS and name not in _CONSUMER_SETTINGS and not _is_security(name):
            raise OptionError(
                f"option {name} is not one annal's source knows (it takes the options of "
                f"Spark's Kafka source: {', '.join(sorted(_READ_OPTIONS | _CONSUMER_SETTINGS))}"
                ", and kafka.security.protocol, kafka.ssl.* and kafka.sasl.*)"
            )


def _number(options: Mapping[str, str], name: str, spelled: str, least: int) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {spelled} is not a number: {text!r}") from None
    if value < least:
        raise OptionError(f"option {spelled} must be at least {least}, not {value}")
    return value


def _flag(options: Mapping[str, str], name: str, spelled: str, default: str) -> bool:
    value = options.get(name, default).strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {spelled} must be true or false, not {value!r}")
    return value == "true"


_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _duration_ms(text: str, spelled: str) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"`` or plain milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS):
        raise OptionError(f"option {spelled} must be a duration such as 15m, 30s or 500ms")
    return int(match.group(1)) * _DURATION_UNITS.get(match.group(2), 1)


def read_options(given_options: Mapping[str, str], streaming: bool) -> ReadOptions:
    options = _lower(given_options)
    _check_known(options)
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
    if streaming:
        for name, spelled in (
            ("endingoffsets", "endingOffsets"),
            ("endingtimestamp", "endingTimestamp"),
            ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp"),
        ):
            if name in options:
                raise OptionError(f"option {spelled} is for batch queries only")
    else:
        for name, spelled in (
            ("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            ("minoffsetspertrigger", "minOffsetsPerTrigger"),
            ("maxtriggerdelay", "maxTriggerDelay"),
        ):
            if name in options:
                raise OptionError(f"option {spelled} is for streaming queries only")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}"
        )
    starting = _position(options, "starting", "latest" if streaming else "earliest", strategy)
    ending = _position(options, "ending", "latest", "latest")
    if not streaming:
        _check_batch_bounds(starting, ending)
    max_rows = _number(options, "maxoffsetspertrigger", "maxOffsetsPerTrigger", 1)
    min_rows = _number(options, "minoffsetspertrigger", "minOffsetsPerTrigger", 1)
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise OptionError(
            f"option minOffsetsPerTrigger ({min_rows}) is larger than "
            f"maxOffsetsPerTrigger ({max_rows})"
        )
    delay = options.get("maxtriggerdelay")
    timeout = _number(options, "kafka.request.timeout.ms", "kafka.request.timeout.ms", 1)
    api_timeout = _number(
        options, "kafka.default.api.timeout.ms", "kafka.default.api.timeout.ms", 1
    )
    return ReadOptions(
        bootstrap(options),
        subscription,
        starting,
        ending,
        max_rows,
        _flag(options, "failondataloss", "failOnDataLoss", "true"),
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=(
            15 * 60 * 1000 if delay is None else _duration_ms(delay, "maxTriggerDelay")
        ),
        min_partitions=_number(options, "minpartitions", "minPartitions", 1),
        include_headers=_flag(options, "includeheaders", "includeHeaders", "false"),
        request_timeout_ms=max(timeout or 30_000, api_timeout or 0),
        max_partition_fetch_bytes=_number(
            options, "kafka.max.partition.fetch.bytes", "kafka.max.partition.fetch.bytes", 1
        )
        or 1 << 20,
        security=parse_security(options),
        isolation_level=_isolation_level(options),
    )


def _isolation_level(options: Mapping[str, str]) -> str:
    """``kafka.isolation.level`` or ``isolation.level`` (the same if both are given)."""
    given = {
        name: options[name].strip().lower()
        for name in ("kafka.isolation.level", "isolation.level")
        if name in options
    }
    if len(set(given.values())) > 1:
        raise OptionError(
            "options kafka.isolation.level and isolation.level disagree: "
            + ", ".join(f"{k}={v}" for k, v in given.items())
        )
    if not given:
        return READ_UNCOMMITTED
    name, level = next(iter(given.items()))
    try:
        isolation_number(level)
    except ValueError:
        raise OptionError(
            f"option {name} must be read_uncommitted or read_committed, not {level!r}"
        ) from None
    return level


def _position(options: Mapping[str, str], side: str, default: str, strategy: str) -> OffsetSpec:
    """Starting or ending offsets: ``<side>Timestamp`` wins over
    ``<side>OffsetsByTimestamp``, which wins over ``<side>Offsets``, as in Spark."""
    global_ts = options.get(f"{side}timestamp")
    if global_ts is not None:
        value = _number(options, f"{side}timestamp", f"{side}Timestamp", 0)
        assert value is not None
        return ByTimestamp(value, strategy)
    by_ts = options.get(f"{side}offsetsbytimestamp")
    if by_ts is not None:
        return ByTimestamp(_partition_json(f"{side}OffsetsByTimestamp", by_ts), strategy)
    return _offsets(f"{side}Offsets", options.get(f"{side}offsets", default))


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Batch queries cannot start at latest nor end at earliest (Spark's rule)."""
    if starting == "latest" or (isinstance(starting, dict) and _has(starting, LATEST)):
        raise OptionError("startingOffsets cannot be latest (-1) for batch queries")
    if ending == "earliest" or (isinstance(ending, dict) and _has(ending, EARLIEST)):
        raise OptionError("endingOffsets cannot be earliest (-2) for batch queries")


def _has(offsets: dict[str, dict[str, int]], value: int) -> bool:
    return any(o == value for ps in offsets.values() for o in ps.values())


def _assign(text: str) -> dict[str, list[int]]:
    try:
        raw = json.loads(text)
        return {str(t): [int(p) for p in ps] for t, ps in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option assign must be JSON like {{"topic": [0, 1]}}, not {text!r}'
        ) from None


def _partition_json(name: str, text: str) -> dict[str, dict[str, int]]:
    try:
        raw = json.loads(text.strip())
        return {str(t): {str(p): int(o) for p, o in ps.items()} for t, ps in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'option {name} must be JSON like {{"topic": {{"0": 23}}}}, not {text!r}'
        ) from None


def _offsets(name: str, text: str) -> str | dict[str, dict[str, int]]:
    value = text.strip()
    if value in ("earliest", "latest"):
        return value
    try:
        return _partition_json(name, value)
    except OptionError:
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
    security: Security | None = None  # None: the process's default (PLAINTEXT)


def write_options(given_options: Mapping[str, str], streaming: bool) -> WriteOptions:
    """The sink's options: ``bootstrap.servers``, ``topic`` (else each row's topic
    column), ``checkpointLocation`` (streaming), the producer settings above
    as ``kafka.<setting>`` and the security options (module docstring); any
    other option is refused, naming it."""
    options = _lower(given_options)
    settings: dict[str, object] = {}
    for name, value in options.items():
        if name in ("bootstrap.servers", "kafka.bootstrap.servers", "topic", "checkpointlocation"):
            continue
        if _is_security(name):
            continue  # parse_security checks these
        setting = name.removeprefix("kafka.")
        parse = _PRODUCER_SETTINGS.get(setting) if name.startswith("kafka.") else None
        if parse is None:
            known = ", ".join(f"kafka.{s}" for s in _PRODUCER_SETTINGS)
            raise OptionError(
                f"option {name} is not one the annal sink knows (it takes bootstrap.servers, "
                f"topic, checkpointLocation, {known}, and kafka.security.protocol, "
                "kafka.ssl.* and kafka.sasl.*)"
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
        security=parse_security(options),
    )
