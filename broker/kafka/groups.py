"""Kafka's group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups,
DeleteGroups.

Membership is the broker's ``GroupMembership`` (Kafka's classic protocol);
offsets are the same ``GroupApi`` and ``OffsetsCoordinator`` that annal's
gRPC clients commit through, so a group's offsets are one set whichever
protocol wrote them.  An OffsetCommit of a group with members must carry a
member id and the current generation (``GroupMembership.check_commit``);
with generation -1 it is a standalone commit (assign-mode consumers).

TxnOffsetCommit (versions 0-3, KIP-98; v3's member id, generation and
instance id are KIP-447's) commits inside a producer's transaction
(``GroupApi.txn_offset_commit``); before v2, COORDINATOR_LOAD_IN_PROGRESS is
answered COORDINATOR_NOT_AVAILABLE, as Kafka does (KAFKA-7296: clients of
those versions may fail on it).  OffsetFetch v7's ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for a partition whose transactional offsets are not
decided yet.

JoinGroup v4+ of a new dynamic member is answered MEMBER_ID_REQUIRED with
the id to join again with (KIP-394); older versions admit it at once.

FindCoordinator answers with the coordinator's Kafka endpoint, a group's or
(key type 1) a transactional id's.  OffsetDelete refuses
(GROUP_SUBSCRIBED_TO_TOPIC) while the group has members.

An OffsetCommit's partition that the broker's metadata does not know (no such
topic, or a partition number past the topic's count) is
UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers it; annal's own gRPC commits are
not checked so.  DescribeGroups of a group the coordinator does not know
answers it ``Dead`` with no error, as Kafka does; a group with committed
offsets and no members is ``Empty``.

Every request goes through ``GroupApi`` with the connection's session, which
authorizes it (docs/security.md); this module only builds the group services'
own requests (``broker/requests/group_types.py``) from Kafka's and maps their
answers onto Kafka's responses.  A refused group is GROUP_AUTHORIZATION_FAILED where the
response carries its error: the top-level code, each partition of an
OffsetCommit (and of an OffsetFetch v1, which has no top-level code), each
group of DescribeGroups or DeleteGroups.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from typing import Any

from annal.broker.groups.coordinator import OffsetsCoordinator
from annal.broker.groups.group_api import CommitMember, GroupApi
from annal.broker.groups.group_membership import GroupMembership
from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.kafka.data import NO_DEADLINE
from annal.broker.metadata_cache import MetadataCache
from annal.broker.requests import group_types as gt
from annal.kafkaproto.wire import Request, millis
from annal.security.session import Session

from annal import errors
from annal.topic_partition import TopicPartition

COMMIT_TIMEOUT_MS = 30_000
GROUP_KEY = gt.GROUP_KEY
NONE = errors.NONE.number


class GroupApis:
    """See the module docstring."""

    def __init__(
        self,
        groups: GroupApi,
        membership: GroupMembership,
        coordinator: OffsetsCoordinator,
        metadata: MetadataCache,
    ) -> None:
        self._groups = groups
        self._membership = membership
        self._coordinator = coordinator
        self._metadata = metadata

    def register(self, apis: KafkaApis) -> None:
        apis.add(8, "OffsetCommit", (2, 8), self.offset_commit)
        apis.add(9, "OffsetFetch", (1, 7), self.offset_fetch)
        apis.add(10, "FindCoordinator", (0, 4), self.find_coordinator)
        apis.add(28, "TxnOffsetCommit", (0, 3), self.txn_offset_commit)
        apis.add(11, "JoinGroup", (0, 7), self.join_group)
        apis.add(12, "Heartbeat", (0, 4), self.heartbeat)
        apis.add(13, "LeaveGroup", (0, 4), self.leave_group)
        apis.add(14, "SyncGroup", (0, 5), self.sync_group)
        apis.add(15, "DescribeGroups", (0, 5), self.describe_groups)
        apis.add(16, "ListGroups", (0, 4), self.list_groups)
        apis.add(42, "DeleteGroups", (0, 2), self.delete_groups)
        apis.add(47, "OffsetDelete", (0, 0), self.offset_delete)

    # -- finding the coordinator -------------------------------------------------------

    async def find_coordinator(self, request: Request) -> Values:
        body = request.body
        keys = list(getattr(body, "coordinator_keys", ()) or ())
        batched = request.head.api_version >= 4
        if not batched:
            keys = [body.key]
        key_type = getattr(body, "key_type", GROUP_KEY)
        found = [await self._coordinator_of(k, key_type, request.session) for k in keys]
        if batched:
            return {"throttle_time": 0, "coordinators": found}
        return {"throttle_time": 0, **found[0]}

    async def _coordinator_of(self, key: str, key_type: int, session: Session) -> dict[str, Any]:
        listener = session.listener or "PLAINTEXT"
        answer = await self._groups.find_coordinator(
            gt.FindCoordinatorRequest(key, key_type), session
        )
        found = answer.coordinator
        broker = None if found is None else self._metadata.snapshot().brokers.get(found.node_id)
        endpoint = None if broker is None else broker.kafka_endpoint_for(listener)
        if answer.error == NONE and endpoint is None:
            answer = gt.FindCoordinatorResponse(
                errors.COORDINATOR_NOT_AVAILABLE.number,
                f"the coordinator has no {listener} listener",
            )
        ok = answer.error == NONE and broker is not None and endpoint is not None
        return {
            "key": key,
            "error_code": answer.error,
            "error_message": answer.error_message or None,
            "node_id": broker.broker_id if ok and broker else -1,
            "host": endpoint.host if ok and endpoint else "",
            "port": endpoint.port if ok and endpoint else -1,
        }

    # -- membership --------------------------------------------------------------------

    async def join_group(self, request: Request) -> Values:
        body = request.body
        session_ms = millis(body.session_timeout)
        rebalance = getattr(body, "rebalance_timeout", None)
        result = await self._groups.join(
            request.session,
            body.group_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            request.client_id or "",
            request.client_host,
            session_ms,
            millis(rebalance) if rebalance is not None else session_ms,
            body.protocol_type,
            [(p.name, bytes(p.metadata)) for p in body.protocols],
            member_id_required=request.head.api_version >= 4,
        )
        return {
            "throttle_time": 0,
            "error_code": result.error.number,
            "generation_id": result.generation,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol or ("" if request.head.api_version < 7 else None),
            "leader": result.leader,
            "member_id": result.member_id,
            "members": [
                {"member_id": m, "group_instance_id": i, "metadata": data}
                for m, i, data in result.members
            ],
        }

    async def sync_group(self, request: Request) -> Values:
        body = request.body
        result = await self._groups.sync(
            request.session,
            body.group_id,
            body.generation_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            {a.member_id: bytes(a.assignment) for a in body.assignments},
        )
        return {
            "throttle_time": 0,
            "error_code": result.error.number,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol,
            "assignment": result.assignment,
        }

    async def heartbeat(self, request: Request) -> Values:
        body = request.body
        error = self._groups.heartbeat(
            request.session, body.group_id, body.generation_id, body.member_id,
            getattr(body, "group_instance_id", None),
        )  # fmt: skip
        return {"throttle_time": 0, "error_code": error.number}

    async def leave_group(self, request: Request) -> Values:
        body = request.body
        if request.head.api_version < 3:
            leaving = [(body.member_id, None)]
        else:
            leaving = [(m.member_id, m.group_instance_id) for m in body.members]
        error, results = self._groups.leave(request.session, body.group_id, leaving)
        if request.head.api_version < 3 and error == errors.NONE:
            error = results[0] if results else errors.UNKNOWN_MEMBER_ID
        return {
            "throttle_time": 0,
            "error_code": error.number,
            "members": [
                {"member_id": m, "group_instance_id": i, "error_code": e.number}
                for (m, i), e in zip(leaving, results, strict=False)
            ],
        }

    # -- offsets -----------------------------------------------------------------------

    async def offset_commit(self, request: Request) -> Values:
        body = request.body
        member = CommitMember(
            getattr(body, "generation_id_or_member_epoch", -1),
            getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None),
        )
        ask = gt.OffsetCommitRequest(body.group_id, _commit_topics(body), COMMIT_TIMEOUT_MS)
        answer = await self._groups.offset_commit(
            ask, NO_DEADLINE, request.session, member, known_partitions_only=True
        )
        return {
            "throttle_time": 0,
            "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": p.error}
                    for p in t.partitions]}
                for t in answer.topics
            ],
        }  # fmt: skip

    async def txn_offset_commit(self, request: Request) -> Values:
        body = request.body
        ask = gt.TxnOffsetCommitRequest(
            body.transactional_id,
            body.group_id,
            body.producer_id,
            body.producer_epoch,
            _commit_topics(body),
            getattr(body, "member_id", ""),  # v3+ (KIP-447)
            getattr(body, "generation_id", -1),
            getattr(body, "group_instance_id", None) or None,
        )
        answer = await self._groups.txn_offset_commit(ask, NO_DEADLINE, request.session)
        old = request.head.api_version < 2  # its clients may not retry a loading one
        loading = errors.COORDINATOR_LOAD_IN_PROGRESS.number
        unavailable = errors.COORDINATOR_NOT_AVAILABLE.number
        return {
            "throttle_time": 0,
            "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index,
                     "error_code": unavailable if old and p.error == loading else p.error}
                    for p in t.partitions]}
                for t in answer.topics
            ],
        }  # fmt: skip

    async def offset_fetch(self, request: Request) -> Values:
        body = request.body
        ask = gt.OffsetFetchRequest(
            body.group_id,
            [gt.OffsetFetchTopic(t.name, list(t.partition_indexes)) for t in body.topics or ()],
            bool(getattr(body, "require_stable", False)),  # v7+ (KIP-447)
        )
        answer = self._groups.offset_fetch(ask, request.session)
        if request.head.api_version < 2 and answer.error != NONE:
            # no top-level code before v2: each partition asked about carries it
            return {"throttle_time": 0, "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": "",
                     "error_code": answer.error}
                    for p in t.partition_indexes]}
                for t in body.topics or ()
            ]}  # fmt: skip
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index,
                     "committed_offset": p.committed_offset,
                     "committed_leader_epoch": p.committed_leader_epoch, "metadata": p.metadata,
                     "error_code": p.error}
                    for p in t.partitions]}
                for t in answer.topics
            ],
        }  # fmt: skip

    async def offset_delete(self, request: Request) -> Values:
        body = request.body
        wanted = [
            TopicPartition(t.name, p.partition_index) for t in body.topics for p in t.partitions
        ]
        error, outcome = await self._groups.offset_delete(request.session, body.group_id, wanted)
        topics = []
        for t in body.topics:
            partitions = [
                {"partition_index": p.partition_index, "error_code": code.number}
                for p in t.partitions
                if (code := outcome.get(TopicPartition(t.name, p.partition_index))) is not None
            ]
            if partitions:
                topics.append({"name": t.name, "partitions": partitions})
        return {"throttle_time": 0, "error_code": error.number, "topics": topics}

    # -- describing, listing, deleting ------------------------------------------------

    async def describe_groups(self, request: Request) -> Values:
        described = []
        for name in request.body.groups:
            error, group = self._groups.describe(request.session, name)
            if group is None:
                # Kafka's answers: no state with an error; a group it does not know
                # is Dead; one with only committed offsets is Empty
                state = ""
                if error == errors.NONE:
                    state = "Empty" if self._coordinator.has_offsets(name) else "Dead"
                described.append({"error_code": error.number, "group_id": name,
                                  "group_state": state, "protocol_type": "",
                                  "protocol_data": "", "members": []})  # fmt: skip
                continue
            described.append({
                "error_code": errors.NONE.number, "group_id": name,
                "group_state": group.state.value, "protocol_type": group.protocol_type or "",
                "protocol_data": group.protocol or "",
                "members": [
                    {"member_id": m.member_id, "group_instance_id": m.instance_id,
                     "client_id": m.client_id, "client_host": m.client_host,
                     "member_metadata": m.metadata(group.protocol),
                     "member_assignment": m.assignment}
                    for m in group.members.values()
                ],
            })  # fmt: skip
        if getattr(request.body, "include_authorized_operations", False):  # v3+ (KIP-430)
            for d in described:
                if d["error_code"] == errors.NONE.number:
                    d["authorized_operations"] = self._groups.authorized_operations(
                        request.session, d["group_id"]
                    )
        return {"throttle_time": 0, "groups": described}

    async def list_groups(self, request: Request) -> Values:
        states = getattr(request.body, "states_filter", None) or ()  # v4+ (KIP-518)
        answer = self._groups.list_groups(gt.ListGroupsRequest(list(states)), request.session)
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "groups": [
                {"group_id": g.group_id, "protocol_type": g.protocol_type,
                 "group_state": g.group_state}
                for g in answer.groups
            ],
        }  # fmt: skip

    async def delete_groups(self, request: Request) -> Values:
        results = []
        for name in request.body.groups_names:
            error = await self._groups.delete(request.session, name)
            results.append({"group_id": name, "error_code": error.number})
        return {"throttle_time": 0, "results": results}


def _commit_topics(body: Any) -> list[gt.OffsetCommitTopic]:
    """The offsets an OffsetCommit or a TxnOffsetCommit carries."""
    return [
        gt.OffsetCommitTopic(
            t.name,
            [
                gt.OffsetCommitPartition(
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),  # OffsetCommit v6+, Txn v2+
                    p.committed_metadata or "",
                )
                for p in t.partitions
            ],
        )
        for t in body.topics
    ]
