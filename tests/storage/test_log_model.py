"""A Hypothesis state machine: the Log against a list of batches.

Rules append, read, roll, truncate, delete records, close and reopen, and
crash (cut bytes off the active segment, append garbage, delete or zero the
index files) and reopen without a clean shutdown.  After every step the log
must hold exactly the model's records.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from annal.storage import files
from annal.storage.config import LogConfig
from annal.storage.errors import OffsetOutOfRangeError
from annal.storage.log import Log
from annal.storage.records import iter_records
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from logutil import batch, read_all

CONFIG = LogConfig.from_properties(
    {"segment.bytes": "700", "index.interval.bytes": "150", "segment.index.bytes": "120"}
)


@dataclass
class ModelBatch:
    base_offset: int
    values: list[bytes]
    size: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="logmodel-"))
        self.directory = self.root / "t-0"
        self.log = Log.open(self.directory, CONFIG)
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.end = 0
        self.counter = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def model_records(self) -> list[tuple[int, bytes]]:
        return [
            (b.base_offset + i, v)
            for b in self.batches
            for i, v in enumerate(b.values)
            if b.base_offset + i >= self.start
        ]

    @rule(count=st.integers(1, 6), size=st.integers(0, 120))
    def append(self, count: int, size: int) -> None:
        values = []
        for _ in range(count):
            self.counter += 1
            values.append(self.counter.to_bytes(4, "big") * (size // 4 + 1))
        data = batch(values)
        info = self.log.append_as_leader(data, 0)
        assert info.first_offset == self.end
        self.batches.append(ModelBatch(self.end, values, len(data)))
        self.end += count

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start - 2, self.end + 2))
        if offset < self.start or offset > self.end:
            try:
                self.log.read(offset, 500)
            except OffsetOutOfRangeError:
                return
            raise AssertionError(f"read at {offset} outside [{self.start}, {self.end}] succeeded")
        got = [(r.offset, r.value) for r in iter_records(self.log.read(offset, 500))]
        got = [(o, v) for o, v in got if o >= offset]
        want = [(o, v) for o, v in self.model_records() if o >= offset]
        assert got == want[: len(got)]
        assert bool(got) == bool(want), f"read at {offset} gave {len(got)} records"

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b.next_offset <= offset]
        self.end = self.batches[-1].next_offset if self.batches else self.start
        if self.end < self.start:
            self.end = self.start
        assert self.log.log_end_offset == self.end

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        self.log.delete_records_before(offset)
        self.start = offset

    @rule()
    def reopen_clean(self) -> None:
        self.log.flush()
        recovery_point = self.log.recovery_point
        self.log.close()
        self.log = Log.open(
            self.directory,
            CONFIG,
            had_clean_shutdown=True,
            recovery_point=recovery_point,
            log_start_offset=self.start,
        )

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), how=st.sampled_from(["cut", "garbage", "drop-index", "zero-index"]))
    def crash(self, data: st.DataObject, how: str) -> None:
        """Abandon the open log, damage the files, reopen without a clean shutdown."""
        self.log.delete_pending_segments(force=True)
        recovery_point = self.log.recovery_point
        active = self.log.active_segment
        victim = data.draw(st.sampled_from(self.log.segments()))
        log_path = active.log_path
        offset_index = victim.offset_index.path
        time_index = victim.time_index.path
        size = active.size
        crash_dir = self.root / f"t-{self.counter + 1}"
        shutil.copytree(self.directory, crash_dir)
        self.log.close()
        shutil.rmtree(self.directory)
        crash_dir.rename(self.directory)
        in_active = [b for b in self.batches if b.base_offset >= active.base_offset]
        if how == "cut" and size > 0:
            cut = data.draw(st.integers(1, size))
            with open(log_path, "r+b") as f:
                f.truncate(size - cut)
            kept, total = [], 0
            for b in in_active:
                if total + b.size > size - cut:
                    break
                total += b.size
                kept.append(b)
            self.batches = [b for b in self.batches if b.base_offset < active.base_offset] + kept
            self.end = kept[-1].next_offset if kept else active.base_offset
            self.start = min(self.start, self.end)
        elif how == "garbage":
            junk = data.draw(st.binary(min_size=1, max_size=200))
            with open(log_path, "ab") as f:
                f.write(junk)
        elif how == "drop-index":
            offset_index.unlink(missing_ok=True)
            time_index.unlink(missing_ok=True)
        elif how == "zero-index":
            for path in (offset_index, time_index):
                with open(path, "wb") as f:
                    f.write(b"\0" * 120)
        self.log = Log.open(
            self.directory,
            CONFIG,
            had_clean_shutdown=False,
            recovery_point=recovery_point,
            log_start_offset=self.start,
        )

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_end_offset == self.end, (self.log, self.end)
        assert self.log.log_start_offset == self.start
        got = [(r.offset, r.value) for r in read_all(self.log)]
        assert got == self.model_records()
        names = {p.name for p in self.directory.iterdir()}
        for segment in self.log.segments():
            assert files.segment_file_name(segment.base_offset, ".log") in names


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("ANNAL_MODEL_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogMachine = LogMachine.TestCase
