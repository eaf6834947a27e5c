"""Idempotent producers' state in a log: sequence checks, snapshots, recovery, truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from annal.storage import files
from annal.storage.config import LogConfig
from annal.storage.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from annal.storage.log import Log
from annal.storage.producer_state import (
    INT32_MAX,
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
    increment_sequence,
    read_snapshot,
)
from annal.storage.records import Record, encode_batch
from logutil import FakeClock, read_all

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000_000


def idem(
    pid: int, epoch: int, seq: int, n: int = 3, *, ts: int = NOW, transactional: bool = False
) -> bytes:
    records = [Record(i, ts, None, f"{pid}-{epoch}-{seq}-{i}".encode()) for i in range(n)]
    return encode_batch(
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def open_log(path: Path, clock: FakeClock | None = None, **config: object) -> Log:
    props = {k.replace("_", "."): str(v) for k, v in config.items()}
    return Log.open(
        path / "t-0",
        LogConfig.from_properties(props),
        time_ms=clock or FakeClock(NOW),
        producer_id_expiration_ms=60_000,
    )


def test_in_order_batches_are_stored_and_a_retry_is_answered_with_its_offsets(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    first = log.append_as_leader(idem(7, 0, 0), 0)
    second = log.append_as_leader(idem(7, 0, 3), 0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 5)
    again = log.append_as_leader(idem(7, 0, 0), 0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 2)
    assert log.log_end_offset == 6
    assert len(read_all(log)) == 6
    state = log.producer_state()[7]
    assert state.producer_epoch == 0 and state.last_seq == 5


def test_any_of_the_last_five_batches_is_a_duplicate_and_no_older(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(6):
        log.append_as_leader(idem(1, 0, 2 * i, n=2), 0)
    dup = log.append_as_leader(idem(1, 0, 2, n=2), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (2, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(1, 0, 0, n=2), 0)  # evicted: only five are kept
    # a batch with the same first but another last sequence is no duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(1, 0, 2, n=3), 0)
    assert log.log_end_offset == 12


def test_gaps_stale_epochs_and_new_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(5, 2, 0), 0)
    with pytest.raises(OutOfOrderSequenceError, match="out of order sequence"):
        log.append_as_leader(idem(5, 2, 4), 0)  # 3 was next
    with pytest.raises(InvalidProducerEpochError, match="older than its last epoch 2"):
        log.append_as_leader(idem(5, 1, 3), 0)
    with pytest.raises(OutOfOrderSequenceError, match="starts at sequence 3, not 0"):
        log.append_as_leader(idem(5, 3, 3), 0)
    log.append_as_leader(idem(5, 3, 0), 0)  # a new epoch restarts at 0
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(5, 2, 3), 0)  # the old epoch is fenced now
    assert log.log_end_offset == 6
    # nothing was stored by the refused appends
    assert [r.value for r in read_all(log)][3] == b"5-3-0-0"


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append_as_leader(idem(9, 4, 1000), 0)
    assert info.first_offset == 0 and not info.duplicate
    log.append_as_leader(idem(9, 4, 1003), 0)


def test_sequences_wrap_from_int32_max_to_zero(tmp_path: Path) -> None:
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    log = open_log(tmp_path)
    log.append_as_leader(idem(3, 0, INT32_MAX - 2, n=3), 0)  # ends at 2^31-1
    log.append_as_leader(idem(3, 0, 0, n=2), 0)  # wraps
    log.append_as_leader(idem(3, 0, 2, n=4), 0)
    log.append_as_leader(idem(4, 0, INT32_MAX - 1, n=3), 0)  # wraps inside the batch: ..., 0
    log.append_as_leader(idem(4, 0, 1), 0)
    assert log.producer_state()[3].last_seq == 5
    dup = log.append_as_leader(idem(4, 0, INT32_MAX - 1, n=3), 0)
    assert dup.duplicate and dup.first_offset == 9
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(3, 0, 0, n=1), 0)


def test_several_batches_of_one_producer_in_one_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append_as_leader(idem(2, 0, 0) + idem(2, 0, 3) + idem(8, 0, 0), 0)
    assert (info.first_offset, info.last_offset) == (0, 8)
    assert log.producer_state()[2].last_seq == 5
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(2, 0, 6) + idem(2, 0, 10), 0)
    assert log.log_end_offset == 9


def test_clients_write_transactional_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(2, 0, 0, transactional=True), 0)
    assert log.producer_state()[2].current_txn_first_offset == 0
    assert log.first_unstable_offset == 0


def test_followers_keep_the_state_so_a_new_leader_answers_a_retry(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    leader.append_as_leader(idem(11, 0, 0), 3)
    leader.append_as_leader(idem(11, 0, 3), 3)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.producer_state() == leader.producer_state()
    dup = follower.append_as_leader(idem(11, 0, 3), 4)  # the follower became leader
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (3, 5)
    follower.append_as_leader(idem(11, 0, 6), 4)


def test_snapshot_format_is_kafkas(tmp_path: Path) -> None:
    entry = ProducerStateEntry(42, 3)
    entry.add_batch(3, 9, 120, 4, NOW)
    data = encode_snapshot([entry, ProducerStateEntry(43, 0, NOW)])
    assert len(data) == 2 + 4 + 4 + 2 * 46
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2)
    pid, epoch, last_seq, last_offset, delta, ts, coord, txn = struct.unpack_from(
        ">qhiqiqiq", data, 10
    )
    assert (pid, epoch, last_seq, last_offset, delta, ts, coord, txn) == (
        42,
        3,
        9,
        120,
        4,
        NOW,
        -1,
        -1,
    )
    entries = decode_snapshot(data)
    assert entries[0].first_sequence == 5 and entries[1].last_offset == -1
    assert entries[0].to_entry() == entry
    broken = bytearray(data)
    broken[-1] ^= 1
    with pytest.raises(CorruptSnapshotError, match="CRC mismatch"):
        decode_snapshot(bytes(broken))
    with pytest.raises(CorruptSnapshotError, match="do not hold"):
        decode_snapshot(data[:-3])


def _fill(log: Log, producers: int = 3, rounds: int = 12) -> None:
    for r in range(rounds):
        for pid in range(producers):
            log.append_as_leader(idem(100 + pid, 1, 3 * r), 0)
        log.append_as_leader(encode_batch([Record(0, NOW, None, b"plain")]), 0)


def test_snapshots_at_each_roll_and_at_a_clean_shutdown(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1024)
    _fill(log)
    bases = [s.base_offset for s in log.segments()]
    assert len(bases) > 3
    directory = tmp_path / "t-0"
    snapshots = sorted(int(p.name[:20]) for p in directory.glob("*.snapshot"))
    assert snapshots == bases[1:]  # one per roll, named by the new segment's base
    log.take_producer_snapshot()
    last = directory / files.snapshot_file_name(log.log_end_offset)
    live = log.producer_state()
    assert {e.producer_id: e.last_sequence for e in read_snapshot(last)} == {
        pid: e.last_seq for pid, e in live.items()
    }


def test_rebuilding_from_the_log_gives_the_snapshot(tmp_path: Path) -> None:
    """A clean restart loads the shutdown snapshot; an unclean one with no snapshot
    at all replays every batch header; both give the same table."""
    clock = FakeClock(NOW)
    log = open_log(tmp_path, clock, segment_bytes=1024)
    _fill(log)
    log.take_producer_snapshot()
    directory = tmp_path / "t-0"
    written = (directory / files.snapshot_file_name(log.log_end_offset)).read_bytes()
    log.close()
    for path in directory.glob("*.snapshot"):
        path.unlink()
    reopened = Log.open(directory, LogConfig(segment_bytes=1024), time_ms=clock)
    assert encode_snapshot(reopened.producer_state().values()) == written
    # the replay kept up to five batches per producer: any of them is a duplicate
    dup = reopened.append_as_leader(idem(101, 1, 3 * 8), 0)
    assert dup.duplicate


def test_recovery_loads_the_snapshot_below_the_recovery_point_and_replays(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, segment_bytes=1024)
    _fill(log)
    live = log.producer_state()
    end = log.log_end_offset
    recovery_point = log.segments()[-2].base_offset
    log.close()
    directory = tmp_path / "t-0"
    # a snapshot past the log end (recovery cut what it described) is dropped
    (directory / files.snapshot_file_name(end + 50)).write_bytes(encode_snapshot([]))
    reopened = Log.open(
        directory,
        LogConfig(segment_bytes=1024),
        recovery_point=recovery_point,
        time_ms=FakeClock(NOW),
    )
    assert not (directory / files.snapshot_file_name(end + 50)).exists()
    state = reopened.producer_state()
    assert {p: (e.producer_epoch, e.last_seq, e.last_data_offset) for p, e in state.items()} == {
        p: (e.producer_epoch, e.last_seq, e.last_data_offset) for p, e in live.items()
    }


def test_a_corrupt_snapshot_is_replaced_by_an_older_one_and_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1024)
    _fill(log)
    live = log.producer_state()
    log.take_producer_snapshot()
    end = log.log_end_offset
    log.close()
    directory = tmp_path / "t-0"
    newest = directory / files.snapshot_file_name(end)
    newest.write_bytes(newest.read_bytes()[:-1] + b"\x00")
    reopened = Log.open(
        directory, LogConfig(segment_bytes=1024), had_clean_shutdown=True, time_ms=FakeClock(NOW)
    )
    assert not newest.exists()
    assert {p: e.last_seq for p, e in reopened.producer_state().items()} == {
        p: e.last_seq for p, e in live.items()
    }


def test_truncation_rolls_the_state_back(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1024)
    _fill(log)
    directory = tmp_path / "t-0"
    cut = log.segments()[1].base_offset + 2
    log.truncate_to(cut)
    assert max(int(p.name[:20]) for p in directory.glob("*.snapshot")) <= log.log_end_offset
    state = log.producer_state()
    end = log.log_end_offset
    for entry in state.values():
        assert entry.last_data_offset < end
    # the batch that followed the cut is new again, not a duplicate
    pid = 100
    info = log.append_as_leader(idem(pid, 1, state[pid].last_seq + 1), 0)
    assert not info.duplicate and info.first_offset == end
    log.truncate_fully_and_start_at(500)
    assert log.producer_state() == {}
    assert not list(directory.glob("*.snapshot"))


def test_retention_deletes_snapshots_with_their_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1024)
    _fill(log)
    directory = tmp_path / "t-0"
    third = log.segments()[2].base_offset
    log.delete_records_before(third)
    left = sorted(int(p.name[:20]) for p in directory.glob("*.snapshot"))
    assert left and min(left) >= third
    assert set(log.producer_state()) == {100, 101, 102}  # producers outlive their batches


def test_producer_ids_expire_after_silence(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(1, 0, 0, ts=NOW), 0)
    log.append_as_leader(idem(2, 0, 0, ts=NOW + 30_000), 0)
    clock.advance(59_999)
    assert log.remove_expired_producers() == 0
    clock.advance(1)
    assert log.remove_expired_producers() == 1
    assert set(log.producer_state()) == {2}
    log.append_as_leader(idem(1, 0, 77), 0)  # unknown again: any sequence
