"""When a leader-epoch entry becomes durable (docs/storage.md, "Leader epochs").

A new epoch is kept in memory; the log's flush writes and syncs it before the
recovery point passes it; a checkpoint torn by a machine crash is
rebuilt from the batches; and a process killed at any moment leaves a cache
that matches its log.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.deploy.runner import wait_until
from annal.storage import files
from annal.storage.batch import iter_batches
from annal.storage.config import LogConfig
from annal.storage.log import Log
from logutil import batch

pytestmark = pytest.mark.timeout(60)

CONFIG = LogConfig.from_properties({"segment.bytes": "2000", "index.interval.bytes": "100"})
EPOCHS = [(0, 0), (1, 20), (2, 40)]


def filled_log(directory: Path) -> Log:
    log = Log.open(directory, CONFIG)
    for i in range(30):
        log.append_as_leader(batch([bytes([i]) * 40, bytes([i]) * 40]), i // 10)
    return log


def entries(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the files fsynced while the test runs."""
    names: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        names.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    yield names


def test_a_new_epoch_is_written_and_fsynced_by_the_next_flush(
    tmp_path: Path, fsynced: list[str]
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    checkpoint = log.directory / files.LEADER_EPOCH_CHECKPOINT
    before = checkpoint.read_text() if checkpoint.exists() else None
    log.append_as_leader(batch([b"a"]), 3)
    log.append_as_leader(batch([b"b"]), 4)
    assert entries(log) == [(3, 0), (4, 1)]
    # no file work per new epoch: a process killed now recovers them from the batches
    assert (checkpoint.read_text() if checkpoint.exists() else None) == before
    assert fsynced == []  # an append alone fsyncs nothing

    log.flush()
    assert checkpoint.read_text() == "0\n2\n3 0\n4 1\n"
    assert fsynced.count(f"{files.LEADER_EPOCH_CHECKPOINT}.tmp") == 1
    assert "t-0" in fsynced  # its directory, for the rename
    fsynced.clear()
    log.flush()  # nothing new
    log.append_as_leader(batch([b"c"]), 4)  # the same epoch: no new entry
    log.flush()
    assert f"{files.LEADER_EPOCH_CHECKPOINT}.tmp" not in fsynced
    log.close()


def test_the_flush_writes_the_epochs_before_the_recovery_point_passes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader(batch([b"a", b"b"]), 7)
    seen: list[tuple[int, bool]] = []
    checkpoint = log.leader_epoch_cache._checkpoint
    real = checkpoint.write

    def write(entries: object, *, sync: bool = True) -> None:
        seen.append((log.recovery_point, sync))
        real(entries, sync=sync)  # type: ignore[arg-type]

    monkeypatch.setattr(checkpoint, "write", write)
    log.flush()
    assert seen == [(0, True)]  # written and fsynced while the recovery point stood below
    assert log.recovery_point == 2
    log.close()


def test_a_truncation_is_fsynced_at_once(tmp_path: Path, fsynced: list[str]) -> None:
    log = filled_log(tmp_path / "t-0")
    fsynced.clear()
    log.truncate_to(25)
    assert fsynced == [f"{files.LEADER_EPOCH_CHECKPOINT}.tmp", "t-0"]  # tmp, then the rename
    assert entries(log) == [(0, 0), (1, 20)]
    log.close()


@pytest.mark.parametrize(
    "torn",
    [b"", b"0\n", b"0\n3\n0 0\n1 2", b"0\n3\n0 0\n", b"\x00" * 12, b"\xff\xfe0\n", b"9\n1\n0 0\n"],
    ids=[
        "empty",
        "version only",
        "cut mid entry",
        "entries missing",
        "zeros",
        "not text",
        "version",
    ],
)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crashed"])
def test_a_torn_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, torn: bytes, clean: bool
) -> None:
    log = filled_log(tmp_path / "t-0")
    assert entries(log) == EPOCHS
    log.flush()
    end = log.log_end_offset
    log.close()
    (log.directory / files.LEADER_EPOCH_CHECKPOINT).write_bytes(torn)

    with caplog.at_level(logging.WARNING, logger="annal.storage.epoch_cache"):
        again = Log.open(log.directory, CONFIG, had_clean_shutdown=clean, recovery_point=end)
    assert entries(again) == EPOCHS
    assert again.log_end_offset == end
    assert "rebuilding the leader epochs from the log" in caplog.text
    assert str(log.directory / files.LEADER_EPOCH_CHECKPOINT) in caplog.text
    again.close()
    # the rebuilt cache was written back: the next start needs no rebuild
    assert (log.directory / files.LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n1 20\n2 40\n"


def test_an_unreadable_checkpoint_still_fails_the_load(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    log.close()
    checkpoint = log.directory / files.LEADER_EPOCH_CHECKPOINT
    checkpoint.unlink()
    checkpoint.mkdir()  # an I/O error, not a torn write: not guessed around
    with pytest.raises(Exception, match="cannot read checkpoint .*Is a directory"):
        Log.open(log.directory, CONFIG)


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from annal.storage.config import LogConfig
    from annal.storage.log import Log
    from logutil import batch

    config = LogConfig.from_properties({"segment.bytes": "4000", "index.interval.bytes": "100"})
    log = Log.open(Path(sys.argv[1]), config)
    print("ready", flush=True)
    epoch = (log.leader_epoch_cache.latest_epoch or 0) + 1
    i = 0
    while True:  # a new epoch every few batches, a flush now and then
        log.append_as_leader(batch([b"x" * 30, b"y" * 30]), epoch)
        i += 1
        if i % 3 == 0:
            epoch += 1
        if i % 7 == 0:
            log.flush()
    """
)


def logged_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def epochs_in_batches(directory: Path) -> list[tuple[int, int]]:
    """The (epoch, first offset) entries the batches on disk imply."""
    out: list[tuple[int, int]] = []
    for path in sorted(directory.glob("*.log")):
        for header in iter_batches(path.read_bytes()):
            if not out or header.partition_leader_epoch > out[-1][0]:
                out.append((header.partition_leader_epoch, header.base_offset))
    return out


def test_a_process_killed_while_epochs_begin_leaves_a_matching_cache(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    for run, grow in enumerate((3_000, 20_000)):  # twice: the second kill lands on a recovered log
        before = logged_bytes(directory)
        child = subprocess.Popen(
            [sys.executable, str(script), str(directory)], stdout=subprocess.PIPE, env=env
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        target = before + grow
        wait_until(lambda: logged_bytes(directory) > target, 20)  # noqa: B023 (called in this iteration)
        child.send_signal(signal.SIGKILL)
        child.wait(10)

        recovered = Log.open(directory, CONFIG)  # no clean shutdown, recovery point 0
        got = entries(recovered)
        recovered.close()
        assert len(got) > 2, f"run {run}: the writer began too few epochs"
        assert got == epochs_in_batches(directory), f"run {run}"
