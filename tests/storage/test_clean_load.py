"""Loading a log after a clean shutdown: the tail check that stands in for recovery.

A clean load does not rescan segments, but it must not trust a damaged tail:
the batches from each segment's last ``.index`` entry to the end of its file
are checked, and a segment whose tail fails is recovered.  The property test
damages the end of any segment, with and without a clean-shutdown marker,
and checks the log against the batches it held before the damage.
"""

from __future__ import annotations

import logging
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from annal.storage.batch import LOG_OVERHEAD, iter_batches
from annal.storage.config import LogConfig
from annal.storage.errors import CorruptRecordError
from annal.storage.log import Log
from annal.storage.records import iter_records
from annal.storage.segment import LogSegment
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logutil import batch, read_all

TIMESTAMP = 1_700_000_000_000
_PREFIX = struct.Struct(">qi")


def _header_with_length(base_offset: int, length: int) -> bytes:
    """61 bytes that start like a batch at ``base_offset`` declaring ``length``."""
    return _PREFIX.pack(base_offset, length) + b"\x00" * 49


# -- the damage reported against the clean-shutdown load ----------------------


def fifteen_offsets(directory: Path) -> Path:
    """A cleanly closed log holding offsets 0..14 in five batches; its one .log file."""
    log = Log.open(directory)
    for i in range(5):
        log.append_as_leader(batch([bytes([i]) * 40] * 3, timestamp=TIMESTAMP + i), 0)
    assert log.log_end_offset == 15
    log.flush()
    log.close()
    (path,) = directory.glob("*.log")
    return path


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00" * 61, id="61-zero-bytes"),
        pytest.param(_header_with_length(15, -12), id="length-minus-12"),
        pytest.param(_header_with_length(15, -200), id="length-minus-200"),
        pytest.param(b"\x80" * 200, id="200-odd-bytes"),
    ],
)
def test_damaged_tail_after_clean_shutdown_is_cut(
    tmp_path: Path, tail: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = fifteen_offsets(tmp_path / "t-0")
    valid = path.stat().st_size
    with open(path, "ab") as f:
        f.write(tail)
    with caplog.at_level(logging.WARNING, logger="annal.storage"):
        log = Log.open(tmp_path / "t-0", had_clean_shutdown=True, recovery_point=15)
    assert log.log_end_offset == 15
    assert path.stat().st_size == valid
    assert [r.offset for r in read_all(log)] == list(range(15))
    assert log.append_as_leader(batch([b"next"]), 0).first_offset == 15
    assert str(path) in caplog.text and "recovering" in caplog.text
    log.close()
    reopened = Log.open(tmp_path / "t-0", had_clean_shutdown=True, recovery_point=16)
    assert reopened.log_end_offset == 16
    reopened.close()


# -- every length walk stops on garbage ------------------------------------------


@pytest.mark.timeout(20)
@pytest.mark.parametrize("length", [-(2**31), -200, -12, 0, 48, 2**31 - 1])
def test_length_walks_on_an_unchecked_segment_never_loop(tmp_path: Path, length: int) -> None:
    first = batch([b"a" * 30, b"b" * 30], timestamp=TIMESTAMP)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(first + _header_with_length(2, length))
    segment = LogSegment(
        tmp_path, 0, index_interval_bytes=4096, max_index_size=1024, time_ms=lambda: TIMESTAMP
    )
    try:
        assert segment.read(0, 1 << 20) == first  # the read's end walk stops before it
        assert segment.translate_offset(1) == (1, 0, len(first))
        for walk in (
            segment.iter_headers,
            segment.read_next_offset,
            lambda: segment.translate_offset(5),
            lambda: segment.find_offset_by_timestamp(TIMESTAMP + 1, 0),
        ):
            with pytest.raises(CorruptRecordError, match=f"batch length {length} .*{path}"):
                walk()
        with pytest.raises(CorruptRecordError, match=f"batch length {length} .*{path}"):
            segment.check_tail()
    finally:
        segment.close()


# -- older segments, indexes that disagree with the tail --------------------------

CONFIG = LogConfig.from_properties({"segment.bytes": "700", "index.interval.bytes": "150"})


def several_segments(directory: Path, batches: int = 14) -> Log:
    log = Log.open(directory, CONFIG)
    for i in range(batches):
        values = [bytes([i]) * (20 + 7 * (i % 5))] * (1 + i % 3)
        log.append_as_leader(batch(values, timestamp=TIMESTAMP + 10 * i), 0)
    return log


def test_garbage_after_an_older_segment_cuts_the_log_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = several_segments(tmp_path / "t-0")
    segments = log.segments()
    assert len(segments) >= 3
    older, following = segments[1], segments[2]
    end, valid = following.base_offset, older.size
    log.flush()
    log.close()
    with open(older.log_path, "ab") as f:
        f.write(b"\x00" * 61)
    with caplog.at_level(logging.WARNING, logger="annal.storage"):
        reopened = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=True, recovery_point=99)
    assert f"recovering {older.log_path}" in caplog.text
    assert older.log_path.stat().st_size == valid
    assert not following.log_path.exists()
    assert reopened.log_end_offset == end
    assert [r.offset for r in read_all(reopened)] == list(range(end))
    assert reopened.append_as_leader(batch([b"next"]), 0).first_offset == end
    reopened.close()


