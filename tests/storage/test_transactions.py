"""Transactions in the log (docs/storage.md, "Transactions"): control records,
producer state with open transactions, the LSO, ``.txnindex``, recovery,
replication, retention and compaction of transactional data."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from annal.deploy.runner import wait_until
from annal.storage import files
from annal.storage.batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, iter_batches, read_header
from annal.storage.cleaner import clean_log, describe_dirty_range
from annal.storage.config import LogConfig
from annal.storage.control import (
    AppendOrigin,
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
    decode_end_txn_marker,
    encode_control_key,
    marker_of_batch,
)
from annal.storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from annal.storage.log import Log
from annal.storage.producer_state import decode_snapshot
from annal.storage.records import decode_batch
from annal.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from logutil import FakeClock, batch, open_log, read_all
from txnutil import TIMESTAMP, TxnWriter, txn_batch, txn_entries

pytestmark = pytest.mark.timeout(120)

COORD = AppendOrigin.COORDINATOR
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT
CONFIG = LogConfig.from_properties({"segment.bytes": "1500", "index.interval.bytes": "100"})


def txn(log: Log, pid: int, count: int = 1, sequence: int = 0, epoch: int = 0) -> int:
    """Append ``count`` records of ``pid``'s transaction; its first offset."""
    data = txn_batch(pid, [b"x%d" % i for i in range(count)], sequence=sequence, epoch=epoch)
    return log.append_as_leader(data, 0, origin=COORD).first_offset


def end(log: Log, pid: int, kind: ControlRecordType, epoch: int = 0, coordinator: int = 0) -> int:
    return log.append_control(pid, epoch, kind, coordinator, 0, timestamp=TIMESTAMP).first_offset


# -- control records ------------------------------------------------------------


