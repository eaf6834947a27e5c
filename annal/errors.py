"""Kafka's error codes: one catalogue for the broker, the clients and the CLI.

Every per-partition answer carries one of these names (``annal.v1.ErrorCode``
holds the same names and numbers, which a test keeps in step).  What a
client does with one follows from two flags, as in Kafka's ``Errors``:

* ``retriable``: the same request may succeed later (a leader moving, a
  coordinator loading, an ISR that is short for now);
* ``invalid_metadata``: the client's view of the cluster is stale, so it
  refreshes its metadata (or finds its coordinator again) before retrying.

Failures below Kafka's codes (the transport) are translated at one place,
``transport_error``: a broker that cannot be reached or timed out is
BROKER_NOT_AVAILABLE or REQUEST_TIMED_OUT, a broker past its request limits
(RESOURCE_EXHAUSTED) is BROKER_BUSY (annal's name; retriable), a request
the broker refused as malformed is INVALID_REQUEST.

Where annal differs from Kafka's flags it says why below: CORRUPT_MESSAGE
is not retriable (Kafka retries it in case the network corrupted the batch;
gRPC over TCP is checksummed, so a batch the leader refused as corrupt is
refused again), BROKER_NOT_AVAILABLE is (a broker restarting comes back).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One of Kafka's error codes and what a client should do about it."""

    name: str
    number: int
    retriable: bool = False
    invalid_metadata: bool = False


_CODES = (
    ErrorCode("NONE", 0),
    ErrorCode("UNKNOWN_SERVER_ERROR", -1),
    ErrorCode("OFFSET_OUT_OF_RANGE", 1),
    ErrorCode("CORRUPT_MESSAGE", 2),
    ErrorCode("UNKNOWN_TOPIC_OR_PARTITION", 3, retriable=True, invalid_metadata=True),
    ErrorCode("LEADER_NOT_AVAILABLE", 5, retriable=True, invalid_metadata=True),
    ErrorCode("NOT_LEADER_OR_FOLLOWER", 6, retriable=True, invalid_metadata=True),
    ErrorCode("REQUEST_TIMED_OUT", 7, retriable=True),
    ErrorCode("BROKER_NOT_AVAILABLE", 8, retriable=True, invalid_metadata=True),
    ErrorCode("REPLICA_NOT_AVAILABLE", 9, retriable=True, invalid_metadata=True),
    ErrorCode("MESSAGE_TOO_LARGE", 10),
    ErrorCode("STALE_CONTROLLER_EPOCH", 11),
    ErrorCode("OFFSET_METADATA_TOO_LARGE", 12),
    ErrorCode("COORDINATOR_LOAD_IN_PROGRESS", 14, retriable=True),
    ErrorCode("COORDINATOR_NOT_AVAILABLE", 15, retriable=True, invalid_metadata=True),
    ErrorCode("NOT_COORDINATOR", 16, retriable=True, invalid_metadata=True),
    ErrorCode("INVALID_TOPIC_EXCEPTION", 17),
    ErrorCode("NOT_ENOUGH_REPLICAS", 19, retriable=True),
    ErrorCode("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, retriable=True),
    ErrorCode("INVALID_REQUIRED_ACKS", 21),
    ErrorCode("INVALID_GROUP_ID", 24),
    ErrorCode("INVALID_TIMESTAMP", 32),
    ErrorCode("TOPIC_ALREADY_EXISTS", 36),
    ErrorCode("INVALID_PARTITIONS", 37),
    ErrorCode("INVALID_REPLICATION_FACTOR", 38),
    ErrorCode("INVALID_REPLICA_ASSIGNMENT", 39),
    ErrorCode("INVALID_CONFIG", 40),
    ErrorCode("NOT_CONTROLLER", 41, retriable=True, invalid_metadata=True),
    ErrorCode("INVALID_REQUEST", 42),
    ErrorCode("INVALID_PRODUCER_ID_MAPPING", 49),
    ErrorCode("KAFKA_STORAGE_ERROR", 56, retriable=True, invalid_metadata=True),
    ErrorCode("REASSIGNMENT_IN_PROGRESS", 60),
    ErrorCode("FENCED_LEADER_EPOCH", 74, retriable=True, invalid_metadata=True),
    ErrorCode("UNKNOWN_LEADER_EPOCH", 75, retriable=True),
    ErrorCode("PREFERRED_LEADER_NOT_AVAILABLE", 80, retriable=True, invalid_metadata=True),
    ErrorCode("ELECTION_NOT_NEEDED", 84),
    ErrorCode("INVALID_RECORD", 87),
)

# Not on the wire: the broker answered RESOURCE_EXHAUSTED (its request limits).
BROKER_BUSY = ErrorCode("BROKER_BUSY", -100, retriable=True)

CODES: dict[str, ErrorCode] = {c.name: c for c in (*_CODES, BROKER_BUSY)}
"""Every code by name."""


def lookup(name: str) -> ErrorCode:
    """The code named ``name``; an unknown name is a non-retriable server error."""
    return CODES.get(name) or ErrorCode(name, -1)


def is_retriable(name: str) -> bool:
    return lookup(name).retriable


def needs_metadata_refresh(name: str) -> bool:
    return lookup(name).invalid_metadata


_TRANSPORT = {
    grpc.StatusCode.UNAVAILABLE: "BROKER_NOT_AVAILABLE",
    grpc.StatusCode.DEADLINE_EXCEEDED: "REQUEST_TIMED_OUT",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "BROKER_BUSY",
    grpc.StatusCode.INVALID_ARGUMENT: "INVALID_REQUEST",
    grpc.StatusCode.CANCELLED: "REQUEST_TIMED_OUT",
}


def transport_error(exc: grpc.RpcError) -> ErrorCode:
    """The Kafka code that stands for a failed call (UNKNOWN_SERVER_ERROR for the rest).
    A single request over the broker's ``socket.request.max.bytes`` is
    MESSAGE_TOO_LARGE, not a busy broker: sending it again cannot help."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        details = exc.details() if callable(getattr(exc, "details", None)) else ""
        if "larger than max" in (details or ""):
            return lookup("MESSAGE_TOO_LARGE")
    return lookup(_TRANSPORT.get(code, "UNKNOWN_SERVER_ERROR"))