def test_index_entry_past_a_cut_at_a_batch_boundary_is_rebuilt(tmp_path: Path) -> None:
    log = several_segments(tmp_path / "t-0")
    active = log.active_segment
    headers = active.iter_headers()
    indexed = active.offset_index.entry(active.offset_index.entries - 1)
    assert indexed.position > 0
    keep = [h for h in headers if h.position < indexed.position]
    end = keep[-1].next_offset
    log.flush()
    log.close()
    with open(active.log_path, "r+b") as f:
        f.truncate(indexed.position)
    reopened = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=True, recovery_point=99)
    assert reopened.log_end_offset == end
    assert reopened.active_segment.offset_index.lookup(end).position < indexed.position
    assert reopened.append_as_leader(batch([b"next"]), 0).first_offset == end
    reopened.close()


def test_time_index_past_the_log_end_is_rebuilt(tmp_path: Path) -> None:
    """A cut after the last .index entry passes the offset checks, but the last
    .timeindex entry (written at close) names an offset that is gone: a later
    append with a newer timestamp must still work."""
    log = several_segments(tmp_path / "t-0", batches=12)
    active = log.active_segment
    for i in range(3):  # until the last batch is not the indexed one
        log.append_as_leader(batch([b"last"] * 3, timestamp=TIMESTAMP + 1000 + i), 0)
        last = active.iter_headers()[-1]
        indexed = active.offset_index.entry(active.offset_index.entries - 1)
        if indexed.position < last.position:
            break
    assert log.active_segment is active
    log.flush()
    log.close()
    assert active.time_index.last_entry.offset == last.last_offset
    with open(active.log_path, "r+b") as f:
        f.truncate(last.position)
    reopened = Log.open(tmp_path / "t-0", CONFIG, had_clean_shutdown=True, recovery_point=99)
    assert reopened.log_end_offset == last.base_offset
    info = reopened.append_as_leader(batch([b"newer"], timestamp=TIMESTAMP + 2000), 0)
    assert info.first_offset == last.base_offset
    assert reopened.offset_for_timestamp(TIMESTAMP + 1500) == (TIMESTAMP + 2000, info.first_offset)
    reopened.close()


# -- the property: damage at the end of any segment --------------------------------


@dataclass(frozen=True)
class StoredBatch:
    """A batch as the log held it before the damage."""

    segment: int  # position in the segment list, oldest first
    position: int
    size: int
    base_offset: int
    values: tuple[bytes, ...]
    timestamp: int

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


