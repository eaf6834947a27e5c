"""Kafka's cluster APIs: Metadata and DescribeCluster, from the metadata cache.

Metadata is annal's Metadata (``AdminManager.metadata``: the same cache, the
same auto-creation) with each broker given by its Kafka endpoint, the
``PLAINTEXT://`` listener it registered in ``/brokers/ids/<id>``.  A broker
without one is left out of the broker list, as Kafka leaves out brokers that
lack the listener a client came in on.

Kafka's Metadata tells "all topics" (a null list) from "no topics" (an empty
one), and v0 asks for all with an empty list; annal's request says all with
an empty list, so "no topics" is answered here with the brokers only.

Topics asked for by id (v10+, KIP-516: a topic with a null name or a non-zero
id) are answered as Kafka's broker answers them.  annal keeps no topic ids,
so in v12 every id asked for is unknown: each is answered UNKNOWN_TOPIC_ID
(with its id and a null name), and, as in Kafka, the names in a request that
asks for any id are not looked up.  v10 and v11 carry the fields but do not
allow ids (Kafka's broker throws InvalidRequestException): every topic of
such a request is answered INVALID_REQUEST, as Kafka's error response for
Metadata has it (the name, "" for a null one, and the id, no partitions).

Authorization is ``AdminManager``'s: Metadata lists the topics the caller may
Describe (and refuses the others it names), and, when asked (v8+, KIP-430),
each topic's operations the caller may do.  DescribeCluster is refused to no
one, as on Kafka's brokers; the cluster's authorized operations it (and
Metadata v8-v10) may be asked for are reported only to a caller that may
Describe the cluster (0 to others).

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from annal.broker.admin_manager import AdminManager
from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.metadata_cache import MetadataCache
from annal.broker.requests import admin_types as at
from annal.kafkaproto.wire import Request
from kio.schema.errors import ErrorCode as KioErrorCode

from annal import errors

METADATA, DESCRIBE_CLUSTER = 3, 60
NO_TOPIC_ID = uuid.UUID(int=0)  # annal's topics have names only (Kafka's "zero" id)
FIRST_TOPIC_ID_VERSION = 12  # Metadata asks for topics by id from v12 (KIP-516)
UNKNOWN_TOPIC_ID = KioErrorCode.unknown_topic_id.value  # 100


class ClusterApis:
    """See the module docstring."""

    def __init__(
        self, admin: AdminManager, metadata: MetadataCache, cluster_id: Callable[[], str | None]
    ) -> None:
        self._admin = admin
        self._metadata = metadata
        self._cluster_id = cluster_id

    def register(self, apis: KafkaApis) -> None:
        apis.add(METADATA, "Metadata", (0, 12), self.metadata)
        apis.add(DESCRIBE_CLUSTER, "DescribeCluster", (0, 1), self.describe_cluster)

    def _brokers(self, request: Request) -> list[dict[str, Any]]:
        """The brokers' endpoints of the listener the request came in on (a broker
        without a listener of that name is left out, as Kafka leaves it out)."""
        cache = self._metadata.snapshot()
        found = []
        for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id):
            endpoint = b.kafka_endpoint_for(request.session.listener or "PLAINTEXT")
            if endpoint is not None:
                found.append(
                    {"node_id": b.broker_id, "broker_id": b.broker_id, "host": endpoint.host,
                     "port": endpoint.port, "rack": b.rack}
                )  # fmt: skip
        return found

    async def metadata(self, request: Request) -> Values:
        body = request.body
        names = body.topics
        everything = names is None or (request.head.api_version == 0 and not names)
        values: dict[str, Any] = {
            "throttle_time": 0,
            "brokers": self._brokers(request),
            "cluster_id": self._cluster_id(),
            "controller_id": self._metadata.snapshot().controller_id,
            "topics": [],
        }
        if not everything and not names:
            return values
        by_id: list[dict[str, Any]] = []
        if not everything:
            ids = [_topic_id(t) for t in names]
            if any(i != NO_TOPIC_ID for i in ids) or any(t.name is None for t in names):
                if request.head.api_version < FIRST_TOPIC_ID_VERSION:
                    return _refused_by_id(names)
                by_id, names = _by_id(names, ids)
                if not names:
                    values["topics"] = by_id
                    return values
        answer = await self._admin.metadata(
            at.MetadataRequest(
                topics=[] if everything else [t.name for t in names],
                allow_auto_topic_creation=getattr(body, "allow_auto_topic_creation", True),
            ),
            request.session,
        )
        values["topics"] = by_id + [
            {
                "error_code": t.error,
                "name": t.name,
                "topic_id": NO_TOPIC_ID,
                "is_internal": t.is_internal,
                "partitions": [
                    {
                        "error_code": p.error,
                        "partition_index": p.partition,
                        "leader_id": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replica_nodes": list(p.replicas),
                        "isr_nodes": list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                    }
                    for p in t.partitions
                ],
            }
            for t in answer.topics
        ]
        if getattr(body, "include_topic_authorized_operations", False):  # v8+ (KIP-430)
            for t in values["topics"]:
                if t["error_code"] == errors.NONE.number:
                    t["topic_authorized_operations"] = self._admin.topic_authorized_operations(
                        request.session, t["name"]
                    )
        if getattr(body, "include_cluster_authorized_operations", False):  # v8-v10
            values["cluster_authorized_operations"] = self._admin.cluster_authorized_operations(
                request.session
            )
        return values

    async def describe_cluster(self, request: Request) -> Values:
        values: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": errors.NONE.number,
            "endpoint_type": 1,  # brokers
            "cluster_id": self._cluster_id() or "",
            "controller_id": self._metadata.snapshot().controller_id,
            "brokers": self._brokers(request),
        }
        if request.body.include_cluster_authorized_operations:
            values["cluster_authorized_operations"] = self._admin.cluster_authorized_operations(
                request.session
            )
        return values


def _topic_id(topic: Any) -> uuid.UUID:
    """A requested topic's id (v10+); the zero id when it names none (kio reads the
    zero id as None)."""
    found = getattr(topic, "topic_id", None)
    return found if found is not None else NO_TOPIC_ID


def _by_id(names: Any, ids: list[uuid.UUID]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Metadata v12+ naming topics by id: the answers for the ids (each unknown, as
    annal keeps no ids), and the topics still to look up by name.  As in Kafka,
    when any id is given only the ids are looked up; otherwise the named topics
    are, and the nameless ones (no name, the zero id) are an unknown zero id."""
    given = list(dict.fromkeys(i for i in ids if i != NO_TOPIC_ID))
    left: list[Any] = []
    if not given:
        given = [NO_TOPIC_ID]
        left = [t for t in names if t.name is not None]
    unknown: list[dict[str, Any]] = [
        {"error_code": UNKNOWN_TOPIC_ID, "name": None, "topic_id": i, "is_internal": False,
         "partitions": []}
        for i in given
    ]  # fmt: skip
    return unknown, left


def _refused_by_id(names: Any) -> Values:
    """Kafka's answer to Metadata v10/v11 with a null name or a non-zero id: its
    handler throws InvalidRequestException ("Topic name can not be null for
    version 10"), and the error response gives every topic asked for
    INVALID_REQUEST, no brokers."""
    return {
        "throttle_time": 0,
        "topics": [
            {
                "error_code": errors.INVALID_REQUEST.number,
                "name": t.name or "",
                "topic_id": _topic_id(t),
                "is_internal": False,
                "partitions": [],
            }
            for t in names
        ],
    }
