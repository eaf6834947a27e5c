"""The controller's decisions at their seam: a context in, ZooKeeper writes and
broker requests out (the state machines with an in-memory store, the request
batch with recorded senders).  Whole-process behaviour is in tests/broker."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from annal.controller.context import ControllerContext
from annal.controller.election import (
    Candidates,
    Reason,
    ReplicaState,
    elect,
)
from annal.controller.election import (
    PartitionState as State,
)
from annal.controller.requests import MetadataUpdate, PartitionUpdate, RequestBatch, Senders
from annal.controller.state_machines import PartitionStateMachine, ReplicaStateMachine
from annal.zk.client import ControllerEpoch, StaleVersionError
from annal.zk.layout import BrokerRegistration, PartitionState

from annal.topic_partition import TopicPartition

EPOCH = 7
FENCE = ControllerEpoch(EPOCH, 6)

Versioned = tuple[PartitionState, int]


@dataclass
class Store:
    """ZooKeeper's partition states in memory; every write is recorded, and
    ``stale_once`` makes the first write of those partitions fail as if a
    leader had just written its ISR."""

    states: dict[TopicPartition, Versioned] = field(default_factory=dict)
    writes: list[tuple[TopicPartition, PartitionState]] = field(default_factory=list)
    rounds: int = 0  # batched write rounds
    stale_once: set[TopicPartition] = field(default_factory=set)
    read: list[TopicPartition] = field(default_factory=list)  # every partition state read

    def partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Versioned]:
        wanted = list(partitions)
        self.read += wanted
        return {tp: self.states[tp] for tp in wanted if tp in self.states}

    def update_partition_states(
        self, states: Mapping[TopicPartition, Versioned], fence: ControllerEpoch
    ) -> dict[TopicPartition, int | StaleVersionError]:
        assert fence == FENCE
        self.rounds += 1
        out: dict[TopicPartition, int | StaleVersionError] = {}
        for tp, (state, version) in states.items():
            current, at = self.states[tp]
            if tp in self.stale_once:
                self.stale_once.discard(tp)
                self.states[tp] = (current, at + 1)  # a leader wrote meanwhile
                out[tp] = StaleVersionError(f"{tp} changed")
            elif version != at:
                out[tp] = StaleVersionError(f"{tp} changed")
            else:
                self.states[tp] = (state, at + 1)
                self.writes.append((tp, state))
                out[tp] = at + 1
        return out

    def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], fence: ControllerEpoch
    ) -> dict[TopicPartition, int | StaleVersionError]:
        self.rounds += 1
        out: dict[TopicPartition, int | StaleVersionError] = {}
        for tp, state in states.items():
            if tp in self.states:
                out[tp] = StaleVersionError(f"{tp} exists")
            else:
                self.states[tp] = (state, 0)
                self.writes.append((tp, state))
                out[tp] = 0
        return out


def tp(name: str) -> TopicPartition:
    topic, _, partition = name.rpartition("-")
    return TopicPartition(topic, int(partition))


def cluster(
    live: Sequence[int],
    partitions: Mapping[str, tuple[Sequence[int], int | None, Sequence[int]]],
    shutting_down: Sequence[int] = (),
) -> tuple[ControllerContext, Store]:
    """``partitions``: name → (replicas, leader, isr); leader None: no state yet."""
    ctx = ControllerContext(epoch=EPOCH)
    ctx.live = {b: BrokerRegistration(b, "127.0.0.1", 9000 + b, epoch=b) for b in live}
    ctx.shutting_down = set(shutting_down)
    store = Store()
    for name, (replicas, leader, isr) in partitions.items():
        key = tp(name)
        ctx.assignments.setdefault(key.topic, {})[key.partition] = tuple(replicas)
        if leader is None:
            ctx.move(key, State.NEW)
            continue
        state = PartitionState(leader, 3, tuple(isr), EPOCH - 1)
        store.states[key] = (state, 5)
        ctx.leadership[key] = PartitionUpdate(*key, state, tuple(replicas), 5)
        ctx.move(key, State.NEW)
        ctx.move(key, State.ONLINE if leader in live else State.OFFLINE)
    return ctx, store


def machines(
    ctx: ControllerContext,
    store: Store,
    unclean: set[str] = frozenset(),  # type: ignore[assignment]
    just_read: bool = False,
) -> tuple[PartitionStateMachine, ReplicaStateMachine, RequestBatch]:
    batch = RequestBatch()
    fresh: set[TopicPartition] = set()  # one event's, as the controller's handlers share it
    return (
        PartitionStateMachine(ctx, store, batch, lambda: FENCE, lambda ts: set(ts) & unclean,
                              just_read=just_read, fresh=fresh),
        ReplicaStateMachine(ctx, store, batch, lambda: FENCE, just_read=just_read, fresh=fresh),
        batch,
    )  # fmt: skip


def told(batch: RequestBatch) -> dict[int, dict[str, tuple[int, int, tuple[int, ...]]]]:
    """broker → partition → (leader, leader epoch, isr) in its LeaderAndIsr."""
    return {
        b: {f"{k.topic}-{k.partition}": (u.state.leader, u.state.leader_epoch, u.state.isr)
            for k, u in updates.items()}
        for b, updates in batch.leader_and_isr.items()
    }  # fmt: skip


def stops(batch: RequestBatch) -> dict[int, dict[str, bool]]:
    return {b: {f"{k.topic}-{k.partition}": d for k, d in s.items()}
            for b, s in batch.stop_replica.items()}  # fmt: skip


# -- the strategies -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "candidates", "leader", "isr"),
    [
        (Reason.OFFLINE, Candidates((1, 2, 3), (2, 3), {1, 2, 3}), 2, (2, 3)),
        (Reason.OFFLINE, Candidates((1, 2), (1,), {2}), -1, (1,)),
        (Reason.OFFLINE, Candidates((1, 2), (1,), {2}, unclean_allowed=True), 2, (2,)),
        (Reason.REASSIGNMENT, Candidates((1, 2, 3, 4), (1, 3, 4), {1, 3, 4}, target=(4, 3)), 4,
         (1, 3, 4)),
        (Reason.REASSIGNMENT, Candidates((1, 2, 4), (1, 2), {1, 2}, target=(4,)), -1, (1, 2)),
        (Reason.PREFERRED, Candidates((1, 2), (2, 1), {1, 2}), 1, (2, 1)),
        (Reason.PREFERRED, Candidates((1, 2), (2,), {1, 2}), -1, (2,)),
        (Reason.PREFERRED, Candidates((1, 2), (2, 1), {2}), -1, (2, 1)),
        (Reason.CONTROLLED_SHUTDOWN, Candidates((1, 2, 3), (1, 2, 3), {2, 3}, {1}), 2, (2, 3)),
        (Reason.CONTROLLED_SHUTDOWN, Candidates((1, 2), (1,), {2}, {1}), -1, ()),
    ],
)  # fmt: skip
def test_each_reason_has_its_strategy(
    reason: Reason, candidates: Candidates, leader: int, isr: tuple[int, ...]
) -> None:
    election = elect(reason, candidates)
    assert (election.leader, election.isr) == (leader, isr)


# -- broker failure -------------------------------------------------------------------


def test_a_dead_brokers_leaderships_move_and_its_replicas_leave_the_isrs() -> None:
    ctx, store = cluster(
        live=[2, 3],
        partitions={
            "t-0": ((1, 2, 3), 1, (1, 2, 3)),  # led by the dead broker
            "t-1": ((2, 1, 3), 2, (2, 1, 3)),  # followed by it
            "t-2": ((2, 3), 2, (2, 3)),  # not on it
            "u-0": ((1,), 1, (1,)),  # its only replica
        },
    )
    partitions, replicas, batch = machines(ctx, store)
    led = [tp("t-0"), tp("u-0")]
    partitions.handle_state_changes(led, State.OFFLINE)
    results = partitions.handle_state_changes(led, State.ONLINE, Reason.OFFLINE)
    replicas.handle_state_changes([(1, tp("t-0")), (1, tp("t-1")), (1, tp("u-0"))],
                                  ReplicaState.OFFLINE)  # fmt: skip
    assert dict(store.writes) == {
        tp("t-0"): PartitionState(2, 4, (2, 3), EPOCH),
        tp("t-1"): PartitionState(2, 4, (2, 3), EPOCH),
        tp("u-0"): PartitionState(-1, 4, (1,), EPOCH),  # nobody can lead: leaderless
    }
    assert told(batch) == {
        2: {"t-0": (2, 4, (2, 3)), "t-1": (2, 4, (2, 3))},
        3: {"t-0": (2, 4, (2, 3)), "t-1": (2, 4, (2, 3))},
    }
    assert stops(batch) == {}  # the dead broker is told nothing
    assert ctx.state_of(tp("u-0")) is State.OFFLINE and ctx.state_of(tp("t-0")) is State.ONLINE
    assert isinstance(results[tp("t-0")], PartitionUpdate)
    assert store.rounds == 2  # one batched round per state machine step


def test_unclean_election_only_where_the_topic_allows_it() -> None:
    ctx, store = cluster(
        live=[2],
        partitions={"clean-0": ((1, 2), 1, (1,)), "dirty-0": ((1, 2), 1, (1,))},
    )
    partitions, _, batch = machines(ctx, store, unclean={"dirty"})
    keys = [tp("clean-0"), tp("dirty-0")]
    partitions.handle_state_changes(keys, State.OFFLINE)
    partitions.handle_state_changes(keys, State.ONLINE, Reason.OFFLINE)
    assert dict(store.writes) == {
        tp("clean-0"): PartitionState(-1, 4, (1,), EPOCH),
        tp("dirty-0"): PartitionState(2, 4, (2,), EPOCH),
    }
    assert told(batch) == {2: {"clean-0": (-1, 4, (1,)), "dirty-0": (2, 4, (2,))}}


def test_a_live_leader_keeps_its_partition_and_nothing_is_written() -> None:
    ctx, store = cluster(live=[1, 2], partitions={"t-0": ((1, 2), 1, (1, 2))})
    partitions, _, batch = machines(ctx, store)
    partitions.handle_state_changes([tp("t-0")], State.ONLINE, Reason.OFFLINE)
    assert store.writes == [] and batch.empty()


# -- controlled shutdown ------------------------------------------------------------------


def test_controlled_shutdown_moves_leaderships_and_stops_the_followers() -> None:
    ctx, store = cluster(
        live=[1, 2, 3],
        shutting_down=[1],
        partitions={
            "t-0": ((1, 2), 1, (1, 2)),  # led: moves to 2
            "t-1": ((1, 3), 1, (1,)),  # led, but 3 is not in sync: stays
            "t-2": ((2, 1), 2, (2, 1)),  # followed: leaves the ISR
            "t-3": ((3, 1), 3, (3,)),  # followed, out of sync already
        },
    )
    partitions, replicas, batch = machines(ctx, store)
    led = [tp("t-0"), tp("t-1")]
    results = partitions.handle_state_changes(led, State.ONLINE, Reason.CONTROLLED_SHUTDOWN)
    assert isinstance(results[tp("t-1")], str) and ctx.leader_of(tp("t-1")) == 1
    replicas.handle_state_changes([(1, tp("t-0")), (1, tp("t-2")), (1, tp("t-3"))],
                                  ReplicaState.OFFLINE)  # fmt: skip
    assert dict(store.writes) == {
        tp("t-0"): PartitionState(2, 4, (2,), EPOCH),
        tp("t-2"): PartitionState(2, 4, (2,), EPOCH),
    }
    # the stopping broker hears no LeaderAndIsr: it stops copying instead
    assert told(batch) == {2: {"t-0": (2, 4, (2,)), "t-2": (2, 4, (2,))}}
    assert stops(batch) == {1: {"t-0": False, "t-2": False, "t-3": False}}


def test_a_thousand_leaderships_move_in_one_round_and_one_request_per_broker() -> None:
    names = {f"t-{p}": ((1, 2 + p % 2), 1, (1, 2 + p % 2)) for p in range(1000)}
    ctx, store = cluster(live=[1, 2, 3], shutting_down=[1], partitions=names)
    partitions, _, batch = machines(ctx, store)
    keys = [tp(n) for n in names]
    partitions.handle_state_changes(keys, State.ONLINE, Reason.CONTROLLED_SHUTDOWN)
    assert store.rounds == 1 and len(store.writes) == 1000
    sent: list[tuple[str, int, int]] = []
    senders = Senders(
        lambda b, e, u, live, on_storage_errors: sent.append(("LeaderAndIsr", b.broker_id, len(u))),
        lambda b, e, p, d: sent.append(("StopReplica", b.broker_id, len(p))),
        lambda b, e, u: sent.append(("UpdateMetadata", b.broker_id, len(u.partitions))),
    )
    batch.send(EPOCH, ctx.live, ctx.view, senders, lambda b, p: None, lambda call: call())
    assert sorted(sent) == [
        ("LeaderAndIsr", 2, 500),
        ("LeaderAndIsr", 3, 500),
        ("UpdateMetadata", 1, 1000),
        ("UpdateMetadata", 2, 1000),
        ("UpdateMetadata", 3, 1000),
    ]


# -- preferred election, new partitions, stale states ----------------------------------------


def test_preferred_election_moves_only_to_a_live_in_sync_preferred_replica() -> None:
    ctx, store = cluster(
        live=[1, 2],
        partitions={
            "t-0": ((1, 2), 2, (2, 1)),  # moves back to 1
            "t-1": ((1, 2), 2, (2,)),  # 1 not in sync: stays
            "t-2": ((3, 2), 2, (2, 3)),  # 3 dead: stays
        },
    )
    partitions, _, batch = machines(ctx, store)
    results = partitions.handle_state_changes(
        [tp("t-0"), tp("t-1"), tp("t-2")], State.ONLINE, Reason.PREFERRED
    )
    assert dict(store.writes) == {tp("t-0"): PartitionState(1, 4, (2, 1), EPOCH)}
    assert told(batch) == {1: {"t-0": (1, 4, (2, 1))}, 2: {"t-0": (1, 4, (2, 1))}}
    assert all(isinstance(results[tp(n)], str) for n in ("t-1", "t-2"))


def test_new_partitions_are_created_with_their_live_replicas_in_sync() -> None:
    ctx, store = cluster(
        live=[2, 3],
        partitions={"n-0": ((1, 2, 3), None, ()), "n-1": ((1,), None, ())},
    )
    partitions, _, batch = machines(ctx, store)
    partitions.handle_state_changes([tp("n-0"), tp("n-1")], State.ONLINE)
    assert dict(store.writes) == {
        tp("n-0"): PartitionState(2, 0, (2, 3), EPOCH),
        tp("n-1"): PartitionState(-1, 0, (1,), EPOCH),  # no live replica: offline
    }
    assert ctx.state_of(tp("n-0")) is State.ONLINE and ctx.state_of(tp("n-1")) is State.OFFLINE
    assert told(batch) == {2: {"n-0": (2, 0, (2, 3))}, 3: {"n-0": (2, 0, (2, 3))}}


def test_taking_office_decides_from_the_states_just_read_and_reads_only_what_moved() -> None:
    ctx, store = cluster(
        live=[2, 3],
        partitions={
            "t-0": ((1, 2, 3), 1, (1, 2, 3)),  # led by the dead broker
            "t-1": ((2, 1, 3), 2, (2, 1, 3)),  # followed by it
            "t-2": ((2, 1), 2, (2, 1)),  # followed by it; its leader shrank the ISR since
        },
    )
    store.states[tp("t-2")] = (PartitionState(2, 4, (2,), EPOCH - 1), 6)
    partitions, replicas, batch = machines(ctx, store, just_read=True)
    led = [tp("t-0")]
    partitions.handle_state_changes(led, State.OFFLINE)
    partitions.handle_state_changes(led, State.ONLINE, Reason.OFFLINE)
    replicas.handle_state_changes([(1, tp("t-0")), (1, tp("t-1")), (1, tp("t-2"))],
                                  ReplicaState.OFFLINE)  # fmt: skip
    assert dict(store.writes) == {
        tp("t-0"): PartitionState(2, 4, (2, 3), EPOCH),
        tp("t-1"): PartitionState(2, 4, (2, 3), EPOCH),
        # t-2: decided from the context, refused on its zkVersion, read again:
        # its leader had already left broker 1 out, nothing to write
    }
    assert store.read == [tp("t-2")]  # nothing else read again
    assert "t-2" not in told(batch)[2]


def test_a_state_that_moved_under_the_election_is_read_and_decided_again() -> None:
    ctx, store = cluster(live=[2, 3], partitions={"t-0": ((1, 2, 3), 1, (1, 2, 3))})
    store.stale_once.add(tp("t-0"))
    partitions, _, batch = machines(ctx, store)
    partitions.handle_state_changes([tp("t-0")], State.OFFLINE)
    partitions.handle_state_changes([tp("t-0")], State.ONLINE, Reason.OFFLINE)
    assert store.writes == [(tp("t-0"), PartitionState(2, 4, (2, 3), EPOCH))]
    assert store.rounds == 2
    assert told(batch)[2] == {"t-0": (2, 4, (2, 3))}
    assert ctx.leadership[tp("t-0")].zk_version == 7


def test_controlled_shutdown_decides_from_the_context_and_reads_only_what_it_must() -> None:
    """Thousands of partitions per shutdown: the context's states are decided from
    without a read; one the context says needs no write is read again (the context
    may lag a leader's ISR change) unless it was written in this event (t-0), and
    one whose write fails on its zkVersion is read too."""
    ctx, store = cluster(
        live=[1, 2, 3],
        shutting_down=[1],
        partitions={
            "t-0": ((1, 2), 1, (1, 2)),  # led: moves to 2
            "t-1": ((2, 1), 2, (2, 1)),  # followed: leaves the ISR
            "t-2": ((2, 1), 2, (2,)),  # the context: out of sync; ZooKeeper: back in
            "t-3": ((3, 1), 3, (3, 1)),  # its leader wrote meanwhile (another version)
        },
    )
    store.states[tp("t-2")] = (PartitionState(2, 4, (2, 1), EPOCH - 1), 6)
    store.stale_once.add(tp("t-3"))
    partitions, replicas, batch = machines(ctx, store)
    partitions.handle_state_changes([tp("t-0")], State.ONLINE, Reason.CONTROLLED_SHUTDOWN)
    assert store.read == []
    replicas.handle_state_changes([(1, tp(n)) for n in ("t-0", "t-1", "t-2", "t-3")],
                                  ReplicaState.OFFLINE)  # fmt: skip
    assert store.read == [tp("t-2"), tp("t-3")]  # unsure, then refused on its version
    assert dict(store.writes) == {
        tp("t-0"): PartitionState(2, 4, (2,), EPOCH),
        tp("t-1"): PartitionState(2, 4, (2,), EPOCH),
        tp("t-2"): PartitionState(2, 5, (2,), EPOCH),
        tp("t-3"): PartitionState(3, 4, (3,), EPOCH),
    }
    assert told(batch)[2]["t-2"] == (2, 5, (2,))


def test_metadata_goes_to_every_live_broker_whole_when_asked() -> None:
    ctx, _ = cluster(live=[1, 2], partitions={"t-0": ((1, 2), 1, (1, 2))})
    batch = RequestBatch()
    batch.full_metadata = True
    got: list[MetadataUpdate] = []
    senders = Senders(lambda *a, **k: None, lambda *a: None, lambda b, e, u: got.append(u))
    batch.send(EPOCH, ctx.live, ctx.view, senders, lambda b, p: None, lambda call: call())
    assert [len(u.partitions) for u in got] == [1, 1] and all(u.full for u in got)
