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
  the rebalance completes the group's generation is one higher and the
  leader (the first member to join) gets every member's metadata to assign
  partitions with (client-side assignment).
* The protocol is chosen as Kafka's ``GroupMetadata.selectProtocol`` does:
  the candidates are the protocols every member supports, each member votes
  for the first candidate in its own order of preference, and the most votes
  win (a tie goes to the leader's preference).  The group keeps a count of
  the members supporting each protocol, so a join costs time in proportion
  to the protocols it names, however many the other members name; a join
  naming more than ``MAX_PROTOCOLS`` is refused (INVALID_REQUEST).
* SyncGroup from the leader carries the assignment of every member; it is
  stored in ``__consumer_offsets`` (Kafka's group metadata record, key v2
  and value v3, with acks=all) before any member gets its part.
* Heartbeats keep a member: each member has a session timer, reset by its
  heartbeats, joins and syncs; a member whose timer runs out leaves and the
  group rebalances.  During a rebalance heartbeats answer
  REBALANCE_IN_PROGRESS, which tells the member to join again.
* Static members (``group.instance.id``, KIP-345) keep their place across
  restarts: a join with a known instance id and no member id replaces the
  old member id and keeps its assignment.  In a stable group whose protocol
  the new member's protocols leave as it is, the group (with the new member
  id) is stored and the member gets the current generation back without a
  rebalance, the leader too: as Kafka answers JoinGroup before v9, the
  answer names the leader's old member id and no members, so a rejoining
  leader runs no assignment and takes its own from SyncGroup.  Otherwise
  (the protocol would change, or the group is not stable) it joins a
  rebalance.
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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from annal.broker.groups.coordinator import OffsetsCoordinator
from annal.broker.groups.offsets_schema import GroupMetadataValue, MemberMetadata

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

