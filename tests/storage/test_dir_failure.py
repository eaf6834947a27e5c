"""A log dir on a disk that fills up goes offline (storage/dir_failure.py): the append
that did not fit is refused with KAFKA_STORAGE_ERROR and leaves no torn bytes,
nothing is written there afterwards even once space returns, logs on the other
dir go on, and the next start recovers every acknowledged batch.  The full disk
is real: a 1 MiB tmpfs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.storage import files
from annal.storage.batch import iter_batches
from annal.storage.config import LogConfig
from annal.storage.errors import LogDirOfflineError
from annal.storage.log import Log
from annal.storage.manager import LogManager, LogManagerConfig
from logutil import batch, read_all
from small_disk import small_disk as mounted

from annal import errors

pytestmark = pytest.mark.timeout(60)

QUIET = LogManagerConfig(cleaner_enable=False)
CONFIG = LogConfig(segment_bytes=256 * 1024)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (a disk that fills up for real); needs root."""
    with mounted(tmp_path / "small", "1m") as disk:
        yield disk


def fill(log: Log, value_size: int) -> list[int]:
    """Append one-record batches until the disk refuses one; their offsets."""
    acknowledged = []
    for i in range(10_000):
        try:
            info = log.append_as_leader(batch([bytes([i % 251]) * value_size]), 0)
        except LogDirOfflineError as exc:
            assert exc.code is errors.KAFKA_STORAGE_ERROR
            assert "No space left on device" in str(exc) or "short write" in str(exc)
            return acknowledged
        acknowledged.append(info.first_offset)
    raise AssertionError("the disk never filled up")


def test_a_full_disk_takes_its_dir_offline_and_spares_the_other(
    small_disk: Path, tmp_path: Path
) -> None:
    big = tmp_path / "big"
    manager = LogManager([small_disk, big], broker_id=1, settings=QUIET)
    manager.startup()
    offline: list[Path] = []
    manager.failures.add_listener(lambda d, _reason: offline.append(d))
    on_small = manager.get_or_create_log(files.TopicPartition("full", 0), CONFIG)
    on_big = manager.get_or_create_log(files.TopicPartition("fine", 0), CONFIG)
    assert manager.log_dir_of(files.TopicPartition("full", 0)) == small_disk.resolve()
    filler = small_disk / "filler"
    filler.write_bytes(b"f" * 256 * 1024)  # freed later: space that returns

    acknowledged = fill(on_small, 3000)
    assert acknowledged and offline == [small_disk.resolve()]
    segment = on_small.active_segment
    assert os.path.getsize(segment.log_path) == segment.size  # no torn bytes after the last
    with pytest.raises(LogDirOfflineError):
        on_small.read(0, 1 << 20)
    filler.unlink()  # space returns: still nothing is written there
    with pytest.raises(LogDirOfflineError, match="is offline"):
        on_small.append_as_leader(batch([b"late"]), 0)
    assert os.path.getsize(segment.log_path) == segment.size
    assert not on_small.online and on_big.online
    # the other dir goes on, and new logs go only there
    on_big.append_as_leader(batch([b"still here"]), 0)
    assert [r.value for r in read_all(on_big)] == [b"still here"]
    created = manager.get_or_create_log(files.TopicPartition("new", 0), CONFIG)
    assert created.directory.parent == big.resolve()
    manager.shutdown()
    assert not (small_disk / files.CLEAN_SHUTDOWN_FILE).exists()  # recovery runs next time

    again = LogManager([small_disk, big], broker_id=1, settings=QUIET)
    again.startup()
    try:
        reopened = again.get_log(files.TopicPartition("full", 0))
        assert reopened is not None and reopened.online
        assert [r.offset for r in read_all(reopened)] == acknowledged
        files_ = [Path(seg.log_path).read_bytes() for seg in reopened.segments()]
        stored = [list(iter_batches(data)) for data in files_]
        assert sum(map(len, stored)) == len(acknowledged)  # every byte of every file parses
        reopened.append_as_leader(batch([b"after restart"]), 0)  # space was freed
    finally:
        again.shutdown()


def test_a_log_without_a_channel_refuses_writes_after_its_own_failure(small_disk: Path) -> None:
    log = Log.open(small_disk / "alone-0", CONFIG)
    acknowledged = fill(log, 5000)
    assert not log.online
    with pytest.raises(LogDirOfflineError):
        log.flush()
    log.close()
    reopened = Log.open(small_disk / "alone-0", CONFIG)
    assert [r.offset for r in read_all(reopened)] == acknowledged
    reopened.close()