def _build(directory: Path, shapes: list[tuple[int, int]]) -> tuple[Log, list[StoredBatch]]:
    log = Log.open(directory, CONFIG)
    stored: list[StoredBatch] = []
    for i, (count, size) in enumerate(shapes):
        values = tuple(b"%04d-%03d" % (i, j) + b"v" * size for j in range(count))
        timestamp = TIMESTAMP + 10 * i
        info = log.append_as_leader(batch(list(values), timestamp=timestamp), i // 4)
        segments = log.segments()
        where = len(segments) - 1
        header = segments[where].iter_headers()[-1]
        assert header.base_offset == info.first_offset
        stored.append(
            StoredBatch(where, header.position, header.size, info.first_offset, values, timestamp)
        )
    return log, stored


def _garbage(data: st.DataObject, end: int, earlier: list[bytes]) -> bytes:
    """Bytes that cannot continue a segment: none is a valid batch with new offsets.

    ``end`` is the log end offset; ``earlier`` holds whole batches whose offsets
    lie below the segment's end."""
    kind = data.draw(st.sampled_from(["binary", "zeros", "length", "torn", "duplicate"]))
    if kind == "binary":
        return data.draw(st.binary(min_size=1, max_size=200))
    if kind == "zeros":
        return b"\x00" * data.draw(st.integers(1, 200))
    if kind == "length":
        length = data.draw(
            st.sampled_from([-(2**31), -200, -12, -1, 0, 48, 2**31 - 1])
            | st.integers(-(2**31), 2**31 - 1)
        )
        base = data.draw(st.sampled_from([0, end, 2**62]))
        return _header_with_length(base, length)[: data.draw(st.integers(12, 61))]
    if kind == "duplicate" and earlier:
        return data.draw(st.sampled_from(earlier))
    whole = data.draw(st.sampled_from(earlier)) if earlier else batch([b"torn"])
    return whole[: data.draw(st.integers(1, len(whole) - 1))]


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 90)), min_size=1, max_size=14),
    clean=st.booleans(),
    crashed=st.booleans(),
    data=st.data(),
)
def test_damage_at_the_end_of_any_segment(
    shapes: list[tuple[int, int]], clean: bool, crashed: bool, data: st.DataObject
) -> None:
    """Bytes cut from and garbage appended to the end of one or two segments.

    The model is what a recovery keeps: in a damaged segment, the whole batches
    before its first changed byte.  When the damage leaves anything after them
    (garbage, a torn batch) the later segments go as well, as after a
    recovery that cuts bytes; a cut exactly at a batch boundary loses only the
    batches cut.  The log end offset follows the last batch of the segment left
    last, and the next append takes it.
    """
    with tempfile.TemporaryDirectory(prefix="clean-load-") as root:
        directory = Path(root) / "t-0"
        log, stored = _build(directory, shapes)
        paths = [s.log_path for s in log.segments()]
        sizes = [s.size for s in log.segments()]
        bases = [s.base_offset for s in log.segments()]
        end = log.log_end_offset
        if crashed:  # the files as they are while the log is open: indexes not trimmed
            shutil.copytree(directory, Path(root) / "crash")
        log.close()
        if crashed:
            shutil.rmtree(directory)
            (Path(root) / "crash").rename(directory)

        originals = [path.read_bytes() for path in paths]
        damaged = data.draw(
            st.lists(st.integers(0, len(paths) - 1), min_size=1, max_size=2, unique=True)
        )
        survivors: list[StoredBatch] = []
        stopped = False
        last_segment = len(paths) - 1  # the active one after the load
        for k, path in enumerate(paths):
            in_segment = [b for b in stored if b.segment == k]
            if k not in damaged:
                if not stopped:
                    survivors += in_segment
                continue
            raw = originals[k]
            whole = [sizes[k] - b.position for b in in_segment]  # cuts that leave whole batches
            cut = data.draw(
                st.sampled_from(whole) | st.integers(0, sizes[k]), label=f"cut from segment {k}"
            )
            copies = [
                originals[b.segment][b.position : b.end]
                for b in stored
                if b.segment < k or (b.segment == k and b.end <= sizes[k] - cut)
            ]
            tail = b""
            if cut == 0 or data.draw(st.booleans(), label="and append"):
                tail = _garbage(data, end, copies)
            damaged_bytes = raw[: sizes[k] - cut] + tail
            path.write_bytes(damaged_bytes)
            # The batches left whole are those before the first changed byte
            # (appended bytes may happen to repeat some that were cut).
            same = next(
                (i for i, (a, b) in enumerate(zip(raw, damaged_bytes, strict=False)) if a != b),
                min(len(raw), len(damaged_bytes)),
            )
            kept = [b for b in in_segment if b.end <= same]
            if not stopped:
                survivors += kept
                stopped = len(damaged_bytes) != (kept[-1].end if kept else 0)
                if stopped:
                    last_segment = k

        in_active = [b for b in survivors if b.segment == last_segment]
        expected_end = in_active[-1].next_offset if in_active else bases[last_segment]
        recovery_point = end if clean else data.draw(st.sampled_from([0, end]))
        log = Log.open(directory, CONFIG, had_clean_shutdown=clean, recovery_point=recovery_point)
        try:
            _check_against(log, survivors, expected_end, data)
            last_timestamp = TIMESTAMP + 10 * len(shapes)
            info = log.append_as_leader(batch([b"after"], timestamp=last_timestamp), 9)
            assert info.first_offset == expected_end
            assert log.offset_for_timestamp(last_timestamp) == (last_timestamp, expected_end)
        finally:
            log.close()
        reopened = Log.open(
            directory, CONFIG, had_clean_shutdown=True, recovery_point=expected_end + 1
        )
        try:
            assert reopened.log_end_offset == expected_end + 1
            assert [r.value for r in read_all(reopened)][-1] == b"after"
        finally:
            reopened.close()


def _check_against(
    log: Log, survivors: list[StoredBatch], expected_end: int, data: st.DataObject
) -> None:
    assert log.log_end_offset == expected_end
    model = [(b.base_offset + i, v) for b in survivors for i, v in enumerate(b.values)]
    assert [(r.offset, r.value) for r in read_all(log, 0)] == model
    for offset in range(log.log_start_offset, expected_end):
        max_bytes = data.draw(st.sampled_from([1, 150, 1 << 20]), label=f"read at {offset}")
        got = log.read(offset, max_bytes)
        batches = list(iter_batches(got))  # whole, valid batches only
        want = next((b for b in survivors if b.next_offset > offset), None)
        if want is None:  # in a gap left by a cut at a batch boundary, with nothing after it
            assert got == b""
            continue
        assert batches and batches[0].base_offset == want.base_offset
        assert [r.offset for r in iter_records(got)][-1] < expected_end
        assert len(got) <= max(max_bytes, batches[0].batch_length + LOG_OVERHEAD)
    for b in survivors:
        assert log.offset_for_timestamp(b.timestamp) == (b.timestamp, b.base_offset)
