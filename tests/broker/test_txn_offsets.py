"""Transactional offset commits in the group coordinator (KIP-98 / KIP-447), on a
real storage ``Log`` of ``__consumer_offsets-0``: the coordinator appends as
the broker does (acks=all, as the coordinator), markers are written with
``Log.append_control`` and announced with ``complete_txn`` as the partition
leader does after WriteTxnMarkers.

* a transactional commit is pending (invisible, UNSTABLE with require_stable)
  until its COMMIT marker, dropped by its ABORT marker;
* a plain commit stored after a transactional one of the same partition wins
  over it when the transaction commits later (Kafka's order by log offset);
* loading the log (control batches included) gives what the coordinator had
  in memory, pending commits included; a marker written while a load or a
  transactional append is under way is not lost;
* a stale producer epoch is fenced by the log (INVALID_PRODUCER_EPOCH);
* deleting offsets or the group drops the pending commits of its partitions;
* random interleavings of transactional and plain commits, markers and
  deletions agree with a simple model, live and after a reload.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from annal.broker.groups.coordinator import CommitEntry, OffsetsCoordinator
from annal.broker.groups.offsets_schema import OffsetValue
from annal.deploy.runner import wait_until
from annal.storage.batch import read_header
from annal.storage.control import AppendOrigin, ControlRecordType
from annal.storage.errors import InvalidRecordError
from annal.storage.log import Log
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(120)

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
CLOCK_MS = 1_700_000_000_000


class Harness:
    """One offsets partition's log and the coordinator leading it."""

    def __init__(self, directory: Path) -> None:
        self.log = Log.open(directory / "__consumer_offsets-0")
        self.gate: asyncio.Event | None = None  # holds the wait for the replicas
        self.coordinator = self.start()

    def _append(self, tp: TopicPartition, batch: bytes) -> tuple[ErrorCode, int]:
        try:
            info = self.log.append_as_leader(batch, 0, origin=AppendOrigin.COORDINATOR)
        except InvalidRecordError as exc:
            return exc.code, -1
        self.log.update_high_watermark(self.log.log_end_offset)
        return errors.NONE, info.last_offset

    async def _await(
        self, appended: dict[TopicPartition, int], timeout_ms: int
    ) -> Mapping[TopicPartition, tuple[ErrorCode, str]]:
        if self.gate is not None:
            await self.gate.wait()
        return {tp: (errors.NONE, "") for tp in appended}

    def start(self, log: Any = None) -> OffsetsCoordinator:
        """A coordinator (as a new leader) that has loaded ``log`` (this log)."""
        coordinator = OffsetsCoordinator(1, self._append, self._await, lambda: CLOCK_MS)
        coordinator.on_leader(0, log or self.log)
        if log is None:
            loaded(coordinator)
        return coordinator

    def txn(
        self, group: str, producer_id: int, offsets: Mapping[TopicPartition, int], epoch: int = 0
    ) -> dict[TopicPartition, ErrorCode]:
        entries = [CommitEntry(tp.topic, tp.partition, o) for tp, o in offsets.items()]
        out = asyncio.run(self.coordinator.txn_commit(group, producer_id, epoch, entries, 1000))
        return {tp: error for tp, (error, _) in out.items()}

    def plain(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        entries = [CommitEntry(tp.topic, tp.partition, o) for tp, o in offsets.items()]
        out = asyncio.run(self.coordinator.commit(group, entries, 1000))
        assert {e for e, _ in out.values()} == {errors.NONE}

    def marker(self, producer_id: int, commit: bool, epoch: int = 0) -> None:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self.log.append_control(producer_id, epoch, kind, 0, 0)
        self.coordinator.complete_txn(0, producer_id, commit)


def loaded(coordinator: OffsetsCoordinator) -> None:
    wait_until(lambda: coordinator.term("g")[0] == errors.NONE, 30, "the partition loaded")


def committed(coordinator: OffsetsCoordinator, group: str) -> dict[TopicPartition, int]:
    error, found = coordinator.fetch(group, None)
    assert error == errors.NONE
    return {tp: v.offset for tp, v in found.items() if v is not None}


def view(coordinator: OffsetsCoordinator, groups: list[str]) -> dict[str, Any]:
    """Everything OffsetFetch can see of ``groups``: committed values, unstable partitions."""
    out: dict[str, Any] = {}
    for group in groups:
        _, found = coordinator.fetch(group, None)
        out[group] = (found, coordinator.unstable(group, [T0, T1, T2]))
    return out


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_pending_until_committed(h: Harness) -> None:
    assert h.txn("g", 7, {T0: 10, T1: 11}) == {T0: errors.NONE, T1: errors.NONE}
    assert committed(h.coordinator, "g") == {}
    _, found = h.coordinator.fetch("g", [T0])
    assert found == {T0: None}
    assert h.coordinator.unstable("g", [T0, T1, T2]) == {T0, T1}
    assert h.coordinator.has_offsets("g") and h.coordinator.groups() == ["g"]
    # the batch: transactional, the producer's id and epoch, base sequence 0
    header = read_header(h.log.read(0, 1 << 20))
    assert (header.is_transactional, header.is_control) == (True, False)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 0)
    assert h.log.first_unstable_offset == 0

    h.marker(7, commit=True)
    assert committed(h.coordinator, "g") == {T0: 10, T1: 11}
    assert h.coordinator.unstable("g", [T0, T1]) == set()
    assert view(h.start(), ["g"]) == view(h.coordinator, ["g"])


