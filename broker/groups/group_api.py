"""Group rpcs: FindCoordinator, OffsetCommit, TxnOffsetCommit, OffsetFetch, answered
through the group coordinator (``coordinator.py``); ListGroups and DescribeGroup from the
membership of Kafka's clients' groups (``group_membership.py``).  Both
protocols come here: the gRPC service and the Kafka listener
(``broker/kafka/groups.py``), whose JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, DeleteGroups and OffsetDelete reach the membership through
this class too, so that every group request is authorized in one place.
Requests and answers are the broker's own types (``broker/requests/group_types.py``),
which each protocol's edge adapts to.

Authorization (docs/security.md), for the caller's ``Session``, as Kafka 2.x:

* FindCoordinator needs Describe on the group (on the transactional id for a
  transaction coordinator, ``broker/transactions/api.py``); DescribeGroups
  Describe on each group;
  DeleteGroups Delete on each group;
* JoinGroup, SyncGroup, Heartbeat and LeaveGroup need Read on the group;
* OffsetCommit needs Read on the group, then Read on each topic (its
  partitions are TOPIC_AUTHORIZATION_FAILED otherwise); TxnOffsetCommit
  (KIP-98) Write on the transactional id first (else every partition is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then the same; OffsetFetch Describe
  on the group, then Describe on each topic (named partitions of other topics
  are TOPIC_AUTHORIZATION_FAILED, the others left out); OffsetDelete Delete on
  the group, then Read on each topic;
* ListGroups lists every group to a caller that may Describe the cluster,
  else only the groups it may Describe.

A refused group is GROUP_AUTHORIZATION_FAILED, with a message naming the
principal, the operation and the group.

Thread safety: runs on the event loop; creating the offsets topic runs on
the admin pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from annal.broker.admin_manager import AdminManager
from annal.broker.data_api import Deadline, wait_ms
from annal.broker.groups.coordinator import OFFSETS_TOPIC, CommitEntry, OffsetsCoordinator
from annal.broker.groups.group_membership import Group, GroupMembership, JoinResult, SyncResult
from annal.broker.metadata_cache import MetadataCache, PartitionView
from annal.broker.requests import group_types as gt
from annal.broker.requests import request_checks as checks
from annal.broker.requests.group_types import TRANSACTION_KEY
from annal.broker.security.authorization import (
    ALLOW_ALL,
    GROUP,
    INTERNAL,
    TRANSACTIONAL_ID,
    RequestAuthorizer,
    denial,
)
from annal.kafkaproto.wire import read_entity
from annal.security.acl import AclOperation, Resource, ResourceType
from annal.security.session import Session
from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment as AssignmentV0,
)
from kio.schema.consumer_protocol_assignment.v1.data import (
    ConsumerProtocolAssignment as AssignmentV1,
)
from kio.schema.consumer_protocol_assignment.v2.data import (
    ConsumerProtocolAssignment as AssignmentV2,
)
from kio.schema.consumer_protocol_assignment.v3.data import (
    ConsumerProtocolAssignment as AssignmentV3,
)
from kio.serial.readers import read_int16

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

if TYPE_CHECKING:
    from annal.broker.transactions.api import TransactionApi

_ASSIGNMENTS: list[Any] = [AssignmentV0, AssignmentV1, AssignmentV2, AssignmentV3]
DELETE_TIMEOUT_MS = 30_000  # OffsetDelete's wait for its tombstones to be replicated
TXN_COMMIT_TIMEOUT_MS = 30_000  # TxnOffsetCommit's wait for its replicas (no field for it)
MAX_PRODUCER_EPOCH = 32_767  # an int16 in the batch header


@dataclass(frozen=True, slots=True)
class CommitMember:
    """Who commits, in a Kafka client's OffsetCommit: checked against the group's
    membership (``GroupMembership.check_commit``) once the commit is authorized."""

    generation: int
    member_id: str
    instance_id: str | None


class GroupApi:
    """See the module docstring."""

    def __init__(
        self,
        coordinator: OffsetsCoordinator,
        metadata: MetadataCache,
        admin: AdminManager,
        membership: GroupMembership,
        authorizer: RequestAuthorizer = ALLOW_ALL,
    ) -> None:
        self._membership = membership
        self._coordinator = coordinator
        self._metadata = metadata
        self._admin = admin
        self._authorizer = authorizer
        self.transactions: TransactionApi | None = None  # FindCoordinator key type 1

    # -- authorization -----------------------------------------------------------------

    def _group_refusal(
        self, session: Session, operation: AclOperation, group: str, audited: bool = False
    ) -> checks.Refusal | None:
        """GROUP_AUTHORIZATION_FAILED when the caller may not ``operation`` the group."""
        resource = Resource(GROUP, group)
        if self._authorizer.allowed(session, operation, resource, audited):
            return None
        return checks.Refusal(
            errors.GROUP_AUTHORIZATION_FAILED, denial(session, operation, resource)
        )

    # -- coordinators --------------------------------------------------------------------

    async def find_coordinator(
        self, request: gt.FindCoordinatorRequest, session: Session = INTERNAL
    ) -> gt.FindCoordinatorResponse:
        """The leader of the group's offsets partition; the offsets topic is
        created on first use (COORDINATOR_NOT_AVAILABLE until it has leaders).
        Needs Describe on the group.  Key type 1 asks for a transactional id's
        transaction coordinator (``broker/transactions/api.py``)."""
        if request.key_type == TRANSACTION_KEY:
            if self.transactions is None:
                return gt.FindCoordinatorResponse(
                    errors.COORDINATOR_NOT_AVAILABLE.number,
                    "the transaction coordinator is starting",
                )
            return await self.transactions.find_coordinator(request.key, session)
        refusal = self._group_refusal(session, AclOperation.DESCRIBE, request.key)
        if refusal := refusal or checks.group_id(request.key):
            return gt.FindCoordinatorResponse(refusal.error.number, refusal.message)
        cache = self._metadata.snapshot()
        if OFFSETS_TOPIC not in cache.topics:
            await self._admin.blocking(self._admin.create_offsets_topic_now, len(cache.brokers))
            return gt.FindCoordinatorResponse(
                errors.COORDINATOR_NOT_AVAILABLE.number,
                f"{OFFSETS_TOPIC} is being created; ask again",
            )
        index = self._coordinator.partition_of(request.key)
        leader = cache.leader_of(OFFSETS_TOPIC, index)
        if leader < 0:
            return gt.FindCoordinatorResponse(
                errors.COORDINATOR_NOT_AVAILABLE.number,
                f"{OFFSETS_TOPIC}-{index} has no leader now",
            )
        broker = cache.brokers[leader]
        return gt.FindCoordinatorResponse(
            coordinator=gt.Coordinator(broker.broker_id, broker.host, broker.port)
        )

    # -- membership (Kafka's clients) ------------------------------------------------------

    async def join(
        self,
        session: Session,
        group: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        member_id_required: bool = False,
    ) -> JoinResult:
        """JoinGroup (``GroupMembership.join``), with Read on the group."""
        if self._group_refusal(session, AclOperation.READ, group):
            return JoinResult(errors.GROUP_AUTHORIZATION_FAILED)
        return await self._membership.join(
            group, member_id, instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, protocols, member_id_required,
        )  # fmt: skip

    async def sync(
        self,
        session: Session,
        group: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """SyncGroup (``GroupMembership.sync``), with Read on the group."""
        if self._group_refusal(session, AclOperation.READ, group):
            return SyncResult(errors.GROUP_AUTHORIZATION_FAILED)
        return await self._membership.sync(group, generation, member_id, instance_id, assignments)

    def heartbeat(
        self,
        session: Session,
        group: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
    ) -> ErrorCode:
        """Heartbeat (``GroupMembership.heartbeat``), with Read on the group."""
        if self._group_refusal(session, AclOperation.READ, group):
            return errors.GROUP_AUTHORIZATION_FAILED
        return self._membership.heartbeat(group, generation, member_id, instance_id)

    def leave(
        self, session: Session, group: str, leaving: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup (``GroupMembership.leave``), with Read on the group."""
        if self._group_refusal(session, AclOperation.READ, group):
            return errors.GROUP_AUTHORIZATION_FAILED, []
        return self._membership.leave(group, leaving)

    # -- offsets -------------------------------------------------------------------------

    async def offset_commit(
        self,
        request: gt.OffsetCommitRequest,
        context: Deadline,
        session: Session = INTERNAL,
        member: CommitMember | None = None,
        known_partitions_only: bool = False,
    ) -> gt.OffsetCommitResponse:
        """Commit each partition's offset: Read on the group (else every partition
        is GROUP_AUTHORIZATION_FAILED), then Read on each topic.  ``member``: the
        Kafka client's generation and member id, checked against the group's
        membership for the partitions that are authorized.
        ``known_partitions_only`` (Kafka's clients): an authorized partition the
        metadata does not know is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers it."""
        checks.check_timeout_ms(request.timeout_ms)
        group_refusal = self._group_refusal(session, AclOperation.READ, request.group_id)
        refused = (
            {}
            if group_refusal
            else self._authorizer.refused_topics(
                session, AclOperation.READ, [t.name for t in request.topics]
            )
        )
        group_refusal = group_refusal or checks.group_id(request.group_id)
        known = self._metadata.snapshot().topics
        outcome: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        entries = []
        for t in request.topics:
            for p in t.partitions:
                refusal = (
                    group_refusal
                    or refused.get(t.name)
                    or checks.commit_partition(
                        t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch
                    )
                )
                if refusal is None and known_partitions_only:
                    refusal = _unknown_partition(known, t.name, p.partition_index)
                if refusal is not None:
                    outcome[TopicPartition(t.name, p.partition_index)] = (
                        refusal.error,
                        refusal.message,
                    )
                else:
                    entries.append(_entry(t.name, p))
        if entries and member is not None:
            error = self._membership.check_commit(
                request.group_id, member.generation, member.member_id, member.instance_id
            )
            if error != errors.NONE:
                for e in entries:
                    outcome[TopicPartition(e.topic, e.partition)] = (error, "")
                entries = []
        if entries:
            outcome.update(
                await self._coordinator.commit(
                    request.group_id, entries, wait_ms(request.timeout_ms, context)
                )
            )
        return _commit_response(request.topics, outcome)

    async def txn_offset_commit(
        self,
        request: gt.TxnOffsetCommitRequest,
        context: Deadline,
        session: Session = INTERNAL,
    ) -> gt.OffsetCommitResponse:
        """Commit offsets inside the producer's transaction (Kafka's
        handleTxnOffsetCommitRequest): Write on the transactional id (else every
        partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Read on the group
        (GROUP_AUTHORIZATION_FAILED), then Read on each topic; a partition the
        metadata does not know is UNKNOWN_TOPIC_OR_PARTITION.  A member id or
        generation given (v3, KIP-447) is checked against the group
        (``GroupMembership.check_txn_commit``).  The offsets stay pending until
        the transaction's marker (``OffsetsCoordinator.txn_commit``)."""
        resource = Resource(TRANSACTIONAL_ID, request.transactional_id)
        refusal = None
        if not self._authorizer.allowed(session, AclOperation.WRITE, resource):
            refusal = checks.Refusal(
                errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                denial(session, AclOperation.WRITE, resource),
            )
        refusal = refusal or self._group_refusal(session, AclOperation.READ, request.group_id)
        refused = (
            {}
            if refusal
            else self._authorizer.refused_topics(
                session, AclOperation.READ, [t.name for t in request.topics]
            )
        )
        refusal = refusal or checks.group_id(request.group_id) or _producer(request)
        known = self._metadata.snapshot().topics
        outcome: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        entries = []
        for t in request.topics:
            for p in t.partitions:
                found = (
                    refusal
                    or refused.get(t.name)
                    or checks.commit_partition(
                        t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch
                    )
                    or _unknown_partition(known, t.name, p.partition_index)
                )
                if found is not None:
                    outcome[TopicPartition(t.name, p.partition_index)] = (
                        found.error,
                        found.message,
                    )
                else:
                    entries.append(_entry(t.name, p))
        if entries:
            error = self._membership.check_txn_commit(
                request.group_id,
                request.generation_id,
                request.member_id,
                request.group_instance_id or None,
            )
            if error != errors.NONE:
                outcome.update((TopicPartition(e.topic, e.partition), (error, "")) for e in entries)
            else:
                outcome.update(
                    await self._coordinator.txn_commit(
                        request.group_id,
                        request.producer_id,
                        request.producer_epoch,
                        entries,
                        wait_ms(TXN_COMMIT_TIMEOUT_MS, context),
                    )
                )
        return _commit_response(request.topics, outcome)

    def offset_fetch(
        self, request: gt.OffsetFetchRequest, session: Session = INTERNAL
    ) -> gt.OffsetFetchResponse:
        """The group's committed offsets; the response has one error field, so a
        refused group id, topic name or partition answers the whole request.
        Needs Describe on the group (else GROUP_AUTHORIZATION_FAILED), then
        Describe on each topic: a partition asked for by name of a topic the
        caller may not describe is answered TOPIC_AUTHORIZATION_FAILED, and such
        topics are left out of an answer about every partition.  With
        ``require_stable`` (Kafka's OffsetFetch v7+, KIP-447) a partition with
        transactional offsets pending is UNSTABLE_OFFSET_COMMIT, offset -1."""
        refusal = self._group_refusal(session, AclOperation.DESCRIBE, request.group_id)
        refusal = refusal or checks.group_id(request.group_id)
        for t in request.topics:
            refusal = refusal or checks.topic_name(t.name)
            for p in t.partition_indexes:
                refusal = refusal or checks.partition_index(t.name, p)
        if refusal is not None:
            return gt.OffsetFetchResponse(refusal.error.number, refusal.message)
        asked = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
        if asked:
            hidden = self._authorizer.refused_topics(
                session, AclOperation.DESCRIBE, [tp.topic for tp in asked]
            )
            wanted = [tp for tp in asked if tp.topic not in hidden]
            error, found = self._coordinator.fetch(request.group_id, wanted)
            if error == errors.NONE:
                found.update((tp, None) for tp in asked if tp.topic in hidden)
        else:  # every partition: what the caller may not describe is left out
            error, found = self._coordinator.fetch(request.group_id, None)
            hidden = self._authorizer.refused_topics(
                session, AclOperation.DESCRIBE, sorted({tp.topic for tp in found}), log_denied=False
            )
            found = {tp: value for tp, value in found.items() if tp.topic not in hidden}
        response = gt.OffsetFetchResponse(error.number)
        unstable: set[TopicPartition] = set()
        if request.require_stable and error == errors.NONE:
            shown = [tp for tp in found if tp.topic not in hidden]
            unstable = self._coordinator.unstable(request.group_id, shown)
        by_topic: dict[str, gt.OffsetFetchTopicResponse] = {}
        for (topic, partition), value in sorted(found.items()):
            out = by_topic.get(topic)
            if out is None:
                out = by_topic[topic] = gt.OffsetFetchTopicResponse(topic)
                response.topics.append(out)
            if topic in hidden or (topic, partition) in unstable:
                refused = (
                    errors.TOPIC_AUTHORIZATION_FAILED
                    if topic in hidden
                    else errors.UNSTABLE_OFFSET_COMMIT
                )
                out.partitions.append(
                    gt.OffsetFetchPartitionResponse(partition, error=refused.number)
                )
            elif value is None:
                out.partitions.append(gt.OffsetFetchPartitionResponse(partition))
            else:
                out.partitions.append(
                    gt.OffsetFetchPartitionResponse(
                        partition, value.offset, value.leader_epoch, value.metadata
                    )
                )
        return response

    async def offset_delete(
        self, session: Session, group: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (Kafka's listener): (the group's error, each partition's).
        Needs Delete on the group (else GROUP_AUTHORIZATION_FAILED and no
        partitions), then Read on each topic; refused while the group has members
        (GROUP_SUBSCRIBED_TO_TOPIC)."""
        if self._group_refusal(session, AclOperation.DELETE, group, audited=True):
            return errors.GROUP_AUTHORIZATION_FAILED, {}
        refused = self._authorizer.refused_topics(
            session, AclOperation.READ, [tp.topic for tp in partitions], audited=True
        )
        unauthorized = errors.TOPIC_AUTHORIZATION_FAILED
        outcome = {tp: unauthorized for tp in partitions if tp.topic in refused}
        wanted = [tp for tp in partitions if tp.topic not in refused]
        error, found = self._membership.describe(group)
        if error != errors.NONE:
            outcome.update(dict.fromkeys(wanted, error))
        elif found is not None and found.members:
            outcome.update(dict.fromkeys(wanted, errors.GROUP_SUBSCRIBED_TO_TOPIC))
        else:
            if wanted:
                error, _ = await self._coordinator.delete_offsets(group, wanted, DELETE_TIMEOUT_MS)
            outcome.update(dict.fromkeys(wanted, errors.NONE))
        return error, outcome

    # -- listing, describing, deleting -------------------------------------------------

    def listing(self, session: Session = INTERNAL) -> list[tuple[str, str, str]]:
        """(group, protocol type, state) of the groups this broker coordinates: all
        of them for a caller that may Describe the cluster, else those it may
        Describe (asked quietly: a listing is narrowed, not refused)."""
        groups = self._membership.listing()
        authorizer = self._authorizer
        if authorizer.cluster(session, AclOperation.DESCRIBE, log_denied=False):
            return groups
        hidden = authorizer.denied(
            session, AclOperation.DESCRIBE, GROUP, [g for g, _, _ in groups], log_denied=False
        )
        return [listed for listed in groups if listed[0] not in hidden]

    def list_groups(
        self, request: gt.ListGroupsRequest, session: Session = INTERNAL
    ) -> gt.ListGroupsResponse:
        """The groups of ``listing``, only those in one of the states asked for
        (ListGroups v4+, KIP-518) when it names any."""
        states = request.states_filter
        return gt.ListGroupsResponse(
            groups=[
                gt.ListedGroup(g, t, s)
                for g, t, s in self.listing(session)
                if not states or s in states
            ]
        )

    async def delete(self, session: Session, group: str) -> ErrorCode:
        """Delete a group without members (``GroupMembership.delete``), with Delete
        on the group."""
        if self._group_refusal(session, AclOperation.DELETE, group, audited=True):
            return errors.GROUP_AUTHORIZATION_FAILED
        return await self._membership.delete(group)

    async def delete_group(
        self, request: gt.DeleteGroupRequest, session: Session = INTERNAL
    ) -> gt.DeleteGroupResponse:
        refusal = self._group_refusal(session, AclOperation.DELETE, request.group_id, audited=True)
        if refusal := refusal or checks.group_id(request.group_id):
            return gt.DeleteGroupResponse(refusal.error.number, refusal.message)
        error = await self._membership.delete(request.group_id)
        messages = {
            errors.NON_EMPTY_GROUP: f"group {request.group_id!r} has live members",
            errors.GROUP_ID_NOT_FOUND: f"no group {request.group_id!r}",
        }
        return gt.DeleteGroupResponse(error.number, messages.get(error, ""))

    def describe(self, session: Session, group: str) -> tuple[ErrorCode, Group | None]:
        """The group's membership (``GroupMembership.describe``), with Describe on the
        group (else GROUP_AUTHORIZATION_FAILED)."""
        if self._group_refusal(session, AclOperation.DESCRIBE, group):
            return errors.GROUP_AUTHORIZATION_FAILED, None
        return self._membership.describe(group)

    def authorized_operations(self, session: Session, group: str) -> int:
        """The operations on ``group`` the caller may do, as Kafka's bit field
        (DescribeGroups v3+, KIP-430)."""
        return self._authorizer.authorized_operations(session, Resource(ResourceType.GROUP, group))

    def describe_group(
        self, request: gt.DescribeGroupRequest, session: Session = INTERNAL
    ) -> gt.DescribeGroupResponse:
        refusal = self._group_refusal(session, AclOperation.DESCRIBE, request.group_id)
        if refusal := refusal or checks.group_id(request.group_id):
            return gt.DescribeGroupResponse(refusal.error.number, refusal.message)
        error, group = self._membership.describe(request.group_id)
        if error != errors.NONE:
            return gt.DescribeGroupResponse(error.number)
        if group is None:
            return gt.DescribeGroupResponse(group_state="Empty")
        return gt.DescribeGroupResponse(
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=group.protocol or "",
            members=[
                gt.DescribedGroupMember(
                    m.member_id,
                    m.instance_id or None,
                    m.client_id,
                    m.client_host,
                    [gt.AssignedPartitions(t, ps) for t, ps in consumer_assignment(m.assignment)],
                )
                for m in group.members.values()
            ],
        )


def _entry(topic: str, p: gt.OffsetCommitPartition) -> CommitEntry:
    return CommitEntry(
        topic, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata
    )


def _commit_response(
    topics: Iterable[gt.OffsetCommitTopic],
    outcome: Mapping[TopicPartition, tuple[ErrorCode, str]],
) -> gt.OffsetCommitResponse:
    return gt.OffsetCommitResponse(
        [
            gt.OffsetCommitTopicResponse(
                t.name,
                [
                    gt.OffsetCommitPartitionResponse(p.partition_index, error.number, message)
                    for p in t.partitions
                    for error, message in [outcome[TopicPartition(t.name, p.partition_index)]]
                ],
            )
            for t in topics
        ]
    )


def _producer(request: gt.TxnOffsetCommitRequest) -> checks.Refusal | None:
    """INVALID_REQUEST unless the request names a producer id and an epoch (int16)."""
    if request.producer_id < 0:
        return checks.Refusal(
            errors.INVALID_REQUEST,
            f"producer_id must be >= 0 in a transactional commit, not {request.producer_id}",
        )
    if not 0 <= request.producer_epoch <= MAX_PRODUCER_EPOCH:
        return checks.Refusal(
            errors.INVALID_REQUEST,
            f"producer_epoch must be in [0, {MAX_PRODUCER_EPOCH}], not {request.producer_epoch}",
        )
    return None


def _unknown_partition(
    known: Mapping[str, Mapping[int, PartitionView]], topic: str, partition: int
) -> checks.Refusal | None:
    """UNKNOWN_TOPIC_OR_PARTITION unless the metadata has the partition."""
    partitions = known.get(topic)
    if partitions is None:
        return checks.Refusal(errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
    if partition not in partitions:
        return checks.Refusal(
            errors.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {topic!r} has {len(partitions)} partitions, no partition {partition}",
        )
    return None


def consumer_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """The partitions in a member's assignment (Kafka's consumer protocol:
    a version, then ConsumerProtocolAssignment); none when it is not one."""
    if len(data) < 2:
        return []
    try:
        version, _ = read_int16(data, 0)
        schema = _ASSIGNMENTS[min(max(int(version), 0), len(_ASSIGNMENTS) - 1)]
        # read as requests are: a claimed length past the bytes there is refused
        # before anything is allocated (kio's reader would reserve it first)
        assignment, _ = read_entity(schema, data, 2)
    except Exception:  # another protocol's bytes: nothing to show
        return []
    return [(t.topic, sorted(int(p) for p in t.partitions)) for t in assignment.assigned_partitions]
