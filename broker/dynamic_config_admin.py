"""DescribeConfigs and AlterConfigs of BROKER resources (KIP-226), for both protocols.

A resource names a broker id or "" (the cluster-wide default).  As in Kafka, a
broker answers for its own id and for "" only: another id is INVALID_REQUEST
("Unexpected broker id, expected 1, but received 2"), since Kafka's clients send a
broker's resource to that broker (and "" to any).  A change reads the level's znode,
checks the result (broker/dynamic_config.py: unknown names, static settings,
passwords and bad values are INVALID_REQUEST naming them), and writes it conditioned
on the version read, retried when another writer came in between; the broker that
wrote takes the new level at once, the others when the notification reaches them.

Authorization is the caller's (``AdminManager``): DescribeConfigs or AlterConfigs
on the cluster.  Thread safety: ``describe`` reads the in-memory levels (any
thread); ``alter_now`` and ``incremental_now`` do ZooKeeper work, on the admin pool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from annal.broker.config import SETTINGS
from annal.broker.dynamic_config import (
    LIST_SETTINGS,
    ConfigSource,
    DescribedConfig,
    DynamicBrokerConfig,
    DynamicConfigError,
)
from annal.broker.requests import admin_types as at
from annal.broker.requests.request_checks import Refusal
from annal.zk.broker_configs import DEFAULT_ENTITY
from annal.zk.client import StaleVersionError, ZkClient

from annal import errors

logger = logging.getLogger(__name__)

ATTEMPTS = 10
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
Operation = tuple[str, int, str | None]  # (name, operation, value)


class BrokerConfigAdmin:
    """See the module docstring."""

    def __init__(self, dynamic: DynamicBrokerConfig, zk: ZkClient) -> None:
        self.dynamic = dynamic
        self._zk = zk

    def entity(self, name: str, describing: bool = False) -> str | Refusal:
        """The level a resource name stands for: this broker's entity or the default."""
        if name == "":
            return DEFAULT_ENTITY
        own = self.dynamic.entity
        if not (name.isascii() and name.lstrip("-").isdigit()):
            return Refusal(
                errors.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
            )
        if str(int(name)) != own:
            expected = f"{own} or empty string" if describing else own
            return Refusal(
                errors.INVALID_REQUEST,
                f"Unexpected broker id, expected {expected}, but received {name} "
                f"(a broker describes and changes only its own settings: send it to broker {name})",
            )
        return own

    def describe(self, name: str, include_synonyms: bool) -> at.BrokerConfigs:
        found = self.entity(name, describing=True)
        if isinstance(found, Refusal):
            return at.BrokerConfigs(name, found.error.number, found.message)
        entries = self.dynamic.describe(per_broker=found != DEFAULT_ENTITY)
        return at.BrokerConfigs(name, entries=[_entry(e, include_synonyms) for e in entries])

    def alter_now(self, change: at.ConfigChange, validate_only: bool) -> Refusal | None:
        """Set and delete settings of one level (AlterConfigs; the legacy API's
        whole-level replacement arrives as the deletions of what it leaves out)."""
        operations: list[Operation] = [(k, SET, v) for k, v in sorted(change.set.items())]
        operations += [(k, DELETE, None) for k in change.delete if k not in change.set]
        return self.incremental_now(change.name, operations, validate_only)

    def incremental_now(
        self,
        name: str,
        operations: Sequence[Operation],
        validate_only: bool,
        replace: bool = False,
    ) -> Refusal | None:
        """IncrementalAlterConfigs of one level: SET, DELETE (of a setting not set:
        nothing), APPEND and SUBTRACT (list settings only, on the level's value or
        else the broker's static or default one).  With ``replace`` the level starts
        empty: Kafka's legacy AlterConfigs, which writes the settings given and drops
        the others."""
        entity = self.entity(name)
        if isinstance(entity, Refusal):
            return entity
        refusal = _check_operations(operations)
        if refusal is not None:
            return refusal
        for _ in range(ATTEMPTS):
            stored, version = self._zk.get_broker_config_versioned(entity)
            wanted = {} if replace else dict(stored)
            for key, operation, value in operations:
                if operation == DELETE:
                    wanted.pop(key, None)
                elif operation == SET:
                    assert value is not None
                    wanted[key] = value
                else:
                    current = wanted.get(key, self._base_value(key))
                    items = [v.strip() for v in current.split(",") if v.strip()]
                    given = [v.strip() for v in (value or "").split(",") if v.strip()]
                    if operation == APPEND:
                        items += [v for v in given if v not in items]
                    else:
                        items = [v for v in items if v not in given]
                    wanted[key] = ",".join(items)
            changed = [k for k, op, _ in operations if op != DELETE]
            try:
                self.dynamic.check(entity, wanted, changed)
            except DynamicConfigError as exc:
                return Refusal(errors.INVALID_REQUEST, str(exc))
            if validate_only:
                return None
            try:
                written = self._zk.set_broker_config(entity, wanted, version)
            except StaleVersionError:
                continue  # another alter wrote in between: apply these on top of it
            logger.info(
                "dynamic configs of brokers/%s set to %s", entity, dict(sorted(wanted.items()))
            )
            self.dynamic.update(entity, wanted, written)  # this broker at once
            return None
        return Refusal(
            errors.INVALID_REQUEST,
            f"the configs of brokers/{entity} kept changing under {ATTEMPTS} attempts; try again",
        )

    def _base_value(self, name: str) -> str:
        """The value below the dynamic levels: server.properties', else the default."""
        static: Mapping[str, str] = self.dynamic.static.raw
        default = SETTINGS[name][1] if name in SETTINGS else None
        return static.get(name, default or "")


def _check_operations(operations: Sequence[Operation]) -> Refusal | None:
    """Kafka's checks of an IncrementalAlterConfigs resource before any is applied."""
    names = [k for k, _, _ in operations]
    repeated = sorted({k for k in names if names.count(k) > 1})
    if repeated:
        return Refusal(
            errors.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(repeated)}"
        )
    nulls = [
        f"{_OPERATIONS.get(op, op)}:{k}" for k, op, v in operations if v is None and op != DELETE
    ]
    if nulls:
        return Refusal(errors.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    for key, operation, _ in operations:
        if operation not in _OPERATIONS:
            return Refusal(errors.INVALID_REQUEST, f"unknown operation {operation} on {key}")
        if operation in (APPEND, SUBTRACT) and key in SETTINGS and key not in LIST_SETTINGS:
            verb = "append" if operation == APPEND else "subtract"
            return Refusal(
                errors.INVALID_REQUEST,
                f"Config value {verb} is not allowed for config key: {key} (not a list)",
            )
    return None


_OPERATIONS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _entry(found: DescribedConfig, include_synonyms: bool) -> at.BrokerConfigEntry:
    return at.BrokerConfigEntry(
        found.name,
        found.value,
        _source(found.source),
        found.read_only,
        found.sensitive,
        [at.ConfigSynonym(s.name, s.value, _source(s.source)) for s in found.synonyms]
        if include_synonyms
        else [],
    )


def _source(source: ConfigSource) -> int:
    """Kafka's number of ``source`` (as DescribeConfigs answers it)."""
    return int(source)
