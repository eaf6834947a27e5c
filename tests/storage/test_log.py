"""The Log's public API: appends, reads, rolls, lookups, truncation, bad input."""

from __future__ import annotations

import hashlib
import logging
import struct
from pathlib import Path

import pytest
from annal.storage import files
from annal.storage.batch import CRC_OFFSET, MAGIC_OFFSET, Compression, iter_batches
from annal.storage.config import LogConfig
from annal.storage.errors import (
    CorruptRecordError,
    KeylessRecordError,
    LogDirError,
    NonMonotonicOffsetError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from annal.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from annal.storage.records import Record, encode_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from logutil import FakeClock, batch, open_log, read_all, values_of


def dir_digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


def test_leader_append_assigns_offsets_and_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = log.append_as_leader(batch([b"a", b"b", b"c"]), leader_epoch=3)
    second = log.append_as_leader(batch([b"d"]) + batch([b"e", b"f"]), leader_epoch=3)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.num_batches) == (3, 5, 2)
    assert log.log_end_offset == 6
    data = log.read(0, 1 << 20)
    headers = list(iter_batches(data))
    assert [h.base_offset for h in headers] == [0, 3, 4]
    assert {h.partition_leader_epoch for h in headers} == {3}
    assert [r.offset for r in read_all(log)] == list(range(6))
    assert log.leader_epoch_cache.latest_epoch == 3
    log.close()


def test_read_returns_whole_batches_and_oversized_first_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    big = batch([b"x" * 5000])
    small = batch([b"y" * 100])
    log.append_as_leader(big, 0)
    log.append_as_leader(small, 0)
    log.append_as_leader(small, 0)
    assert len(log.read(0, 100)) == len(big)  # first batch whole though larger
    assert log.read(0, 100, min_one_message=False) == b""
    data = log.read(1, len(small) + 10)
    assert len(data) == len(small)
    assert log.read(3, 1000) == b""  # at the log end
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        log.read(4, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    # max_offset (e.g. a high watermark) stops before the batch holding it
    assert [r.offset for r in read_all_upto(log, 0, 2)] == [0, 1]
    log.close()


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 300), st.integers(4_000, 12_000)), min_size=1, max_size=25
    ),
    interval=st.sampled_from([1, 100, 4096, 1 << 20]),
    reads=st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 60_000)), min_size=1, max_size=8),
)
def test_a_read_is_every_whole_batch_that_fits(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    interval: int,
    reads: list[tuple[int, int]],
) -> None:
    """A read ends at the last whole batch within ``max_bytes``, wherever the
    index entries fall and however large the batches are."""
    log = open_log(tmp_path_factory.mktemp("log") / "t-0", index_interval_bytes=interval)
    encoded = [batch([b"v" * size]) for size in sizes] + [batch([b"v" * 12_000])] * 3
    for data in encoded:
        log.append_as_leader(data, 0)
    for offset, max_bytes in reads:
        offset %= len(sizes)
        want, total = [], 0
        for data in encoded[offset:]:
            if total + len(data) > max_bytes and want:
                break
            want.append(data)
            total += len(data)
            if total > max_bytes:  # an oversized first batch comes whole
                break
        got = log.read(offset, max_bytes)
        assert [h.base_offset for h in iter_batches(got)] == list(range(offset, offset + len(want)))
        assert len(got) == total
    log.close()


def read_all_upto(log: Log, offset: int, max_offset: int) -> list[Record]:
    from annal.storage.records import iter_records

    return list(iter_records(log.read(offset, 1 << 20, max_offset=max_offset)))


def test_segments_roll_on_size_and_use_twenty_digit_names(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1000)
    for i in range(20):
        log.append_as_leader(batch([bytes([i]) * 200]), 0)
    bases = [s.base_offset for s in log.segments()]
    assert len(bases) > 3
    assert all(s.size <= 1000 for s in log.segments())
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == [files.segment_file_name(b, ".log") for b in bases]
    assert all(len(n) == 24 for n in names)
    # rolled segments' indexes are trimmed to their entries
    for segment in log.segments()[:-1]:
        assert segment.offset_index.path.stat().st_size == segment.offset_index.entries * 8
        assert segment.time_index.path.stat().st_size == segment.time_index.entries * 12
    assert [r.value for r in read_all(log)] == [bytes([i]) * 200 for i in range(20)]
    log.close()


