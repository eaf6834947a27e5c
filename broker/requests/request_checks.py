"""What a request may hold: the broker's checks at its boundary, as pure functions.

Every rpc handler runs the fields it was sent through these before it touches
a log, ZooKeeper or the group coordinator, so no value from the wire reaches
the internals unchecked.  They take plain values (never protobuf) and do no
I/O: the caller passes what they depend on (the live brokers, the broker's
defaults).  The gRPC service uses them today; the Kafka-protocol listener is
meant to share them.

Two kinds of answer, as Kafka gives them:

* A field of one topic or partition out of range is a ``Refusal``: Kafka's
  error name and a message, answered for that topic or partition alone while
  the rest of the request goes on.  Functions return ``None`` when the value
  is fine.
* A field of the whole request out of range (a negative timeout, a replica
  id that is no broker id) raises ``InvalidRequest`` naming the field and
  the value; gRPC answers it with INVALID_ARGUMENT (``broker/requests/rpc_guard.py``).

Kafka's conventions: -1 asks for the broker's default (partition count,
replication factor) or means "unknown" (leader epochs, a consumer's replica
id); a negative partition index is UNKNOWN_TOPIC_OR_PARTITION, a negative
fetch offset OFFSET_OUT_OF_RANGE.

Thread safety: stateless, so any thread may call anything here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from annal.broker.groups.coordinator import OFFSETS_TOPIC
from annal.broker.transactions.log_schema import TRANSACTION_STATE_TOPIC
from annal.controller.election import assign_replicas
from annal.storage.config import LogConfig
from annal.zk.layout import LayoutError, check_topic_name

from annal import errors
from annal.errors import ErrorCode

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# -1: the broker's default (num.partitions, default.replication.factor), as in Kafka
USE_DEFAULT = -1
# ListOffsets: the log start and the high watermark; other timestamps are ms
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
# A topic's assignment is one znode (/brokers/topics/<t>), which must stay
# well inside ZooKeeper's default 1 MB jute.maxbuffer: 10,000 partitions
# with five four-digit broker ids each take about 350 kB.
MAX_PARTITIONS = 10_000
# Group ids travel as Kafka strings (int16 length) in __consumer_offsets keys.
MAX_GROUP_ID_BYTES = 32_767
# Clients may not write to these (Kafka: "Cannot append to internal topic").
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

# Kafka's types and lower bounds for the numeric topic configs; storage's
# LogConfig parses the values, these add the ranges Kafka declares.
_INT_CONFIGS = {
    "segment.bytes": 14,
    "segment.index.bytes": 12,
    "index.interval.bytes": 0,
    "max.message.bytes": 0,
    "min.insync.replicas": 1,
}
_LONG_CONFIGS = {
    "segment.ms": 1,
    "retention.ms": -1,
    "retention.bytes": -1,
    "file.delete.delay.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 1,
    "delete.retention.ms": 0,
    "flush.messages": 0,
    "flush.ms": 0,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One topic's or partition's answer instead of doing the work."""

    error: ErrorCode
    message: str


class InvalidRequest(ValueError):
    """A request-level field out of range; the message names the field and value."""

    def __init__(self, field: str, value: object, expected: str = "", *, reason: str = "") -> None:
        # "timeout_ms must be >= 0, not -1"; with a reason instead of what is expected,
        # "partition_states[0] 'a/b': illegal topic name ..."
        if reason:
            super().__init__(f"{field} {shown(value)}: {reason}")
        else:
            super().__init__(f"{field} must be {expected}, not {shown(value)}")
        self.field = field
        self.value = value


def shown(value: object, limit: int = 60) -> str:
    """``value`` for a message: long strings cut, so an answer never echoes megabytes."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    return repr(value)


# -- request-level fields -------------------------------------------------------------


def require_at_least(field: str, value: int, minimum: int, expected: str | None = None) -> None:
    if value < minimum:
        raise InvalidRequest(field, value, expected or f">= {minimum}")


def check_timeout_ms(value: int, field: str = "timeout_ms") -> None:
    """0 asks for the broker's default wait; negative waits mean nothing."""
    require_at_least(field, value, 0, ">= 0 (milliseconds; 0 for the default)")


def check_replica_id(value: int, field: str = "replica_id") -> None:
    require_at_least(field, value, -1, "-1 (a client) or a broker id >= 0")


def check_fetch_limits(max_wait_ms: int, min_bytes: int, max_bytes: int) -> None:
    require_at_least("max_wait_ms", max_wait_ms, 0)
    require_at_least("min_bytes", min_bytes, 0)
    require_at_least("max_bytes", max_bytes, 0, ">= 0 (0 for the default)")


