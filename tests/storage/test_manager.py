"""LogManager: log dirs, placement, checkpoints, clean shutdown, background work."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from annal.storage import files
from annal.storage.checkpoints import OffsetCheckpointFile
from annal.storage.config import LogConfig
from annal.storage.errors import LogDirError
from annal.storage.log import Log
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.meta import read_meta_properties
from logutil import FakeClock, batch, read_all

QUIET = LogManagerConfig(cleaner_enable=False)


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_new_partitions_go_to_the_least_loaded_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs, broker_id=3, cluster_id="abc", settings=QUIET)
    manager.startup()
    for p in range(6):
        manager.get_or_create_log(files.TopicPartition("t", p))
    counts = [len([d for d in directory.iterdir() if d.is_dir()]) for directory in dirs]
    assert counts == [2, 2, 2]
    meta = read_meta_properties(dirs[0] / files.META_PROPERTIES)
    assert meta is not None and (meta.broker_id, meta.cluster_id) == (3, "abc")
    manager.shutdown()


def test_clean_shutdown_writes_checkpoints_and_marker(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "d"], broker_id=1, settings=QUIET)
    manager.startup()
    log = manager.get_or_create_log(files.TopicPartition("orders", 0))
    for _ in range(5):
        log.append_as_leader(batch([b"x" * 50]), 0)
    log.delete_records_before(2)
    log.update_high_watermark(5)
    manager.shutdown()
    d = tmp_path / "d"
    assert (d / files.CLEAN_SHUTDOWN_FILE).exists()
    tp = files.TopicPartition("orders", 0)
    assert OffsetCheckpointFile(d / files.RECOVERY_POINT_CHECKPOINT).read() == {tp: 5}
    assert OffsetCheckpointFile(d / files.LOG_START_OFFSET_CHECKPOINT).read() == {tp: 2}
    assert OffsetCheckpointFile(d / files.REPLICATION_CHECKPOINT).read() == {tp: 5}

    again = LogManager([d], broker_id=1, settings=QUIET)
    again.startup()
    assert not (d / files.CLEAN_SHUTDOWN_FILE).exists()
    reopened = again.get_log(tp)
    assert reopened is not None
    assert (reopened.log_start_offset, reopened.log_end_offset) == (2, 5)
    assert len(read_all(reopened)) == 3
    again.shutdown()


def test_shutdown_syncs_once_after_every_log_is_closed_and_before_the_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every log's snapshot, leader epochs and trimmed indexes are written with no
    fsync of their own; one sync writes them all before the recovery points that
    count on them are checkpointed, and before the clean-shutdown marker."""
    manager = LogManager([tmp_path / "d"], broker_id=1, settings=QUIET)
    manager.startup()
    for p in range(20):
        log = manager.get_or_create_log(files.TopicPartition("orders", p))
        log.append_as_leader(batch([b"x" * 50]), 3)  # unflushed, and a new epoch
    events: list[str] = []
    real_fsync, real_sync = os.fsync, os.sync
    recovery_points = tmp_path / "d" / files.RECOVERY_POINT_CHECKPOINT
    tp = files.TopicPartition("orders", 7)

    def fsync(fd: int) -> None:
        events.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def sync() -> None:
        events.append("sync")
        logs = sorted((tmp_path / "d").glob("orders-*"))
        assert len(logs) == 20
        for log_dir in logs:
            assert len(list(log_dir.glob("*.snapshot"))) == 1
            assert "3 0" in (log_dir / files.LEADER_EPOCH_CHECKPOINT).read_text()
            for index in log_dir.glob("*index"):  # trimmed: closed
                assert index.stat().st_size in (0, 8, 12), index
        if recovery_points.exists():  # not yet moved past the unsynced record
            assert OffsetCheckpointFile(recovery_points).read().get(tp, 0) == 0
        assert not (tmp_path / "d" / files.CLEAN_SHUTDOWN_FILE).exists()
        real_sync()

    closes: list[bool] = []
    real_close = Log.close

    def close(log: Log, *, sync_indexes: bool = True) -> None:
        closes.append(sync_indexes)
        real_close(log, sync_indexes=sync_indexes)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "sync", sync)
    monkeypatch.setattr(Log, "close", close)
    manager.shutdown()
    assert closes[:20] == [False] * 20  # no msync of each index: the sync writes them
    assert events.count("sync") == 1
    assert events.index("sync") == 0  # nothing of the logs' own was fsynced
    after = events[1:]
    assert not [e for e in after if e.endswith((".snapshot", ".snapshot.tmp", ".log"))]
    assert files.LEADER_EPOCH_CHECKPOINT not in after
    assert OffsetCheckpointFile(recovery_points).read()[tp] == 1
    assert (tmp_path / "d" / files.CLEAN_SHUTDOWN_FILE).exists()


