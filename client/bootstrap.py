"""Bootstrap from ZooKeeper: the live brokers' endpoints as a bootstrap string.

ZooKeeper-era Kafka clients could find the cluster through ZooKeeper instead
of a broker list (the old producer's ``zookeeper.connect``, the console tools'
``--zookeeper``).  Every client here takes either ``bootstrap_servers`` or
``zookeeper_connect`` (``host:port[,host:port][/chroot]``, the brokers' own
``zookeeper.connect``); ``resolve_bootstrap`` turns either into the bootstrap
string a ``ClusterConnection`` takes.

With ZooKeeper, ``servers_from_zookeeper`` opens one short session (creating
nothing: not even a missing chroot), lists ``/brokers/ids``, reads each live
broker's ephemeral registration (docs/architecture.md: ``{"host":..,"port":..,
"endpoints":["GRPC://host:port"],..}``), closes the session and returns
``"host:port,host:port"`` in broker id order.  ZooKeeper is read once: from then
on Metadata, leaders and refreshes come from the brokers, exactly as with
``bootstrap_servers``.

Errors:

- a malformed connect string (no host, a host without a numeric port) is a
  ValueError naming it;
- ZooKeeper not answering within ``timeout_s`` (or failing mid-read) is
  ``ClientError(NETWORK_EXCEPTION)`` naming the connect string and timeout;
- no broker registered (an empty ``/brokers/ids``, or a chroot that does not
  exist) is ``ClientError(BROKER_NOT_AVAILABLE)`` naming the chroot used;
- a registration that is not valid JSON is skipped with a warning, so one bad
  znode does not hide the other brokers.

kazoo is imported only when ZooKeeper is used, so clients that bootstrap from
brokers do not pay for it.  Thread safety: no shared state; each call has its
own session.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from annal.client.cluster import ClientError

from annal import errors

if TYPE_CHECKING:
    from annal.zk.client import ZkClient

logger = logging.getLogger(__name__)

DEFAULT_ZOOKEEPER_TIMEOUT_S = 15.0


def parse_zookeeper_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/annal"`` → (``"h1:2181,h2:2181"``, ``"/annal"``);
    ValueError naming a malformed part."""
    from annal.zk.client import ZkError, split_connect_string

    try:
        hosts, chroot = split_connect_string(connect.strip())
    except ZkError as exc:
        raise ValueError(str(exc)) from None
    for server in hosts.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(
                f"ZooKeeper server {server!r} in {connect!r} is not host:port "
                "(expected host:port[,host:port][/chroot])"
            )
    if "//" in chroot:
        raise ValueError(f"chroot {chroot!r} in {connect!r} has an empty path element")
    return hosts, chroot


def servers_from_zookeeper(connect: str, timeout_s: float = DEFAULT_ZOOKEEPER_TIMEOUT_S) -> str:
    """The endpoints of the brokers registered under ``connect``, as ``"h:p,h:p"``.

    See the module docstring for what is read and for the errors.
    """
    from annal.zk.client import NoChrootError, ZkClient, ZkError
    from annal.zk.layout import BROKER_IDS

    hosts, chroot = parse_zookeeper_connect(connect)
    where = f"chroot {chroot}" if chroot else "no chroot"
    zk = ZkClient(connect.strip(), timeout_s=timeout_s, create_chroot=False)
    try:
        zk.start()
    except NoChrootError:
        raise ClientError(
            errors.BROKER_NOT_AVAILABLE,
            f"no brokers are registered in ZooKeeper at {hosts}: {where} does not exist "
            "(use the chroot of the brokers' zookeeper.connect)",
        ) from None
    except ZkError as exc:
        cause = exc.__cause__ or exc
        raise ClientError(
            errors.NETWORK_EXCEPTION,
            f"cannot reach ZooKeeper at {connect} within {timeout_s:g} s ({cause})",
        ) from exc
    try:
        endpoints = _registered_endpoints(zk)
    except ZkError as exc:
        raise ClientError(
            errors.NETWORK_EXCEPTION,
            f"reading {BROKER_IDS} from ZooKeeper at {connect} failed: {exc!r}",
        ) from exc
    finally:
        zk.stop()
    if not endpoints:
        raise ClientError(
            errors.BROKER_NOT_AVAILABLE,
            f"no brokers are registered in ZooKeeper at {hosts} ({where}: {BROKER_IDS} "
            "is empty); are the brokers up, and is this their zookeeper.connect chroot?",
        )
    return ",".join(endpoints)


def _registered_endpoints(zk: ZkClient) -> list[str]:
    """Endpoints of the registrations under ``/brokers/ids``, in broker id order."""
    from annal.zk.layout import BROKER_IDS

    found: list[tuple[int, str]] = []
    for child in zk.children(BROKER_IDS):
        try:
            registration = zk.get_broker(int(child))
        except (ValueError, TypeError) as exc:  # a non-numeric id; not JSON; no host
            logger.warning("ignoring broker registration %r under %s: %s", child, BROKER_IDS, exc)
            continue
        if registration is not None:  # None: the broker went away since the listing
            found.append((registration.broker_id, registration.endpoint))
    return [endpoint for _, endpoint in sorted(found)]


def resolve_bootstrap(
    bootstrap_servers: str | None,
    zookeeper_connect: str | None,
    timeout_s: float = DEFAULT_ZOOKEEPER_TIMEOUT_S,
) -> str:
    """The bootstrap string of a client given exactly one of ``bootstrap_servers``
    and ``zookeeper_connect``; both or neither is a ValueError naming the two."""
    if zookeeper_connect is None:
        if bootstrap_servers is None:
            raise ValueError("give bootstrap_servers or zookeeper_connect (neither was given)")
        return bootstrap_servers
    if bootstrap_servers is not None:
        raise ValueError("give bootstrap_servers or zookeeper_connect, not both")
    return servers_from_zookeeper(zookeeper_connect, timeout_s)
