"""Kafka's error codes: one catalogue for the broker, the clients and the CLI.

Every per-partition answer carries one of these names (``annal.v1.ErrorCode``
holds the same names and numbers, which a test keeps in step).  What a
client does with one follows from two flags, as in Kafka's ``Errors``:

* ``retriable``: the same request may succeed later (a leader moving, a
  coordinator loading, an ISR that is short for now);
* ``invalid_metadata``: the client's view of the cluster is stale, so it
  refreshes its metadata (or finds its coordinator again) before retrying.

Code compares codes, never names: ``result.error is errors.NONE``.  Every
error annal raises is an ``AnnalError`` carrying its code (the storage
engine's, the broker's, the clients'), so a caller asks ``exc.code.retriable``
whatever raised it.

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


@dataclass(frozen=True, slots=True, order=True)
class ErrorCode:
    """One of Kafka's error codes and what a client should do about it."""

    name: str
    number: int
    retriable: bool = False
    invalid_metadata: bool = False

    def __str__(self) -> str:
        return self.name


NONE = ErrorCode("NONE", 0)
UNKNOWN_SERVER_ERROR = ErrorCode("UNKNOWN_SERVER_ERROR", -1)
OFFSET_OUT_OF_RANGE = ErrorCode("OFFSET_OUT_OF_RANGE", 1)
CORRUPT_MESSAGE = ErrorCode("CORRUPT_MESSAGE", 2)
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode("UNKNOWN_TOPIC_OR_PARTITION", 3, True, True)
LEADER_NOT_AVAILABLE = ErrorCode("LEADER_NOT_AVAILABLE", 5, True, True)
NOT_LEADER_OR_FOLLOWER = ErrorCode("NOT_LEADER_OR_FOLLOWER", 6, True, True)
REQUEST_TIMED_OUT = ErrorCode("REQUEST_TIMED_OUT", 7, True)
BROKER_NOT_AVAILABLE = ErrorCode("BROKER_NOT_AVAILABLE", 8, True, True)
REPLICA_NOT_AVAILABLE = ErrorCode("REPLICA_NOT_AVAILABLE", 9, True, True)
MESSAGE_TOO_LARGE = ErrorCode("MESSAGE_TOO_LARGE", 10)
STALE_CONTROLLER_EPOCH = ErrorCode("STALE_CONTROLLER_EPOCH", 11)
OFFSET_METADATA_TOO_LARGE = ErrorCode("OFFSET_METADATA_TOO_LARGE", 12)
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode("COORDINATOR_LOAD_IN_PROGRESS", 14, True)
COORDINATOR_NOT_AVAILABLE = ErrorCode("COORDINATOR_NOT_AVAILABLE", 15, True, True)
NOT_COORDINATOR = ErrorCode("NOT_COORDINATOR", 16, True, True)
INVALID_TOPIC_EXCEPTION = ErrorCode("INVALID_TOPIC_EXCEPTION", 17)
NOT_ENOUGH_REPLICAS = ErrorCode("NOT_ENOUGH_REPLICAS", 19, True)
NOT_ENOUGH_REPLICAS_AFTER_APPEND = ErrorCode("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True)
INVALID_REQUIRED_ACKS = ErrorCode("INVALID_REQUIRED_ACKS", 21)
INVALID_GROUP_ID = ErrorCode("INVALID_GROUP_ID", 24)
INVALID_TIMESTAMP = ErrorCode("INVALID_TIMESTAMP", 32)
TOPIC_ALREADY_EXISTS = ErrorCode("TOPIC_ALREADY_EXISTS", 36)
INVALID_PARTITIONS = ErrorCode("INVALID_PARTITIONS", 37)
INVALID_REPLICATION_FACTOR = ErrorCode("INVALID_REPLICATION_FACTOR", 38)
INVALID_REPLICA_ASSIGNMENT = ErrorCode("INVALID_REPLICA_ASSIGNMENT", 39)
INVALID_CONFIG = ErrorCode("INVALID_CONFIG", 40)
NOT_CONTROLLER = ErrorCode("NOT_CONTROLLER", 41, True, True)
INVALID_REQUEST = ErrorCode("INVALID_REQUEST", 42)
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode("OUT_OF_ORDER_SEQUENCE_NUMBER", 45)
INVALID_PRODUCER_EPOCH = ErrorCode("INVALID_PRODUCER_EPOCH", 47)
INVALID_TXN_STATE = ErrorCode("INVALID_TXN_STATE", 48)
INVALID_PRODUCER_ID_MAPPING = ErrorCode("INVALID_PRODUCER_ID_MAPPING", 49)
INVALID_TRANSACTION_TIMEOUT = ErrorCode("INVALID_TRANSACTION_TIMEOUT", 50)
CONCURRENT_TRANSACTIONS = ErrorCode("CONCURRENT_TRANSACTIONS", 51, True)
TRANSACTION_COORDINATOR_FENCED = ErrorCode("TRANSACTION_COORDINATOR_FENCED", 52)
PRODUCER_FENCED = ErrorCode("PRODUCER_FENCED", 90)
TRANSACTIONAL_ID_NOT_FOUND = ErrorCode("TRANSACTIONAL_ID_NOT_FOUND", 105)
OPERATION_NOT_ATTEMPTED = ErrorCode("OPERATION_NOT_ATTEMPTED", 55)
KAFKA_STORAGE_ERROR = ErrorCode("KAFKA_STORAGE_ERROR", 56, True, True)
UNKNOWN_PRODUCER_ID = ErrorCode("UNKNOWN_PRODUCER_ID", 59)
REASSIGNMENT_IN_PROGRESS = ErrorCode("REASSIGNMENT_IN_PROGRESS", 60)
TOPIC_DELETION_DISABLED = ErrorCode("TOPIC_DELETION_DISABLED", 73)
FETCH_SESSION_ID_NOT_FOUND = ErrorCode("FETCH_SESSION_ID_NOT_FOUND", 70, True)
INVALID_FETCH_SESSION_EPOCH = ErrorCode("INVALID_FETCH_SESSION_EPOCH", 71, True)
FENCED_LEADER_EPOCH = ErrorCode("FENCED_LEADER_EPOCH", 74, True, True)
UNKNOWN_LEADER_EPOCH = ErrorCode("UNKNOWN_LEADER_EPOCH", 75, True)
PREFERRED_LEADER_NOT_AVAILABLE = ErrorCode("PREFERRED_LEADER_NOT_AVAILABLE", 80, True, True)
ELECTION_NOT_NEEDED = ErrorCode("ELECTION_NOT_NEEDED", 84)
INVALID_RECORD = ErrorCode("INVALID_RECORD", 87)
# the classic group membership protocol (Kafka's clients' consumer groups)
ILLEGAL_GENERATION = ErrorCode("ILLEGAL_GENERATION", 22)
INCONSISTENT_GROUP_PROTOCOL = ErrorCode("INCONSISTENT_GROUP_PROTOCOL", 23)
UNKNOWN_MEMBER_ID = ErrorCode("UNKNOWN_MEMBER_ID", 25)
INVALID_SESSION_TIMEOUT = ErrorCode("INVALID_SESSION_TIMEOUT", 26)
REBALANCE_IN_PROGRESS = ErrorCode("REBALANCE_IN_PROGRESS", 27)
NON_EMPTY_GROUP = ErrorCode("NON_EMPTY_GROUP", 68)
GROUP_ID_NOT_FOUND = ErrorCode("GROUP_ID_NOT_FOUND", 69)
MEMBER_ID_REQUIRED = ErrorCode("MEMBER_ID_REQUIRED", 79)
FENCED_INSTANCE_ID = ErrorCode("FENCED_INSTANCE_ID", 82)
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode("GROUP_SUBSCRIBED_TO_TOPIC", 86)
UNSTABLE_OFFSET_COMMIT = ErrorCode("UNSTABLE_OFFSET_COMMIT", 88, True)
# security (docs/security.md): authentication and authorization
TOPIC_AUTHORIZATION_FAILED = ErrorCode("TOPIC_AUTHORIZATION_FAILED", 29)
GROUP_AUTHORIZATION_FAILED = ErrorCode("GROUP_AUTHORIZATION_FAILED", 30)
CLUSTER_AUTHORIZATION_FAILED = ErrorCode("CLUSTER_AUTHORIZATION_FAILED", 31)
UNSUPPORTED_SASL_MECHANISM = ErrorCode("UNSUPPORTED_SASL_MECHANISM", 33)
ILLEGAL_SASL_STATE = ErrorCode("ILLEGAL_SASL_STATE", 34)
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 53)
SECURITY_DISABLED = ErrorCode("SECURITY_DISABLED", 54)
SASL_AUTHENTICATION_FAILED = ErrorCode("SASL_AUTHENTICATION_FAILED", 58)
DELEGATION_TOKEN_AUTHORIZATION_FAILED = ErrorCode("DELEGATION_TOKEN_AUTHORIZATION_FAILED", 65)
STALE_BROKER_EPOCH = ErrorCode("STALE_BROKER_EPOCH", 77)
# administration of ACLs and SCRAM credentials (KIP-554)
RESOURCE_NOT_FOUND = ErrorCode("RESOURCE_NOT_FOUND", 91)
DUPLICATE_RESOURCE = ErrorCode("DUPLICATE_RESOURCE", 92)
UNACCEPTABLE_CREDENTIAL = ErrorCode("UNACCEPTABLE_CREDENTIAL", 93)

