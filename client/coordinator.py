"""Which broker coordinates a key: Kafka's FindCoordinator, asked of any
bootstrap server.

``GROUP_KEY`` (0) names a consumer group's coordinator (the leader of its
``__consumer_offsets`` partition); ``TRANSACTION_KEY`` (1) a transactional
id's transaction coordinator (the leader of its ``__transaction_state``
partition, KIP-98; docs/transactions.md).  The first lookup of either kind
creates its internal topic, so the answer is COORDINATOR_NOT_AVAILABLE
(retriable) until that topic has leaders; callers retry with their own
policy (``client/retry.py``).

Thread safety: as the ``ClusterConnection`` it is given.
"""

from __future__ import annotations

from annal.client.cluster import ClientError, ClusterConnection
from annal.v1 import annal_pb2 as pb

from annal import errors

GROUP_KEY = 0
TRANSACTION_KEY = 1
_KINDS = {GROUP_KEY: "group", TRANSACTION_KEY: "transactional id"}


def find_coordinator(cluster: ClusterConnection, key: str, key_type: int) -> str:
    """The endpoint (``host:port``) of the broker coordinating ``key``; a
    ClientError with the answer's error otherwise (BROKER_NOT_AVAILABLE when
    no bootstrap server answered)."""
    answer = cluster.call_any(
        "FindCoordinator", pb.FindCoordinatorRequest(group=key, key_type=key_type)
    )
    error = errors.from_wire(answer.error)
    if error is not errors.NONE:
        kind = _KINDS.get(key_type, f"key type {key_type}")
        raise ClientError(
            error, f"coordinator of {kind} {key!r}: {answer.error_message or error.name}"
        )
    return f"{answer.coordinator.host}:{answer.coordinator.port}"