def test_abort_drops_them(h: Harness) -> None:
    h.plain("g", {T0: 3})
    h.txn("g", 7, {T0: 10, T1: 11})
    h.txn("g", 7, {T1: 12})  # a second commit of the transaction replaces the first
    h.marker(7, commit=False)
    assert committed(h.coordinator, "g") == {T0: 3}
    assert h.coordinator.unstable("g", [T0, T1]) == set()
    h.txn("g", 7, {T1: 20})  # the producer's next transaction
    h.txn("g", 7, {T1: 21})
    h.marker(7, commit=True)
    assert committed(h.coordinator, "g") == {T0: 3, T1: 21}
    assert view(h.start(), ["g"]) == view(h.coordinator, ["g"])


def test_a_later_plain_commit_wins(h: Harness) -> None:
    h.txn("g", 7, {T0: 10, T1: 11})
    h.plain("g", {T0: 50})  # stored after the transactional one
    h.marker(7, commit=True)
    assert committed(h.coordinator, "g") == {T0: 50, T1: 11}
    h.txn("g", 8, {T0: 60})  # stored after the plain one: wins when committed
    h.marker(8, commit=True)
    assert committed(h.coordinator, "g") == {T0: 60, T1: 11}
    assert view(h.start(), ["g"]) == view(h.coordinator, ["g"])


def test_reload_keeps_pending_commits_pending(h: Harness) -> None:
    h.txn("g", 7, {T0: 10})
    h.txn("other", 8, {T2: 5})
    h.marker(9, commit=True)  # a producer with no offsets here: nothing to do
    h.marker(8, commit=False)
    reloaded = h.start()
    assert view(reloaded, ["g", "other"]) == view(h.coordinator, ["g", "other"])
    assert reloaded.unstable("g", [T0]) == {T0} and committed(reloaded, "g") == {}
    h.coordinator = reloaded
    h.marker(7, commit=True)  # the marker comes after the load
    assert committed(reloaded, "g") == {T0: 10}
    assert view(h.start(), ["g", "other"]) == view(reloaded, ["g", "other"])


def test_groups_with_pending_offsets_only(h: Harness) -> None:
    h.txn("g", 7, {T0: 10})
    assert h.coordinator.groups() == ["g"] and h.coordinator.has_offsets("g")
    h.marker(7, commit=False)
    assert h.coordinator.groups() == [] and not h.coordinator.has_offsets("g")


def test_a_stale_epoch_is_fenced_by_the_log(h: Harness) -> None:
    assert h.txn("g", 7, {T0: 1}, epoch=3) == {T0: errors.NONE}
    assert h.txn("g", 7, {T0: 2}, epoch=2) == {T0: errors.INVALID_PRODUCER_EPOCH}
    h.marker(7, commit=True, epoch=3)
    assert committed(h.coordinator, "g") == {T0: 1}


