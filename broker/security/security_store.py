"""What a broker knows of ACLs and SCRAM credentials: a cache kept in step with ZooKeeper.

Authorization and SASL need answers on the request path, without a ZooKeeper read per
request, so every broker keeps the cluster's ACLs (an ``AclCache``) and its users'
SCRAM credentials in memory, and follows ZooKeeper's change notifications to stay
current, as Kafka's ``AclAuthorizer`` and its credential cache do:

* ``start`` notes the newest ACL change notification of both trees, loads every ACL,
  then follows ``/kafka-acl-changes`` (literal patterns) and
  ``/kafka-acl-extended-changes`` (prefixed ones) on its own ``acl-changes`` thread:
  a watch only wakes the thread, which reads each notification newer than the last it
  handled and re-reads the pattern it names.  Users go the same way through a
  ``ConfigChangeListener`` (``broker/config_changes.py``) that follows
  ``/config/changes`` for ``users/<name>``: every user is loaded after the starting
  notification is noted, then each named user is re-read.  A broker already
  follows ``/config/changes`` for topics, so it builds the store with
  ``follow_users=False`` and hands ``user_changed`` and ``load_users`` to its one
  listener; a store of its own (``follow_users=True``) has a ``user-changes``
  thread.
* After a lost ZooKeeper session (notifications may have expired meanwhile), both are
  loaded whole again once a new session is connected.
* A broker's own admin writes refresh the changed pattern or user at once
  (``refresh_acls`` / ``refresh_user``), so the broker that changed something shows the
  change in its next answer; the others follow within a second or two.

Every refresh re-reads ZooKeeper and replaces the cached value while holding
``_refresh_lock``; reads on one session see every write made before them, so whichever
refresh runs last leaves the newest state, and two refreshes never interleave a stale
read with a newer one.  Notifications of either tree older than 15 minutes are
deleted by this thread, at most once a minute (Kafka's ``changeExpirationMs``).

Thread safety: ``credentials`` and the ``AclCache`` are safe from any thread
(``_lock`` guards the credential map, whose values are read-only mappings).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from types import MappingProxyType

from annal.broker.config_changes import (
    CHANGE_EXPIRATION_MS,
    PURGE_INTERVAL_S,
    RETRY_S,
    ConfigChangeListener,
)
from annal.security.acl import PatternType, ResourcePattern
from annal.security.authorizer import AclCache
from annal.security.scram import ScramConfigError, ScramCredential
from annal.zk import acls
from annal.zk.client import SessionEvent, ZkClient, ZkError
from annal.zk.users import UserLayoutError

logger = logging.getLogger(__name__)

_TREES = (PatternType.LITERAL, PatternType.PREFIXED)
_NONE: Mapping[str, ScramCredential] = MappingProxyType({})


class SecurityStore:
    """See the module docstring; ``start`` then ``stop``."""

    def __init__(self, zk: ZkClient, follow_users: bool = True) -> None:
        self.zk = zk
        self.acls = AclCache()
        self._lock = threading.Lock()
        self._credentials: dict[str, Mapping[str, ScramCredential]] = {}
        self._refresh_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._reload = False  # a session was lost: load everything once connected
        self._last = dict.fromkeys(_TREES, -1)
        self._next_purge = 0.0
        self._watches: list[object] = []
        self._thread = threading.Thread(target=self._run, name="acl-changes", daemon=True)
        self._users = (
            ConfigChangeListener(zk, None, self.user_changed, thread_name="user-changes")
            if follow_users
            else None
        )

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Load everything and follow the changes; ZkError when ZooKeeper cannot be read."""
        for pattern_type in _TREES:
            self._last[pattern_type] = self._newest_change(pattern_type)
        self._load_acls()
        if self._users is not None:
            self._users.start(load=self.load_users)
        else:
            self.load_users()  # the owner's listener loads them again when it starts
        self._thread.start()
        self.zk.add_session_listener(self._session_changed)
        for pattern_type in _TREES:
            self._watches.append(
                self.zk.watch_children(acls.change_root(pattern_type), self._on_change)
            )

    def _newest_change(self, pattern_type: PatternType) -> int:
        numbers = []
        for child in self.zk.children(acls.change_root(pattern_type)):
            try:
                numbers.append(acls.change_sequence(child))
            except acls.AclLayoutError:
                continue
        return max(numbers, default=-1)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self.zk.remove_session_listener(self._session_changed)
        if self._users is not None:
            self._users.stop()
        if self._thread.is_alive():
            self._thread.join(5)

    # -- what the broker asks -----------------------------------------------------------

    def credentials(self, user: str) -> Mapping[str, ScramCredential]:
        """The user's SCRAM credentials by mechanism (empty when it has none): SASL's
        credential lookup."""
        with self._lock:
            return self._credentials.get(user, _NONE)

    def users(self) -> list[str]:
        """The users with a SCRAM credential, sorted."""
        with self._lock:
            return sorted(self._credentials)

    # -- refreshes (any thread; they read ZooKeeper) -------------------------------------

    def refresh_acls(self, pattern: ResourcePattern) -> int:
        """Re-read one pattern's ACLs from ZooKeeper into the cache; how many it has."""
        with self._refresh_lock:
            entries, _ = self.zk.acls_of(pattern)
            self.acls.replace(pattern, entries)
        return len(entries)

    def user_changed(self, user: str) -> None:
        """A notification named ``user``: re-read it (``refresh_user``), logged."""
        self.refresh_user(user)
        mechanisms = sorted(self.credentials(user))
        logger.info("SCRAM credentials of user %r changed: %s", user, mechanisms or "none left")

    def refresh_user(self, user: str) -> None:
        """Re-read one user's SCRAM credentials from ZooKeeper (none when its znode is
        gone or does not decode)."""
        with self._refresh_lock:
            try:
                found: Mapping[str, ScramCredential] = self.zk.get_user_scram_credentials(user)
            except (ScramConfigError, UserLayoutError) as exc:
                logger.warning("user %r has no usable SCRAM credential: %s", user, exc)
                found = {}
            with self._lock:
                if found:
                    self._credentials[user] = MappingProxyType(dict(found))
                else:
                    self._credentials.pop(user, None)

    def _load_acls(self) -> None:
        with self._refresh_lock:
            everything = self.zk.all_acls()
            self.acls.clear()
            for pattern, entries in everything.items():
                self.acls.replace(pattern, entries)
        logger.info("loaded the ACLs of %d resource patterns", len(everything))

    def load_users(self) -> None:
        """Read every user's SCRAM credentials from ZooKeeper into the cache."""
        with self._refresh_lock:
            everything = self.zk.all_scram_credentials()
            with self._lock:
                self._credentials = {
                    user: MappingProxyType(dict(found)) for user, found in everything.items()
                }
        logger.info("loaded the SCRAM credentials of %d users", len(everything))

    # -- following the ACL change notifications -------------------------------------------

    def _on_change(self, children: list[str]) -> bool:
        self._wake.set()  # kazoo's thread: only wake ours
        return not self._stopped

    def _session_changed(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST:
            self._reload = True
        elif event is SessionEvent.CONNECTED and self._reload:
            self._wake.set()

    def _run(self) -> None:
        retry = False
        while True:
            self._wake.wait(RETRY_S if retry else None)
            self._wake.clear()
            if self._stopped:
                return
            try:
                if self._reload and self.zk.session_state is SessionEvent.CONNECTED:
                    self._reload = False
                    self._load_acls()
                    self.load_users()
                self._process()
                retry = False
            except ZkError as exc:
                logger.warning("ACL changes not applied yet (again in %.0f s): %s", RETRY_S, exc)
                retry = True

    def _process(self) -> None:
        for pattern_type in _TREES:
            for number, pattern in self.zk.acl_changes(pattern_type, self._last[pattern_type]):
                if pattern is not None:
                    entries = self.refresh_acls(pattern)
                    logger.info("ACLs of %s changed: %d entries now", pattern, entries)
                self._last[pattern_type] = number
        if time.monotonic() >= self._next_purge:
            self._next_purge = time.monotonic() + PURGE_INTERVAL_S
            for pattern_type in _TREES:
                purged = self.zk.purge_notifications(
                    acls.change_root(pattern_type), acls.CHANGE_PREFIX, CHANGE_EXPIRATION_MS
                )
                if purged:
                    logger.info("deleted %d ACL change notifications older than 15 min", purged)
