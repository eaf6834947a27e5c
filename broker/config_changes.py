"""Dynamic configs: brokers follow ``/config/changes``.

A config change writes the entity's znode and then a sequential
``config_change_<seq>`` notification naming the entity: ``topics/<t>`` after an
AlterConfigs, ``users/<sanitized user>`` after a SCRAM credential changed.  Every
broker watches the notifications; its own thread (the watch only wakes it) reads
each one newer than the last it handled and:

* for a topic, reads its overrides and hands them to ``apply_topic`` (the replica
  manager, which reconfigures the logs it hosts);
* for a user, calls ``user_changed(user)``, which re-reads what it keeps of the user
  (the security store's SCRAM credentials);
* for a broker (``brokers/<id>`` or ``brokers/<default>``, KIP-226), calls
  ``broker_changed(entity)``, which re-reads that level of the dynamic broker
  configs when it is this broker's or the cluster default (broker/dynamic_config.py).

Notifications older than the listener's start are skipped: whoever needs the
entities reads them whole when starting (logs read their topic's config when
opened; ``start(load=...)`` runs a full load after the starting point is noted and
before any notification is handled, so nothing written in between is missed or
applied out of order).  A notification that cannot be handled because ZooKeeper is
unreachable is tried again a second later.

Notifications older than 15 minutes (Kafka's ``changeExpirationMs``) are deleted
by whoever handles notifications, at most once a minute, as Kafka's change
listeners do; brokers that are down that long read everything when they start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from annal.zk import broker_configs, layout, users
from annal.zk.client import ZkClient, ZkError

logger = logging.getLogger(__name__)

ApplyTopicConfig = Callable[[str, Mapping[str, str]], None]
UserChanged = Callable[[str], None]
BrokerChanged = Callable[[str], None]

CHANGE_EXPIRATION_MS = 15 * 60 * 1000
PURGE_INTERVAL_S = 60.0
RETRY_S = 1.0
CHANGE_PREFIX = layout.CONFIG_CHANGE_PREFIX.rsplit("/", 1)[1]


class ConfigChangeListener:
    """See the module docstring; ``start`` then ``stop``.  Any callback may be None
    (its entity type is then skipped)."""

    def __init__(
        self,
        zk: ZkClient,
        apply_topic: ApplyTopicConfig | None,
        user_changed: UserChanged | None = None,
        *,
        broker_changed: BrokerChanged | None = None,
        thread_name: str = "config-changes",
    ) -> None:
        self.zk = zk
        self._apply_topic = apply_topic
        self._user_changed = user_changed
        self._broker_changed = broker_changed
        self._wake = threading.Event()
        self._stopped = False
        self._last = -1
        self._next_purge = 0.0
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._watch: object | None = None

    def start(self, load: Callable[[], None] | None = None) -> None:
        """Note the newest notification, run ``load`` (a full read of what the owner
        keeps), then follow the notifications after the one noted."""
        seen = [layout.config_change_number(c) for c in self.zk.children(layout.CONFIG_CHANGES)]
        self._last = max((n for n in seen if n is not None), default=-1)
        if load is not None:
            load()
        self._thread.start()
        self._watch = self.zk.watch_children(layout.CONFIG_CHANGES, self._on_change)

    def _on_change(self, children: list[str]) -> bool:
        self._wake.set()
        return not self._stopped  # False ends the watch

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        retry = False
        while True:
            self._wake.wait(RETRY_S if retry else None)
            self._wake.clear()
            if self._stopped:
                return
            try:
                self._process()
                retry = False
            except ZkError as exc:
                logger.warning("config changes not applied yet (again in %.0f s): %s", RETRY_S, exc)
                retry = True

    def _process(self) -> None:
        for number, entity in self.zk.config_changes(self._last):
            kind, _, name = entity.partition("/")
            try:
                if kind == "topics" and name and self._apply_topic is not None:
                    overrides = self.zk.get_topic_config(name)
                    logger.info("config of topic %s: %s", name, dict(sorted(overrides.items())))
                    self._apply_topic(name, overrides)
                user = users.user_of_entity(entity)
                if user is not None and self._user_changed is not None:
                    self._user_changed(user)
                broker = broker_configs.entity_of_change(entity)
                if broker is not None and self._broker_changed is not None:
                    self._broker_changed(broker)
            except ZkError:
                raise  # this notification again, once ZooKeeper answers
            except Exception:  # one bad entity must not stop the others
                logger.exception("cannot apply the config change of %s", entity or "?")
            self._last = number
        if time.monotonic() >= self._next_purge:
            self._next_purge = time.monotonic() + PURGE_INTERVAL_S
            purged = self.zk.purge_notifications(
                layout.CONFIG_CHANGES, CHANGE_PREFIX, CHANGE_EXPIRATION_MS
            )
            if purged:
                logger.info("deleted %d config change notifications older than 15 min", purged)