# Not in annal's answers, only raised by clients.  BROKER_BUSY: the broker
# answered RESOURCE_EXHAUSTED (its request limits).  NETWORK_EXCEPTION:
# Kafka's code for a client that could not reach what it needed (here
# ZooKeeper, when brokers are found through it).
BROKER_BUSY = ErrorCode("BROKER_BUSY", -100, retriable=True)
NETWORK_EXCEPTION = ErrorCode("NETWORK_EXCEPTION", 13, True, True)

CODES: dict[str, ErrorCode] = {
    code.name: code for code in globals().copy().values() if isinstance(code, ErrorCode)
}
"""Every code by name."""

_BY_NUMBER = {c.number: c for c in CODES.values() if c not in (BROKER_BUSY, NETWORK_EXCEPTION)}


def lookup(name: str) -> ErrorCode:
    """The code named ``name``; an unknown name is a non-retriable server error."""
    return CODES.get(name) or ErrorCode(name, -1)


def from_wire(number: int) -> ErrorCode:
    """The code an answer carries (``annal.v1.ErrorCode``); an unknown number is
    a non-retriable server error that keeps its number."""
    return _BY_NUMBER.get(number) or ErrorCode(f"UNKNOWN_ERROR_{number}", number)


class AnnalError(Exception):
    """Base of the errors annal raises for a request or a record: ``code`` says
    what failed (and whether trying again can help), the text says where."""

    code: ErrorCode = UNKNOWN_SERVER_ERROR

    @property
    def retriable(self) -> bool:
        return self.code.retriable


