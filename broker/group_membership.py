"""Kafka's classic group membership protocol, for the groups of Kafka's clients.

The coordinator of a group (the leader of its ``__consumer_offsets``
partition, ``coordinator.py``) keeps each group's members and moves the group
through Kafka's states::

    EMPTY ──join──► PREPARING_REBALANCE ──every member joined, or the
      ▲                 ▲   │             rebalance timeout──► COMPLETING_REBALANCE
      │   leave, expiry,│   │                                        │ the leader's
      │   new member ───┘   └── no member left ──► EMPTY             │ SyncGroup stored
      └──── last member gone ◄──── STABLE ◄──────────────────────────┘

* JoinGroup gives a new member its id (``<client.id>-<uuid>``) and waits
  until the rebalance completes.  From JoinGroup v4 on (KIP-394) a dynamic
  member (no ``group.instance.id``) that joins with no member id gets its
  new id in a MEMBER_ID_REQUIRED answer instead; the id is *pending*, not
  yet a member (no rebalance waits for it), until the member joins again
  with it, and forgotten if it has not within its session timeout.  Once
  the rebalance completes the group's generation is one higher, the
  protocol is the first of the leader's that every member supports, and the
  leader (the first member to join) gets every member's metadata to assign
  partitions with (client-side assignment).
* SyncGroup from the leader carries the assignment of every member; it is
  stored in ``__consumer_offsets`` (Kafka's group metadata record, key v2
  and value v3, with acks=all) before any member gets its part.
* Heartbeats keep a member: each member has a session timer, reset by its
  heartbeats, joins and syncs; a member whose timer runs out leaves and the
  group rebalances.  During a rebalance heartbeats answer
  REBALANCE_IN_PROGRESS, which tells the member to join again.
* Static members (``group.instance.id``) keep their place across restarts:
  a join with a known instance id and no member id replaces the old member
  id, and in a stable group a follower gets the current generation back
  without a rebalance.
* A coordinator that takes over a group (the offsets partition's leader
  moved) loads it from the last stored record, STABLE with its members and
  their assignments, and gives every member a full session to heartbeat.

Thread safety: runs on the broker's event loop only (timers are the loop's).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from annal.broker.coordinator import OffsetsCoordinator
from annal.broker.offsets_schema import GroupMetadataValue, MemberMetadata

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

MIN_SESSION_TIMEOUT_MS = 6_000  # Kafka's group.min.session.timeout.ms
MAX_SESSION_TIMEOUT_MS = 1_800_000  # Kafka's group.max.session.timeout.ms
STORE_TIMEOUT_MS = 30_000


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # the leader's: id, instance, metadata


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[SyncResult] | None = None
    expiry: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class Group:
    name: str
    term: int
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # id -> its expiry
    rebalance: asyncio.TimerHandle | None = None


class GroupMembership:
    """See the module docstring."""

    def __init__(
        self,
        coordinator: OffsetsCoordinator,
        initial_rebalance_delay_ms: int,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._coordinator = coordinator
        self._initial_delay_ms = initial_rebalance_delay_ms
        self._clock_ms = clock_ms
        self._groups: dict[str, Group] = {}
        self._storing: set[asyncio.Future[tuple[ErrorCode, str]]] = set()  # emptied groups

    # -- finding a group -------------------------------------------------------------

    def _group(self, name: str, create: bool = True) -> tuple[ErrorCode, Group | None]:
        state, term = self._coordinator.term(name)
        if state != errors.NONE:
            self._drop(name, state)
            return state, None
        group = self._groups.get(name)
        if group is not None and group.term == term:
            return errors.NONE, group
        self._drop(name, errors.NOT_COORDINATOR)
        stored = self._coordinator.group_metadata(name)
        if stored is None and not create:
            return errors.NONE, None
        group = self._groups[name] = Group(name, term)
        if stored is not None:
            self._restore(group, stored)
        return errors.NONE, group

    def _restore(self, group: Group, stored: GroupMetadataValue) -> None:
        group.generation = stored.generation
        group.protocol_type = stored.protocol_type or None
        group.protocol = stored.protocol
        group.leader = stored.leader
        for m in stored.members:
            member = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.session_timeout_ms, m.rebalance_timeout_ms,
                [(stored.protocol or "", m.subscription)], m.assignment,
            )  # fmt: skip
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.instances[m.group_instance_id] = m.member_id
            self._touch(group, member)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    def _drop(self, name: str, error: ErrorCode) -> None:
        """Forget an in-memory group whose coordinator term ended."""
        group = self._groups.pop(name, None)
        if group is None:
            return
        if group.rebalance is not None:
            group.rebalance.cancel()
        for expiry in group.pending.values():
            expiry.cancel()
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()
            _answer_join(member, JoinResult(error))
            _answer_sync(member, SyncResult(error))

    # -- JoinGroup -------------------------------------------------------------------

    async def join(
        self,
        name: str,
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
        """A member's JoinGroup; ``member_id_required`` (JoinGroup v4+) has a new
        dynamic member sent back for its id first (MEMBER_ID_REQUIRED)."""
        error, group = self._group(name)
        if group is None:
            return JoinResult(error, member_id=member_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(errors.INVALID_SESSION_TIMEOUT, member_id=member_id)
        names = [p for p, _ in protocols]
        if not protocol_type or not names or (
            group.members and (protocol_type != group.protocol_type
                               or not self._common(group, names, skip=member_id))
        ):  # fmt: skip
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        member = group.members.get(member_id) if member_id else None
        pending = member is None and not instance_id and member_id in group.pending
        if member_id and member is None and not pending:
            return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)
        if member is not None and instance_id and group.instances.get(instance_id) != member_id:
            return JoinResult(errors.FENCED_INSTANCE_ID, member_id=member_id)
        if member is None and instance_id and instance_id in group.instances:
            replaced = self._static_rejoin(
                group, instance_id, client_id, client_host,
                session_timeout_ms, rebalance_timeout_ms, protocols,
            )  # fmt: skip
            if isinstance(replaced, JoinResult):
                return replaced
            member = replaced  # the leader's place, or a group not stable: rebalance
        elif member is None:
            if not member_id and member_id_required and not instance_id:
                return self._pend(group, _new_member_id(client_id), session_timeout_ms)
            if pending:
                group.pending.pop(member_id).cancel()  # back with its id: a member now
            member = Member(
                member_id or _new_member_id(client_id), instance_id, client_id, client_host,
                session_timeout_ms, rebalance_timeout_ms, list(protocols),
            )  # fmt: skip
            group.members[member.member_id] = member
            if instance_id:
                group.instances[instance_id] = member.member_id
        elif (
            member_id
            and group.state == GroupState.STABLE
            and member.member_id != group.leader
            and list(protocols) == member.protocols
        ):
            self._touch(group, member)  # nothing changed: the current generation holds
            return self._join_result(group, member)
        member.protocols = list(protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if member.expiry is not None:
            member.expiry.cancel()
        _answer_join(member, JoinResult(errors.REBALANCE_IN_PROGRESS))  # a duplicate join
        joining = member.joining = asyncio.get_running_loop().create_future()
        group.protocol_type = protocol_type
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        if group.generation and all(m.joining is not None for m in group.members.values()):
            self._complete_join(group)  # every member is in: no need to wait any longer
        result: JoinResult = await joining
        return result

    def _static_rejoin(
        self,
        group: Group,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: Sequence[tuple[str, bytes]],
    ) -> JoinResult | Member:
        """A known group.instance.id back with no member id: it takes a new member id
        and the old one's place (and assignment).  A follower of a stable group gets
        the current generation back at once; otherwise the new member joins a
        rebalance like any other (returned, for ``join`` to go on with)."""
        old = group.members.pop(group.instances[instance_id])
        if old.expiry is not None:
            old.expiry.cancel()
        _answer_join(old, JoinResult(errors.FENCED_INSTANCE_ID))
        _answer_sync(old, SyncResult(errors.FENCED_INSTANCE_ID))
        member = Member(
            _new_member_id(client_id), instance_id, client_id, client_host,
            session_timeout_ms, rebalance_timeout_ms, list(protocols), old.assignment,
        )  # fmt: skip
        group.members[member.member_id] = member
        group.instances[instance_id] = member.member_id
        if group.leader == old.member_id:
            group.leader = member.member_id
        if group.state == GroupState.STABLE and member.member_id != group.leader:
            self._touch(group, member)
            return self._join_result(group, member)
        return member

    def _pend(self, group: Group, member_id: str, session_timeout_ms: int) -> JoinResult:
        """Hand out a member id to join again with; it is pending until then."""
        group.pending[member_id] = asyncio.get_running_loop().call_later(
            session_timeout_ms / 1000, self._pending_expired, group, member_id, session_timeout_ms
        )
        logger.info(
            "group %s: member id %s handed out, pending its next join", group.name, member_id
        )
        return JoinResult(errors.MEMBER_ID_REQUIRED, member_id=member_id)

    def _pending_expired(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        if group.pending.pop(member_id, None) is not None:
            logger.info(
                "group %s: pending member %s did not join again within %d ms: forgotten",
                group.name, member_id, session_timeout_ms,
            )  # fmt: skip

    def _common(self, group: Group, names: Sequence[str], skip: str = "") -> list[str]:
        """Protocols (in ``names``' order) that every other member supports too."""
        others = [m for m in group.members.values() if m.member_id != skip]
        return [n for n in names if all(any(n == p for p, _ in m.protocols) for m in others)]

    def _prepare_rebalance(self, group: Group) -> None:
        for member in group.members.values():
            _answer_sync(member, SyncResult(errors.REBALANCE_IN_PROGRESS))
        was_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        if group.rebalance is not None:
            group.rebalance.cancel()
        delay_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if was_empty:
            delay_ms = min(self._initial_delay_ms, delay_ms)
        group.rebalance = asyncio.get_running_loop().call_later(
            delay_ms / 1000, self._complete_join, group
        )

    def _complete_join(self, group: Group) -> None:
        if group.rebalance is not None:
            group.rebalance.cancel()
            group.rebalance = None
        current = self._groups.get(group.name) is group
        if group.state != GroupState.PREPARING_REBALANCE or not current:
            return
        for member in [m for m in group.members.values() if m.joining is None]:
            self._remove(group, member)
        group.generation += 1
        if not group.members:
            group.state, group.protocol, group.leader = GroupState.EMPTY, None, None
            task = asyncio.ensure_future(self._store(group))
            self._storing.add(task)
            task.add_done_callback(self._storing.discard)
            return
        first = next(iter(group.members.values()))
        if group.leader not in group.members:
            group.leader = first.member_id
        leader = group.members[group.leader or first.member_id]
        common = self._common(group, [p for p, _ in leader.protocols])
        group.protocol = common[0] if common else leader.protocols[0][0]
        group.state = GroupState.COMPLETING_REBALANCE
        for member in group.members.values():
            member.assignment = b""
            _answer_join(member, self._join_result(group, member))
            self._touch(group, member)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        everyone = tuple(
            (m.member_id, m.instance_id, m.metadata(group.protocol)) for m in group.members.values()
        )
        return JoinResult(
            errors.NONE, group.generation, group.protocol_type, group.protocol,
            group.leader or "", member.member_id,
            everyone if member.member_id == group.leader else (),
        )  # fmt: skip

    # -- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------

    async def sync(
        self,
        name: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        error, group, member = self._member(name, generation, member_id, instance_id)
        if group is None or member is None:
            return SyncResult(error)
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(errors.REBALANCE_IN_PROGRESS)
        self._touch(group, member)
        if group.state == GroupState.STABLE:
            return SyncResult(errors.NONE, group.protocol_type, group.protocol, member.assignment)
        syncing = member.syncing = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            stored_generation = group.generation
            error, _ = await self._store(group)
            still = group.state == GroupState.COMPLETING_REBALANCE
            if group.generation == stored_generation and still:
                if error != errors.NONE:
                    for m in group.members.values():
                        _answer_sync(m, SyncResult(error))
                    self._prepare_rebalance(group)
                else:
                    group.state = GroupState.STABLE
                    for m in group.members.values():
                        answer = SyncResult(
                            errors.NONE, group.protocol_type, group.protocol, m.assignment
                        )
                        _answer_sync(m, answer)
        synced: SyncResult = await syncing
        return synced

    def heartbeat(
        self, name: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        error, group, member = self._member(name, generation, member_id, instance_id)
        if group is None or member is None:
            return error
        self._touch(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return errors.REBALANCE_IN_PROGRESS
        return errors.NONE

    def leave(
        self, name: str, leaving: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, an error per (member id, instance id) leaving)."""
        error, group = self._group(name, create=False)
        if group is None:
            return (error if error != errors.NONE else errors.UNKNOWN_MEMBER_ID), []
        results = []
        for member_id, instance_id in leaving:
            if instance_id and not member_id:
                member_id = group.instances.get(instance_id, "")
            member = group.members.get(member_id)
            if member is None and member_id in group.pending:
                group.pending.pop(member_id).cancel()  # it will not join after all
                results.append(errors.NONE)
            elif member is None:
                results.append(errors.UNKNOWN_MEMBER_ID)
            elif instance_id and member.instance_id != instance_id:
                results.append(errors.FENCED_INSTANCE_ID)
            else:
                results.append(errors.NONE)
                self._member_gone(group, member)
        return errors.NONE, results

    def _member(
        self, name: str, generation: int, member_id: str, instance_id: str | None
    ) -> tuple[ErrorCode, Group | None, Member | None]:
        error, group = self._group(name, create=False)
        if group is None:
            return (error if error != errors.NONE else errors.UNKNOWN_MEMBER_ID), None, None
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID, group, None
        if instance_id and group.instances.get(instance_id) != member_id:
            return errors.FENCED_INSTANCE_ID, group, None
        if generation != group.generation:
            return errors.ILLEGAL_GENERATION, group, None
        return errors.NONE, group, member

    def _touch(self, group: Group, member: Member) -> None:
        """Restart the member's session timer."""
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expired, group, member
        )

    def _expired(self, group: Group, member: Member) -> None:
        if self._groups.get(group.name) is group and group.members.get(member.member_id) is member:
            self._member_gone(group, member)

    def _member_gone(self, group: Group, member: Member) -> None:
        self._remove(group, member)
        _answer_join(member, JoinResult(errors.UNKNOWN_MEMBER_ID))
        _answer_sync(member, SyncResult(errors.UNKNOWN_MEMBER_ID))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state == GroupState.PREPARING_REBALANCE and all(
            m.joining is not None for m in group.members.values()
        ):
            self._complete_join(group)

    def _remove(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id and group.instances.get(member.instance_id) == member.member_id:
            del group.instances[member.instance_id]
        if member.expiry is not None:
            member.expiry.cancel()

    async def _store(self, group: Group) -> tuple[ErrorCode, str]:
        value = GroupMetadataValue(
            group.protocol_type or "", group.generation, group.protocol, group.leader,
            self._clock_ms(),
            tuple(
                MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata(group.protocol), m.assignment)
                for m in group.members.values()
            ),
        )  # fmt: skip
        return await self._coordinator.store_group(group.name, value, STORE_TIMEOUT_MS)

    # -- offsets, descriptions, listing, deletion -------------------------------------

    def check_commit(
        self, name: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Whether a commit with this generation and member may go ahead (Kafka's
        rules: a generation of -1 is a standalone commit, for groups with no members)."""
        error, group = self._group(name, create=False)
        if error != errors.NONE:
            return error
        if group is None or not group.members:
            return errors.NONE if generation < 0 else errors.ILLEGAL_GENERATION
        if generation < 0 and not member_id:
            return errors.UNKNOWN_MEMBER_ID
        error, _, member = self._member(name, generation, member_id, instance_id)
        if member is None:
            return error
        if group.state == GroupState.COMPLETING_REBALANCE:
            return errors.REBALANCE_IN_PROGRESS
        self._touch(group, member)
        return errors.NONE

    def describe(self, name: str) -> tuple[ErrorCode, Group | None]:
        return self._group(name, create=False)

    def listing(self) -> list[tuple[str, str, str]]:
        """(group, protocol type, state) of every group this broker coordinates."""
        out: dict[str, tuple[str, str, str]] = {}
        for name in self._coordinator.metadata_groups() + self._coordinator.groups():
            if name in out:
                continue
            error, group = self._group(name, create=False)
            if error != errors.NONE:
                continue
            if group is None:
                out[name] = (name, "", GroupState.EMPTY.value)
            else:
                out[name] = (name, group.protocol_type or "", group.state.value)
        return sorted(out.values())

    async def delete(self, name: str) -> ErrorCode:
        error, group = self._group(name, create=False)
        if error != errors.NONE:
            return error
        if group is not None and group.members:
            return errors.NON_EMPTY_GROUP
        known = group is not None or name in self._coordinator.groups()
        if not known:
            return errors.GROUP_ID_NOT_FOUND
        # the metadata tombstone takes the group's committed offsets with it
        error, _ = await self._coordinator.store_group(name, None, STORE_TIMEOUT_MS)
        if error == errors.NONE:
            self._groups.pop(name, None)
        return error


def _new_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


def _answer_join(member: Member, result: JoinResult) -> None:
    if member.joining is not None and not member.joining.done():
        member.joining.set_result(result)
    member.joining = None


def _answer_sync(member: Member, result: SyncResult) -> None:
    if member.syncing is not None and not member.syncing.done():
        member.syncing.set_result(result)
    member.syncing = None