MIN_SESSION_TIMEOUT_MS = 6_000  # Kafka's group.min.session.timeout.ms
MAX_SESSION_TIMEOUT_MS = 1_800_000  # Kafka's group.max.session.timeout.ms
STORE_TIMEOUT_MS = 30_000
# Protocols one JoinGroup may name.  Kafka sets no limit; its clients name one
# to three (their assignors).  Past this a join is refused as malformed.
MAX_PROTOCOLS = 10_000


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
    # protocol name -> its metadata (the first of a name named twice)
    by_name: dict[str, bytes] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_name = _by_name(self.protocols)

    def set_protocols(self, protocols: Sequence[tuple[str, bytes]]) -> None:
        self.protocols = list(protocols)
        self.by_name = _by_name(self.protocols)

    def metadata(self, protocol: str | None) -> bytes:
        return b"" if protocol is None else self.by_name.get(protocol, b"")


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
    # protocol name -> how many members support it (each member counted once)
    supported: Counter[str] = field(default_factory=Counter)


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
            _add(group, member)
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
        if len(protocols) > MAX_PROTOCOLS:
            logger.warning(
                "group %s: a join from %s (%s) names %d protocols, more than the %d allowed: "
                "refused", name, client_id, client_host, len(protocols), MAX_PROTOCOLS,
            )  # fmt: skip
            return JoinResult(errors.INVALID_REQUEST, member_id=member_id)
        names = [p for p, _ in protocols]
        if not protocol_type or not names or (
            group.members and (protocol_type != group.protocol_type
                               or not _supported_by_others(group, names, skip=member_id))
        ):  # fmt: skip
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        member = group.members.get(member_id) if member_id else None
        pending = member is None and not instance_id and member_id in group.pending
        if member_id and instance_id and group.instances.get(instance_id) not in (None, member_id):
            # a newer member holds the instance id: this one was replaced (KIP-345)
            return JoinResult(errors.FENCED_INSTANCE_ID, member_id=member_id)
        if member_id and member is None and not pending:
            return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)
        if member is not None and instance_id and group.instances.get(instance_id) != member_id:
            return JoinResult(errors.FENCED_INSTANCE_ID, member_id=member_id)
        if member is None and instance_id and instance_id in group.instances:
            replaced = await self._static_rejoin(
                group, instance_id, client_id, client_host,
                session_timeout_ms, rebalance_timeout_ms, protocols,
            )  # fmt: skip
            if isinstance(replaced, JoinResult):
                return replaced
            member = replaced  # the protocol would change, or a group not stable: rebalance
        elif member is None:
            if not member_id and member_id_required and not instance_id:
                return self._pend(group, _new_member_id(client_id), session_timeout_ms)
            if pending:
                group.pending.pop(member_id).cancel()  # back with its id: a member now
            member = Member(
                member_id or _new_member_id(client_id), instance_id, client_id, client_host,
                session_timeout_ms, rebalance_timeout_ms, list(protocols),
            )  # fmt: skip
            _add(group, member)
        elif (
            member_id
            and group.state == GroupState.STABLE
            and member.member_id != group.leader
            and list(protocols) == member.protocols
        ):
            self._touch(group, member)  # nothing changed: the current generation holds
            return self._join_result(group, member)
        if list(protocols) != member.protocols:
            _set_protocols(group, member, protocols)
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

    async def _static_rejoin(
        self,
        group: Group,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: Sequence[tuple[str, bytes]],
    ) -> JoinResult | Member:
        """A known group.instance.id back with no member id (KIP-345): it takes a new
        member id and the old one's place and assignment (Kafka's
        ``updateStaticMemberAndRebalance``).  In a stable group whose protocol stays
        as it is, the group is stored with the new member id and the member gets
        the current generation back, naming the leader as it was before (its old
        member id, when the member is the leader) and no members, so that it runs
        no assignment; otherwise the new member is returned, for ``join`` to go on
        with into a rebalance."""
        old = group.members[group.instances[instance_id]]
        leader_before = group.leader or ""
        member = Member(
            _new_member_id(client_id), instance_id, client_id, client_host,
            session_timeout_ms, rebalance_timeout_ms, list(protocols), old.assignment,
        )  # fmt: skip
        self._replace(group, old, member)
        self._touch(group, member)
        logger.info(
            "group %s: static member %s rejoins as %s in place of %s",
            group.name, instance_id, member.member_id, old.member_id,
        )  # fmt: skip
        if group.state != GroupState.STABLE or self._select_protocol(group) != group.protocol:
            return member
        generation = group.generation
        error, message = await self._store(group)
        if group.members.get(member.member_id) is not member:  # replaced or gone meanwhile
            fenced = group.instances.get(instance_id) not in (None, member.member_id)
            return JoinResult(errors.FENCED_INSTANCE_ID if fenced else errors.UNKNOWN_MEMBER_ID)
        if error != errors.NONE:
            logger.warning(
                "group %s: storing static member %s's new member id failed (%s: %s); "
                "the old one stays", group.name, instance_id, error, message,
            )  # fmt: skip
            if group.instances.get(instance_id) == member.member_id:
                self._replace(group, member, old, answer=False)
                self._touch(group, old)
            return JoinResult(error)
        if group.state != GroupState.STABLE or group.generation != generation:
            return member  # a rebalance began meanwhile: the member joins it
        return JoinResult(
            errors.NONE, group.generation, group.protocol_type, group.protocol,
            leader_before, member.member_id,
        )  # fmt: skip

    def _replace(self, group: Group, old: Member, new: Member, answer: bool = True) -> None:
        """``new`` takes ``old``'s place (its instance id, and the lead if ``old`` led);
        ``old``'s pending join and sync are answered FENCED_INSTANCE_ID if ``answer``."""
        self._remove(group, old)
        if answer:
            _answer_join(old, JoinResult(errors.FENCED_INSTANCE_ID))
            _answer_sync(old, SyncResult(errors.FENCED_INSTANCE_ID))
        _add(group, new)
        if group.leader == old.member_id:
            group.leader = new.member_id

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

    def _select_protocol(self, group: Group) -> str:
        """Kafka's ``GroupMetadata.selectProtocol``: of the protocols every member
        supports, the one most members name first among them (a tie goes to the
        leader's order).  Linear in the protocols the members name."""
        size = len(group.members)
        candidates = {name for name, count in group.supported.items() if count == size}
        votes: Counter[str] = Counter()
        for m in group.members.values():
            vote = next((name for name, _ in m.protocols if name in candidates), None)
            if vote is not None:
                votes[vote] += 1
        leader = group.members.get(group.leader or "") or next(iter(group.members.values()))
        if not votes:
            return leader.protocols[0][0]
        most = max(votes.values())
        return next(name for name, _ in leader.protocols if votes.get(name) == most)

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
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol = self._select_protocol(group)
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
        if instance_id and group.instances.get(instance_id) not in (None, member_id):
            # a newer member holds the instance id: this one was replaced (KIP-345)
            return errors.FENCED_INSTANCE_ID, group, None
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
        if group.members.get(member.member_id) is member:
            del group.members[member.member_id]
            _count_protocols(group, member, -1)
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

    def check_txn_commit(
        self, name: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Whether a transactional commit (TxnOffsetCommit v3, KIP-447) may go ahead,
        as Kafka's GroupCoordinator.doTxnCommitOffsets checks it: a static member's
        instance id held by another member id is FENCED_INSTANCE_ID; a member id,
        when given, must be the group's (UNKNOWN_MEMBER_ID); a generation, when
        not -1, must be the group's (ILLEGAL_GENERATION: a group never stored is
        at generation 0).  The group's state does not matter."""
        error, group = self._group(name, create=False)
        if error != errors.NONE:
            return error
        if group is not None and instance_id:
            holder = group.instances.get(instance_id)
            if holder is not None and holder != member_id:
                return errors.FENCED_INSTANCE_ID
        if member_id and (group is None or member_id not in group.members):
            return errors.UNKNOWN_MEMBER_ID
        current = 0 if group is None else group.generation
        if generation >= 0 and generation != current:
            return errors.ILLEGAL_GENERATION
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


def _by_name(protocols: Sequence[tuple[str, bytes]]) -> dict[str, bytes]:
    by_name: dict[str, bytes] = {}
    for name, metadata in protocols:
        by_name.setdefault(name, metadata)
    return by_name


def _count_protocols(group: Group, member: Member, delta: int) -> None:
    """Count ``member``'s protocols in (1) or out of (-1) the group's support counts."""
    supported = group.supported
    for name in member.by_name:
        count = supported[name] + delta
        if count > 0:
            supported[name] = count
        else:
            del supported[name]


def _add(group: Group, member: Member) -> None:
    group.members[member.member_id] = member
    _count_protocols(group, member, 1)
    if member.instance_id:
        group.instances[member.instance_id] = member.member_id


def _set_protocols(group: Group, member: Member, protocols: Sequence[tuple[str, bytes]]) -> None:
    counted = group.members.get(member.member_id) is member
    if counted:
        _count_protocols(group, member, -1)
    member.set_protocols(protocols)
    if counted:
        _count_protocols(group, member, 1)


def _supported_by_others(group: Group, names: Sequence[str], skip: str = "") -> bool:
    """Whether some protocol of ``names`` is supported by every member but ``skip``
    (Kafka's ``GroupMetadata.supportsProtocols``); linear in ``names``."""
    skipped = group.members.get(skip) if skip else None
    others = len(group.members) - (skipped is not None)
    return any(
        group.supported.get(n, 0) - (skipped is not None and n in skipped.by_name) == others
        for n in names
    )


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
