"""Dynamic topic configuration: brokers follow ``/config/changes``.

An AlterConfigs writes ``/config/topics/<t>`` and then a sequential
``config_change_<seq>`` notification naming ``topics/<t>``.  Every broker
watches the notifications; its own thread (the watch only wakes it) reads
each one newer than the last it applied and hands the topic's overrides to
the replica manager, which reconfigures the logs it hosts.  Notifications
older than the broker's start are skipped: logs read their topic's config
from ZooKeeper when they are opened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from annal.zk import layout
from annal.zk.client import ZkClient, ZkError

logger = logging.getLogger(__name__)

ApplyTopicConfig = Callable[[str, Mapping[str, str]], None]


class ConfigChangeListener:
    """See the module docstring; ``start`` then ``stop``."""

    def __init__(self, zk: ZkClient, apply: ApplyTopicConfig) -> None:
        self.zk = zk
        self._apply = apply
        self._wake = threading.Event()
        self._stopped = False
        self._last = -1
        self._thread = threading.Thread(target=self._run, name="config-changes", daemon=True)
        self._watch: object | None = None

    def start(self) -> None:
        seen = [layout.config_change_number(c) for c in self.zk.children(layout.CONFIG_CHANGES)]
        self._last = max((n for n in seen if n is not None), default=-1)
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
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                self._process()
            except ZkError as exc:
                logger.warning("config changes not applied yet: %s", exc)

    def _process(self) -> None:
        for number, entity in self.zk.config_changes(self._last):
            kind, _, name = entity.partition("/")
            if kind == "topics" and name:
                overrides = self.zk.get_topic_config(name)
                logger.info("config of topic %s: %s", name, dict(sorted(overrides.items())))
                self._apply(name, overrides)
            self._last = number