def test_broker_id_mismatch_is_refused(tmp_path: Path) -> None:
    LogManager([tmp_path / "d"], broker_id=1, settings=QUIET).startup()
    with pytest.raises(LogDirError, match=r"belongs to broker\.id 1"):
        LogManager([tmp_path / "d"], broker_id=2, settings=QUIET).startup()


def test_a_directory_of_other_things_is_not_a_log_dir(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(LogDirError, match="does not look like a log dir"):
        LogManager([home], broker_id=1, settings=QUIET).startup()
    assert (home / "thesis.tex").read_text() == "precious"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(LogDirError, match="not a directory"):
        LogManager([a_file], broker_id=1, settings=QUIET).startup()


def test_unknown_entries_are_left_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "d"
    manager = LogManager([d], broker_id=1, settings=QUIET)
    manager.startup()
    manager.get_or_create_log(files.TopicPartition("t", 0)).append_as_leader(batch([b"v"]), 0)
    manager.shutdown()
    (d / "README").write_text("notes")
    (d / "scratch").mkdir()
    again = LogManager([d], broker_id=1, settings=QUIET)
    again.startup()
    assert "unknown file README" in caplog.text
    assert "scratch is not a partition directory" in caplog.text
    again.shutdown()
    assert (d / "README").exists() and (d / "scratch").exists()


def test_delete_log_renames_then_removes(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "d"], broker_id=1, settings=QUIET)
    manager.startup()
    tp = files.TopicPartition("gone", 0)
    manager.get_or_create_log(tp).append_as_leader(batch([b"v"]), 0)
    assert manager.delete_log(tp)
    assert manager.get_log(tp) is None
    wait_until(lambda: not list((tmp_path / "d").glob("gone-0*")))
    manager.shutdown()


def test_background_retention_runs(tmp_path: Path) -> None:
    clock = FakeClock()
    config = LogConfig.from_properties(
        {"retention.ms": "1000", "segment.bytes": "300", "file.delete.delay.ms": "0"}
    )
    settings = LogManagerConfig(retention_check_interval_ms=20, cleaner_enable=False)
    manager = LogManager([tmp_path / "d"], config, broker_id=1, settings=settings, time_ms=clock)
    manager.startup()
    log = manager.get_or_create_log(files.TopicPartition("t", 0))
    for _ in range(6):
        log.append_as_leader(batch([b"v" * 100], timestamp=clock.now_ms), 0)
    clock.advance(5000)
    wait_until(lambda: log.log_start_offset == 6)
    wait_until(lambda: not list(log.directory.glob("*.deleted")))
    manager.shutdown()


def test_background_cleaner_compacts(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": "300"})
    settings = LogManagerConfig(cleaner_backoff_ms=20)
    manager = LogManager([tmp_path / "d"], config, broker_id=1, settings=settings)
    manager.startup()
    log = manager.get_or_create_log(files.TopicPartition("__consumer_offsets", 0))
    for i in range(20):
        log.append_as_leader(batch([b"%d" % i], keys=[b"same"]), 0)
    log.roll()
    wait_until(lambda: len(read_all(log)) == 1)
    assert read_all(log)[0].value == b"19"
    manager.shutdown()


class _KilledBeforeTheSync(Exception):
    """The process dies at the worst moment of a clean shutdown: every log is
    closed (snapshots, epochs and trimmed indexes written, none of them synced,
    the recovery points moved only in memory) and the one sync has not run."""


def test_a_shutdown_killed_before_its_sync_twice_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a process killed there leaves (the page cache survives it) is a dir
    with no clean-shutdown marker and the old checkpoints: the next start
    recovers every log, and every record and leader epoch is still there, twice
    in a row, then after a clean stop too."""
    d = tmp_path / "d"
    tps = [files.TopicPartition("orders", p) for p in range(8)]
    written: dict[files.TopicPartition, list[bytes]] = {tp: [] for tp in tps}

    def kill_at_the_sync() -> None:
        raise _KilledBeforeTheSync

    for epoch in (3, 4):
        manager = LogManager([d], broker_id=1, settings=QUIET)
        manager.startup()
        for tp in tps:
            log = manager.get_or_create_log(tp)
            for i in range(3):
                value = f"{tp.partition}-{epoch}-{i}".encode()
                log.append_as_leader(batch([value]), epoch)  # a new epoch, unflushed
                written[tp].append(value)
        with monkeypatch.context() as patched:
            patched.setattr(os, "sync", kill_at_the_sync)
            with pytest.raises(_KilledBeforeTheSync):
                manager.shutdown()
        assert not (d / files.CLEAN_SHUTDOWN_FILE).exists()

    for _ in range(2):  # recovered, then again after a clean stop
        again = LogManager([d], broker_id=1, settings=QUIET)
        again.startup()
        for tp in tps:
            log = again.get_log(tp)
            assert log is not None
            assert [r.value for r in read_all(log)] == written[tp]
            epochs = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
            assert epochs == [(3, 0), (4, 3)]
        again.shutdown()
        assert (d / files.CLEAN_SHUTDOWN_FILE).exists()
