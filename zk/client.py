"""annal's one ZooKeeper client: kazoo, with retries, a session listener and typed znodes.

Every read and write of cluster metadata goes through ``ZkClient``: paths and
JSON come from ``layout`` (ACLs' from ``acls``, users' from ``users``); retries use
kazoo's ``KazooRetry`` (a deadline, jittered backoff, and only kazoo's retriable
errors); writes to partition state are conditioned on the znode version the caller
read, and ACLs and users' configs are changed by versioned read-modify-writes that
read again when another writer won (``_update_versioned``), each followed by the
change notification brokers follow.

Session handling follows kazoo's states: SUSPENDED means "stop acting on
ZooKeeper-held roles until CONNECTED"; LOST means "every ephemeral node of
ours is gone: resign, re-register, rebuild".  ``ZkClient`` is the one
listener kazoo has; it fans each change out, as a ``SessionEvent``, to the
owners registered with ``add_session_listener`` (the broker registration, the
controller, the ISR-change writer, the group consumer).  Owners are called on
kazoo's thread, in registration order, and must only hand the event on (set a
flag, put it on a queue); the owner decides what to do on its own thread.

The controller's writes are fenced by its epoch (Kafka's KAFKA-6082): each
is a ZooKeeper multi-op that begins with a ``check`` of ``/controller_epoch``
at the zkVersion the controller read when it took office
(``register_controller`` returns it as a ``ControllerEpoch``).  Once another
controller has bumped the epoch the whole multi-op fails and nothing is
written: ``ControllerMovedError``.  Methods that take ``fence=`` write this
way when given one.

This module is the one owner of kazoo: nothing outside ``zk/`` imports it.
Watches are set through ``watch_children`` and ``watch_data``, and every kazoo
failure other than the node-level answers this module handles itself (no
node, node exists, bad version, not empty) leaves as a ``ZkError`` whose
cause is the kazoo exception.

Thread safety: kazoo's client is thread-safe; ``ZkClient``'s own state (the
listeners and the last session state) is guarded by ``self._listeners_lock``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from annal.security.acl import AccessControlEntry, PatternType, ResourcePattern
from annal.security.scram import ScramConfigError, ScramCredential, scram_credentials
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from annal.topic_partition import TopicPartition

from . import acls, broker_configs, layout, users, znode_acls
from .layout import BrokerRegistration, PartitionState, TopicAssignment

logger = logging.getLogger(__name__)
T = TypeVar("T")


class _SessionLossFilter(logging.Filter):
    """kazoo's worker and watch threads log a traceback at ERROR for every
    callback a lost connection or session cut short (SessionExpiredError,
    ConnectionLoss, RetryFailedError, ConnectionClosedError).  Each owner of a
    session (the broker, the controller, a consumer) logs that loss once, in
    one line, and reads again when connected; these become one DEBUG line."""

    _QUIET = (SessionExpiredError, ConnectionLoss, RetryFailedError, ConnectionClosedError)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, self._QUIET):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.msg, record.args = (
                "a ZooKeeper callback stopped: %s (%s)",
                (
                    type(exc).__name__,
                    exc,
                ),
            )
            record.exc_info = record.exc_text = None
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


for _name in ("kazoo.handlers.threading", "kazoo.recipe.watchers"):
    logging.getLogger(_name).addFilter(_SessionLossFilter())

# Answers about one znode that this module turns into return values or its own
# errors; every other kazoo failure is a ZkError.
_NODE_ANSWERS = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)

# What a watch callback gets: a znode's children (watch_children) or its data
# and version (watch_data; None data when the znode does not exist).  Returning
# False ends the watch.
ChildrenCallback = Callable[[list[str]], bool | None]
DataCallback = Callable[[bytes | None, int], bool | None]


class ZkError(Exception):
    """A ZooKeeper operation failed for a reason annal understands."""


class BrokerIdTakenError(ZkError):
    """Another live broker holds ``/brokers/ids/<id>``."""


class StaleVersionError(ZkError):
    """A conditional write lost: the znode changed since it was read."""


class NoChrootError(ZkError):
    """The connect string's chroot does not exist, and this client may not create it."""


class ControllerMovedError(ZkError):
    """A fenced write failed its ``/controller_epoch`` check: another controller
    took office since this one did (Kafka's ControllerMovedException)."""


class CredentialNotFoundError(ZkError):
    """A deletion named SCRAM mechanisms the user has no credential for; nothing
    was written.  ``mechanisms`` names them."""

    def __init__(self, user: str, mechanisms: Collection[str]) -> None:
        self.user = user
        self.mechanisms = tuple(sorted(mechanisms))
        super().__init__(f"user {user!r} has no {', '.join(self.mechanisms)} credential")


class SessionEvent(enum.Enum):
    SUSPENDED = "suspended"
    CONNECTED = "connected"
    LOST = "lost"


# Called on kazoo's thread with each session change; must not block.
SessionListener = Callable[[SessionEvent], None]


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """The controller's term: its epoch, and the zkVersion of ``/controller_epoch``
    that holds it, which every fenced write checks."""

    epoch: int
    zk_version: int


# Node-level answers a multi-op reports per operation (raised as themselves).
_OP_ANSWERS = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)
# What the other operations of a failed multi-op report.
_ROLLED_BACK = (RolledBackError, RuntimeInconsistency)
# Operations per fenced multi-op when deleting a subtree.
_DELETES_PER_MULTI = 500
# Tries of a versioned read-modify-write (ACLs, user configs) before giving up, as
# Kafka's authorizer bounds its own.
_CAS_ATTEMPTS = 30


