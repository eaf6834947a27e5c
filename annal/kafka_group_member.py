"""A member of a Kafka-protocol consumer group, for ``console-consumer --group``
with ``--bootstrap-server`` (no ZooKeeper).

It joins the group at its coordinator as Kafka's consumers do, over the
coordinator's Kafka listener (the one of the client's security protocol):
FindCoordinator, JoinGroup with the consumer protocol and the range assignor
(as a new dynamic member, KIP-394: the first join is answered with a member
id to join again with), SyncGroup, where the leader hands every member its
share of the subscribed topics' partitions.  Heartbeats go on a connection
of their own, every second; when the coordinator answers one with a
rebalance (a member joined or left), ``rebalance_needed`` is set and the
owner commits what it consumed and calls ``join`` again.  Offsets are
fetched and committed with the member's generation (OffsetFetch,
OffsetCommit), and ``leave`` sends LeaveGroup, so the group rebalances at
once instead of after the session timeout.  Kafka's own clients in the same
group share the partitions with it (docs/kafka-protocol.md).

Records are read by the caller (over gRPC, with ``SimpleConsumer``); this
class only keeps the membership.
"""

from __future__ import annotations

import io
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.serial import entity_writer

from annal import errors
from annal.client.cluster import ClientError
from annal.client.security import Security
from annal.kafkaproto.client import ConnectionFailed, KafkaConnection
from annal.kafkaproto.wire import build, read_entity
from annal.topic_partition import TopicPartition
from annal.v1 import annal_pb2 as pb

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN, HEARTBEAT, LEAVE, SYNC = 11, 12, 13, 14
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
HEARTBEAT_S = 1.0
RETRIABLE = {
    errors.COORDINATOR_LOAD_IN_PROGRESS.number,
    errors.COORDINATOR_NOT_AVAILABLE.number,
    errors.NOT_COORDINATOR.number,
    errors.REBALANCE_IN_PROGRESS.number,
    errors.UNKNOWN_MEMBER_ID.number,
    errors.ILLEGAL_GENERATION.number,
    errors.MEMBER_ID_REQUIRED.number,
}


def _encode(schema: Any, values: Mapping[str, Any]) -> bytes:
    """Kafka's consumer protocol bytes: version 0, then the entity."""
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", 0))
    entity_writer(schema)(buffer, build(schema, values))
    return buffer.getvalue()


def subscription(topics: Sequence[str]) -> bytes:
    return _encode(ConsumerProtocolSubscription, {"topics": list(topics), "user_data": None})