def bounded_wait_ms(timeout_ms: int, default_ms: int, remaining_s: float | None) -> int:
    """How long a request may wait: its timeout (0: ``default_ms``), but never
    until the caller's deadline (``remaining_s`` from now, None without one):
    the answer leaves a tenth of the remaining time early (20 ms to 1 s), so
    the caller reads it (an empty fetch, REQUEST_TIMED_OUT) instead of
    DEADLINE_EXCEEDED, and no handler waits for a caller that has gone."""
    wanted = timeout_ms or default_ms
    if remaining_s is None:
        return wanted
    margin_s = min(max(remaining_s / 10, 0.02), 1.0)
    return max(min(wanted, int((remaining_s - margin_s) * 1000)), 0)


# -- topics and partitions -------------------------------------------------------------


def topic_name(name: str) -> Refusal | None:
    """Kafka's rule: 1-249 of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    try:
        check_topic_name(name)
    except LayoutError:
        return Refusal(
            errors.INVALID_TOPIC_EXCEPTION,
            f"illegal topic name {shown(name)}: use 1-249 characters of a-z, A-Z, 0-9, "
            "'.', '_', '-' (not '.' or '..')",
        )
    return None


def partition_index(topic: str, partition: int) -> Refusal | None:
    if partition < 0:
        return Refusal(
            errors.UNKNOWN_TOPIC_OR_PARTITION,
            f"partition {partition} of {shown(topic)} does not exist: partitions count from 0",
        )
    return None


def topic_partition(topic: str, partition: int) -> Refusal | None:
    return topic_name(topic) or partition_index(topic, partition)


def _epoch(field: str, value: int, topic: str, partition: int) -> Refusal | None:
    if value < -1:
        return Refusal(
            errors.INVALID_REQUEST,
            f"{field} {value} of {topic}-{partition} is not an epoch (-1 for unknown, or >= 0)",
        )
    return None


def _invalid(field: str, value: int, topic: str, partition: int, expected: str) -> Refusal:
    return Refusal(errors.INVALID_REQUEST, f"{field} {value} of {topic}-{partition}: {expected}")


def acks(value: int) -> Refusal | None:
    if value not in (-1, 0, 1):
        return Refusal(errors.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {value}")
    return None


def produce_partition(topic: str, partition: int) -> Refusal | None:
    if refusal := topic_partition(topic, partition):
        return refusal
    if topic in INTERNAL_TOPICS:
        return Refusal(errors.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic}")
    return None


def fetch_partition(
    topic: str,
    partition: int,
    fetch_offset: int,
    partition_max_bytes: int,
    current_leader_epoch: int,
    log_start_offset: int,
) -> Refusal | None:
    if refusal := topic_partition(topic, partition):
        return refusal
    if fetch_offset < 0:
        return Refusal(
            errors.OFFSET_OUT_OF_RANGE,
            f"fetch_offset {fetch_offset} of {topic}-{partition} is negative",
        )
    if partition_max_bytes < 0:
        return _invalid("partition_max_bytes", partition_max_bytes, topic, partition, "not >= 0")
    if log_start_offset < -1:
        return _invalid(
            "log_start_offset", log_start_offset, topic, partition, "-1 (a consumer) or >= 0"
        )
    return _epoch("current_leader_epoch", current_leader_epoch, topic, partition)


def list_offsets_partition(
    topic: str, partition: int, timestamp: int, current_leader_epoch: int
) -> Refusal | None:
    if refusal := topic_partition(topic, partition):
        return refusal
    if timestamp < EARLIEST_TIMESTAMP:
        return _invalid(
            "timestamp", timestamp, topic, partition, "-2 (earliest), -1 (latest) or >= 0 (ms)"
        )
    return _epoch("current_leader_epoch", current_leader_epoch, topic, partition)


def epoch_partition(
    topic: str, partition: int, current_leader_epoch: int, leader_epoch: int
) -> Refusal | None:
    """OffsetsForLeaderEpoch: both epochs -1 (unknown) or >= 0."""
    return (
        topic_partition(topic, partition)
        or _epoch("current_leader_epoch", current_leader_epoch, topic, partition)
        or _epoch("leader_epoch", leader_epoch, topic, partition)
    )


def delete_records_partition(topic: str, partition: int, offset: int) -> Refusal | None:
    """``offset`` -1 is the high watermark; other negatives are out of range (Kafka)."""
    if refusal := topic_partition(topic, partition):
        return refusal
    if offset < -1:
        return Refusal(
            errors.OFFSET_OUT_OF_RANGE,
            f"cannot delete records of {topic}-{partition} before {offset}: "
            "-1 (the high watermark) or an offset >= 0",
        )
    return None


def commit_partition(topic: str, partition: int, offset: int, leader_epoch: int) -> Refusal | None:
    if refusal := topic_partition(topic, partition):
        return refusal
    if offset < 0:
        return _invalid("offset", offset, topic, partition, "a committed offset is >= 0")
    return _epoch("leader_epoch", leader_epoch, topic, partition)


def group_id(group: str) -> Refusal | None:
    if not group:
        return Refusal(errors.INVALID_GROUP_ID, "the group id is empty")
    size = len(group.encode("utf-8", "surrogatepass"))
    if size > MAX_GROUP_ID_BYTES:
        return Refusal(
            errors.INVALID_GROUP_ID,
            f"group id {shown(group)} is {size} bytes; at most {MAX_GROUP_ID_BYTES}",
        )
    return None


def repeated(names: Iterable[str]) -> set[str]:
    """Names given more than once: Kafka answers each of them INVALID_REQUEST."""
    return {name for name, n in Counter(names).items() if n > 1}


def repeated_refusal(name: str) -> Refusal:
    return Refusal(
        errors.INVALID_REQUEST, f"topic {shown(name)} appears more than once in the request"
    )


# -- topic admin ---------------------------------------------------------------------


def topic_configs(props: Mapping[str, str]) -> Refusal | None:
    """INVALID_CONFIG for an unknown name, a value that does not parse, or a number
    outside Kafka's type (int32 or int64) and lower bound."""
    for name, raw in props.items():
        bounds = _INT_CONFIGS.get(name), _LONG_CONFIGS.get(name)
        try:
            number = int(raw.strip())
        except ValueError:
            continue  # LogConfig names the problem below
        if bounds[0] is not None:
            low, high, kind = bounds[0], INT32_MAX, "int32"
        elif bounds[1] is not None:
            low, high, kind = bounds[1], INT64_MAX, "int64"
        else:
            continue
        if not low <= number <= high:
            return Refusal(
                errors.INVALID_CONFIG,
                f"invalid value {shown(raw)} for config {name!r}: an {kind} in [{low}, {high}]",
            )
    try:
        LogConfig.from_properties(dict(props))
    except ValueError as exc:
        return Refusal(errors.INVALID_CONFIG, str(exc))
    return None