def test_roll_on_segment_ms_by_timestamp(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    log.append_as_leader(batch([b"a"], timestamp=clock.now_ms), 0)
    log.append_as_leader(batch([b"b"], timestamp=clock.now_ms + 500), 0)
    assert len(log.segments()) == 1
    log.append_as_leader(batch([b"c"], timestamp=clock.now_ms + 1500), 0)
    assert [s.base_offset for s in log.segments()] == [0, 2]
    log.close()


def test_roll_when_index_is_full(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_index_bytes=24, index_interval_bytes=1)
    for _ in range(12):
        log.append_as_leader(batch([b"v" * 10]), 0)
    assert len(log.segments()) > 2
    assert [r.value for r in read_all(log)] == [b"v" * 10] * 12
    log.close()


def test_roll_when_relative_offset_overflows_int32(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(batch([b"a"]))
    log.append_as_follower(batch([b"b"], base_offset=2**31 + 5))
    assert [s.base_offset for s in log.segments()] == [0, 2**31 + 5]
    assert [r.offset for r in read_all(log)] == [0, 2**31 + 5]
    log.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=1)
    for i in range(30):
        log.append_as_leader(batch([b"v" * 20, b"w" * 20], timestamp=1000 + 10 * i), 0)
    assert len(log.segments()) > 3
    found = log.offset_for_timestamp(1000 + 10 * 17 - 3)
    assert found is not None and (found.timestamp, found.offset) == (1170, 34)
    found = log.offset_for_timestamp(0)
    assert found is not None and found.offset == 0
    assert log.offset_for_timestamp(10**12) is None
    earliest = log.offset_for_timestamp(EARLIEST_TIMESTAMP)
    latest = log.offset_for_timestamp(LATEST_TIMESTAMP)
    assert earliest is not None and earliest.offset == 0
    assert latest is not None and latest.offset == 60
    log.close()


def test_offset_for_timestamp_inside_a_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    records = [Record(i, 100 + i, None, b"v") for i in range(5)]
    log.append_as_leader(encode_batch(records), 0)
    found = log.offset_for_timestamp(102)
    assert found is not None and (found.timestamp, found.offset) == (102, 2)
    log.close()


def test_truncate_to_removes_whole_batches_and_later_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    for i in range(20):
        log.append_as_leader(batch([bytes([i]) * 50, bytes([i]) * 50]), i // 5)
    assert log.truncate_to(15)
    assert log.log_end_offset == 14  # offset 15 sits mid-batch: its batch goes
    assert [r.offset for r in read_all(log)] == list(range(14))
    assert log.leader_epoch_cache.latest_epoch == 1
    assert not log.truncate_to(100)
    info = log.append_as_leader(batch([b"new"]), 5)
    assert info.first_offset == 14
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=500)
    assert reopened.log_end_offset == 15
    reopened.close()


def test_roll_due_tells_an_append_that_would_roll(tmp_path: Path) -> None:
    clock = FakeClock()  # the batches' timestamps are its time
    log = open_log(tmp_path / "t-0", clock, segment_bytes=500)
    assert not log.roll_due(400)  # an empty segment takes any first batch
    data = batch([b"x" * 300])
    log.append_as_leader(data, 0)
    assert not log.roll_due(100)
    assert log.roll_due(len(data))  # past segment.bytes
    segments = len(log.segments())
    log.append_as_leader(data, 0)
    assert len(log.segments()) == segments + 1 and not log.roll_due(100)
    clock.advance(7 * 24 * 3600 * 1000 + 1)  # past segment.ms
    assert log.roll_due(100)
    log.close()


def test_truncate_below_start_restarts_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch([b"a", b"b"]), 0)
    log.truncate_fully_and_start_at(7)
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    assert log.append_as_leader(batch([b"c"]), 0).first_offset == 7
    log.close()


def test_delete_records_before_moves_start_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for i in range(20):
        log.append_as_leader(batch([bytes([i]) * 50]), 0)
    before = len(log.segments())
    assert log.delete_records_before(9) == 9
    assert log.log_start_offset == 9
    assert len(log.segments()) < before
    assert log.segments()[0].base_offset <= 9
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 100)
    assert read_all(log)[0].offset == 9
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(21)
    log.close()