def test_metadata_too_large_and_not_coordinator(h: Harness) -> None:
    entries = [CommitEntry("t", 0, 1, metadata="x" * 5000), CommitEntry("t", 1, 1)]
    out = asyncio.run(h.coordinator.txn_commit("g", 7, 0, entries, 1000))
    assert out[T0][0] == errors.OFFSET_METADATA_TOO_LARGE and out[T1][0] == errors.NONE
    assert h.coordinator.unstable("g", [T0, T1]) == {T1}
    h.coordinator.on_follower(0)
    out = asyncio.run(h.coordinator.txn_commit("g", 7, 0, entries[1:], 1000))
    assert out[T1][0] == errors.NOT_COORDINATOR
    h.coordinator.complete_txn(0, 7, True)  # not leading: nothing


def test_deleting_offsets_or_the_group_drops_pending_commits(h: Harness) -> None:
    h.plain("g", {T0: 1})
    h.txn("g", 7, {T0: 10, T1: 11, T2: 12})
    error, _ = asyncio.run(h.coordinator.delete_offsets("g", [T1], 1000))
    assert error == errors.NONE
    assert h.coordinator.unstable("g", [T0, T1, T2]) == {T0, T2}
    error, _ = asyncio.run(h.coordinator.store_group("g", None, 1000))
    assert error == errors.NONE
    assert h.coordinator.unstable("g", [T0, T1, T2]) == set()
    assert not h.coordinator.has_offsets("g")
    h.marker(7, commit=True)
    assert committed(h.coordinator, "g") == {}
    assert view(h.start(), ["g"]) == view(h.coordinator, ["g"])


def test_a_marker_while_the_append_waits_for_its_replicas(h: Harness) -> None:
    async def scenario(commit: bool) -> None:
        h.gate = asyncio.Event()
        end = h.log.log_end_offset
        entries = [CommitEntry("t", 0, 40 if commit else 41)]
        task = asyncio.create_task(h.coordinator.txn_commit("g", 7, 0, entries, 1000))
        while h.log.log_end_offset == end:  # stored; now waiting for the replicas
            await asyncio.sleep(0.001)
        h.marker(7, commit)
        h.gate.set()
        assert (await task)[T0][0] == errors.NONE
        h.gate = None

    asyncio.run(scenario(commit=True))
    assert committed(h.coordinator, "g") == {T0: 40}
    asyncio.run(scenario(commit=False))
    assert committed(h.coordinator, "g") == {T0: 40}
    assert h.coordinator.unstable("g", [T0]) == set()
    assert view(h.start(), ["g"]) == view(h.coordinator, ["g"])