def test_control_key_and_marker_value_are_kafkas_bytes() -> None:
    assert encode_control_key(ABORT) == b"\x00\x00\x00\x00"
    assert encode_control_key(COMMIT) == b"\x00\x00\x00\x01"
    marker = EndTransactionMarker(COMMIT, 7)
    assert marker.value() == b"\x00\x00\x00\x00\x00\x07"
    assert decode_end_txn_marker(marker.key(), marker.value()) == marker
    # a newer version is read as version 0, as Kafka does
    assert decode_end_txn_marker(b"\x00\x01\x00\x00xx", b"\x00\x02\x00\x00\x00\x03zz") == (
        EndTransactionMarker(ABORT, 3)
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01", "found no key"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01", "at least 4 bytes .* found 3 bytes"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01", "negative version -1"),
        (b"\x00\x00\x00\x03", b"\x00\x00\x00\x00\x00\x01", "type 3 is not a transaction marker"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00", "at least 6 bytes .* found 3 bytes"),
        (b"\x00\x00\x00\x01", None, "found no value"),
        (b"\x00\x00\x00\x01", b"\x80\x00\x00\x00\x00\x01", "marker has a negative version"),
    ],
)  # fmt: skip
def test_bad_control_record_bytes_are_named(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    with pytest.raises(CorruptRecordError, match=message) as info:
        decode_end_txn_marker(key, value)
    assert info.value.code.name == "CORRUPT_MESSAGE"


def test_a_control_batch_is_one_marker_record_of_the_producer() -> None:
    data = build_control_batch(42, 3, EndTransactionMarker(ABORT, 9), TIMESTAMP)
    header, records = decode_batch(data)
    assert header.attributes & CONTROL_FLAG and header.attributes & TRANSACTIONAL_FLAG
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert (header.record_count, header.compression, header.max_timestamp) == (1, 0, TIMESTAMP)
    assert records[0].key == b"\x00\x00\x00\x00"
    assert marker_of_batch(data) == EndTransactionMarker(ABORT, 9)


def test_clients_may_not_write_control_batches_but_transactional_ones(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    control = build_control_batch(5, 0, EndTransactionMarker(COMMIT, 0), TIMESTAMP)
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control") as e:
        log.append_as_leader(control, 0)
    assert e.value.code.name == "INVALID_RECORD"
    assert log.log_end_offset == 0
    # a client's transactional batches are stored; the coordinator writes the marker
    assert log.append_as_leader(txn_batch(5, [b"a"]), 0).first_offset == 0
    assert log.first_unstable_offset == 0
    assert end(log, 5, COMMIT) == 1
    log.close()


def test_a_control_batch_whose_record_is_no_marker_is_refused(tmp_path: Path) -> None:
    from annal.storage.records import Record, encode_batch

    bad = encode_batch(
        [Record(0, TIMESTAMP, b"\x00\x00\x00\x07", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=5,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    log = Log.open(tmp_path / "t-0")
    with pytest.raises(CorruptRecordError, match="type 7 is not a transaction marker"):
        log.append_as_leader(bad, 0, origin=COORD)
    with pytest.raises(CorruptRecordError, match="type 7"):
        log.append_as_follower(bad)
    assert log.log_end_offset == 0
    log.close()


# -- producer state, LSO ----------------------------------------------------------


def test_open_transactions_hold_back_the_last_stable_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append_as_leader(batch([b"plain"]), 0)  # 0
    assert log.first_unstable_offset is None
    first = txn(log, 7, count=2)  # 1..2
    txn(log, 8)  # 3
    txn(log, 7, sequence=2)  # 4: the same transaction
    assert (first, log.first_unstable_offset) == (1, 1)
    log.update_high_watermark(5)
    assert (log.high_watermark, log.last_stable_offset) == (5, 1)
    state = log.producer_state()
    assert (state[7].current_txn_first_offset, state[8].current_txn_first_offset) == (1, 3)
    assert end(log, 7, COMMIT) == 5
    # decided, but its marker is not below the high watermark yet (Kafka's unreplicated)
    assert (log.first_unstable_offset, log.last_stable_offset) == (1, 1)
    log.update_high_watermark(6)
    assert (log.first_unstable_offset, log.last_stable_offset) == (3, 3)
    end(log, 8, ABORT)  # 6
    log.update_high_watermark(7)
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 7)
    assert log.producer_state()[7].current_txn_first_offset == -1
    log.close()


def test_an_abort_enters_the_txnindex_with_the_lso_of_that_moment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    txn(log, 1, 2)  # 0..1
    txn(log, 2)  # 2
    assert end(log, 2, ABORT) == 3  # producer 1 is still open from 0
    assert end(log, 1, ABORT) == 4  # nothing else open: LSO after the marker
    txn(log, 3)  # 5
    end(log, 3, COMMIT)  # 6: commits are not indexed
    assert txn_entries(log) == [AbortedTxn(2, 2, 3, 0), AbortedTxn(1, 0, 4, 5)]
    path = log.directory / files.segment_file_name(0, files.TXN_INDEX_SUFFIX)
    raw = path.read_bytes()
    assert len(raw) == 2 * ENTRY_SIZE == 68
    assert struct.unpack(">hqqqq", raw[:34]) == (0, 2, 2, 3, 0)
    log.close()


def test_markers_are_checked_for_producer_and_coordinator_epochs(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    txn(log, 1, epoch=3)
    end(log, 1, COMMIT, epoch=3, coordinator=5)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2 of producer 1") as e:
        end(log, 1, ABORT, epoch=2, coordinator=5)
    assert e.value.code.name == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(TransactionCoordinatorFencedError, match="coordinator epoch 4"):
        end(log, 1, ABORT, epoch=3, coordinator=4)
    assert log.log_end_offset == 2  # refused markers leave the log as it was
    end(log, 1, ABORT, epoch=4, coordinator=5)  # a newer producer epoch (a fenced zombie)
    state = log.producer_state()[1]
    assert (state.producer_epoch, state.coordinator_epoch, state.last_seq) == (4, 5, -1)
    log.close()


def test_a_non_transactional_batch_while_a_transaction_is_open_is_refused(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0")
    txn(log, 1, count=2)
    plain = txn_batch(1, [b"p"], sequence=2, transactional=False)
    with pytest.raises(InvalidTxnStateError, match="transaction is open"):
        log.append_as_leader(plain, 0)
    end(log, 1, COMMIT)
    assert log.append_as_leader(plain, 0).first_offset == 3
    log.close()


def test_producers_with_an_open_transaction_do_not_expire(tmp_path: Path) -> None:
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", time_ms=clock, producer_id_expiration_ms=1000)
    txn(log, 1)
    txn(log, 2)
    end(log, 2, COMMIT)
    clock.advance(10**12)
    assert log.remove_expired_producers() == 1
    assert set(log.producer_state()) == {1}
    log.close()


def test_snapshots_carry_open_transactions_and_coordinator_epochs(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    txn(log, 1)  # 0
    end(log, 1, COMMIT, coordinator=6)  # 1
    txn(log, 1, sequence=1)  # 2: open again
    txn(log, 2)  # 3
    log.take_producer_snapshot()
    entries = {
        e.producer_id: e
        for e in decode_snapshot((tmp_path / "t-0" / files.snapshot_file_name(4)).read_bytes())
    }
    assert (entries[1].coordinator_epoch, entries[1].current_txn_first_offset) == (6, 2)
    assert (entries[2].coordinator_epoch, entries[2].current_txn_first_offset) == (-1, 3)
    log.close()

    reopened = Log.open(tmp_path / "t-0", recovery_point=4, had_clean_shutdown=True)
    assert reopened.first_unstable_offset == 2
    assert reopened.producer_state()[1].coordinator_epoch == 6
    with pytest.raises(TransactionCoordinatorFencedError):
        end(reopened, 1, ABORT, coordinator=5)
    end(reopened, 1, ABORT, coordinator=6)  # 4: the transaction the snapshot kept open
    assert txn_entries(reopened) == [AbortedTxn(1, 2, 4, 3)]
    reopened.close()


# -- .txnindex ------------------------------------------------------------------------


def test_collect_aborted_transactions_overlapping_a_range(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    writer = TxnWriter(log, seed=3)
    for _ in range(400):
        writer.step()
    assert len(log.segments()) > 5
    everything = txn_entries(log)
    assert len(everything) > 10
    end_offset = log.log_end_offset
    for start in range(0, end_offset, 37):
        for upper in (start + 1, start + 50, end_offset):
            got = log.collect_aborted_transactions(start, upper)
            want = [t for t in everything if t.last_offset >= start and t.first_offset < upper]
            # everything that overlaps is found (a few more may come from the last
            # segment read, as in Kafka; none outside [start, upper) ... they overlap)
            assert set(want) <= set(got), (start, upper)
            assert all(t.last_offset >= start and t.first_offset < upper for t in got)
    log.close()


def test_truncation_cuts_the_txnindex_and_reopens_transactions(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    txn(log, 1, 2)  # 0..1
    end(log, 1, ABORT)  # 2
    txn(log, 2)  # 3
    end(log, 2, ABORT)  # 4
    assert [t.last_offset for t in txn_entries(log)] == [2, 4]
    log.update_high_watermark(5)
    log.truncate_to(4)
    assert txn_entries(log) == [AbortedTxn(1, 0, 2, 3)]
    assert log.first_unstable_offset == 3  # producer 2's transaction is open again
    assert log.producer_state()[2].current_txn_first_offset == 3
    end(log, 2, ABORT)  # 4 again
    assert [t.last_offset for t in txn_entries(log)] == [2, 4]
    log.truncate_fully_and_start_at(10)
    assert txn_entries(log) == [] and log.first_unstable_offset is None
    assert not list((tmp_path / "t-0").glob("*.txnindex"))  # gone, or .deleted
    log.close()


def test_a_txnindex_that_fails_its_check_is_rebuilt_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    writer = TxnWriter(log, seed=5)
    for _ in range(200):
        writer.step()
    live = txn_entries(log)
    end_offset = log.log_end_offset
    log.take_producer_snapshot()
    log.close()
    damaged = next(p for p in sorted((tmp_path / "t-0").glob("*.txnindex")) if p.stat().st_size)
    with open(damaged, "ab") as f:
        f.write(b"\x00" * 10)  # a partial entry
    index = TransactionIndex(damaged, int(damaged.name[:20]))
    with pytest.raises(CorruptIndexError, match="not a whole number of 34-byte entries"):
        index.sanity_check()
    index.close()
    reopened = Log.open(
        tmp_path / "t-0", CONFIG, recovery_point=end_offset, had_clean_shutdown=True
    )
    assert txn_entries(reopened) == live
    assert "not a whole number" in caplog.text
    reopened.close()


# -- recovery ----------------------------------------------------------------------------


def _live_run(
    directory: Path, seed: int, steps: int
) -> tuple[list[AbortedTxn], int | None, list[int]]:
    log = Log.open(directory, CONFIG)
    writer = TxnWriter(log, seed=seed)
    for _ in range(steps):
        writer.step()
    log.update_high_watermark(log.log_end_offset)
    result = txn_entries(log), log.last_stable_offset, [s.base_offset for s in log.segments()]
    log.close()
    return result


@pytest.mark.parametrize("where", ["all", "middle", "last", "indexes deleted"])
def test_recovery_rebuilds_the_txnindex_and_lso_as_the_live_run_wrote_them(
    tmp_path: Path, where: str
) -> None:
    live, lso, bases = _live_run(tmp_path / "live" / "t-0", seed=11, steps=300)
    assert len(bases) > 6 and len(live) > 10
    copy = tmp_path / "copy" / "t-0"
    shutil.copytree(tmp_path / "live" / "t-0", copy)
    recovery_point = {"all": 0, "middle": bases[len(bases) // 2], "last": bases[-1]}.get(where, 0)
    if where == "indexes deleted":
        for path in copy.glob("*.txnindex"):
            path.unlink()
    recovered = Log.open(copy, CONFIG, recovery_point=recovery_point)  # no clean shutdown
    recovered.update_high_watermark(recovered.log_end_offset)
    assert txn_entries(recovered) == live
    assert recovered.last_stable_offset == lso
    recovered.close()


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from annal.storage.config import LogConfig
    from annal.storage.log import Log
    from txnutil import TxnWriter

    config = LogConfig.from_properties({"segment.bytes": "1500", "index.interval.bytes": "100"})
    log = Log.open(Path(sys.argv[1]), config)
    writer = TxnWriter(log, seed=int(sys.argv[2]))
    writer.open = {p for p, e in log.producer_state().items() if e.current_txn_first_offset >= 0}
    writer.sequences.update({p: e.last_seq + 1 for p, e in log.producer_state().items()})
    print("ready", flush=True)
    while True:
        writer.step()
    """
)


def test_a_killed_writer_leaves_a_txnindex_recovery_rebuilds_as_a_clean_run(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    for run, grow in enumerate((20_000, 30_000)):  # the second kill lands on a recovered log
        before = sum(p.stat().st_size for p in directory.glob("*.log"))
        child = subprocess.Popen(
            [sys.executable, str(script), str(directory), str(run)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        target = before + grow
        wait_until(
            lambda: sum(p.stat().st_size for p in directory.glob("*.log")) > target,  # noqa: B023
            30,
        )
        child.send_signal(signal.SIGKILL)
        child.wait(10)

        recovered = Log.open(directory, CONFIG)  # no clean shutdown, recovery point 0
        recovered.update_high_watermark(recovered.log_end_offset)
        got, lso = txn_entries(recovered), recovered.last_stable_offset
        raw = b"".join(s.read_all() for s in recovered.segments())
        recovered.close()
        assert len(got) > 5, f"run {run}: too few aborts"
        # the clean run: the same batches, appended whole by a follower
        clean = Log.open(tmp_path / f"clean{run}" / "t-0", CONFIG)
        clean.append_as_follower(raw)
        clean.update_high_watermark(clean.log_end_offset)
        assert txn_entries(clean) == got, f"run {run}"
        assert clean.last_stable_offset == lso, f"run {run}"
        clean.close()


# -- replication ---------------------------------------------------------------------------


def test_followers_copy_markers_and_build_the_same_state(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "l" / "t-0", CONFIG)
    follower = Log.open(tmp_path / "f" / "t-0", CONFIG)
    writer = TxnWriter(leader, seed=2)
    offset = 0
    for _ in range(20):
        for _ in range(15):
            writer.step()
        while offset < leader.log_end_offset:
            data = leader.read(offset, 700)
            follower.append_as_follower(data)
            offset = list(iter_batches(data))[-1].next_offset
    assert txn_entries(follower) == txn_entries(leader) != []
    assert follower.first_unstable_offset == leader.first_unstable_offset
    assert follower.producer_state() == leader.producer_state()
    leader.close()
    follower.close()


# -- retention and compaction --------------------------------------------------------------


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400, file_delete_delay_ms=0)
    txn(log, 1)
    end(log, 1, ABORT)
    first = log.directory / files.segment_file_name(0, files.TXN_INDEX_SUFFIX)
    assert first.exists()
    while len(log.segments()) < 3:
        log.append_as_leader(batch([b"y" * 100]), 0)
    log.delete_records_before(log.segments()[1].base_offset)
    log.delete_old_segments()
    assert not first.exists()
    assert not list(log.directory.glob("*.txnindex*"))
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    log.close()


def _compacted(tmp_path: Path, clock: FakeClock) -> Log:
    return open_log(
        tmp_path / "t-0",
        clock,
        cleanup_policy="compact",
        segment_bytes=300,
        delete_retention_ms=1000,
    )


def _compact(log: Log, clock: FakeClock) -> int:
    dirty = describe_dirty_range(log, 0, clock.now_ms)
    return clean_log(
        log, dirty.first_dirty_offset, dirty.first_uncleanable_offset, now_ms=clock.now_ms
    )


def data_records(log: Log) -> set[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record outside control batches."""
    control = {
        offset
        for s in log.segments()
        for h in s.iter_headers()
        if h.is_control
        for offset in range(h.base_offset, h.next_offset)
    }
    return {(r.key, r.value) for r in read_all(log) if r.offset not in control}


def _keyed(log: Log, pid: int, keys: list[bytes], sequence: int, value: bytes) -> None:
    data = txn_batch(pid, [value] * len(keys), keys=keys, sequence=sequence, timestamp=TIMESTAMP)
    log.append_as_leader(data, 0, origin=COORD)


def test_compaction_removes_aborted_data_then_markers_after_delete_retention(
    tmp_path: Path,
) -> None:
    clock = FakeClock(TIMESTAMP)
    log = _compacted(tmp_path, clock)
    _keyed(log, 1, [b"a", b"b"], 0, b"committed")  # 0..1
    end(log, 1, COMMIT)  # 2
    _keyed(log, 2, [b"a"], 0, b"aborted")  # 3
    _keyed(log, 2, [b"c"], 1, b"aborted")  # 4
    end(log, 2, ABORT)  # 5
    _keyed(log, 1, [b"d"], 2, b"later")  # 6: producer 1's last data batch
    end(log, 1, COMMIT)  # 7
    # 8..9: the committed a and b superseded, so that commit's batch can go
    log.append_as_leader(txn_batch(3, [b"new"] * 2, keys=[b"a", b"b"], transactional=False), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    _compact(log, clock)
    kept = data_records(log)
    assert (b"a", b"aborted") not in kept and (b"c", b"aborted") not in kept
    assert kept == {(b"a", b"new"), (b"b", b"new"), (b"d", b"later")}

    def control_offsets() -> list[int]:
        return [h.base_offset for s in log.segments() for h in s.iter_headers() if h.is_control]

    # markers stay for delete.retention.ms; the abort keeps its .txnindex entry while
    # an (emptied) batch of its transaction remains, the producer's last data batch
    assert control_offsets() == [2, 5, 7]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in txn_entries(log)] == [(2, 3, 5)]
    clock.advance(10_000)  # past delete.retention.ms: markers with nothing left go
    _compact(log, clock)
    _compact(log, clock)
    # 2 went once its transaction's batch had gone; 5 stays while its emptied batch 4
    # (producer 2's last) does; 7 is producer 1's last batch
    assert control_offsets() == [5, 7]
    assert data_records(log) == kept
    log.close()


def test_compaction_stops_at_the_first_unstable_offset(tmp_path: Path) -> None:
    clock = FakeClock(TIMESTAMP)
    log = _compacted(tmp_path, clock)
    for i in range(8):
        log.append_as_leader(
            txn_batch(9, [b"v%d" % i], keys=[b"k"], transactional=False, sequence=i), 0
        )
    _keyed(log, 1, [b"k"], 0, b"open")
    unstable = log.first_unstable_offset
    for i in range(8):
        log.append_as_leader(
            txn_batch(9, [b"w%d" % i], keys=[b"k"], transactional=False, sequence=8 + i), 0
        )
    log.roll()
    dirty = describe_dirty_range(log, 0, clock.now_ms)
    assert unstable is not None and dirty.first_uncleanable_offset <= unstable
    log.close()


# -- dump-log --------------------------------------------------------------------------------


def test_dump_log_prints_txnindex_entries_and_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from annal.cli import main

    log = Log.open(tmp_path / "t-0")
    txn(log, 4, 2)  # 0..1
    end(log, 4, ABORT, coordinator=3)  # 2
    txn(log, 5)  # 3
    end(log, 5, COMMIT, coordinator=3)  # 4
    log.close()
    segment = tmp_path / "t-0" / files.segment_file_name(0, files.LOG_SUFFIX)
    index = tmp_path / "t-0" / files.segment_file_name(0, files.TXN_INDEX_SUFFIX)
    assert main(["dump-log", str(index)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"Dumping {index}",
        "version: 0 producerId: 4 firstOffset: 0 lastOffset: 2 lastStableOffset: 3",
    ]
    assert main(["dump-log", "--deep-iteration", str(segment)]) == 0
    out = capsys.readouterr().out.splitlines()
    markers = [line for line in out if "endTxnMarker" in line]
    assert len(markers) == 2
    assert markers[0].startswith("| offset: 2 ")
    assert markers[0].endswith(" endTxnMarker: ABORT coordinatorEpoch: 3")
    assert markers[1].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert main(["dump-log", "--json", str(index)]) == 0
    import json

    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line == {
        "producer_id": 4,
        "first_offset": 0,
        "last_offset": 2,
        "last_stable_offset": 3,
        "version": 0,
    }


def test_a_control_batch_read_back_from_disk_keeps_its_header(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    txn(log, 4)
    end(log, 4, ABORT, epoch=0, coordinator=2)
    data = log.read(1, 1000)
    header = read_header(data)
    assert header.is_control and header.is_transactional and header.producer_id == 4
    assert marker_of_batch(data) == EndTransactionMarker(ABORT, 2)
    log.close()
