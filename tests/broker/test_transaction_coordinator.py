"""The transaction coordinator at its seams: ``__transaction_state`` records in
Kafka's schema, the state table of one transactional id, and the coordinator
with a real log for its partition and a stand-in for the partition leaders
(markers recorded, not sent)."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import pytest
from annal.broker.transactions.coordinator import (
    TransactionCoordinator,
    TxnSettings,
    spawn_on,
)
from annal.broker.transactions.log_schema import (
    TxnLogSchemaError,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    describe_record,
    encode_key,
    encode_value,
)
from annal.broker.transactions.markers import Marker
from annal.broker.transactions.metadata import TransactionMetadata, TxnError
from annal.storage.log import Log
from annal.storage.records import iter_records
from hypothesis import given, settings
from hypothesis import strategies as st

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(60)

TP = TopicPartition


# -- the log's records ---------------------------------------------------------------


def test_record_layout_is_kafkas() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    value = TxnLogValue(7, 3, 60_000, TxnState.ONGOING, frozenset({TP("a", 1), TP("a", 0)}), 5, 4)
    raw = encode_value(value)
    # version, producer id, epoch, timeout, state, 1 topic "a" with [0, 1], times
    expected = (
        struct.pack(">hqhib", 0, 7, 3, 60_000, 1)
        + struct.pack(">ih", 1, 1) + b"a" + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 5, 4)
    )  # fmt: skip
    assert raw == expected
    assert decode_value(raw) == value
    empty = TxnLogValue(7, 4, 60_000, TxnState.EMPTY, frozenset(), 9, -1)
    assert encode_value(empty)[17:21] == struct.pack(">i", -1)  # null partitions
    assert decode_value(encode_value(empty)) == empty
    assert describe_record(encode_key("tx"), raw)[1].startswith(
        "producerId:7,producerEpoch:3,state=Ongoing,partitions=[a-0,a-1]"
    )
    assert describe_record(encode_key("tx"), None)[1] == "<DELETE>"


@given(st.binary(max_size=80))
@settings(max_examples=300, deadline=None)
def test_random_bytes_are_refused_clearly(data: bytes) -> None:
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except TxnLogSchemaError as exc:
            assert "transaction log" in str(exc)


def test_state_names_are_kafkas() -> None:
    assert [s.kafka_name for s in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence",
    ]  # fmt: skip
    assert TxnState.by_kafka_name("PrepareAbort") is TxnState.PREPARE_ABORT


# -- one transactional id's moves ----------------------------------------------------


def meta(state: TxnState = TxnState.EMPTY, epoch: int = 0) -> TransactionMetadata:
    m = TransactionMetadata("tx", 100, epoch, 60_000, state)
    if state not in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
        m.partitions = {TP("a", 0)}
    return m


def test_a_whole_transaction() -> None:
    m = TransactionMetadata("tx", 100, -1, 60_000)
    m.complete(m.prepare_increment_epoch(60_000, None, 1))
    assert (m.producer_epoch, m.state) == (0, TxnState.EMPTY)
    m.complete(m.prepare_add_partitions([TP("a", 0)], 2))
    assert (m.state, m.start_ms, m.partitions) == (TxnState.ONGOING, 2, {TP("a", 0)})
    m.complete(m.prepare_add_partitions([TP("b", 1)], 3))
    assert m.start_ms == 2 and m.partitions == {TP("a", 0), TP("b", 1)}
    m.complete(m.prepare_end(True, 4))
    assert m.state == TxnState.PREPARE_COMMIT
    m.complete(m.prepare_complete(5))
    assert (m.state, m.partitions) == (TxnState.COMPLETE_COMMIT, set())


def test_a_fence_bumps_the_epoch_and_aborts() -> None:
    m = meta(TxnState.ONGOING, epoch=4)
    transit = m.prepare_end(False, 9, fence=True)
    assert (transit.state, transit.value.producer_epoch) == (TxnState.PREPARE_ABORT, 5)
    m.complete(transit)
    assert m.producer_epoch == 5


@pytest.mark.parametrize(
    ("state", "move"),
    [
        (TxnState.EMPTY, "end"),
        (TxnState.COMPLETE_COMMIT, "end"),
        (TxnState.PREPARE_COMMIT, "add"),
        (TxnState.PREPARE_ABORT, "complete_again"),
        (TxnState.ONGOING, "init"),
    ],
)
def test_illegal_moves_are_refused(state: TxnState, move: str) -> None:
    m = meta(state)
    if move == "end":
        transit = m.prepare_end(True, 1)
    elif move == "add":
        transit = m.prepare_add_partitions([TP("a", 1)], 1)
    elif move == "init":
        transit = m.prepare_increment_epoch(1000, None, 1)
    else:
        m.state = TxnState.COMPLETE_ABORT
        transit = m.prepare_complete(1)
    with pytest.raises(TxnError):
        m.complete(transit)
    assert m.state == state or move == "complete_again"
    assert m.pending is None


def test_pending_and_producer_checks() -> None:
    m = meta(TxnState.ONGOING, epoch=2)
    with pytest.raises(TxnError) as wrong_id:
        m.check_producer(101, 2)
    assert wrong_id.value.code is errors.INVALID_PRODUCER_ID_MAPPING
    with pytest.raises(TxnError) as old_epoch:
        m.check_producer(100, 1)
    assert old_epoch.value.code is errors.PRODUCER_FENCED
    m.prepare_end(True, 1)
    with pytest.raises(TxnError) as pending:
        m.check_not_pending()
    assert pending.value.code is errors.CONCURRENT_TRANSACTIONS
    m.abandon()
    m.check_not_pending()


def test_kip_360_epochs() -> None:
    m = meta(TxnState.COMPLETE_COMMIT, epoch=3)
    bumped = m.prepare_increment_epoch(1000, 3, 1)  # the current epoch: go on
    assert (bumped.value.producer_epoch, bumped.last_producer_epoch) == (4, 3)
    m.complete(bumped)
    retried = m.prepare_increment_epoch(1000, 3, 2)  # a retry of the call that worked
    assert retried.value.producer_epoch == 4
    m.abandon()
    with pytest.raises(TxnError) as fenced:
        m.prepare_increment_epoch(1000, 1, 3)
    assert fenced.value.code is errors.PRODUCER_FENCED


# -- the coordinator ------------------------------------------------------------------


class Leaders:
    """Stands in for the partition leaders: records each marker; ``ok`` False
    makes every write give up (as when a newer coordinator took over)."""

    def __init__(self) -> None:
        self.markers: list[Marker] = []
        self.ok = True
        self.gate: asyncio.Event | None = None  # when set: writes wait for it

    async def write(self, marker: Marker, still_valid: object) -> bool:
        self.markers.append(marker)
        if self.gate is not None:
            await self.gate.wait()
        return self.ok


class Harness:
    def __init__(self, directory: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.log = Log.open(directory / "__transaction_state-0")
        self.leaders = Leaders()
        self.now = 1_000_000
        self.next_pid = 500
        self.awaited: list[int] = []  # the offsets each write waited to see replicated
        self.coordinator = self._coordinator(loop)

    def _coordinator(self, loop: asyncio.AbstractEventLoop) -> TransactionCoordinator:
        async def new_pid() -> int:
            self.next_pid += 1
            return self.next_pid

        return TransactionCoordinator(
            TxnSettings(log_partitions=1, max_timeout_ms=100_000),
            self.append,
            self.replicated,
            new_pid,
            self.leaders,  # type: ignore[arg-type]
            spawn_on(loop),
            clock_ms=lambda: self.now,
        )

    def append(self, tp: TopicPartition, records: bytes) -> tuple[ErrorCode, int]:
        info = self.log.append_as_leader(records, 0)
        self.log.update_high_watermark(self.log.log_end_offset)
        return errors.NONE, info.last_offset

    async def replicated(
        self, appended: dict[TopicPartition, int], timeout_ms: int
    ) -> Mapping[TopicPartition, tuple[ErrorCode, str]]:
        self.awaited.extend(appended.values())
        return {tp: (errors.NONE, "") for tp in appended}

    async def lead(self, epoch: int = 1) -> None:
        self.coordinator.on_leader(0, self.log, epoch)
        while self.coordinator.describe("x")[0] is errors.COORDINATOR_LOAD_IN_PROGRESS:
            await asyncio.sleep(0.01)

    def states(self) -> list[tuple[str, str]]:
        """Every record of the log, every segment: (id, state)."""
        found: list[tuple[str, str]] = []
        offset = 0
        while offset < self.log.log_end_offset:
            records = list(iter_records(self.log.read(offset, 1 << 20)))
            for r in records:
                state = decode_value(r.value).state.kafka_name if r.value else "-"
                found.append((decode_key(r.key or b""), state))
            offset = records[-1].offset + 1
        return found


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path, asyncio.new_event_loop())


def run(harness: Harness, coro: Coroutine[Any, Any, None]) -> None:
    try:
        harness.loop.run_until_complete(coro)
    finally:
        harness.loop.close()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_commit_writes_every_state_and_the_markers(harness: Harness) -> None:
    c = harness.coordinator

    async def scenario() -> None:
        assert (await c.init_producer_id("tx", 60_000)).error is errors.NOT_COORDINATOR
        await harness.lead(epoch=7)
        init = await c.init_producer_id("tx", 60_000)
        assert (init.error, init.producer_id, init.producer_epoch) == (errors.NONE, 501, 0)
        added = await c.add_partitions("tx", 501, 0, [TP("a", 0), TP("b", 2)])
        assert added is errors.NONE
        assert await c.add_offsets("tx", 501, 0, "grp") is errors.NONE
        assert await c.end_txn("tx", 501, 0, True) == (errors.NONE, "")
        await settle()
        (marker,) = harness.leaders.markers
        assert marker.commit and marker.coordinator_epoch == 7 and marker.producer_epoch == 0
        assert TP("a", 0) in marker.partitions and TP("b", 2) in marker.partitions
        assert any(tp.topic == "__consumer_offsets" for tp in marker.partitions)
        assert c.describe("tx")[1].state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
        # a retried EndTxn of a done commit is fine; an abort of it is not
        assert (await c.end_txn("tx", 501, 0, True))[0] is errors.NONE
        assert (await c.end_txn("tx", 501, 0, False))[0] is errors.INVALID_TXN_STATE

    run(harness, scenario())
    assert [s for _, s in harness.states()] == [
        "Empty", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"
    ]


def test_a_new_producer_fences_and_aborts_the_ongoing_transaction(harness: Harness) -> None:
    c = harness.coordinator

    async def scenario() -> None:
        await harness.lead()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 501, 0, [TP("a", 0)])
        again = await c.init_producer_id("tx", 60_000)
        assert again.error is errors.CONCURRENT_TRANSACTIONS
        await settle()
        (abort,) = harness.leaders.markers
        assert not abort.commit and abort.producer_epoch == 1  # the old epoch is fenced
        new = await c.init_producer_id("tx", 60_000)
        assert (new.error, new.producer_id, new.producer_epoch) == (errors.NONE, 501, 2)
        assert await c.add_partitions("tx", 501, 0, [TP("a", 0)]) is errors.PRODUCER_FENCED
        assert (await c.end_txn("tx", 501, 1, True))[0] is errors.PRODUCER_FENCED
        assert await c.add_partitions("tx", 999, 2, [TP("a", 0)]) is (
            errors.INVALID_PRODUCER_ID_MAPPING
        )

    run(harness, scenario())


def test_timeouts_abort_and_a_new_leader_finishes_prepared_work(
    harness: Harness, tmp_path: Path
) -> None:
    c = harness.coordinator

    async def scenario() -> None:
        await harness.lead(epoch=1)
        await c.init_producer_id("slow", 5_000)
        await c.add_partitions("slow", 501, 0, [TP("a", 1)])
        harness.now += 4_000
        assert await c.abort_timed_out() == 0
        harness.now += 2_000
        assert await c.abort_timed_out() == 1
        await settle()
        assert harness.leaders.markers[-1].producer_epoch == 1
        assert c.describe("slow")[1].state is TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
        # a commit the markers of which never got out (the leader moved on)
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 502, 0, [TP("b", 0)])
        harness.leaders.ok = False
        await c.end_txn("tx", 502, 0, True)
        await settle()
        assert c.describe("tx")[1].state is TxnState.PREPARE_COMMIT  # type: ignore[union-attr]
        c.on_follower(0)
        assert c.describe("tx")[0] is errors.NOT_COORDINATOR
        # the next coordinator loads the log and completes the commit
        harness.leaders.ok = True
        harness.leaders.markers.clear()
        await harness.lead(epoch=2)
        await settle()
        (marker,) = harness.leaders.markers
        assert marker.commit and marker.coordinator_epoch == 2
        assert c.describe("tx")[1].state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
        assert c.describe("nope")[0] is errors.TRANSACTIONAL_ID_NOT_FOUND

    run(harness, scenario())


def test_bad_timeouts_and_unknown_ids(harness: Harness) -> None:
    c = harness.coordinator

    async def scenario() -> None:
        await harness.lead()
        for timeout in (0, -1, 100_001):
            init = await c.init_producer_id("tx", timeout)
            assert init.error is errors.INVALID_TRANSACTION_TIMEOUT
            assert "transaction.max.timeout.ms" in init.message
        assert await c.add_partitions("ghost", 1, 0, [TP("a", 0)]) is (
            errors.INVALID_PRODUCER_ID_MAPPING
        )

    run(harness, scenario())


def test_random_requests_keep_the_log_and_memory_in_step(harness: Harness) -> None:
    """Whatever the order of requests, reloading the log gives the state in memory."""
    c = harness.coordinator
    rng = random.Random(3)
    ids = ["t0", "t1", "t2"]

    async def scenario() -> None:
        await harness.lead()
        pids: dict[str, tuple[int, int]] = {}
        for _ in range(200):
            tid = rng.choice(ids)
            action = rng.random()
            if action < 0.2 or tid not in pids:
                init = await c.init_producer_id(tid, 60_000)
                if init.error is errors.NONE:
                    pids[tid] = (init.producer_id, init.producer_epoch)
            elif action < 0.6:
                await c.add_partitions(tid, *pids[tid], [TP("a", rng.randrange(3))])
            else:
                await c.end_txn(tid, *pids[tid], rng.random() < 0.5)
            await settle()
        before = {m.transactional_id: m.as_value() for m in c.listing()[1]}
        c.on_follower(0)
        await harness.lead(epoch=2)
        await settle()
        after = {m.transactional_id: m.as_value() for m in c.listing()[1]}
        assert after == before

    run(harness, scenario())


def test_the_next_transaction_waits_for_the_markers_instead_of_a_retry(
    harness: Harness,
) -> None:
    """AddPartitionsToTxn right after EndTxn waits for the markers (not
    CONCURRENT_TRANSACTIONS and a client backoff), up to a bound."""
    c = harness.coordinator

    async def scenario() -> None:
        await harness.lead()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 501, 0, [TP("a", 0)])
        harness.leaders.gate = asyncio.Event()
        assert (await c.end_txn("tx", 501, 0, True))[0] is errors.NONE
        await settle()
        added = asyncio.ensure_future(c.add_partitions("tx", 501, 0, [TP("a", 1)]))
        await settle()
        assert not added.done()  # held while the markers are out
        harness.leaders.gate.set()
        assert await added is errors.NONE
        meta = c.describe("tx")[1]
        assert meta is not None and meta.partitions == {TP("a", 1)}
        # markers that stay out past the bound: CONCURRENT_TRANSACTIONS, as Kafka answers
        harness.leaders.gate = asyncio.Event()
        assert (await c.end_txn("tx", 501, 0, False))[0] is errors.NONE
        started = asyncio.get_running_loop().time()
        late = await c.add_partitions("tx", 501, 0, [TP("a", 2)])
        assert late is errors.CONCURRENT_TRANSACTIONS
        assert asyncio.get_running_loop().time() - started >= 0.9
        harness.leaders.gate.set()

    run(harness, scenario())


def test_the_complete_state_rides_on_the_next_replicated_write(harness: Harness) -> None:
    """Complete is the state once appended: the next transaction does not wait a
    replication round for it, and its own first write (acks=all) comes after it in
    the log, so it is on the ISR when that write is."""
    c = harness.coordinator

    async def scenario() -> None:
        await harness.lead()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 501, 0, [TP("a", 0)])
        assert (await c.end_txn("tx", 501, 0, True))[0] is errors.NONE
        await settle()
        assert await c.add_partitions("tx", 501, 0, [TP("a", 1)]) is errors.NONE

    run(harness, scenario())
    states = [s for _, s in harness.states()]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing"]
    complete, ongoing = 3, 4  # offsets in the log
    assert complete not in harness.awaited and ongoing in harness.awaited


def test_idle_ids_expire_as_tombstones(harness: Harness) -> None:
    c = harness.coordinator
    expiry = c.settings.id_expiration_ms

    async def scenario() -> None:
        await harness.lead()
        await c.init_producer_id("idle", 60_000)
        await c.init_producer_id("busy", 60_000)
        await c.add_partitions("busy", 502, 0, [TP("a", 0)])  # Ongoing: never expires
        harness.now += expiry - 1
        assert await c.expire_ids() == 0
        harness.now += 2
        assert await c.expire_ids() == 1
        assert c.describe("idle")[0] is errors.TRANSACTIONAL_ID_NOT_FOUND
        c.on_follower(0)
        await harness.lead(epoch=2)  # the tombstone is in the log: still gone
        assert c.describe("idle")[0] is errors.TRANSACTIONAL_ID_NOT_FOUND
        assert c.describe("busy")[0] is errors.NONE

    run(harness, scenario())
    assert harness.states()[-1] == ("idle", "-")
