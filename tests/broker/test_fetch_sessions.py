"""Fetch sessions (KIP-227) as pure logic: the broker's cache (new sessions, incremental
fetches that add, update and forget partitions, refusals, eviction, closing), the
fetcher's handler (what each request names), and the delayed fetch that waits on a
session's dirty partitions only."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from annal.broker.requests.delayed import DelayedSessionFetch
from annal.broker.requests.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    CachedPartition,
    FetchKind,
    FetchSessionCache,
    FetchSessionError,
    FetchSessionHandler,
    PartitionFetch,
    Probe,
    kind_of,
    next_epoch,
)
from annal.storage.files import TopicPartition

from annal import errors

A0, A1, A2 = (TopicPartition("a", i) for i in range(3))
B0 = TopicPartition("b", 0)
ME = "User:ANONYMOUS"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def at(offset: int, log_start: int = -1, epoch: int = -1) -> PartitionFetch:
    return PartitionFetch(offset, 1 << 20, log_start, epoch)


def cached(*tps: TopicPartition, offset: int = 0) -> dict[TopicPartition, CachedPartition]:
    return {
        tp: CachedPartition(at(offset), high_watermark=offset, log_start_offset=0) for tp in tps
    }


def cache(slots: int = 10, clock: Clock | None = None) -> FetchSessionCache:
    ids = itertools.count(101)
    return FetchSessionCache(slots, 120_000, clock or Clock(), lambda: next(ids))


# -- what a request asks -------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "kind"),
    [
        (INITIAL_EPOCH, FetchKind.NEW_SESSION),
        (FINAL_EPOCH, FetchKind.SESSIONLESS),
        (1, FetchKind.INCREMENTAL),
        (MAX_EPOCH, FetchKind.INCREMENTAL),
        (-2, FetchKind.INCREMENTAL),  # no session has it: refused
    ],
)
def test_the_epoch_says_what_kind_of_fetch(epoch: int, kind: FetchKind) -> None:
    assert kind_of(epoch) is kind


def test_epochs_wrap_to_one() -> None:
    assert [next_epoch(e) for e in (0, 1, 41, MAX_EPOCH)] == [1, 2, 42, 1]


# -- the cache -----------------------------------------------------------------------


def test_a_new_session_holds_its_partitions_all_dirty_at_first() -> None:
    sessions = cache()
    session = sessions.create(-1, ME, cached(A0, A1))
    assert session is not None
    assert (session.id, session.epoch, session.follower) == (101, 1, False)
    assert session.dirty == {A0, A1}  # looked at once by the first incremental fetch
    assert (len(sessions), sessions.partitions_cached) == (1, 2)
    assert sessions.get(101) is session
    assert sessions.create(-1, ME, {}) is None  # nothing to hold: no session


@dataclass
class Step:
    """One incremental fetch on session 101 (epoch 1 first) and what follows."""

    changed: dict[TopicPartition, PartitionFetch] = field(default_factory=dict)
    forgotten: tuple[TopicPartition, ...] = ()
    epoch: int | None = None  # None: the expected one
    session_id: int = 101
    principal: str = ME
    replica_id: int = -1
    refused: errors.ErrorCode | None = None
    holds: dict[TopicPartition, int] | None = None  # partition -> fetch offset afterwards


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [Step(holds={A0: 0, A1: 0}), Step(holds={A0: 0, A1: 0})], id="nothing-changed"
        ),
        pytest.param([Step({A1: at(7)}, holds={A0: 0, A1: 7})], id="update"),
        pytest.param([Step({B0: at(3)}, holds={A0: 0, A1: 0, B0: 3})], id="add"),
        pytest.param([Step(forgotten=(A0,), holds={A1: 0})], id="forget"),
        pytest.param(
            [Step({A0: at(5)}, forgotten=(A1, A2), holds={A0: 5})], id="update-and-forget-unknown"
        ),
        pytest.param([Step({A0: at(5)}, forgotten=(A0,), holds={A1: 0})], id="forgotten-wins"),
        pytest.param([Step(epoch=2, refused=errors.INVALID_FETCH_SESSION_EPOCH)], id="epoch-ahead"),
        pytest.param(
            [Step(), Step(epoch=1, refused=errors.INVALID_FETCH_SESSION_EPOCH)], id="epoch-replayed"
        ),
        pytest.param(
            [Step(session_id=999, refused=errors.FETCH_SESSION_ID_NOT_FOUND)], id="unknown-id"
        ),
        pytest.param([Step(session_id=0, refused=errors.FETCH_SESSION_ID_NOT_FOUND)], id="id-0"),
        pytest.param(
            [Step(principal="User:eve", refused=errors.FETCH_SESSION_ID_NOT_FOUND)],
            id="another-principal",
        ),
        pytest.param(
            [Step(replica_id=2, refused=errors.FETCH_SESSION_ID_NOT_FOUND)],
            id="a-replica-on-a-consumer-session",
        ),
        pytest.param(
            [Step(epoch=5, refused=errors.INVALID_FETCH_SESSION_EPOCH), Step(holds={A0: 0, A1: 0})],
            id="refused-then-right",
        ),
    ],
)
def test_incremental_fetches(steps: list[Step]) -> None:
    sessions = cache()
    session = sessions.create(-1, ME, cached(A0, A1))
    assert session is not None
    for step in steps:
        epoch = session.epoch if step.epoch is None else step.epoch
        before = session.epoch

        def fetch(step: Step = step, epoch: int = epoch) -> object:
            return sessions.incremental(
                step.session_id,
                epoch,
                step.replica_id,
                step.principal,
                step.changed,
                step.forgotten,
            )

        if step.refused is not None:
            with pytest.raises(FetchSessionError) as refused:
                fetch()
            assert refused.value.code == step.refused
            assert session.epoch == before  # a refusal changes nothing
            continue
        assert fetch() is session
        assert session.epoch == next_epoch(before)
        if step.holds is None:
            continue
        assert {tp: c.fetch.fetch_offset for tp, c in session.partitions.items()} == step.holds
        assert sessions.partitions_cached == len(step.holds)


def test_an_update_keeps_what_was_answered_and_a_new_partition_is_unanswered() -> None:
    sessions = cache()
    session = sessions.create(-1, ME, cached(A0, offset=4))
    assert session is not None
    sessions.incremental(session.id, 1, -1, ME, {A0: at(9), B0: at(0)}, ())
    assert session.partitions[A0] == CachedPartition(at(9), 4, 0)
    assert session.partitions[B0] == CachedPartition(at(0), -1, -1)


def test_a_session_emptied_by_forgetting_is_closed() -> None:
    sessions = cache()
    session = sessions.create(-1, ME, cached(A0))
    assert session is not None
    assert sessions.incremental(session.id, 1, -1, ME, {}, (A0,)) is None
    assert (len(sessions), sessions.partitions_cached) == (0, 0)
    assert sessions.touched(A0) == ()


def test_closing_a_session() -> None:
    sessions = cache()
    session = sessions.create(-1, ME, cached(A0, A1))
    assert session is not None
    assert not sessions.remove(session.id, "User:eve")  # only its own principal closes it
    assert sessions.remove(session.id, ME)
    assert not sessions.remove(session.id)
    assert (len(sessions), sessions.partitions_cached) == (0, 0)
    with pytest.raises(FetchSessionError) as refused:
        sessions.incremental(session.id, 1, -1, ME, {}, ())
    assert refused.value.code == errors.FETCH_SESSION_ID_NOT_FOUND


def test_events_mark_the_partition_dirty_in_every_session_holding_it() -> None:
    sessions = cache()
    one = sessions.create(-1, ME, cached(A0, A1))
    two = sessions.create(2, ME, cached(A1))
    assert one is not None and two is not None
    one.take_dirty(), two.take_dirty()
    assert set(sessions.touched(A1)) == {one, two}
    assert sessions.touched(B0) == ()
    assert (one.dirty, two.dirty) == ({A1}, {A1})
    sessions.incremental(one.id, 1, -1, ME, {}, (A1,))
    assert one.dirty == set()  # forgotten: no longer dirty, no longer told
    assert sessions.touched(A1) == (two,)


# -- eviction ------------------------------------------------------------------------


def test_no_slot_no_session() -> None:
    assert cache(slots=0).create(2, ME, cached(A0)) is None


@pytest.mark.parametrize(
    ("existing", "age_s", "new", "evicted"),
    [
        # (replica id, partitions) of the sessions there; the new one; which one goes
        pytest.param([(-1, 5), (-1, 2)], 10, (-1, 9), None, id="young-consumers-stay"),
        pytest.param(
            [(-1, 5), (-1, 2)], 10, (1, 1), 1, id="a-follower-evicts-the-smaller-consumer"
        ),
        pytest.param([(1, 5), (2, 2)], 10, (3, 9), None, id="young-followers-stay"),
        pytest.param([(-1, 5), (-1, 2)], 200, (-1, 3), 1, id="old-the-smaller-goes"),
        pytest.param([(-1, 5), (-1, 2)], 200, (-1, 1), None, id="old-but-worth-more-than-new"),
        pytest.param(
            [(1, 5), (-1, 50)], 200, (-1, 1), None, id="a-consumer-never-evicts-a-follower"
        ),
        pytest.param([(1, 5), (-1, 50)], 200, (-1, 60), 1, id="a-larger-consumer-evicts"),
        pytest.param([(1, 5), (2, 2)], 200, (3, 3), 1, id="old-followers-the-smaller-goes"),
    ],
)
def test_eviction_when_full(
    existing: list[tuple[int, int]], age_s: float, new: tuple[int, int], evicted: int | None
) -> None:
    clock = Clock()
    sessions = cache(slots=len(existing), clock=clock)
    made = []
    for replica_id, size in existing:
        tps = [TopicPartition("t", i) for i in range(size)]
        session = sessions.create(replica_id, ME, cached(*tps))
        assert session is not None
        made.append(session)
    clock.now += age_s
    for session in made:  # all in use (none idle past the eviction age)
        sessions.incremental(session.id, session.epoch, session.replica_id, ME, {}, ())
    replica_id, size = new
    got = sessions.create(replica_id, ME, cached(*[TopicPartition("n", i) for i in range(size)]))
    if evicted is None:
        assert got is None
        assert sessions.evictions == 0
        assert len(sessions) == len(existing)
    else:
        assert got is not None
        assert sessions.get(made[evicted].id) is None
        assert sessions.evictions == 1
        assert len(sessions) == len(existing)
        assert (
            sessions.partitions_cached == sum(s for _, s in existing) - existing[evicted][1] + size
        )


def test_a_session_unused_past_the_eviction_age_goes_first() -> None:
    clock = Clock()
    sessions = cache(slots=2, clock=clock)
    idle = sessions.create(1, ME, cached(A0, A1, A2))  # a large follower's, but idle
    busy = sessions.create(-1, ME, cached(B0))
    assert idle is not None and busy is not None
    clock.now += 121
    sessions.incremental(busy.id, 1, -1, ME, {}, ())
    assert sessions.create(-1, ME, cached(A0)) is not None
    assert sessions.get(idle.id) is None and sessions.get(busy.id) is busy


# -- the fetcher's handler -----------------------------------------------------------


def test_the_handler_asks_for_a_session_then_sends_only_changes() -> None:
    handler: FetchSessionHandler[PartitionFetch] = FetchSessionHandler()
    wanted = {A0: at(0), A1: at(0), B0: at(0)}
    first = handler.request(wanted)
    assert (first.session_id, first.epoch, first.full) == (INVALID_SESSION_ID, INITIAL_EPOCH, True)
    assert first.partitions == wanted and first.forgotten == ()
    handler.answered(first, 55)
    idle = handler.request(wanted)
    assert (idle.session_id, idle.epoch, idle.full, idle.partitions) == (55, 1, False, {})
    handler.answered(idle, 55)
    moved = handler.request({A0: at(3), A1: at(0), A2: at(0)})  # A0 moved, A2 added, B0 gone
    assert (moved.epoch, moved.partitions, moved.forgotten) == (2, {A0: at(3), A2: at(0)}, (B0,))
    handler.answered(moved, 55)
    assert handler.request({A0: at(3), A1: at(0), A2: at(0)}).partitions == {}


@pytest.mark.parametrize(
    ("outcome", "next_id", "next_epoch_"),
    [
        (lambda h: h.refused(errors.FETCH_SESSION_ID_NOT_FOUND), INVALID_SESSION_ID, 0),
        (lambda h: h.refused(errors.INVALID_FETCH_SESSION_EPOCH), 55, 0),  # closes 55 anew
        (lambda h: h.reset(), 55, 0),  # a failed connection
    ],
    ids=["not-found", "bad-epoch", "connection-lost"],
)
def test_the_handler_falls_back_to_a_full_fetch(
    outcome: Callable[[FetchSessionHandler[PartitionFetch]], None], next_id: int, next_epoch_: int
) -> None:
    handler: FetchSessionHandler[PartitionFetch] = FetchSessionHandler()
    wanted = {A0: at(0), A1: at(0)}
    handler.answered(handler.request(wanted), 55)
    outcome(handler)
    full = handler.request(wanted)
    assert (full.session_id, full.epoch, full.full) == (next_id, next_epoch_, True)
    assert full.partitions == wanted


def test_the_handler_goes_on_without_a_session_the_broker_did_not_give() -> None:
    handler: FetchSessionHandler[PartitionFetch] = FetchSessionHandler()
    wanted = {A0: at(0)}
    handler.answered(handler.request(wanted), INVALID_SESSION_ID)  # no slot
    assert handler.request(wanted).full
    handler.answered(handler.request(wanted), 9)
    incremental = handler.request(wanted)
    handler.answered(incremental, INVALID_SESSION_ID)  # the broker closed it
    assert handler.request(wanted).full


# -- waiting on a session ------------------------------------------------------------


def test_a_waiting_session_fetch_looks_at_dirty_partitions_only() -> None:
    sessions = cache()
    session = sessions.create(1, ME, cached(A0, A1, A2, B0))
    assert session is not None
    session.take_dirty()
    probes: dict[TopicPartition, Probe] = {A0: Probe.NOTHING, A1: Probe.METADATA, A2: Probe.DATA}
    looked: list[TopicPartition] = []

    def probe(tp: TopicPartition, _: CachedPartition) -> Probe:
        looked.append(tp)
        return probes.get(tp, Probe.NOTHING)

    waiting = DelayedSessionFetch(session, probe)
    assert waiting.try_complete() is None and looked == []  # nothing touched: nothing looked at
    sessions.touched(A0)
    sessions.touched(A1)
    assert waiting.try_complete() is None  # nothing new, and a high watermark: no reason yet
    assert sorted(looked) == [A0, A1] and waiting.news == {A1} and session.dirty == set()
    assert waiting.try_complete() is None and len(looked) == 2  # each looked at once
    sessions.touched(A2)
    assert waiting.try_complete() is True
    assert waiting.news == {A1, A2}
    assert waiting.on_expire() is False