def partition_count(value: int, default: int) -> Refusal | int:
    """A new topic's partition count: -1 for ``default``; 1..MAX_PARTITIONS."""
    count = default if value == USE_DEFAULT else value
    if not 1 <= count <= MAX_PARTITIONS:
        return Refusal(
            errors.INVALID_PARTITIONS,
            f"partition count {count} is not valid: 1 to {MAX_PARTITIONS}, or -1 for the "
            f"broker's num.partitions",
        )
    return count


def replication_factor(value: int, default: int, live_brokers: int) -> Refusal | int:
    """-1 for ``default``; at least 1 and at most the live brokers."""
    factor = default if value == USE_DEFAULT else value
    if factor < 1:
        return Refusal(
            errors.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor} is not valid: at least 1, or -1 for the broker's "
            "default.replication.factor",
        )
    if factor > live_brokers:
        return Refusal(
            errors.INVALID_REPLICATION_FACTOR,
            f"replication factor {factor} is larger than the {live_brokers} live brokers",
        )
    return factor


def replica_lists(
    lists: Mapping[int, Sequence[int]], live_brokers: Collection[int], factor: int | None = None
) -> Refusal | None:
    """Each partition's replicas: not empty, no broker twice, every broker live, and
    all lists as long as each other (and as ``factor`` when given)."""
    lengths = {len(replicas) for replicas in lists.values()}
    for partition, replicas in sorted(lists.items()):
        if not replicas:
            return Refusal(
                errors.INVALID_REPLICA_ASSIGNMENT, f"partition {partition} has no replicas"
            )
        if len(set(replicas)) != len(replicas):
            return Refusal(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} names a broker twice: {list(replicas)}",
            )
        unknown = sorted(set(replicas) - set(live_brokers))
        if unknown:
            return Refusal(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition}: brokers {unknown} are not live brokers",
            )
        if factor is not None and len(replicas) != factor:
            return Refusal(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} has {len(replicas)} replicas; the topic's other "
                f"partitions have {factor}",
            )
    if len(lengths) > 1:
        return Refusal(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"all partitions need the same number of replicas, not {sorted(lengths)}",
        )
    return None