class HeldLog:
    """A log as a loading coordinator sees it: reads wait for ``release`` and stop
    at the end it had when made."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.end = log.log_end_offset
        self.release = threading.Event()

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.end

    def read(self, offset: int, max_bytes: int) -> bytes:
        assert self.release.wait(30)
        return self.log.read(offset, max_bytes, max_offset=self.end)


def test_a_marker_while_the_partition_loads(h: Harness) -> None:
    h.txn("g", 7, {T0: 10})
    h.txn("g", 8, {T1: 11})
    held = HeldLog(h.log)
    loading = h.start(cast(Log, held))
    assert loading.term("g")[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
    h.log.append_control(7, 0, ControlRecordType.COMMIT, 0, 0)
    loading.complete_txn(0, 7, True)
    h.log.append_control(8, 0, ControlRecordType.ABORT, 0, 0)
    loading.complete_txn(0, 8, False)
    held.release.set()
    loaded(loading)
    assert committed(loading, "g") == {T0: 10}
    assert loading.unstable("g", [T0, T1]) == set()
    assert view(h.start(), ["g"]) == view(loading, ["g"])


# -- random interleavings against a model ----------------------------------------------

GROUPS = ["a", "b"]
PIDS = [1, 2, 3]
partitions = st.sets(st.sampled_from([T0, T1, T2]), min_size=1)
op = st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(GROUPS), partitions),
    st.tuples(st.just("plain"), st.sampled_from(GROUPS), partitions),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), partitions),
    st.tuples(st.just("drop"), st.sampled_from(GROUPS)),
    st.tuples(st.just("reload")),
)


class Model:
    """Kafka's rules, written plainly: every write has a sequence number in log order."""

    def __init__(self) -> None:
        self.seq = 0
        self.committed: dict[tuple[str, TopicPartition], tuple[int, int]] = {}
        self.pending: dict[int, dict[tuple[str, TopicPartition], tuple[int, int]]] = {}

    def txn(self, pid: int, group: str, tps: set[TopicPartition], offset: int) -> None:
        self.seq += 1
        for tp in tps:
            self.pending.setdefault(pid, {})[(group, tp)] = (offset, self.seq)

    def plain(self, group: str, tps: set[TopicPartition], offset: int) -> None:
        self.seq += 1
        for tp in tps:
            self.committed[(group, tp)] = (offset, self.seq)

    def end(self, pid: int, commit: bool) -> None:
        for key, (offset, seq) in self.pending.pop(pid, {}).items():
            if commit and (key not in self.committed or self.committed[key][1] < seq):
                self.committed[key] = (offset, seq)

    def delete(self, group: str, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self.committed.pop((group, tp), None)
            for pending in self.pending.values():
                pending.pop((group, tp), None)

    def drop(self, group: str) -> None:
        self.delete(group, {T0, T1, T2})

    def view(self, group: str) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        offsets = {tp: o for (g, tp), (o, _) in self.committed.items() if g == group}
        unstable = {tp for p in self.pending.values() for (g, tp) in p if g == group}
        return offsets, unstable


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=10, max_size=40))
def test_random_interleavings_match_the_model(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        h = Harness(Path(directory))
        model = Model()
        try:
            for n, (kind, *args) in enumerate(ops):
                offset = 100 + n
                if kind == "txn":
                    pid, group, tps = args
                    assert set(h.txn(group, pid, dict.fromkeys(tps, offset)).values()) == {
                        errors.NONE
                    }
                    model.txn(pid, group, tps, offset)
                elif kind == "plain":
                    group, tps = args
                    h.plain(group, dict.fromkeys(tps, offset))
                    model.plain(group, tps, offset)
                elif kind == "end":
                    h.marker(args[0], args[1])
                    model.end(args[0], args[1])
                elif kind == "delete":
                    group, tps = args
                    assert asyncio.run(h.coordinator.delete_offsets(group, sorted(tps), 1000))[
                        0
                    ] == (errors.NONE)
                    model.delete(group, tps)
                elif kind == "drop":
                    assert asyncio.run(h.coordinator.store_group(args[0], None, 1000))[0] == (
                        errors.NONE
                    )
                    model.drop(args[0])
                else:
                    h.coordinator = h.start()
                for group in GROUPS:
                    found, unstable = model.view(group)
                    assert committed(h.coordinator, group) == found, (kind, group)
                    assert h.coordinator.unstable(group, [T0, T1, T2]) == unstable
            assert view(h.start(), GROUPS) == view(h.coordinator, GROUPS)
        finally:
            h.log.close()


def test_the_loaded_values_are_the_stored_ones(h: Harness) -> None:
    entries = [CommitEntry("t", 0, 10, leader_epoch=4, metadata="m")]
    asyncio.run(h.coordinator.txn_commit("g", 7, 0, entries, 1000))
    h.marker(7, commit=True)
    expected = {T0: OffsetValue(10, 4, "m", CLOCK_MS)}
    assert h.coordinator.fetch("g", None) == (errors.NONE, expected)
    assert h.start().fetch("g", None) == (errors.NONE, expected)


def test_a_partition_named_twice_keeps_the_last(h: Harness) -> None:
    twice = [CommitEntry("t", 0, 1), CommitEntry("t", 0, 2)]
    asyncio.run(h.coordinator.txn_commit("g", 7, 0, twice, 1000))
    h.marker(7, commit=True)
    asyncio.run(h.coordinator.commit("h", twice, 1000))
    assert committed(h.coordinator, "g") == committed(h.coordinator, "h") == {T0: 2}
    assert view(h.start(), ["g", "h"]) == view(h.coordinator, ["g", "h"])