def assignment(partitions: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return _encode(ConsumerProtocolAssignment, {
        "assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        "user_data": None,
    })  # fmt: skip


def subscribed_topics(data: bytes) -> list[str]:
    """The topics of a member's subscription (any version: v0's fields come first)."""
    found, _ = read_entity(ConsumerProtocolSubscription, data, 2)
    return list(found.topics)


def assigned_partitions(data: bytes) -> list[TopicPartition]:
    if len(data) < 2:
        return []
    found, _ = read_entity(ConsumerProtocolAssignment, data, 2)
    return sorted(
        TopicPartition(t.topic, int(p)) for t in found.assigned_partitions for p in t.partitions
    )


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Kafka's range assignor: per topic, its partitions in order over the members
    subscribed to it in member id order, the first ``P % C`` taking one more."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        count = partition_counts.get(topic, 0)
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = share + (1 if index < extra else 0)
            out[member].extend(TopicPartition(topic, p) for p in range(start, start + size))
            start += size
    return out


class KafkaGroupMember:
    """See the module docstring.  ``brokers`` is the gRPC Metadata's broker list
    (their Kafka listeners are chosen from it); ``partition_counts`` answers how
    many partitions a topic has, for the assignment a leader makes."""

    def __init__(
        self,
        brokers: Sequence[pb.Broker],
        group: str,
        topics: Sequence[str],
        security: Security,
        partition_counts: Any,
        timeout_s: float = 30.0,
    ) -> None:
        from annal.consumer.kafka_fetch import connection_security

        self.group = group
        self.topics = list(topics)
        self.timeout_s = timeout_s
        self._security = connection_security(security)
        self._protocol = security.protocol
        self._partition_counts = partition_counts
        listeners = [e for b in brokers if (e := self._listener(b)) is not None]
        if not listeners:
            raise ClientError(
                errors.BROKER_NOT_AVAILABLE,
                f"no broker has a Kafka listener for {security.protocol}: a group of Kafka's "
                "protocol is joined there (or give --zookeeper for annal's group consumer)",
            )
        self._bootstrap = listeners
        self.member_id = ""
        self.generation = -1
        self.partitions: list[TopicPartition] = []
        self.rebalance_needed = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._coordinator: KafkaConnection | None = None
        self._beat: KafkaConnection | None = None
        self._beating: threading.Thread | None = None

    def _listener(self, broker: pb.Broker) -> str | None:
        for e in broker.kafka_endpoints:
            if e.security_protocol == self._protocol:
                return f"{e.host}:{e.port}"
        if self._protocol == "PLAINTEXT" and broker.kafka_port:
            return f"{broker.kafka_host}:{broker.kafka_port}"
        return None

    def _connection(self, endpoint: str, timeout_s: float) -> KafkaConnection:
        return KafkaConnection(endpoint, timeout_s, "console-consumer", self._security)

    def _find_coordinator(self) -> str:
        deadline = time.monotonic() + self.timeout_s
        last = "no broker answered"
        while time.monotonic() < deadline:
            for endpoint in self._bootstrap:
                connection = self._connection(endpoint, self.timeout_s)
                try:
                    answer = connection.exchange(FIND_COORDINATOR, 2, {"key": self.group,
                                                                       "key_type": 0})
                except ConnectionFailed as exc:
                    last = str(exc)
                    continue
                finally:
                    connection.close()
                code = int(answer.error_code)
                if code == 0:
                    return f"{answer.host}:{answer.port}"
                if code not in RETRIABLE:
                    raise ClientError(errors.from_wire(code), answer.error_message or "")
                last = errors.from_wire(code).name
            time.sleep(0.2)
        raise ClientError(errors.COORDINATOR_NOT_AVAILABLE, f"group {self.group}: {last}")

    def _call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """One request to the coordinator (found again when its connection fails)."""
        if self._coordinator is None:
            timeout = REBALANCE_TIMEOUT_MS / 1000 + self.timeout_s  # a join waits for others
            self._coordinator = self._connection(self._find_coordinator(), timeout)
        try:
            return self._coordinator.exchange(api_key, version, values)
        except ConnectionFailed:
            self._coordinator.close()
            self._coordinator = None
            raise

    def join(self) -> list[TopicPartition]:
        """Join (or join again) and return this member's partitions."""
        deadline = time.monotonic() + REBALANCE_TIMEOUT_MS / 1000 + self.timeout_s
        while True:
            if time.monotonic() > deadline:
                raise ClientError(errors.REBALANCE_IN_PROGRESS, f"could not join {self.group}")
            self.rebalance_needed.clear()
            try:
                partitions = self._join_once()
            except ConnectionFailed:
                time.sleep(0.2)
                continue
            if partitions is not None:
                with self._lock:
                    self.partitions = partitions
                self._start_heartbeats()
                return partitions

    def _join_once(self) -> list[TopicPartition] | None:
        joined = self._call(JOIN, 5, {
            "group_id": self.group, "session_timeout": SESSION_TIMEOUT_MS,
            "rebalance_timeout": REBALANCE_TIMEOUT_MS, "member_id": self.member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(self.topics)}],
        })  # fmt: skip
        code = int(joined.error_code)
        if code == errors.MEMBER_ID_REQUIRED.number:
            self.member_id = joined.member_id
            return None
        if code == errors.UNKNOWN_MEMBER_ID.number:
            self.member_id = ""
            return None
        if code in RETRIABLE:
            if code == errors.NOT_COORDINATOR.number and self._coordinator is not None:
                self._coordinator.close()
                self._coordinator = None
            time.sleep(0.2)
            return None
        if code != 0:
            raise ClientError(errors.from_wire(code), f"JoinGroup of {self.group}")
        with self._lock:
            self.member_id, self.generation = joined.member_id, joined.generation_id
        assignments: list[dict[str, Any]] = []
        if joined.leader == joined.member_id:
            wanted = {m.member_id: subscribed_topics(m.metadata) for m in joined.members}
            counts = self._partition_counts(sorted({t for ts in wanted.values() for t in ts}))
            shares = range_assign(wanted, counts)
            assignments = [{"member_id": m, "assignment": assignment(ps)}
                           for m, ps in shares.items()]  # fmt: skip
        synced = self._call(SYNC, 3, {
            "group_id": self.group, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None, "assignments": assignments,
        })  # fmt: skip
        code = int(synced.error_code)
        if code in RETRIABLE:
            if code in (errors.UNKNOWN_MEMBER_ID.number, errors.ILLEGAL_GENERATION.number):
                self.member_id = "" if code == errors.UNKNOWN_MEMBER_ID.number else self.member_id
            return None
        if code != 0:
            raise ClientError(errors.from_wire(code), f"SyncGroup of {self.group}")
        return [tp for tp in assigned_partitions(synced.assignment) if tp.topic in self.topics]

    def _start_heartbeats(self) -> None:
        if self._beating is None:
            self._beating = threading.Thread(target=self._heartbeats, name="heartbeat",
                                             daemon=True)  # fmt: skip
            self._beating.start()

    def _heartbeats(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if self.rebalance_needed.is_set():
                continue  # the owner is about to join again
            with self._lock:
                generation, member = self.generation, self.member_id
            try:
                if self._beat is None:
                    self._beat = self._connection(self._find_coordinator(), self.timeout_s)
                answer = self._beat.exchange(HEARTBEAT, 3, {
                    "group_id": self.group, "generation_id": generation,
                    "member_id": member, "group_instance_id": None,
                })  # fmt: skip
            except (ConnectionFailed, ClientError):
                if self._beat is not None:
                    self._beat.close()
                self._beat = None
                continue
            if int(answer.error_code) != 0:
                self.rebalance_needed.set()

    def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (those it has)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        answer = self._call(OFFSET_FETCH, 5, {
            "group_id": self.group,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        })  # fmt: skip
        if int(answer.error_code) != 0:
            raise ClientError(errors.from_wire(int(answer.error_code)), "OffsetFetch")
        found = {}
        for t in answer.topics:
            for p in t.partitions:
                if int(p.error_code) == 0 and p.committed_offset >= 0:
                    found[TopicPartition(t.name, p.partition_index)] = int(p.committed_offset)
        return found

    def commit(self, positions: Mapping[TopicPartition, int]) -> str | None:
        """Commit ``positions`` (the next offsets to read) with this member's
        generation; what went wrong, if anything (a rebalance under way refuses it)."""
        if not positions:
            return None
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in sorted(positions.items()):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset,
                "committed_leader_epoch": -1, "committed_metadata": "",
            })  # fmt: skip
        with self._lock:
            generation, member = self.generation, self.member_id
        try:
            answer = self._call(OFFSET_COMMIT, 7, {
                "group_id": self.group, "generation_id_or_member_epoch": generation,
                "member_id": member, "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            })  # fmt: skip
        except ConnectionFailed as exc:
            return str(exc)
        for t in answer.topics:
            for p in t.partitions:
                if int(p.error_code) != 0:
                    return f"{errors.from_wire(int(p.error_code)).name} committing {t.name}"
        return None

    def leave(self) -> None:
        """Stop heartbeats and leave the group (its partitions go to the others now)."""
        self._stop.set()
        if self._beating is not None:
            self._beating.join(5)
        try:
            if self.member_id:
                self._call(LEAVE, 3, {"group_id": self.group, "members": [
                    {"member_id": self.member_id, "group_instance_id": None}]})  # fmt: skip
        except (ConnectionFailed, ClientError):
            pass  # the session timeout ends the membership instead
        for connection in (self._coordinator, self._beat):
            if connection is not None:
                connection.close()
