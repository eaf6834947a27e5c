"""The partition leader's side of transactions (KIP-98) on a real replica manager
and logs: read_committed reads stop at the last stable offset and name the
aborted transactions, ListOffsets LATEST is the LSO, the long poll counts bytes
below it, markers are written (and refused) as Kafka's WriteTxnMarkers writes
them, and a fetch session sees a moved LSO as news."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from annal.broker.control import ControlService
from annal.broker.groups.coordinator import OFFSETS_TOPIC
from annal.broker.replication.partition import LeaderAndIsrState
from annal.broker.replication.replica_manager import ReplicaManager
from annal.broker.requests import txn_types as tt
from annal.broker.requests.fetch_sessions import CachedPartition, PartitionFetch
from annal.broker.requests.request_checks import InvalidRequest
from annal.broker.security.authorization import ALLOW_ALL
from annal.broker.transactions.data_path import (
    check_isolation_level,
    has_transactional_batches,
    transactional_refusal,
)
from annal.broker.transactions.leader_markers import TxnMarkerWriter
from annal.security.session import UNAUTHENTICATED
from annal.storage.batch import iter_batches
from annal.storage.control import ControlRecordType, EndTransactionMarker, build_control_batch
from annal.storage.files import TopicPartition
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch
from annal.storage.txn_index import AbortedTxn

from annal import errors

pytestmark = pytest.mark.timeout(60)

TP = TopicPartition("t", 0)
OFFSETS = TopicPartition(OFFSETS_TOPIC, 3)
TS = int(time.time() * 1000)  # markers carry the clock's time: no time-based roll


def led(tp: TopicPartition, leader: int = 1) -> LeaderAndIsrState:
    return LeaderAndIsrState(tp.topic, tp.partition, 1, leader, 1, (leader,), (1, 2), 0)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([tmp_path], broker_id=1, settings=LogManagerConfig(cleaner_enable=False))
    logs.startup()
    manager = ReplicaManager(1, logs, lambda topic: {}, lambda tp: tp.topic != "nowhere")
    assert manager.become_leader_or_follower([led(TP), led(OFFSETS)]) == {
        TP: errors.NONE,
        OFFSETS: errors.NONE,
    }
    try:
        yield manager
    finally:
        logs.shutdown()


def plain(*values: bytes) -> bytes:
    return encode_batch([Record(i, TS, None, v) for i, v in enumerate(values)])


def txn(pid: int, seq: int, *values: bytes, epoch: int = 0) -> bytes:
    records = [Record(i, TS, None, v) for i, v in enumerate(values)]
    return encode_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


def offsets_of(data: bytes) -> list[int]:
    return [h.base_offset for h in iter_batches(data)]


def test_read_committed_stops_at_the_lso_and_names_aborted_transactions(
    replicas: ReplicaManager,
) -> None:
    assert replicas.append(TP, plain(b"p0")).base_offset == 0
    assert replicas.append(TP, txn(7, 0, b"a", b"b")).base_offset == 1  # 1-2, open
    assert replicas.append(TP, plain(b"p3")).base_offset == 3
    committed = replicas.read(TP, 0, 1 << 20, read_committed=True)
    assert (committed.error, offsets_of(committed.records)) == (errors.NONE, [0])
    assert (committed.last_stable_offset, committed.high_watermark) == (1, 4)
    assert committed.aborted == ()
    uncommitted = replicas.read(TP, 0, 1 << 20)
    assert offsets_of(uncommitted.records) == [0, 1, 3]
    assert (uncommitted.aborted, uncommitted.last_stable_offset) == (None, 1)
    # at the LSO itself: nothing yet, no error
    at_lso = replicas.read(TP, 1, 1 << 20, read_committed=True)
    assert (at_lso.error, at_lso.records, at_lso.aborted) == (errors.NONE, b"", ())
    assert replicas.list_offset(TP, -1, read_committed=True)[2] == 1
    assert replicas.list_offset(TP, -1)[2] == 4

    aborted = replicas.append_control(TP, 7, 0, False, 0)  # ABORT at 4
    assert (aborted.error, aborted.base_offset) == (errors.NONE, 4)
    after = replicas.read(TP, 0, 1 << 20, read_committed=True)
    assert offsets_of(after.records) == [0, 1, 3, 4]
    assert after.last_stable_offset == 5 == after.high_watermark
    assert after.aborted == (AbortedTxn(7, 1, 4, 5),)
    # a read after the aborted range names nothing; one inside it names it
    assert replicas.read(TP, 5, 1 << 20, read_committed=True).aborted == ()
    assert replicas.read(TP, 2, 1 << 20, read_committed=True).aborted == (AbortedTxn(7, 1, 4, 5),)
    assert replicas.list_offset(TP, -1, read_committed=True)[2] == 5
    # a follower reads to the log end whatever it asks
    replicas.append(TP, txn(8, 0, b"open"))
    follower = replicas.read(TP, 0, 1 << 20, replica_id=2, read_committed=True)
    assert offsets_of(follower.records) == [0, 1, 3, 4, 5] and follower.aborted is None


def test_a_timestamp_lookup_counts_only_below_the_lso(replicas: ReplicaManager) -> None:
    replicas.append(TP, txn(7, 0, b"a"))
    found = replicas.list_offset(TP, TS)
    assert found[:3] == (errors.NONE, TS, 0)
    assert replicas.list_offset(TP, TS, read_committed=True)[:3] == (errors.NONE, -1, -1)
    assert replicas.list_offset(TP, -2, read_committed=True)[2] == 0  # earliest as ever
    replicas.append_control(TP, 7, 0, True, 0)
    assert replicas.list_offset(TP, TS, read_committed=True)[:3] == (errors.NONE, TS, 0)


def test_markers_are_refused_as_kafka_refuses_them(replicas: ReplicaManager) -> None:
    replicas.append(TP, txn(7, 0, b"a", epoch=2))
    stale_producer = replicas.append_control(TP, 7, 1, True, 0)
    assert stale_producer.error is errors.INVALID_PRODUCER_EPOCH
    assert replicas.append_control(TP, 7, 2, True, 5).error is errors.NONE
    replicas.append(TP, txn(7, 1, b"b", epoch=2))
    zombie = replicas.append_control(TP, 7, 2, False, 4)  # an older coordinator
    assert zombie.error is errors.TRANSACTION_COORDINATOR_FENCED
    assert "coordinator" in zombie.message
    hosted_elsewhere = replicas.append_control(TopicPartition("t", 9), 7, 2, True, 5)
    assert hosted_elsewhere.error is errors.UNKNOWN_TOPIC_OR_PARTITION
    replicas.become_leader_or_follower([LeaderAndIsrState("t", 0, 1, 2, 2, (2,), (1, 2), 0)])
    assert replicas.append_control(TP, 7, 2, True, 5).error is errors.NOT_LEADER_OR_FOLLOWER


def test_clients_may_not_write_control_batches(replicas: ReplicaManager) -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    refused = replicas.append(TP, build_control_batch(7, 0, marker, TS))
    assert refused.error is errors.INVALID_RECORD
    assert "Clients are not allowed to write control records" in refused.message


def test_a_long_poll_counts_bytes_below_the_lso_only(replicas: ReplicaManager) -> None:
    replicas.append(TP, plain(b"p0"))
    committed = replicas.fetch_start(TP, 1, -1, read_committed=True)
    uncommitted = replicas.fetch_start(TP, 1, -1)
    p1 = plain(b"p1")
    replicas.append(TP, p1)  # 1
    replicas.append(TP, txn(7, 0, b"open" * 50))  # 2, open: the LSO stays at 2
    replicas.append(TP, plain(b"p3" * 50))  # 3
    assert replicas.bytes_available(committed, follower=False) == len(p1)
    everything = replicas.bytes_available(uncommitted, follower=False)
    assert everything is not None and everything > len(p1) + 200
    at_lso = replicas.fetch_start(TP, 2, -1, read_committed=True)
    replicas.append(TP, plain(b"p4"))
    assert replicas.bytes_available(at_lso, follower=False) == 0
    replicas.append_control(TP, 7, 0, True, 0)
    assert (replicas.bytes_available(at_lso, follower=False) or 0) > 0


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def markers(
    pid: int, commit: bool, *tps: TopicPartition, epoch: int = 0
) -> tt.WriteTxnMarkersRequest:
    topics = [tt.WritableTxnMarkerTopic(tp.topic, [tp.partition]) for tp in tps]
    return tt.WriteTxnMarkersRequest([tt.WritableTxnMarker(pid, epoch, commit, topics, 0)])


def results(response: tt.WriteTxnMarkersResponse) -> list[tuple[int, str, int, str]]:
    return [
        (m.producer_id, p.topic, p.partition, errors.from_wire(p.error).name)
        for m in response.markers
        for p in m.partitions
    ]


def test_the_marker_writer_waits_for_the_isr_then_tells_the_group_coordinator(
    replicas: ReplicaManager,
) -> None:
    told: list[tuple[int, int, bool]] = []
    waited: list[dict[TopicPartition, int]] = []

    async def await_replication(appended: dict[TopicPartition, int], timeout_ms: int) -> Any:
        waited.append(dict(appended))
        return {tp: (errors.NONE, "") for tp in appended}

    writer = TxnMarkerWriter(replicas, await_replication, lambda *a: told.append(a))
    replicas.append(TP, txn(7, 0, b"a"))
    request = markers(7, True, TP, OFFSETS, TopicPartition("nowhere", 0), TopicPartition("t", 9))
    request.markers[0].topics.append(tt.WritableTxnMarkerTopic("bad/name", [0]))
    answer = run(writer.write(request))
    assert results(answer) == [
        (7, "t", 0, "NONE"),
        (7, OFFSETS_TOPIC, 3, "NONE"),
        (7, "nowhere", 0, "UNKNOWN_TOPIC_OR_PARTITION"),
        (7, "t", 9, "UNKNOWN_TOPIC_OR_PARTITION"),
        (7, "bad/name", 0, "INVALID_TOPIC_EXCEPTION"),
    ]
    assert waited == [{TP: 1, OFFSETS: 0}]
    assert told == [(3, 7, True)]
    assert replicas.read(TP, 0, 1 << 20, read_committed=True).last_stable_offset == 2


def test_a_marker_not_replicated_or_not_completed_is_answered_so(
    replicas: ReplicaManager,
) -> None:
    async def timed_out(appended: dict[TopicPartition, int], timeout_ms: int) -> Any:
        return {tp: (errors.REQUEST_TIMED_OUT, "not replicated") for tp in appended}

    told: list[tuple[int, int, bool]] = []
    answer = run(TxnMarkerWriter(replicas, timed_out, lambda *a: told.append(a)).write(
        markers(7, False, OFFSETS)
    ))  # fmt: skip
    assert results(answer) == [(7, OFFSETS_TOPIC, 3, "REQUEST_TIMED_OUT")] and told == []

    def failing(index: int, pid: int, commit: bool) -> None:
        raise RuntimeError("no group coordinator")

    answer = run(TxnMarkerWriter(replicas, None, failing).write(markers(7, True, OFFSETS)))
    assert results(answer) == [(7, OFFSETS_TOPIC, 3, "UNKNOWN_SERVER_ERROR")]


class Denying:
    def cluster_action(self, session: object) -> bool:
        return False


def test_write_txn_markers_needs_cluster_action(replicas: ReplicaManager) -> None:
    def control(authorizer: Any) -> ControlService:
        none = cast(Any, None)
        return ControlService(replicas, none, none, none, none, authorizer)

    request = markers(7, True, TP, OFFSETS)
    refused = run(control(Denying()).write_txn_markers(request, UNAUTHENTICATED))
    assert results(refused) == [
        (7, "t", 0, "CLUSTER_AUTHORIZATION_FAILED"),
        (7, OFFSETS_TOPIC, 3, "CLUSTER_AUTHORIZATION_FAILED"),
    ]
    assert replicas.read(TP, 0, 1 << 20).records == b""  # nothing written
    replicas.append(TP, txn(7, 0, b"a"))
    allowed = run(control(ALLOW_ALL).write_txn_markers(request, UNAUTHENTICATED))
    assert [r[3] for r in results(allowed)] == ["NONE", "NONE"]


def test_a_fetch_session_answers_a_moved_lso() -> None:
    cached = CachedPartition(PartitionFetch(5, 100))
    cached.answered(0, 10, 0, 5)
    assert not cached.has_news(0, 10, 0, 0, 5)
    assert cached.has_news(0, 10, 0, 0, 8)
    cached.answered(0, 10, 0, 8)
    assert cached.last_stable_offset == 8 and not cached.has_news(0, 10, 0, 0, 8)


def test_transactional_produce_checks() -> None:
    assert has_transactional_batches([plain(b"x"), txn(1, 0, b"y")])
    assert not has_transactional_batches([plain(b"x"), b"", b"\xff" * 100, txn(1, 0, b"y")[:40]])
    no_id = transactional_refusal(ALLOW_ALL, UNAUTHENTICATED, "")
    assert no_id is not None and no_id.error is errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert transactional_refusal(ALLOW_ALL, UNAUTHENTICATED, "tx") is None
    check_isolation_level(0)
    check_isolation_level(1)
    with pytest.raises(InvalidRequest, match="isolation_level"):
        check_isolation_level(2)
