"""Dynamic broker configs (KIP-226): broker settings changed at run time, kept in
ZooKeeper (zk/broker_configs.py) at two levels.

A setting's value is the first of, in order of precedence (Kafka's):

1. DYNAMIC_BROKER_CONFIG: this broker's ``/config/brokers/<id>``;
2. DYNAMIC_DEFAULT_BROKER_CONFIG: the cluster's ``/config/brokers/<default>``;
3. STATIC_BROKER_CONFIG: ``server.properties`` (and ``--override``);
4. DEFAULT_CONFIG: annal's default (broker/config.py).

Which settings are dynamic (``DYNAMIC``): those Kafka 2.x changes at run time that
annal can also apply live, the log defaults that topics without their own override
take (Kafka's ``DynamicLogConfig``, ``LOG_DEFAULTS`` below).  A change is applied
to every log the broker has at once, as a topic config change is (each topic's
overrides on top of the new defaults, ``apply_log_defaults``), and
``unclean.leader.election.enable`` reaches this broker's controller.  Everything else
Kafka makes dynamic (thread pools, listeners and their certificates, the cleaner's
threads, connection quotas, ...) is refused, as Kafka refuses its static settings:
"Cannot update these configs dynamically: [...]".  Passwords are refused too
(Kafka keeps them encrypted with ``password.encoder.secret``, which annal has not);
unknown names and bad values are refused naming the setting.

Synonyms (``include_synonyms``) are listed as Kafka lists them: level by level,
each level's synonyms in order (``log.retention.ms``, ``.minutes``, ``.hours``;
``log.roll.ms``, ``.hours``; ``log.flush.interval.ms`` and
``log.flush.scheduler.interval.ms``), starting at the setting described.

Thread safety: ``DynamicBrokerConfig`` is shared by the config-change thread (which
applies notifications), the admin pool (which applies the broker's own writes at
once) and the event loop (which describes): each level remembers the znode version
it was read at and ignores older reads; one lock orders the updates and their
application, another (held only to read or swap the levels) the levels.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from annal.broker.config import (
    KAFKA_DYNAMIC_UNUSED,
    KAFKA_SETTINGS_UNUSED,
    SETTINGS,
    BrokerConfig,
    ConfigError,
)
from annal.broker.listeners import LISTENER_PREFIX, is_sensitive
from annal.broker.requests import request_checks as checks
from annal.storage.config import LogConfig
from annal.storage.manager import LogManager
from annal.zk.broker_configs import DEFAULT_ENTITY
from annal.zk.layout import LayoutError

logger = logging.getLogger(__name__)


class ConfigSource(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` numbers."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# the dynamic broker settings, each with the topic config it is the default of
# (Kafka's LogConfig.TopicConfigSynonyms, as far as annal has the setting)
LOG_DEFAULTS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "message.max.bytes": "max.message.bytes",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleanup.policy": "cleanup.policy",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
}
DYNAMIC = frozenset(LOG_DEFAULTS)
TOPIC_SYNONYMS = {topic: broker for broker, topic in LOG_DEFAULTS.items()}
# settings whose value is a comma-separated list (IncrementalAlterConfigs APPEND/SUBTRACT)
LIST_SETTINGS = frozenset({"log.cleanup.policy"})

_SYNONYM_GROUPS = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
)
_LEVELS = (
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.DEFAULT_CONFIG,
)


def synonyms_of(name: str) -> tuple[str, ...]:
    """The names that set the same thing as ``name``, in Kafka's order."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            return group
    if name == "log.flush.interval.ms":
        return (name, "log.flush.scheduler.interval.ms")
    return (name,)


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One setting as DescribeConfigs shows it."""

    name: str
    value: str | None  # None: sensitive, or no value at any level
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[Synonym, ...]


class DynamicConfigError(ValueError):
    """A dynamic change that is refused; the message says which settings and why."""


def check_changes(props: Mapping[str, str]) -> None:
    """Each setting of ``props`` may be set dynamically to its value: DynamicConfigError
    naming the unknown names, the passwords, the static settings or the bad value.
    Never shows a value of a sensitive setting."""
    unknown = sorted(
        n
        for n in props
        if n not in SETTINGS
        and n not in KAFKA_SETTINGS_UNUSED
        and not n.startswith(LISTENER_PREFIX)
    )
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(SETTINGS), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise DynamicConfigError(f"unknown broker config {', '.join(hints)}")
    passwords = sorted(n for n in props if is_sensitive(n))
    if passwords:
        raise DynamicConfigError(
            f"Cannot update these configs dynamically: {_names(passwords)}: annal does not "
            "keep passwords in ZooKeeper (set them in server.properties)"
        )
    static = sorted(n for n in props if n not in DYNAMIC and n not in KAFKA_DYNAMIC_UNUSED)
    if static:
        raise DynamicConfigError(
            f"Cannot update these configs dynamically: {_names(static)} (annal changes "
            f"only these at run time: {_names(sorted(DYNAMIC))})"
        )
    for name, value in sorted(props.items()):
        if name in KAFKA_DYNAMIC_UNUSED:
            continue  # kept and shown, used by nothing: no value is wrong
        parse = SETTINGS[name][0]
        try:
            parse(name, value)
        except ConfigError as exc:
            raise DynamicConfigError(f"invalid value {exc}") from None
        topic_name = LOG_DEFAULTS[name]
        refusal = checks.topic_configs({topic_name: value})
        if refusal is not None:  # Kafka's type bounds (int32, int64) of the topic config
            raise DynamicConfigError(
                refusal.message.replace(f"config {topic_name!r}", f"config {name!r}")
            )


def _names(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"


def effective_config(
    static: BrokerConfig, default: Mapping[str, str], own: Mapping[str, str]
) -> BrokerConfig:
    """``static`` with the dynamic levels on top (precedence: ``own`` > ``default``
    > static > annal's default); ConfigError when the result is not a valid config."""
    raw = {**static.raw, **default, **own}
    config = dataclasses.replace(
        static,
        raw=raw,
        min_insync_replicas=_value(raw, "min.insync.replicas"),
        unclean_leader_election_enable=_value(raw, "unclean.leader.election.enable"),
    )
    config.log_config()  # the log.* settings must still form a valid topic config
    return config


def _value(raw: Mapping[str, str], name: str) -> Any:
    parse, default = SETTINGS[name]
    text = raw.get(name, default)
    assert text is not None
    return parse(name, text)


ConfigListener = Callable[[BrokerConfig, BrokerConfig], None]


class DynamicBrokerConfig:
    """The broker's settings as they are now: the static ones with the two dynamic
    levels on top.  ``update`` takes a level as read from ZooKeeper; the listeners
    (``add_listener``) get (old, new) each time the effective settings change."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self.entity = str(static.broker_id)
        self._levels: dict[str, dict[str, str]] = {DEFAULT_ENTITY: {}, self.entity: {}}
        self._versions: dict[str, int] = {DEFAULT_ENTITY: -2, self.entity: -2}
        self._current = static
        self._listeners: list[ConfigListener] = []
        # what a setting left unset comes to once the broker serves: advertised.listeners
        # as registered, with the ports bound for listeners of port 0 (set by the server)
        self.served: dict[str, str] = {}
        # _lock guards the levels (held briefly: DescribeConfigs reads them on the
        # event loop); _apply_lock orders updates with the listeners' work
        self._lock = threading.Lock()
        self._apply_lock = threading.Lock()

    def add_listener(self, listener: ConfigListener) -> None:
        self._listeners.append(listener)

    def current(self) -> BrokerConfig:
        """The effective settings (read without the lock: an immutable snapshot)."""
        return self._current

    def level(self, entity: str) -> dict[str, str]:
        """The dynamic settings of ``DEFAULT_ENTITY`` or this broker's entity in use."""
        with self._lock:
            return dict(self._levels.get(entity, {}))

    def concerns(self, entity: str) -> bool:
        """Whether ``entity`` (a notification's) is a level this broker follows."""
        return entity in self._levels

    def update(self, entity: str, stored: Mapping[str, str], version: int) -> None:
        """Take the level ``entity`` as stored at znode ``version`` (-1: no znode),
        unless a newer version was taken already.  Stored entries that annal cannot
        apply (unknown, static, bad values: written by another tool) are skipped
        with a warning, the rest applied."""
        if entity not in self._levels:
            return  # another broker's
        with self._apply_lock:  # one update and its application at a time
            with self._lock:
                if version < self._versions[entity]:
                    return  # read before a version already taken
                kept = self._usable(entity, stored)
                levels = {**self._levels, entity: kept}
                try:
                    new = effective_config(self.static, levels[DEFAULT_ENTITY], levels[self.entity])
                except ConfigError as exc:
                    logger.error("dynamic configs of brokers/%s not applied: %s", entity, exc)
                    return
                self._versions[entity] = version
                if kept == self._levels[entity]:
                    return
                self._levels = levels
                old, self._current = self._current, new
            shown = {k: kept[k] for k in sorted(kept)}
            logger.info("dynamic configs of brokers/%s now %s", entity, shown or "{}")
            for listener in self._listeners:
                try:
                    listener(old, new)
                except Exception:  # one failing listener must not stop the others
                    logger.exception("applying dynamic broker configs failed")

    def load(self, read: Callable[[str], tuple[dict[str, str], int]]) -> None:
        """Read both levels (``read(entity)``: the stored settings and the znode's
        version, as ``ZkClient.get_broker_config_versioned``) and take them; a znode
        that does not decode is logged and left as it was taken before."""
        for entity in (DEFAULT_ENTITY, self.entity):
            self.reload(entity, read)

    def reload(self, entity: str, read: Callable[[str], tuple[dict[str, str], int]]) -> None:
        """Read level ``entity`` and take it (nothing for another broker's entity)."""
        if entity not in self._levels:
            return
        try:
            stored, version = read(entity)
        except LayoutError as exc:
            logger.error("dynamic configs of brokers/%s not applied: %s", entity, exc)
            return
        self.update(entity, stored, version)

    def _usable(self, entity: str, stored: Mapping[str, str]) -> dict[str, str]:
        kept: dict[str, str] = {}
        for name, value in stored.items():
            try:
                check_changes({name: value})
            except DynamicConfigError as exc:
                logger.warning("brokers/%s: skipping %s: %s", entity, name, exc)
                continue
            kept[name] = value
        return kept

    def check(self, entity: str, wanted: Mapping[str, str], changed: Iterable[str]) -> None:
        """Whether level ``entity`` may become ``wanted`` (the names ``changed`` set
        in it): DynamicConfigError if not."""
        check_changes({n: wanted[n] for n in changed if n in wanted})
        with self._lock:
            levels = {**self._levels, entity: dict(wanted)}
        try:
            effective_config(self.static, levels[DEFAULT_ENTITY], levels[self.entity])
        except ConfigError as exc:
            raise DynamicConfigError(str(exc)) from None

    def describe(self, per_broker: bool) -> list[DescribedConfig]:
        """Every setting of this broker (``per_broker``) or the cluster default's
        dynamic settings, sorted by name, with their synonyms."""
        with self._lock:
            own, default = dict(self._levels[self.entity]), dict(self._levels[DEFAULT_ENTITY])
        defaults = {n: d for n, (_, d) in SETTINGS.items() if d is not None}
        static = dict(self.static.raw)
        by_level = {
            ConfigSource.DYNAMIC_BROKER_CONFIG: own,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: default,
            ConfigSource.STATIC_BROKER_CONFIG: static,
            ConfigSource.DEFAULT_CONFIG: defaults,
        }
        names = set(default)
        if per_broker:
            names |= set(SETTINGS) | set(static) | set(own)
        found = []
        for name in sorted(names):
            sensitive = is_sensitive(name)
            listed = [
                Synonym(s, None if sensitive else by_level[level][s], level)
                for level in _LEVELS
                for s in synonyms_of(name)
                if s in by_level[level]
            ]
            if not per_broker:
                listed = [
                    s for s in listed if s.source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
                ]
            while listed and listed[0].name != name:
                listed.pop(0)  # a synonym of higher precedence is another setting
            head = listed[0] if listed else None
            unset = None if not per_broker else self.served.get(name)
            found.append(
                DescribedConfig(
                    name,
                    head.value if head is not None else unset,
                    head.source if head is not None else ConfigSource.DEFAULT_CONFIG,
                    name not in DYNAMIC,
                    sensitive,
                    tuple(listed),
                )
            )
        return found

    def topic_default_source(self, topic_config: str) -> ConfigSource:
        """Where the broker default of a topic config without an override comes
        from: the level that sets its broker synonym (Kafka's topic describe)."""
        broker_name = TOPIC_SYNONYMS.get(topic_config)
        if broker_name is None:
            return ConfigSource.DEFAULT_CONFIG
        with self._lock:
            own, default = self._levels[self.entity], self._levels[DEFAULT_ENTITY]
            names = synonyms_of(broker_name)
            if any(n in own for n in names):
                return ConfigSource.DYNAMIC_BROKER_CONFIG
            if any(n in default for n in names):
                return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if any(n in self.static.raw for n in names):
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG


def apply_log_defaults(
    logs: LogManager,
    defaults: LogConfig,
    topic_configs: Callable[[list[str]], Mapping[str, Mapping[str, str]]],
    update_topic_config: Callable[[str, Mapping[str, str]], None],
) -> None:
    """New topic defaults for every log of ``logs``: the defaults of logs created from
    now on, and every topic's hosted logs reconfigured through the path a topic
    config change takes (``update_topic_config``: its overrides on the new defaults),
    the overrides read in one batched round (``topic_configs``)."""
    before = logs.default_config.to_properties()
    logs.default_config = defaults
    topics = sorted({tp.topic for tp in logs.all_logs()})
    overrides = topic_configs(topics) if topics else {}
    for topic in topics:
        update_topic_config(topic, overrides.get(topic, {}))
    changed = {k: v for k, v in defaults.to_properties().items() if before.get(k) != v}
    logger.info("topic defaults now %s; the logs of %d topics reconfigured", changed, len(topics))