def test_follower_append_keeps_offsets_and_refuses_going_back(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    leader_batch = bytearray(batch([b"a", b"b"], base_offset=10))
    struct.pack_into(">i", leader_batch, 12, 4)  # leader epoch 4
    info = log.append_as_follower(bytes(leader_batch))
    assert (info.first_offset, info.last_offset) == (10, 11)
    assert log.leader_epoch_cache.latest_epoch == 4
    before = dir_digest(tmp_path / "t-0")
    with pytest.raises(NonMonotonicOffsetError, match="below the log end offset 12"):
        log.append_as_follower(batch([b"c"], base_offset=11))
    with pytest.raises(NonMonotonicOffsetError, match="not above"):
        log.append_as_follower(batch([b"c"], base_offset=20) + batch([b"d"], base_offset=20))
    assert dir_digest(tmp_path / "t-0") == before
    log.close()


def corrupt_crc(data: bytes) -> bytes:
    buf = bytearray(data)
    buf[CRC_OFFSET] ^= 0xFF
    return bytes(buf)


@pytest.mark.parametrize(
    ("make_input", "error", "message"),
    [
        (lambda: corrupt_crc(batch([b"a"])), CorruptRecordError, "CRC mismatch"),
        (lambda: batch([b"a"])[:40], CorruptRecordError, "truncated"),
        (lambda: batch([b"a"]) + batch([b"b"])[:-3], CorruptRecordError, "at position"),
        (lambda: b"", CorruptRecordError, "empty"),
        (lambda: batch([b"x" * 2000]), RecordTooLargeError, "max.message.bytes"),
        (lambda: set_magic(batch([b"a"]), 3), CorruptRecordError, "magic 3"),
        (lambda: set_count(batch([b"a", b"b", b"c"]), 2), CorruptRecordError, "does not match"),
        (lambda: set_count(batch([b"a", b"b"]), 9), CorruptRecordError, "record count 9"),
    ],
)
def test_bad_input_is_refused_and_log_unchanged(
    tmp_path: Path, make_input: object, error: type[Exception], message: str
) -> None:
    log = open_log(tmp_path / "t-0", max_message_bytes=1000)
    log.append_as_leader(batch([b"ok"]), 0)
    before = dir_digest(tmp_path / "t-0")
    with pytest.raises(error, match=message) as info:
        log.append_as_leader(make_input(), 0)  # type: ignore[operator]
    assert "position" in str(info.value) or isinstance(info.value, RecordTooLargeError)
    assert dir_digest(tmp_path / "t-0") == before
    assert log.log_end_offset == 1
    log.close()


def set_magic(data: bytes, magic: int) -> bytes:
    buf = bytearray(data)
    buf[MAGIC_OFFSET] = magic
    return bytes(buf)


def set_count(data: bytes, count: int) -> bytes:
    """Rewrite the record count and fix the CRC, so only the count is wrong."""
    from annal.storage.batch import compute_crc

    buf = bytearray(data)
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_keyless_record_into_compacted_log_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy="compact")
    log.append_as_leader(batch([b"v"], keys=[b"k"]), 0)
    before = dir_digest(tmp_path / "t-0")
    with pytest.raises(KeylessRecordError, match="null key"):
        log.append_as_leader(batch([b"v", b"w"], keys=[b"k", None]), 0)
    assert dir_digest(tmp_path / "t-0") == before
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    clock = FakeClock(5_000)
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch([b"a"], timestamp=1), 0)
    assert info.log_append_time_ms == 5_000
    header = next(iter_batches(log.read(0, 1000)))
    assert header.max_timestamp == 5_000 and header.timestamp_type.name == "LOG_APPEND_TIME"
    log.close()


def test_compressed_batches_pass_through_untouched(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for codec in Compression:
        log.append_as_leader(batch([b"v" * 100] * 10, compression=codec), 0)
    assert values_of(log.read(0, 1 << 20)) == [b"v" * 100] * 50
    log.close()


def test_reopen_after_clean_close_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for i in range(10):
        log.append_as_leader(batch([bytes([i]) * 100]), 0)
    log.flush()
    log.close()
    again = Log.open(
        tmp_path / "t-0",
        LogConfig.from_properties({"segment.bytes": "400"}),
        had_clean_shutdown=True,
        recovery_point=10,
    )
    assert again.log_end_offset == 10
    assert [r.value for r in read_all(again)] == [bytes([i]) * 100 for i in range(10)]
    again.close()


def test_not_a_partition_directory(tmp_path: Path) -> None:
    with pytest.raises(LogDirError, match="not a partition directory"):
        Log.open(tmp_path / "notapartition")
    (tmp_path / "x-0").write_text("a file")
    with pytest.raises(LogDirError, match="not a directory"):
        Log.open(tmp_path / "x-0")


def test_unknown_files_are_left_in_place_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "notes.txt").write_text("mine")
    with caplog.at_level(logging.WARNING):
        log = Log.open(directory)
    assert "unknown file notes.txt" in caplog.text
    log.close()
    assert (directory / "notes.txt").read_text() == "mine"


def test_flush_messages_advances_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", flush_messages=3)
    log.append_as_leader(batch([b"a"]), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch([b"b", b"c"]), 0)
    assert log.recovery_point == 3
    log.close()


def test_flush_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, flush_ms=1000)
    log.append_as_leader(batch([b"a"]), 0)
    log.flush_if_due()
    assert log.recovery_point == 0
    clock.advance(1000)
    log.flush_if_due()
    assert log.recovery_point == 1
    log.close()