def new_topic_assignment(
    num_partitions: int,
    factor: int,
    assignment: Mapping[int, Sequence[int]],
    live_brokers: Collection[int],
    default_partitions: int,
    default_factor: int,
) -> Refusal | dict[int, tuple[int, ...]]:
    """CreateTopics: either an explicit ``assignment`` (partition → replicas, with
    ``num_partitions`` and ``factor`` both -1), or a count and a factor (-1 for
    the broker's defaults) spread over ``live_brokers``."""
    if assignment:
        if num_partitions != USE_DEFAULT or factor != USE_DEFAULT:
            return Refusal(
                errors.INVALID_REQUEST,
                "give either an assignment or num_partitions/replication_factor, not both "
                f"(num_partitions {num_partitions}, replication_factor {factor}; -1 with "
                "an assignment)",
            )
        if len(assignment) > MAX_PARTITIONS:
            return Refusal(
                errors.INVALID_PARTITIONS,
                f"{len(assignment)} partitions assigned; at most {MAX_PARTITIONS}",
            )
        if sorted(assignment) != list(range(len(assignment))):
            return Refusal(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"the assignment must number its partitions 0..{len(assignment) - 1}",
            )
        if refusal := replica_lists(assignment, live_brokers):
            return refusal
        return {p: tuple(replicas) for p, replicas in sorted(assignment.items())}
    count = partition_count(num_partitions, default_partitions)
    if isinstance(count, Refusal):
        return count
    resolved = replication_factor(factor, default_factor, len(live_brokers))
    if isinstance(resolved, Refusal):
        return resolved
    return assign_replicas(count, resolved, list(live_brokers))


def added_partitions_assignment(
    topic: str,
    count: int,
    current: Mapping[int, Sequence[int]],
    given: Sequence[Sequence[int]],
    live_brokers: Collection[int],
) -> Refusal | dict[int, tuple[int, ...]]:
    """CreatePartitions: the replicas of the partitions that take ``topic`` from
    ``len(current)`` to ``count`` partitions, ``given`` in order or spread over the
    live brokers like a new topic's."""
    existing = len(current)
    if count <= existing or count > MAX_PARTITIONS:
        return Refusal(
            errors.INVALID_PARTITIONS,
            f"topic {topic!r} has {existing} partitions; the count can only grow, up to "
            f"{MAX_PARTITIONS} (asked for {count})",
        )
    factor = len(next(iter(current.values()), ()))
    added = count - existing
    if given:
        if len(given) != added:
            return Refusal(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"{len(given)} replica lists given for {added} new partitions",
            )
        new = {existing + i: tuple(replicas) for i, replicas in enumerate(given)}
        if refusal := replica_lists(new, live_brokers, factor):
            return refusal
        return new
    if factor > len(live_brokers):
        return Refusal(
            errors.INVALID_REPLICATION_FACTOR,
            f"topic {topic!r} has {factor} replicas per partition; {len(live_brokers)} "
            "brokers are live",
        )
    spread = assign_replicas(added, factor, list(live_brokers), start=existing)
    return {existing + p: replicas for p, replicas in spread.items()}


def reassignment(
    topic: str, partition: int, replicas: Sequence[int], live_brokers: Collection[int]
) -> Refusal | None:
    """AlterPartitionReassignments: the target replicas of one partition."""
    if refusal := topic_partition(topic, partition):
        return refusal
    name = f"{topic}-{partition}"
    if not replicas:
        return Refusal(errors.INVALID_REPLICA_ASSIGNMENT, f"no replicas given for {name}")
    if len(set(replicas)) != len(replicas):
        return Refusal(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"replicas {list(replicas)} of {name} repeat a broker",
        )
    absent = sorted(set(replicas) - set(live_brokers))
    if absent:
        return Refusal(
            errors.INVALID_REPLICA_ASSIGNMENT, f"brokers {absent} for {name} are not alive"
        )
    return None


# -- controller requests --------------------------------------------------------------


def partition_state(
    topic: str,
    partition: int,
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    replicas: Sequence[int],
) -> Refusal | None:
    """One partition of a LeaderAndIsr or UpdateMetadata from a controller."""
    if refusal := topic_partition(topic, partition):
        return refusal
    name = f"{topic}-{partition}"
    if leader < -1:
        return Refusal(
            errors.INVALID_REQUEST, f"leader {leader} of {name}: -1 (none) or a broker id"
        )
    if leader_epoch < 0:
        return Refusal(errors.INVALID_REQUEST, f"leader_epoch {leader_epoch} of {name} is negative")
    for field, ids in (("isr", isr), ("replicas", replicas)):
        if any(b < 0 for b in ids) or len(set(ids)) != len(ids):
            return Refusal(
                errors.INVALID_REQUEST, f"{field} {list(ids)} of {name}: distinct broker ids >= 0"
            )
    return None


def check_broker_endpoint(field: str, broker_id: int, port: int) -> None:
    require_at_least(f"{field}.id", broker_id, 0)
    if not 1 <= port <= 65_535:
        raise InvalidRequest(f"{field}.port", port, "a TCP port (1-65535)")
