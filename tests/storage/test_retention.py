"""Retention by time, size and log start offset; delayed deletion; readers during deletes."""

from __future__ import annotations

import threading
from pathlib import Path

from annal.storage import files
from annal.storage.records import iter_records
from logutil import FakeClock, batch, open_log, read_all

DAY = 24 * 3600 * 1000


def test_time_retention_uses_largest_timestamp(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(
        tmp_path / "t-0", clock, segment_bytes=500, retention_ms=DAY, file_delete_delay_ms=1000
    )
    old = clock.now_ms - 2 * DAY
    for _i in range(10):
        log.append_as_leader(batch([b"o" * 100], timestamp=old), 0)
    log.roll()
    for _i in range(5):
        log.append_as_leader(batch([b"n" * 100], timestamp=clock.now_ms), 0)
    old_segments = [s for s in log.segments() if s.largest_timestamp == old]
    assert len(old_segments) > 1
    removed = log.delete_old_segments()
    assert removed == len(old_segments)
    assert log.log_start_offset == 10
    assert [r.value for r in read_all(log)] == [b"n" * 100] * 5
    # renamed to .deleted now, removed after file.delete.delay.ms
    pending = list(log.directory.glob("*.deleted"))
    assert len(pending) == 3 * len(old_segments)
    assert log.delete_pending_segments() == 0
    clock.advance(1000)
    assert log.delete_pending_segments() == len(old_segments)
    assert not list(log.directory.glob("*.deleted"))
    log.close()


def test_everything_expired_rolls_first(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, retention_ms=1000)
    log.append_as_leader(batch([b"a", b"b"], timestamp=clock.now_ms), 0)
    clock.advance(5000)
    assert log.delete_old_segments() == 1
    assert len(log.segments()) == 1
    assert log.active_segment.base_offset == 2
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.append_as_leader(batch([b"c"]), 0).first_offset == 2
    log.close()


def test_empty_active_segment_is_never_deleted(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, retention_ms=1000)
    clock.advance(10_000)
    assert log.delete_old_segments() == 0
    assert len(log.segments()) == 1
    log.close()


def test_size_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=600, retention_bytes=1300)
    for i in range(30):
        log.append_as_leader(batch([bytes([i]) * 100], timestamp=clock.now_ms), 0)
    sizes = [s.size for s in log.segments()]
    log.delete_old_segments()
    assert 1300 <= log.size < 1300 + max(sizes)
    kept = [r.value for r in read_all(log)]
    assert kept == [bytes([i]) * 100 for i in range(30 - len(kept), 30)]
    log.close()


def test_compact_only_log_ignores_time_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(
        tmp_path / "t-0", clock, retention_ms=1, cleanup_policy="compact", segment_bytes=300
    )
    for i in range(10):
        log.append_as_leader(batch([b"v" * 100], keys=[b"k%d" % i], timestamp=0), 0)
    assert log.delete_old_segments() == 0
    log.close()


def test_log_start_offset_retention_applies_to_every_policy(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy="compact", segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch([b"v" * 100], keys=[b"k%d" % i]), 0)
    log.delete_records_before(6)
    assert log.segments()[0].base_offset <= 6 < log.segments()[0].base_offset + 3
    log.close()


def test_reader_with_a_snapshot_keeps_reading_while_segments_go(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400, retention_ms=DAY)
    for i in range(40):
        log.append_as_leader(batch([bytes([i]) * 100], timestamp=clock.now_ms), 0)
    snapshot = log.segments()
    clock.advance(2 * DAY)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                for segment in snapshot:
                    data = segment.read(segment.base_offset, 1 << 16)
                    assert data and list(iter_records(data))
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        removed = log.delete_old_segments()
    finally:
        done.set()
        thread.join(10)
    assert removed == len(snapshot)
    assert not errors, errors
    # the deleted segments' files are still readable through the snapshot
    for segment in snapshot:
        assert segment.log_path.name.endswith(files.DELETED_SUFFIX)
        assert list(iter_records(segment.read(segment.base_offset, 1 << 16)))
    log.close()