_TRANSPORT = {
    "UNAVAILABLE": BROKER_NOT_AVAILABLE,
    "DEADLINE_EXCEEDED": REQUEST_TIMED_OUT,
    "RESOURCE_EXHAUSTED": BROKER_BUSY,
    "INVALID_ARGUMENT": INVALID_REQUEST,
    "CANCELLED": REQUEST_TIMED_OUT,
    "UNAUTHENTICATED": SASL_AUTHENTICATION_FAILED,  # a wrong password (grpc_auth.py)
}


def transport_error(exc: object) -> ErrorCode:
    """The Kafka code that stands for a failed gRPC call (UNKNOWN_SERVER_ERROR
    for the rest), read by the status's name so this module needs no gRPC.
    A single request over the broker's ``socket.request.max.bytes`` is
    MESSAGE_TOO_LARGE, not a busy broker: sending it again cannot help."""
    status = exc.code() if callable(getattr(exc, "code", None)) else None  # type: ignore[attr-defined]
    name = getattr(status, "name", "")
    if name == "RESOURCE_EXHAUSTED":
        details = exc.details() if callable(getattr(exc, "details", None)) else ""  # type: ignore[attr-defined]
        if "larger than max" in (details or ""):
            return MESSAGE_TOO_LARGE
    return _TRANSPORT.get(name, UNKNOWN_SERVER_ERROR)
