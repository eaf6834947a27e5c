"""Recovery on open: torn tails, garbage, damaged indexes, crashes during a roll,
leftover transient files, and the clean-shutdown shortcut."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from annal.storage import files
from annal.storage.config import LogConfig
from annal.storage.log import Log
from logutil import batch, read_all

CONFIG = LogConfig.from_properties({"segment.bytes": "2000", "index.interval.bytes": "100"})


def filled_log(directory: Path, batches: int = 30) -> Log:
    log = Log.open(directory, CONFIG)
    for i in range(batches):
        log.append_as_leader(batch([bytes([i]) * 40, bytes([i]) * 40]), i // 10)
    return log


def crash_copy(log: Log, target: Path) -> Path:
    """The files as a crash right now would leave them (no close, no trim)."""
    shutil.copytree(log.directory, target)
    return target


def reopen(directory: Path, clean: bool = False, recovery_point: int = 0) -> Log:
    return Log.open(directory, CONFIG, had_clean_shutdown=clean, recovery_point=recovery_point)


@pytest.mark.parametrize("cut", [1, 13, 61, 150])
def test_torn_tail_is_cut_at_last_valid_batch(tmp_path: Path, cut: int) -> None:
    log = filled_log(tmp_path / "t-0")
    crashed = crash_copy(log, tmp_path / "crash" / "t-0")
    active = crashed / log.active_segment.log_path.name
    size = log.active_segment.size
    with open(active, "r+b") as f:
        f.truncate(size - cut)
    log.close()
    recovered = reopen(crashed)
    offsets = [r.offset for r in read_all(recovered)]
    assert offsets == list(range(len(offsets)))
    assert 60 - len(offsets) in (2, 4)  # one or two whole batches lost
    assert recovered.active_segment.size < size - cut + 1
    next_offset = recovered.append_as_leader(batch([b"after"]), 9).first_offset
    assert next_offset == len(offsets)
    recovered.close()


def test_garbage_after_valid_data_is_cut(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    crashed = crash_copy(log, tmp_path / "crash" / "t-0")
    active = crashed / log.active_segment.log_path.name
    valid = log.active_segment.size
    with open(active, "r+b") as f:  # right after the data
        f.seek(valid)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x99\x00\x00\x01\x00garbage" * 20)
    log.close()
    recovered = reopen(crashed)
    assert recovered.log_end_offset == 60
    assert active.stat().st_size == valid
    recovered.close()


def test_corrupt_batch_in_the_middle_drops_it_and_everything_after(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    segments = log.segments()
    assert len(segments) >= 3
    crashed = crash_copy(log, tmp_path / "crash" / "t-0")
    middle = crashed / segments[1].log_path.name
    data = bytearray(middle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    middle.write_bytes(bytes(data))
    log.close()
    recovered = reopen(crashed)
    offsets = [r.offset for r in read_all(recovered)]
    assert offsets == list(range(len(offsets)))
    assert segments[1].base_offset < len(offsets) < segments[2].base_offset
    assert len(recovered.segments()) == 2
    assert not (crashed / segments[2].log_path.name).exists()
    recovered.close()


@pytest.mark.parametrize("damage", ["missing", "zeroed", "short"])
def test_damaged_indexes_are_rebuilt_even_after_clean_shutdown(tmp_path: Path, damage: str) -> None:
    log = filled_log(tmp_path / "t-0")
    first = log.segments()[0]
    entries = first.offset_index.entries
    assert entries > 0
    log.flush()
    log.close()
    index = first.offset_index.path
    if damage == "missing":
        index.unlink()
        first.time_index.path.unlink()
    elif damage == "zeroed":
        index.write_bytes(b"\0" * 64)
    else:
        index.write_bytes(index.read_bytes()[:-3])
    recovered = reopen(tmp_path / "t-0", clean=True, recovery_point=60)
    assert recovered.segments()[0].offset_index.entries == entries
    assert [r.offset for r in read_all(recovered)] == list(range(60))
    assert recovered.offset_for_timestamp(0) is not None
    recovered.close()


def test_crash_during_roll_leaves_a_readable_log(tmp_path: Path) -> None:
    """A roll creates the new segment's files, then trims the old indexes.
    Each intermediate state must recover to the same records."""
    log = filled_log(tmp_path / "t-0", batches=12)
    active = log.active_segment
    base = log.log_end_offset
    # State A: old indexes still preallocated (not trimmed), new files empty.
    state_a = crash_copy(log, tmp_path / "a" / "t-0")
    for suffix in files.SEGMENT_SUFFIXES:
        (state_a / files.segment_file_name(base, suffix)).touch()
    # State B: only the new .log exists.
    state_b = crash_copy(log, tmp_path / "b" / "t-0")
    (state_b / files.segment_file_name(base, ".log")).touch()
    # State C: the roll completed, nothing appended yet.
    log.roll()
    state_c = crash_copy(log, tmp_path / "c" / "t-0")
    log.close()
    assert active.base_offset < base
    for state in (state_a, state_b, state_c):
        recovered = reopen(state)
        assert recovered.log_end_offset == 24
        assert [r.offset for r in read_all(recovered)] == list(range(24))
        assert recovered.append_as_leader(batch([b"x"]), 1).first_offset == 24
        recovered.close()


def test_clean_shutdown_skips_recovery(tmp_path: Path) -> None:
    """Only the tail after the last index entry is checked (test_clean_load.py);
    a bad batch before it goes unseen until a recovery scans the segment."""
    log = filled_log(tmp_path / "t-0")
    assert log.active_segment.offset_index.lookup(60).position > 0
    log.flush()
    log.close()
    active = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    size = active.stat().st_size
    with open(active, "r+b") as f:  # the first batch's records: its CRC no longer matches
        f.seek(70)
        f.write(b"junk")
    clean = reopen(tmp_path / "t-0", clean=True, recovery_point=60)
    assert active.stat().st_size == size  # not scanned, not cut
    assert clean.log_end_offset == 60
    clean.close()
    unclean = reopen(tmp_path / "t-0", clean=False, recovery_point=60)
    assert active.stat().st_size == 0  # scanned and cut at the first batch
    assert unclean.log_end_offset == unclean.active_segment.base_offset
    unclean.close()


def test_leftover_transient_files(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    directory = log.directory
    first = log.segments()[0]
    log.flush()
    log.close()
    deleted = directory / (files.segment_file_name(9999, ".log") + files.DELETED_SUFFIX)
    cleaned = directory / (files.segment_file_name(0, ".log") + files.CLEANED_SUFFIX)
    deleted.write_bytes(b"old")
    cleaned.write_bytes(first.log_path.read_bytes()[:50])
    recovered = reopen(directory)
    assert not deleted.exists() and not cleaned.exists()
    assert [r.offset for r in read_all(recovered)] == list(range(60))
    recovered.close()


@pytest.mark.parametrize("step", ["swap-written", "old-deleted", "half-renamed"])
def test_crash_at_each_step_of_a_swap(tmp_path: Path, step: str) -> None:
    """A .swap is a committed compaction output: recovery finishes the swap."""
    log = filled_log(tmp_path / "t-0")
    segments = log.segments()
    group = segments[:2]
    end = segments[2].base_offset
    log.flush()
    log.close()
    directory = tmp_path / "t-0"
    # the "compacted" output: the same batches, copied (compaction kept everything)
    swap = directory / (files.segment_file_name(group[0].base_offset, ".log") + files.SWAP_SUFFIX)
    swap.write_bytes(b"".join(s.log_path.read_bytes() for s in group))
    if step in ("old-deleted", "half-renamed"):
        for s in group:
            s.log_path.rename(s.log_path.with_name(s.log_path.name + files.DELETED_SUFFIX))
    if step == "half-renamed":
        # the index files of the swap were renamed, its log not yet
        (
            directory
            / (files.segment_file_name(group[0].base_offset, ".index") + files.SWAP_SUFFIX)
        ).write_bytes(b"")
    recovered = reopen(directory)
    assert [r.offset for r in read_all(recovered)] == list(range(60))
    assert recovered.segments()[0].base_offset == 0
    assert recovered.segments()[1].base_offset == end
    assert not list(directory.glob("*.swap")) and not list(directory.glob("*.deleted"))
    recovered.close()


def test_leader_epoch_cache_rebuilt_by_recovery(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [
        (0, 0),
        (1, 20),
        (2, 40),
    ]
    crashed = crash_copy(log, tmp_path / "crash" / "t-0")
    log.close()
    (crashed / files.LEADER_EPOCH_CHECKPOINT).unlink()
    recovered = reopen(crashed)
    assert [(e.epoch, e.start_offset) for e in recovered.leader_epoch_cache.epoch_entries()] == [
        (0, 0),
        (1, 20),
        (2, 40),
    ]
    recovered.close()
