"""Start-up loading on num.recovery.threads.per.data.dir threads per log dir, and
the log manager's background work that costs nothing while nothing changes."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from annal.storage import files
from annal.storage.checkpoints import OffsetCheckpointFile
from annal.storage.config import LogConfig
from annal.storage.loading import LogLoadError, run_per_dir
from annal.storage.log import Log
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch
from logutil import FakeClock, batch, read_all

DIRS = ("a", "b", "c")


def settings(threads: int = 1, **kwargs: Any) -> LogManagerConfig:
    return LogManagerConfig(cleaner_enable=False, recovery_threads_per_data_dir=threads, **kwargs)


def fill(root: Path, partitions: int = 24) -> list[files.TopicPartition]:
    """Logs of every shape in three dirs: empty, one batch, several segments,
    records deleted from the front, idempotent producers."""
    manager = LogManager([root / d for d in DIRS], broker_id=1, settings=settings())
    manager.startup()
    config = LogConfig.from_properties({"segment.bytes": "400"})
    tps = [files.TopicPartition(f"t{p % 3}", p) for p in range(partitions)]
    for p, tp in enumerate(tps):
        log = manager.get_or_create_log(tp, config)
        for i in range(p % 6 * 3):
            value = [Record(0, 1_700_000_000_000, None, b"%d-%d" % (p, i) * 10)]
            if p % 4 == 0:  # an idempotent producer's
                data = encode_batch(value, producer_id=7, producer_epoch=0, base_sequence=i)
            else:
                data = encode_batch(value)
            log.append_as_leader(data, p % 3)
        if p % 5 == 0 and log.log_end_offset > 4:
            log.delete_records_before(3)
        log.update_high_watermark(log.log_end_offset - p % 2)
    manager.shutdown()
    return tps


def crash(root: Path) -> None:
    """What a killed broker leaves: no marker, recovery points from long ago."""
    for d in DIRS:
        (root / d / files.CLEAN_SHUTDOWN_FILE).unlink()
        (root / d / files.RECOVERY_POINT_CHECKPOINT).unlink()


def state_of(log: Log) -> tuple[object, ...]:
    return (
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        log.recovery_point,
        [(r.offset, r.value) for r in read_all(log)],
        log.leader_epoch_cache.epoch_entries(),
        sorted(log.producer_state()),
        [s.base_offset for s in log.segments()],
    )


def loaded(root: Path, threads: int) -> dict[files.TopicPartition, tuple[object, ...]]:
    manager = LogManager([root / d for d in DIRS], broker_id=1, settings=settings(threads))
    manager.startup()
    try:
        return {tp: state_of(log) for tp, log in manager.all_logs().items()}
    finally:
        manager.shutdown()


@pytest.mark.parametrize("crashed", [False, True])
def test_several_threads_load_the_same_logs_as_one(tmp_path: Path, crashed: bool) -> None:
    tps = fill(tmp_path / "one")
    if crashed:
        crash(tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "four")
    shutil.copytree(tmp_path / "one", tmp_path / "many")
    one = loaded(tmp_path / "one", 1)
    assert sorted(one) == sorted(tps)
    assert sum(1 for s in one.values() if len(s[-1]) > 1) >= 5  # several segments
    assert one == loaded(tmp_path / "four", 4)
    assert one == loaded(tmp_path / "many", 64)  # more threads than logs


def test_a_log_that_fails_to_load_is_named_and_the_others_lose_nothing(
    tmp_path: Path,
) -> None:
    fill(tmp_path)
    expected = loaded(tmp_path, 1)
    broken = [files.TopicPartition("t1", 4), files.TopicPartition("t2", 5)]
    paths = {tp: next(tmp_path.glob(f"*/{tp}/{files.LEADER_EPOCH_CHECKPOINT}")) for tp in broken}
    for path in paths.values():  # a checkpoint that cannot be read at all
        path.unlink()
        path.mkdir()
    before = {
        p: p.read_bytes()
        for d in DIRS
        for p in (tmp_path / d).iterdir()
        if p.is_file()  # markers and checkpoints
    }

    manager = LogManager([tmp_path / d for d in DIRS], broker_id=1, settings=settings(4))
    with pytest.raises(LogLoadError) as info:
        manager.startup()
    message = str(info.value)
    assert "cannot load 2 of 24 logs" in message
    for tp, path in paths.items():
        assert f"{path.parent}: CheckpointError" in message, tp
    assert "Is a directory" in message
    assert {path for path, _ in info.value.failures} == {p.parent for p in paths.values()}
    manager.shutdown()  # after a failed start: writes nothing
    after = {p: p.read_bytes() for d in DIRS for p in (tmp_path / d).iterdir() if p.is_file()}
    assert after == before  # markers and checkpoints as they were

    for path in paths.values():  # the operator moves the broken logs aside
        shutil.move(path.parent, tmp_path / path.parent.name)
    again = loaded(tmp_path, 4)
    assert again == {tp: s for tp, s in expected.items() if tp not in paths}


def test_run_per_dir_keeps_order_and_failures(tmp_path: Path) -> None:
    work = {tmp_path / "x": [1, 2, 3, 4], tmp_path / "y": [5, 6], tmp_path / "z": []}

    def run(n: int) -> int:
        if n % 3 == 0:
            raise ValueError(f"bad {n}")
        return n * 10

    for threads in (1, 2, 8):
        done, failed = run_per_dir(work, run, threads)
        assert done == [(1, 10), (2, 20), (4, 40), (5, 50)]
        assert [(n, str(exc)) for n, exc in failed] == [(3, "bad 3"), (6, "bad 6")]
    with pytest.raises(ValueError, match="at least 1"):
        run_per_dir(work, run, 0)


def test_dirs_load_side_by_side_each_on_its_threads(tmp_path: Path) -> None:
    """Two dirs of two threads: four logs load at once (each waits for the others)."""
    work = {tmp_path / "x": [1, 2, 3, 4], tmp_path / "y": [5, 6, 7, 8]}
    together = threading.Barrier(4, timeout=10)
    names: set[str] = set()

    def run(n: int) -> int:
        names.add(threading.current_thread().name.rsplit("_", 1)[0])
        together.wait()
        return n

    done, failed = run_per_dir(work, run, 2)
    assert [n for n, _ in done] == [1, 2, 3, 4, 5, 6, 7, 8] and not failed
    assert names == {"log-loading-x", "log-loading-y"}


def test_checkpoints_are_written_only_when_an_offset_moved(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, broker_id=1, settings=settings())
    manager.startup()
    tps = [files.TopicPartition("t", p) for p in range(4)]  # two per dir
    logs = [manager.get_or_create_log(tp) for tp in tps]
    for log in logs:
        log.append_as_leader(batch([b"v"] * 3), 0)
    manager.checkpoint_changed_recovery_points()  # the new logs: both dirs
    manager.checkpoint_changed_log_start_offsets()
    written = {d: (d / files.RECOVERY_POINT_CHECKPOINT).stat().st_mtime_ns for d in dirs}
    starts = {d: (d / files.LOG_START_OFFSET_CHECKPOINT).stat().st_mtime_ns for d in dirs}

    for _ in range(3):  # nothing moved: nothing written
        manager.checkpoint_changed_recovery_points()
        manager.checkpoint_changed_log_start_offsets()
    assert {d: (d / files.RECOVERY_POINT_CHECKPOINT).stat().st_mtime_ns for d in dirs} == written
    assert {d: (d / files.LOG_START_OFFSET_CHECKPOINT).stat().st_mtime_ns for d in dirs} == starts

    moved = logs[0]
    moved.flush()  # its recovery point moves: its dir's checkpoint only
    moved_dir = manager.log_dir_of(tps[0])
    assert moved_dir is not None
    manager.checkpoint_changed_recovery_points()
    recovery = OffsetCheckpointFile(moved_dir / files.RECOVERY_POINT_CHECKPOINT).read()
    assert recovery[tps[0]] == 3
    for d in dirs:
        changed = (d / files.RECOVERY_POINT_CHECKPOINT).stat().st_mtime_ns != written[d]
        assert changed == (d == moved_dir)

    moved.delete_records_before(2)
    manager.checkpoint_changed_log_start_offsets()
    assert OffsetCheckpointFile(moved_dir / files.LOG_START_OFFSET_CHECKPOINT).read()[tps[0]] == 2

    assert manager.delete_log(tps[0])  # a log that goes takes its entries along
    manager.checkpoint_changed_recovery_points()
    assert tps[0] not in OffsetCheckpointFile(moved_dir / files.RECOVERY_POINT_CHECKPOINT).read()
    manager.shutdown()


def test_only_logs_with_records_to_flush_in_time_are_visited(tmp_path: Path) -> None:
    clock = FakeClock()
    manager = LogManager([tmp_path / "d"], broker_id=1, settings=settings(), time_ms=clock)
    manager.startup()
    timed = LogConfig.from_properties({"flush.ms": "1000"})
    quiet = [manager.get_or_create_log(files.TopicPartition("quiet", p)) for p in range(50)]
    for log in quiet:  # flush.ms unset: the OS flushes, the tick never visits them
        log.append_as_leader(batch([b"v"]), 0)
    flushed = manager.get_or_create_log(files.TopicPartition("timed", 0), timed)
    idle = manager.get_or_create_log(files.TopicPartition("timed", 1), timed)
    marks = manager._marks[tmp_path / "d"]
    assert marks.unflushed_count == 0

    flushed.append_as_leader(batch([b"v"] * 2), 0)
    flushed.append_as_leader(batch([b"v"]), 0)
    assert marks.unflushed_count == 1  # one entry, however many appends
    manager.flush_dirty_logs()
    assert flushed.recovery_point == 0 and marks.unflushed_count == 1  # not due yet
    clock.advance(1000)
    manager.flush_dirty_logs()
    assert flushed.recovery_point == 3 and marks.unflushed_count == 0
    assert idle.recovery_point == 0 and all(log.recovery_point == 0 for log in quiet)

    flushed.append_as_leader(batch([b"w"]), 0)  # unflushed again: back on the list
    assert marks.unflushed_count == 1
    clock.advance(1000)
    manager.flush_dirty_logs()
    assert flushed.recovery_point == 4 and marks.unflushed_count == 0

    # a finite flush.ms set later puts a log holding unflushed records on the list
    quiet[0].update_config(timed)
    assert marks.unflushed_count == 1
    clock.advance(1000)
    manager.flush_dirty_logs()
    assert quiet[0].recovery_point == 1 and marks.unflushed_count == 0
    manager.shutdown()


def test_retention_passes_over_logs_with_nothing_to_delete(tmp_path: Path) -> None:
    clock = FakeClock()
    config = LogConfig.from_properties(
        {"retention.ms": "1000", "segment.bytes": "300", "file.delete.delay.ms": "0"}
    )
    manager = LogManager([tmp_path / "d"], config, broker_id=1, settings=settings(), time_ms=clock)
    manager.startup()
    log = manager.get_or_create_log(files.TopicPartition("t", 0))
    empty = manager.get_or_create_log(files.TopicPartition("t", 1))
    for _ in range(6):
        log.append_as_leader(batch([b"v" * 100], timestamp=clock.now_ms), 0)
    assert not log.retention_due(clock.now_ms) and not empty.retention_due(clock.now_ms)
    assert manager.cleanup_logs() == 0
    clock.advance(5000)
    assert log.retention_due(clock.now_ms) and not empty.retention_due(clock.now_ms)
    assert manager.cleanup_logs() > 0
    assert log.log_start_offset == 6 and not log.retention_due(clock.now_ms)

    sized = LogConfig.from_properties({"retention.bytes": "300", "segment.bytes": "300"})
    log.update_config(sized)
    for _ in range(6):
        log.append_as_leader(batch([b"v" * 100], timestamp=clock.now_ms), 0)
    assert log.retention_due(clock.now_ms)
    manager.cleanup_logs()
    assert not log.retention_due(clock.now_ms) and log.size <= 2 * 300
    manager.shutdown()


def test_the_cleaner_looks_only_at_compacted_logs(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "d"], broker_id=1, settings=settings())
    manager.startup()
    compact = LogConfig.from_properties({"cleanup.policy": "compact"})
    kept = [manager.get_or_create_log(files.TopicPartition("plain", p)) for p in range(20)]
    offsets = manager.get_or_create_log(files.TopicPartition("offsets", 0), compact)
    assert manager.compacted_logs() == {offsets.topic_partition: offsets}
    kept[3].update_config(compact)  # a topic config change
    assert set(manager.compacted_logs()) == {offsets.topic_partition, kept[3].topic_partition}
    offsets.update_config(LogConfig())
    assert manager.delete_log(kept[3].topic_partition)
    assert manager.compacted_logs() == {}
    manager.shutdown()