def check_fence(check: object, fence: ControllerEpoch) -> None:
    """ControllerMovedError when a fenced multi-op's first result, the check of
    ``/controller_epoch``, failed (rolled back because another operation
    failed is not the check failing)."""
    if isinstance(check, Exception) and not isinstance(check, _ROLLED_BACK):
        raise ControllerMovedError(
            f"controller epoch {fence.epoch} is over: {layout.CONTROLLER_EPOCH} is no "
            f"longer at zkVersion {fence.zk_version} ({type(check).__name__})"
        )


def split_connect_string(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/annal"`` → (``"h1:2181,h2:2181"``, ``"/annal"``)."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ZkError(f"zookeeper.connect {connect!r} names no host:port")
    return hosts, (slash + chroot).rstrip("/")


class ZkClient:
    """A connected session to the ensemble named by ``connect`` (with an optional chroot)."""

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18_000,
        timeout_s: float = 15.0,
        create_chroot: bool = True,
        digest: str | None = None,
        set_acl: bool = False,
    ):
        """``create_chroot=False`` is for clients that only read (bootstrap from
        ZooKeeper): a missing chroot is ``NoChrootError`` instead of a new znode.
        ``digest`` (``user:password``) authenticates the session with ZooKeeper's
        digest scheme; ``set_acl`` gives the znodes it creates the ACLs of
        ``znode_acls`` (``zookeeper.set.acl``), and needs ``digest``."""
        if set_acl and not digest:
            raise ZkError("zookeeper.set.acl needs a ZooKeeper identity (zookeeper.auth.digest)")
        self._auth = [("digest", znode_acls.check_digest(digest))] if digest else None
        self._set_acl = set_acl
        self.connect_string = connect
        self.hosts, self.chroot = split_connect_string(connect)
        self.create_chroot = create_chroot
        self.session_timeout_ms = session_timeout_ms
        self.timeout_s = timeout_s
        self._listeners_lock = threading.Lock()
        self._listeners: list[SessionListener] = []
        self._session_state = SessionEvent.LOST  # until start() connects
        self._retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, deadline=timeout_s)
        self._kazoo = self._client(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0),
            command_retry=KazooRetry(max_tries=3, delay=0.05, max_delay=0.5),
        )
        self._kazoo.add_listener(self._on_state)

    def _client(self, **kwargs: Any) -> KazooClient:
        """A kazoo client with this client's identity and ACL choice."""
        if self._set_acl:
            return znode_acls.AclKazooClient(znode_acls.secure_acls, auth_data=self._auth,
                                             **kwargs)  # fmt: skip
        return KazooClient(auth_data=self._auth, **kwargs)

    # -- connection ------------------------------------------------------------

    def start(self) -> ZkClient:
        """Connect (creating the chroot first when missing, unless told not to:
        then NoChrootError); ZkError if it cannot."""
        if self.chroot:
            bare = self._client(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
            try:
                bare.start(timeout=self.timeout_s)
                if self.create_chroot:
                    bare.ensure_path(self.chroot)
                    missing = False
                else:
                    missing = bare.exists(self.chroot) is None
            except Exception as exc:
                raise ZkError(f"cannot reach ZooKeeper at {self.hosts}: {exc}") from exc
            finally:
                bare.stop()
                bare.close()
            if missing:
                raise NoChrootError(
                    f"chroot {self.chroot} does not exist in ZooKeeper at {self.hosts}"
                )
        try:
            self._kazoo.start(timeout=self.timeout_s)
        except Exception as exc:
            raise ZkError(f"cannot reach ZooKeeper at {self.connect_string}: {exc}") from exc
        return self

    def stop(self) -> None:
        self._kazoo.stop()
        self._kazoo.close()

    def add_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener(event)`` on every session change from now on, on kazoo's
        thread: it must not block (hand the event to the owner's own thread)."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    @property
    def session_state(self) -> SessionEvent:
        """The last session change: CONNECTED, SUSPENDED (connection lost, session
        perhaps alive) or LOST (expired or closed; also before ``start``)."""
        with self._listeners_lock:
            return self._session_state

    def _on_state(self, state: str) -> None:
        # Never block here: kazoo calls listeners on its own thread.
        if state == KazooState.SUSPENDED:
            event = SessionEvent.SUSPENDED
        elif state == KazooState.LOST:
            event = SessionEvent.LOST
        else:
            event = SessionEvent.CONNECTED
        with self._listeners_lock:
            self._session_state = event
            listeners = list(self._listeners)
        logger.debug("ZooKeeper session %s (%s)", event.value, self.connect_string)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # one owner's bug must not silence the others
                logger.exception("session listener %r failed on %s", listener, event.value)

    @property
    def kazoo(self) -> KazooClient:
        """The underlying client: for tests that expire sessions or plant bad znodes."""
        return self._kazoo

    @property
    def session_id(self) -> int | None:
        session = self._kazoo.client_id
        return int(session[0]) if session else None

    def __enter__(self) -> ZkClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- primitives ------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: object, **kwargs: object) -> Any:
        """``fn`` under the retry policy; kazoo's failures leave as ZkError."""
        try:
            return self._retry(fn, *args, **kwargs)
        except _NODE_ANSWERS:
            raise
        except KazooException as exc:
            name = getattr(fn, "__name__", "request")
            raise ZkError(f"ZooKeeper {name} failed: {type(exc).__name__} {exc}") from exc

    def _fenced(self, fence: ControllerEpoch, build: Callable[[Any], object]) -> list[Any]:
        """One multi-op: the check of ``/controller_epoch`` at ``fence.zk_version``,
        then the operations ``build`` adds to the transaction.  Their results in
        order; ControllerMovedError when the check fails, an operation's own
        node-level answer (NoNodeError, BadVersionError, ...) when one fails."""

        def attempt() -> list[Any]:
            txn = self._kazoo.transaction()  # a fresh one per try: a commit is final
            txn.check(layout.CONTROLLER_EPOCH, fence.zk_version)
            build(txn)
            return list(txn.commit())

        results: list[Any] = self._call(attempt)
        check, ops = results[0], results[1:]
        check_fence(check, fence)
        for result in ops:
            if isinstance(result, _OP_ANSWERS):
                raise result
        for result in ops:
            if isinstance(result, Exception) and not isinstance(result, _ROLLED_BACK):
                raise ZkError(f"ZooKeeper multi-op failed: {type(result).__name__} {result}")
        return ops

    # -- watches -----------------------------------------------------------------

    def watch_children(self, path: str, callback: ChildrenCallback) -> object:
        """Call ``callback(children)`` now and on every change of ``path``'s
        children, on kazoo's thread: it must only hand work on.  The returned
        handle keeps the watch; ``callback`` returning False ends it."""
        return ChildrenWatch(self._kazoo, path, callback)

    def watch_data(self, path: str, callback: DataCallback) -> object:
        """Call ``callback(data, version)`` now and on every change of ``path``
        (data None, version -1 while it does not exist), on kazoo's thread."""

        def on_data(data: bytes | None, stat: Any) -> bool | None:
            return callback(
                None if data is None else bytes(data), -1 if stat is None else stat.version
            )

        return DataWatch(self._kazoo, path, on_data)

    @property
    def connected(self) -> bool:
        return bool(self._kazoo.connected)

    def ensure_persistent_paths(self) -> None:
        """The top-level znodes, the users' config tree and the ACL trees (with a
        child per resource type, as Kafka's authorizer creates them)."""
        for path in (
            *layout.PERSISTENT_PATHS,
            users.CONFIG_USERS,
            broker_configs.CONFIG_BROKERS,
            *acls.PERSISTENT_PATHS,
        ):
            self._call(self._kazoo.ensure_path, path)

    def get(self, path: str) -> tuple[bytes, int] | None:
        """(data, version) of ``path``; None when it does not exist."""
        try:
            data, stat = self._call(self._kazoo.get, path)
        except NoNodeError:
            return None
        return bytes(data), int(stat.version)

    def children(self, path: str) -> list[str]:
        try:
            return sorted(str(c) for c in self._call(self._kazoo.get_children, path))
        except NoNodeError:
            return []

    def _create(
        self,
        path: str,
        data: bytes,
        ephemeral: bool = False,
        fence: ControllerEpoch | None = None,
    ) -> bool:
        """Create ``path``; False when it already exists (creates are idempotent under
        retry).  With ``fence`` the missing parents and the znode are created in
        fenced multi-ops (a multi-op cannot make parents)."""
        if fence is None:
            try:
                self._call(self._kazoo.create, path, data, ephemeral=ephemeral, makepath=True)
            except NodeExistsError:
                return False
            return True
        parent = path.rsplit("/", 1)[0]
        if parent and self._call(self._kazoo.exists, parent) is None:
            self._create(parent, b"", fence=fence)
        try:
            self._fenced(fence, lambda txn: txn.create(path, data, ephemeral=ephemeral))
        except NodeExistsError:
            return False
        return True

    # -- /cluster/id -----------------------------------------------------------

    def get_or_create_cluster_id(self) -> str:
        self._create(layout.CLUSTER_ID, layout.encode_cluster_id(layout.new_cluster_id()))
        found = self.get(layout.CLUSTER_ID)
        if found is None:
            raise ZkError(f"{layout.CLUSTER_ID} vanished right after it was created")
        return layout.decode_cluster_id(found[0])

    # -- brokers -----------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; the broker epoch (the zxid that
        created it, KIP-380).  BrokerIdTakenError names the holder."""
        path = layout.broker_path(registration.broker_id)
        if self._create(path, registration.encode(), ephemeral=True):
            owner = self._call(self._kazoo.exists, path)
            if owner is not None and owner.owner_session_id == self.session_id:
                return int(owner.czxid)
            return self.register_broker(registration)  # gone already: again
        found = self.get(path)
        if found is not None:
            holder = BrokerRegistration.decode(registration.broker_id, found[0])
            owner = self._call(self._kazoo.exists, path)
            if owner is not None and owner.owner_session_id == self.session_id:
                return int(owner.czxid)  # ours: a retried create that had succeeded
            raise BrokerIdTakenError(
                f"broker.id {registration.broker_id} is registered by a live broker at "
                f"{holder.endpoint} (znode {path}); give this broker another broker.id"
            )
        return self.register_broker(registration)  # it went away in between: try again

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        """The broker's registration with its epoch (the znode's creating zxid)."""
        try:
            data, stat = self._call(self._kazoo.get, layout.broker_path(broker_id))
        except NoNodeError:
            return None
        found = BrokerRegistration.decode(broker_id, bytes(data))
        return dataclasses.replace(found, epoch=int(stat.czxid))

    def get_brokers(self) -> list[BrokerRegistration]:
        brokers = []
        for child in self.children(layout.BROKER_IDS):
            registration = self.get_broker(int(child))
            if registration is not None:
                brokers.append(registration)
        return brokers

    # -- controller --------------------------------------------------------------

    def register_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Run for controller: one multi-op creates the ephemeral ``/controller``
        and bumps ``/controller_epoch`` at the version read.  The new term, or
        None when another broker holds ``/controller``."""
        while True:
            found = self.get(layout.CONTROLLER_EPOCH)
            if found is None:  # the first controller ever: the epoch starts at 0
                self._create(layout.CONTROLLER_EPOCH, layout.encode_controller_epoch(0))
                continue
            epoch = layout.decode_controller_epoch(found[0]) + 1
            version = found[1]

            def attempt(epoch: int = epoch, version: int = version) -> list[Any]:
                txn = self._kazoo.transaction()
                txn.create(layout.CONTROLLER, layout.encode_controller(broker_id), ephemeral=True)
                txn.set_data(
                    layout.CONTROLLER_EPOCH, layout.encode_controller_epoch(epoch), version
                )
                return list(txn.commit())

            created, bumped = self._call(attempt)
            if isinstance(created, NodeExistsError):
                if self._owns(layout.CONTROLLER):  # a retried multi-op that had succeeded
                    now = self.get(layout.CONTROLLER_EPOCH)
                    if now is not None:
                        return ControllerEpoch(layout.decode_controller_epoch(now[0]), now[1])
                return None
            if isinstance(bumped, BadVersionError):
                continue  # the epoch moved between the read and the multi-op
            if isinstance(created, Exception) or isinstance(bumped, Exception):
                raise ZkError(f"running for controller failed: {created!r}, {bumped!r}")
            return ControllerEpoch(epoch, int(bumped.version))

    def get_controller(self) -> int | None:
        found = self.get(layout.CONTROLLER)
        return None if found is None else layout.decode_controller(found[0])

    def get_controller_epoch(self) -> ControllerEpoch | None:
        """The current term as ``/controller_epoch`` holds it; None before the first."""
        found = self.get(layout.CONTROLLER_EPOCH)
        if found is None:
            return None
        return ControllerEpoch(layout.decode_controller_epoch(found[0]), found[1])

    def owns_controller(self) -> bool:
        """True when ``/controller`` is this session's ephemeral znode."""
        return self._owns(layout.CONTROLLER)

    def resign_controller(self) -> bool:
        """Delete ``/controller`` if this session holds it (so that the brokers run
        for election again); True if it did."""
        stat = self._call(self._kazoo.exists, layout.CONTROLLER)
        if stat is None or stat.owner_session_id != self.session_id:
            return False
        try:
            self._call(self._kazoo.delete, layout.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            return False
        return True

    def _owns(self, path: str) -> bool:
        stat = self._call(self._kazoo.exists, path)
        return stat is not None and stat.owner_session_id == self.session_id

    # -- topics ------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        assignment: TopicAssignment,
        config: Mapping[str, str] | None = None,
    ) -> bool:
        """Write the topic's config, then its assignment; False if the topic exists."""
        if self.get(layout.topic_path(topic)) is not None:
            return False
        if config:
            self._create(layout.topic_config_path(topic), layout.encode_topic_config(config))
        return self._create(layout.topic_path(topic), assignment.encode())

    def get_topics(self) -> list[str]:
        return self.children(layout.BROKER_TOPICS)

    def get_topic_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        found = self.get(layout.topic_path(topic))
        return None if found is None else (TopicAssignment.decode(topic, found[0]), found[1])

    def get_topic_config(self, topic: str) -> dict[str, str]:
        return self.get_topic_config_versioned(topic)[0]

    def get_topic_config_versioned(self, topic: str) -> tuple[dict[str, str], int]:
        """A topic's overrides and the znode's version (-1: no znode yet), for a
        conditional ``set_topic_config``."""
        found = self.get(layout.topic_config_path(topic))
        if found is None:
            return {}, -1
        return layout.decode_topic_config(topic, found[0]), found[1]

    def get_partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        found = self.get(layout.partition_state_path(topic, partition))
        if found is None:
            return None
        return PartitionState.decode(topic, partition, found[0]), found[1]

    def create_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        fence: ControllerEpoch | None = None,
    ) -> int:
        """Create the state znode (version 0); StaleVersionError if it exists already."""
        path = layout.partition_state_path(topic, partition)
        if not self._create(path, state.encode(), fence=fence):
            raise StaleVersionError(
                f"{layout.partition_state_path(topic, partition)} exists already"
            )
        return 0

    def update_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        fence: ControllerEpoch | None = None,
    ) -> int:
        """Conditional write of a partition's state; returns the new znode version."""
        return self._set_versioned(
            layout.partition_state_path(topic, partition), state.encode(), expected_version, fence
        )

    def update_topic_assignment(
        self,
        topic: str,
        assignment: TopicAssignment,
        expected_version: int,
        fence: ControllerEpoch | None = None,
    ) -> int:
        """Conditional rewrite of a topic's assignment (partitions added);
        StaleVersionError when it changed since it was read."""
        return self._set_versioned(
            layout.topic_path(topic), assignment.encode(), expected_version, fence
        )

    def _set_versioned(
        self,
        path: str,
        data: bytes,
        expected_version: int,
        fence: ControllerEpoch | None = None,
    ) -> int:
        """Write ``path`` only if still at ``expected_version``; the new version,
        or StaleVersionError when it changed or vanished since it was read."""
        try:
            if fence is None:
                stat = self._call(self._kazoo.set, path, data, version=expected_version)
            else:
                (stat,) = self._fenced(
                    fence, lambda txn: txn.set_data(path, data, expected_version)
                )
        except BadVersionError:
            raise StaleVersionError(
                f"{path} changed since version {expected_version} was read"
            ) from None
        except NoNodeError:
            raise StaleVersionError(f"{path} no longer exists") from None
        return int(stat.version)

    def mark_topic_for_deletion(self, topic: str) -> bool:
        return self._create(layout.delete_topic_path(topic), b"")

    def topics_to_delete(self) -> list[str]:
        return self.children(layout.DELETE_TOPICS)

    def delete_recursive(self, path: str, fence: ControllerEpoch | None = None) -> None:
        """Delete ``path`` and everything under it (nothing when it is gone).  With
        ``fence`` the deletes, children first, go in fenced multi-ops."""
        if fence is None:
            try:
                self._call(self._kazoo.delete, path, recursive=True)
            except NoNodeError:
                pass
            return
        while True:
            doomed = self._subtree(path)  # children before their parents
            try:
                for start in range(0, len(doomed), _DELETES_PER_MULTI):
                    chunk = doomed[start : start + _DELETES_PER_MULTI]

                    def deletes(txn: Any, chunk: list[str] = chunk) -> None:
                        for node in chunk:
                            txn.delete(node)

                    self._fenced(fence, deletes)
            except (NoNodeError, NotEmptyError):
                continue  # the tree changed under us: list it again
            return

    def _subtree(self, path: str) -> list[str]:
        """``path`` and its descendants, deepest first; [] when it does not exist."""
        try:
            children = self._call(self._kazoo.get_children, path)
        except NoNodeError:
            return []
        out: list[str] = []
        for child in children:
            out.extend(self._subtree(f"{path.rstrip('/')}/{child}"))
        out.append(path)
        return out

    def take_isr_changes(self, fence: ControllerEpoch | None = None) -> list[TopicPartition]:
        """The partitions named by every pending ``isr_change_`` znode, which are
        deleted once read (the controller's side of ``notify_isr_change``)."""
        changed: set[TopicPartition] = set()
        for listed in self._take_notifications(
            layout.ISR_CHANGE_NOTIFICATION, layout.decode_partition_list, "an ISR change", fence
        ):
            changed.update(listed)
        return sorted(changed)

    def _take_notifications(
        self,
        root: str,
        decode: Callable[[str, bytes], T],
        what: str,
        fence: ControllerEpoch | None,
    ) -> list[T]:
        """Every notification under ``root`` decoded (one that does not decode is
        logged and skipped), each deleted once read."""
        found: list[T] = []
        for child in sorted(self.children(root)):
            path = f"{root}/{child}"
            data = self.get(path)
            if data is not None:
                try:
                    found.append(decode(path, data[0]))
                except layout.LayoutError as exc:
                    logger.warning("ignoring %s notification: %s", what, exc)
            self.delete_recursive(path, fence)
        return found

    def notify_log_dir_event(self, broker_id: int) -> None:
        """A sequential ``log_dir_event_`` znode: a log dir of ``broker_id`` went
        offline (Kafka's LogDirEventNotification)."""
        data = layout.encode_log_dir_event(broker_id)
        self._call(
            self._kazoo.create, layout.LOG_DIR_EVENT_PREFIX, data, sequence=True, makepath=True
        )

    def take_log_dir_events(self, fence: ControllerEpoch | None = None) -> list[int]:
        """The brokers named by every pending ``log_dir_event_`` znode, which are
        deleted once read (the controller's side of ``notify_log_dir_event``)."""
        return sorted(set(self._take_notifications(
            layout.LOG_DIR_EVENT_NOTIFICATION, layout.decode_log_dir_event, "a log dir event",
            fence,
        )))  # fmt: skip

    def notify_isr_change(self, partitions: Sequence[TopicPartition]) -> None:
        """A sequential ``isr_change_`` znode listing partitions whose ISR changed."""
        data = layout.encode_partition_list(partitions)
        self._call(self._kazoo.create, layout.ISR_CHANGE_PREFIX, data, sequence=True, makepath=True)

    # -- /admin/preferred_replica_election ------------------------------------------

    def request_preferred_election(self, partitions: Sequence[TopicPartition]) -> bool:
        """Ask the controller to hand these partitions to their preferred replicas;
        False while an earlier request is still pending."""
        return self._create(
            layout.PREFERRED_REPLICA_ELECTION, layout.encode_partition_list(partitions)
        )

    def take_preferred_election(
        self, fence: ControllerEpoch | None = None
    ) -> list[TopicPartition] | None:
        """The pending request's partitions (the znode is then deleted), or None."""
        path = layout.PREFERRED_REPLICA_ELECTION
        found = self.get(path)
        if found is None:
            return None
        self.delete_recursive(path, fence)
        try:
            return layout.decode_partition_list(path, found[0])
        except layout.LayoutError as exc:
            logger.warning("ignoring a preferred replica election request: %s", exc)
            return []

    # -- /admin/reassign_partitions -------------------------------------------------

    def request_reassignments(self, targets: Mapping[TopicPartition, Sequence[int]]) -> bool:
        """Ask the controller to move partitions; False while a reassignment runs."""
        return self._create(layout.REASSIGN_PARTITIONS, layout.encode_reassignments(targets))

    def get_reassignments(self) -> tuple[dict[TopicPartition, tuple[int, ...]], int] | None:
        """The reassignments still running (partition → target replicas) and the
        znode version, or None when none is."""
        found = self.get(layout.REASSIGN_PARTITIONS)
        if found is None:
            return None
        try:
            return layout.decode_reassignments(found[0]), found[1]
        except layout.LayoutError as exc:
            logger.warning("ignoring a partition reassignment request: %s", exc)
            return {}, found[1]

    def finish_reassignments(
        self, done: Sequence[TopicPartition], fence: ControllerEpoch | None = None
    ) -> None:
        """Drop finished partitions from the request; delete it once empty."""
        while True:
            found = self.get_reassignments()
            if found is None:
                return
            targets, version = found
            remaining = {k: v for k, v in targets.items() if k not in done}
            if not remaining:
                self.delete_recursive(layout.REASSIGN_PARTITIONS, fence)
                return
            try:
                self._set_versioned(
                    layout.REASSIGN_PARTITIONS,
                    layout.encode_reassignments(remaining),
                    version,
                    fence,
                )
                return
            except StaleVersionError:
                continue  # rewritten meanwhile: read again

    # -- /config/topics and /config/changes -----------------------------------------

    def set_topic_config(
        self, topic: str, config: Mapping[str, str], expected_version: int | None = None
    ) -> None:
        """Replace a topic's overrides, then leave a change notification for brokers.

        With ``expected_version`` (from ``get_topic_config_versioned``; -1 for
        "no znode yet") the write happens only if nobody wrote in between, else
        StaleVersionError: a read-modify-write never loses a concurrent one."""
        path = layout.topic_config_path(topic)
        data = layout.encode_topic_config(config)
        if expected_version is None:
            if not self._create(path, data):
                self._call(self._kazoo.set, path, data)
        elif expected_version < 0:
            if not self._create(path, data):
                raise StaleVersionError(f"{path} was created since it was read")
        else:
            self._set_versioned(path, data, expected_version)
        self._notify_config_change(f"topics/{topic}")

    def config_changes(self, after: int) -> list[tuple[int, str]]:
        """(sequence number, entity path such as ``topics/<t>``) of each change
        notification numbered above ``after``, oldest first."""
        changes = []
        for child in self.children(layout.CONFIG_CHANGES):
            number = layout.config_change_number(child)
            if number is None or number <= after:
                continue
            found = self.get(f"{layout.CONFIG_CHANGES}/{child}")
            if found is None:
                continue
            try:
                changes.append((number, layout.decode_config_change(child, found[0])))
            except layout.LayoutError as exc:
                logger.warning("ignoring a config change notification: %s", exc)
                changes.append((number, ""))
        return sorted(changes)

    def purge_notifications(self, root: str, prefix: str, max_age_ms: int) -> int:
        """Delete the children of ``root`` named ``<prefix><seq>`` that were created
        more than ``max_age_ms`` ago (ZooKeeper's ctime against this host's clock), as
        Kafka's change listeners expire old notifications; how many went."""
        now_ms = time.time() * 1000
        purged = 0
        for child in self.children(root):
            if not child.startswith(prefix):
                continue
            path = f"{root}/{child}"
            stat = self._call(self._kazoo.exists, path)
            if stat is None or now_ms - stat.ctime <= max_age_ms:
                continue
            try:
                self._call(self._kazoo.delete, path)
                purged += 1
            except NoNodeError:
                pass  # another broker purged it first
        return purged

    def _notify(self, prefix: str, data: bytes) -> None:
        """A sequential change notification ``<prefix><seq>`` that brokers follow."""
        self._call(self._kazoo.create, prefix, data, sequence=True, makepath=True)

    def _notify_config_change(self, entity_path: str) -> None:
        self._notify(layout.CONFIG_CHANGE_PREFIX, layout.encode_config_change(entity_path))

    def _update_versioned(
        self, path: str, change: Callable[[bytes | None], bytes | None]
    ) -> tuple[bytes | None, bytes | None]:
        """Read-modify-write ``path`` conditioned on the version read: ``change`` gets
        the current data (None: no znode) and returns the new (None: delete the znode).
        Retried from the read while another writer wins; an unchanged result writes
        nothing.  (data before, data after) of the attempt that succeeded."""
        for _ in range(_CAS_ATTEMPTS):
            found = self.get(path)
            before = None if found is None else found[0]
            after = change(before)
            if after == before:
                return before, after
            try:
                if found is None:
                    assert after is not None
                    if not self._create(path, after):
                        continue  # created meanwhile: read it
                elif after is None:
                    self._call(self._kazoo.delete, path, version=found[1])
                else:
                    self._call(self._kazoo.set, path, after, version=found[1])
            except (BadVersionError, NoNodeError, NotEmptyError):
                continue  # written or deleted meanwhile: read again
            return before, after
        raise StaleVersionError(f"{path} kept changing under {_CAS_ATTEMPTS} attempts; try again")

    # -- /config/brokers: dynamic broker configs (zk/broker_configs.py, KIP-226) ------

    def get_broker_config_versioned(self, entity: str) -> tuple[dict[str, str], int]:
        """The dynamic configs of ``entity`` (a broker id or ``<default>``) and the
        znode's version (-1: no znode)."""
        found = self.get(broker_configs.broker_config_path(entity))
        if found is None:
            return {}, -1
        return broker_configs.decode_broker_config(entity, found[0]), found[1]

    def get_broker_config(self, entity: str) -> dict[str, str]:
        return self.get_broker_config_versioned(entity)[0]

    def set_broker_config(
        self, entity: str, config: Mapping[str, str], expected_version: int
    ) -> int:
        """Replace the dynamic configs of ``entity`` if nobody wrote since
        ``expected_version`` was read (-1: no znode then), else StaleVersionError;
        then the notification ``brokers/<entity>``.  The znode's new version.  An
        empty config stays as an empty znode, as Kafka leaves it."""
        path = broker_configs.broker_config_path(entity)
        data = broker_configs.encode_broker_config(config)
        if expected_version < 0:
            if not self._create(path, data):
                raise StaleVersionError(f"{path} was created since it was read")
            version = 0
        else:
            version = self._set_versioned(path, data, expected_version)
        self._notify_config_change(broker_configs.broker_entity_path(entity))
        return version

    # -- /config/users: SCRAM credentials (zk/users.py) -------------------------------

    def get_user_config_versioned(self, user: str) -> tuple[dict[str, str], int]:
        """A user's whole config (SCRAM credentials, and quotas Kafka may keep there)
        and the znode's version (-1: no znode)."""
        found = self.get(users.user_config_path(user))
        if found is None:
            return {}, -1
        return users.decode_user_config(user, found[0]), found[1]

    def get_user_scram_credentials(self, user: str) -> dict[str, ScramCredential]:
        """The user's SCRAM credentials by mechanism (none: an empty dict); a stored
        value that does not decode is ScramConfigError naming the mechanism."""
        return scram_credentials(self.get_user_config_versioned(user)[0])

    def scram_users(self) -> list[str]:
        """Every user whose config holds a SCRAM credential, sorted."""
        found = []
        for name in self.children(users.CONFIG_USERS):
            user = users.desanitize(name)
            try:
                config = self.get_user_config_versioned(user)[0]
            except users.UserLayoutError as exc:
                logger.warning("skipping user %r: %s", user, exc)
                continue
            if users.has_scram_credential(config):
                found.append(user)
        return sorted(found)

    def all_scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """user → mechanism → credential, for every user with one; a user whose
        znode does not decode is left out, with a warning."""
        out: dict[str, dict[str, ScramCredential]] = {}
        for user in self.scram_users():
            try:
                out[user] = self.get_user_scram_credentials(user)
            except (ScramConfigError, users.UserLayoutError) as exc:
                logger.warning("ignoring the SCRAM credentials of user %r: %s", user, exc)
        return out

    def alter_user_scram_credentials(
        self,
        user: str,
        upsertions: Mapping[str, ScramCredential] | None = None,
        deletions: Collection[str] = (),
    ) -> bool:
        """Remove the credentials of ``deletions`` and set ``upsertions`` (mechanism →
        credential) in one versioned write of the user's znode, created when absent and
        deleted once its config is empty; other entries are kept.  Then, if anything
        changed, the notification ``users/<user>``.  CredentialNotFoundError (nothing
        written) when the user lacks a mechanism of ``deletions``.  True if it changed."""
        path = users.user_config_path(user)
        wanted = dict(upsertions or {})

        def change(data: bytes | None) -> bytes | None:
            config = users.decode_user_config(user, data)
            missing = [m for m in deletions if m not in config]
            if missing:
                raise CredentialNotFoundError(user, missing)
            altered = users.altered_config(config, wanted, deletions)
            if data is not None and altered == config:
                return data
            return users.encode_user_config(altered) if altered else None

        before, after = self._update_versioned(path, change)
        if before == after:
            return False
        self._notify_config_change(users.user_entity_path(user))
        return True

    def upsert_scram_credential(
        self, user: str, mechanism: str, credential: ScramCredential
    ) -> bool:
        """Set one of the user's credentials (see ``alter_user_scram_credentials``)."""
        return self.alter_user_scram_credentials(user, {mechanism: credential})

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """Remove one of the user's credentials; CredentialNotFoundError when absent."""
        return self.alter_user_scram_credentials(user, deletions=[mechanism])

    # -- ACLs: /kafka-acl, /kafka-acl-extended and their changes (zk/acls.py) -----------

    def acls_of(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        """The pattern's entries and its znode's version (-1: no znode, no entries)."""
        path = acls.acl_path(pattern)
        found = self.get(path)
        if found is None:
            return frozenset(), -1
        return acls.decode_acls(found[0], path), found[1]

    def update_acls(
        self,
        pattern: ResourcePattern,
        change: Callable[[frozenset[AccessControlEntry]], Iterable[AccessControlEntry]],
    ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
        """Replace the pattern's entries by ``change(current entries)``, conditioned on
        the znode's version and retried while another writer wins (``change`` may run
        more than once); the znode is created when absent and deleted once empty.  If
        the entries changed, a change notification follows (``acl_changes_<seq>`` under
        the pattern type's change tree).  (entries before, entries after)."""
        path = acls.acl_path(pattern)
        seen: dict[str, frozenset[AccessControlEntry]] = {}

        def apply(data: bytes | None) -> bytes | None:
            current = acls.decode_acls(data, path)
            new = frozenset(change(current))
            seen["before"], seen["after"] = current, new
            if new == current:
                return data
            return acls.encode_acls(new) if new else None

        before, after = self._update_versioned(path, apply)
        if before != after:
            self._notify(acls.change_path_prefix(pattern.pattern_type), acls.encode_change(pattern))
        return seen["before"], seen["after"]

    def add_acls(
        self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]
    ) -> frozenset[AccessControlEntry]:
        """Add entries to the pattern's ACLs (those present stay); its entries after."""
        added = frozenset(entries)
        return self.update_acls(pattern, lambda current: current | added)[1]

    def remove_acls(
        self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]
    ) -> frozenset[AccessControlEntry]:
        """Remove entries from the pattern's ACLs; those that were there and went."""
        removed = frozenset(entries)
        before, after = self.update_acls(pattern, lambda current: current - removed)
        return before - after

    def all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern with ACLs (both trees, every resource type) and its entries;
        a znode that does not decode is left out, with a warning."""
        out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for resource_type in acls.RESOURCE_TYPES:
                parent = acls.acl_type_path(pattern_type, resource_type)
                for name in self.children(parent):
                    path = f"{parent}/{name}"
                    found = self.get(path)
                    if found is None:
                        continue
                    try:
                        entries = acls.decode_acls(found[0], path)
                        pattern = acls.pattern_from_path(path)
                    except acls.AclLayoutError as exc:
                        logger.warning("ignoring ACL znode %s: %s", path, exc)
                        continue
                    if entries:
                        out[pattern] = entries
        return out

    def acl_changes(
        self, pattern_type: PatternType, after: int
    ) -> list[tuple[int, ResourcePattern | None]]:
        """(sequence number, pattern named) of each ACL change notification of the
        pattern type's tree numbered above ``after``, oldest first; None for one that
        does not decode (logged)."""
        root = acls.change_root(pattern_type)
        out: list[tuple[int, ResourcePattern | None]] = []
        for child in self.children(root):
            try:
                number = acls.change_sequence(child)
            except acls.AclLayoutError:
                continue
            if number <= after:
                continue
            path = f"{root}/{child}"
            found = self.get(path)
            if found is None:
                continue  # purged meanwhile
            try:
                out.append((number, acls.decode_change(path, found[0])))
            except acls.AclLayoutError as exc:
                logger.warning("ignoring an ACL change notification: %s", exc)
                out.append((number, None))
        return sorted(out, key=lambda change: change[0])

    # -- /consumers: the ZooKeeper group membership of the group consumer -------------

    def register_consumer(
        self, group: str, consumer_id: str, subscription: Mapping[str, int], pattern: str
    ) -> None:
        """The consumer's ephemeral registration (replaced if left from a lost session)."""
        path = layout.consumer_id_path(group, consumer_id)
        data = layout.encode_consumer_registration(subscription, pattern)
        if not self._create(path, data, ephemeral=True):
            self.delete_recursive(path)
            self._create(path, data, ephemeral=True)

    def consumer_registrations(self, group: str) -> dict[str, tuple[dict[str, int], str]]:
        """consumer id → (subscription, pattern) of every live member of ``group``."""
        out = {}
        for consumer_id in self.children(layout.consumer_ids_path(group)):
            path = layout.consumer_id_path(group, consumer_id)
            found = self.get(path)
            if found is not None:
                out[consumer_id] = layout.decode_consumer_registration(path, found[0])
        return out

    def consumer_groups(self) -> list[str]:
        return sorted(self.children(layout.CONSUMERS))

    def claim_partition(self, group: str, topic: str, partition: int, owner: str) -> bool:
        """Take ownership (an ephemeral znode holding ``owner``); False when another
        consumer thread still owns it (ours already counts as claimed)."""
        path = layout.consumer_owner_path(group, topic, partition)
        if self._create(path, owner.encode("utf-8"), ephemeral=True):
            return True
        found = self.get(path)
        return found is not None and found[0].decode("utf-8") == owner

    def release_partition(self, group: str, topic: str, partition: int, owner: str) -> None:
        """Give up ownership, if ``owner`` holds it."""
        path = layout.consumer_owner_path(group, topic, partition)
        found = self.get(path)
        if found is not None and found[0].decode("utf-8") == owner:
            try:
                self._call(self._kazoo.delete, path, version=found[1])
            except (NoNodeError, BadVersionError):
                pass

    def partition_owners(self, group: str) -> dict[TopicPartition, str]:
        """(topic, partition) → owning consumer thread id, for the whole group."""
        out: dict[TopicPartition, str] = {}
        for topic in self.children(f"{layout.CONSUMERS}/{group}/owners"):
            for child in self.children(layout.consumer_owners_path(group, topic)):
                found = self.get(f"{layout.consumer_owners_path(group, topic)}/{child}")
                if found is not None and child.isdigit():
                    out[TopicPartition(topic, int(child))] = found[0].decode("utf-8")
        return out

    # -- /latest_producer_id_block (see producer_ids.py) --------------------------

    def get_producer_id_block(self) -> tuple[bytes, int] | None:
        """(data, version) of ``/latest_producer_id_block``; None when absent."""
        return self.get(layout.LATEST_PRODUCER_ID_BLOCK)

    def create_producer_id_block(self, data: bytes) -> bool:
        """Create ``/latest_producer_id_block``; False when it already exists."""
        return self._create(layout.LATEST_PRODUCER_ID_BLOCK, data)

    def set_producer_id_block(self, data: bytes, expected_version: int) -> int:
        """Conditional write of ``/latest_producer_id_block``; StaleVersionError
        when another broker wrote it since ``expected_version`` was read."""
        return self._set_versioned(layout.LATEST_PRODUCER_ID_BLOCK, data, expected_version)
