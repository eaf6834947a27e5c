"""Checkpoint files (offsets per partition, leader epochs) and the log config parser."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from annal.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from annal.storage.config import LogConfig
from annal.storage.epoch_types import EpochEntry
from annal.storage.errors import CheckpointError, MalformedCheckpointError
from annal.storage.files import TopicPartition


def test_offset_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    assert checkpoint.read() == {}
    offsets = {TopicPartition("orders", 1): 1498, TopicPartition("orders", 0): 1520}
    checkpoint.write(offsets)
    assert path.read_text() == "0\n2\norders 0 1520\norders 1 1498\n"
    assert checkpoint.read() == offsets
    assert not list(tmp_path.glob("*.tmp"))
    checkpoint.write({})
    assert path.read_text() == "0\n0\n"
    assert checkpoint.read() == {}


def test_offset_checkpoint_reads_a_file_written_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n3\n__consumer_offsets 17 0\nmy.topic-x 0 12\n\nt 2 9\n")
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("__consumer_offsets", 17): 0,
        TopicPartition("my.topic-x", 0): 12,
        TopicPartition("t", 2): 9,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: missing version line"),
        ("1\n0\n", "line 1: unknown version '1'"),
        ("0\n", "line 2: missing entry count"),
        ("0\nx\n", "line 2: bad entry count 'x'"),
        ("0\n-1\n", "line 2: negative entry count -1"),
        ("0\n2\nt 0 5\n", "line 2: declares 2 entries but the file holds 1"),
        ("0\n1\nt 0 5\nt 1 6\n", "line 2: declares 1 entries but the file holds 2"),
        ("0\n1\nt zero 5\n", "line 3: malformed entry 't zero 5' .partition 'zero'"),
        ("0\n1\nt 0 five\n", "line 3: malformed entry .*offset 'five'"),
        ("0\n1\nt 0\n", "line 3: malformed entry 't 0' .expected 'topic partition offset'"),
        ("0\n2\nt 0 1\n\nt 1 2 3\n", "line 5: malformed entry 't 1 2 3'"),
    ],
)
def test_malformed_offset_checkpoints(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=rf"checkpoint .*cleaner-offset-checkpoint {message}"):
        OffsetCheckpointFile(path).read()


def test_unreadable_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(b"0\n1\n\xff\xfe 0 1\n")
    with pytest.raises(MalformedCheckpointError, match="log-start-offset-checkpoint: not text"):
        OffsetCheckpointFile(path).read()
    path.unlink()
    path.mkdir()  # read, but not a file
    with pytest.raises(CheckpointError, match="cannot read checkpoint") as info:
        OffsetCheckpointFile(path).read()
    assert not isinstance(info.value, MalformedCheckpointError)


def test_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    checkpoint = LeaderEpochCheckpointFile(path)
    assert checkpoint.read() == []
    checkpoint.write([EpochEntry(0, 0), EpochEntry(3, 1210)])
    assert path.read_text() == "0\n2\n0 0\n3 1210\n"
    assert checkpoint.read() == [EpochEntry(0, 0), EpochEntry(3, 1210)]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2\n0\n", "line 1: unknown version"),
        ("0\n2\n0 0\n", "line 2: declares 2 entries but the file holds 1"),
        ("0\n1\n3\n", "line 3: malformed entry '3' .expected 'epoch start_offset'"),
        ("0\n1\n3 x\n", "line 3: malformed entry '3 x' .start offset 'x'"),
    ],
)
def test_malformed_leader_epoch_checkpoints(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=rf"checkpoint .*leader-epoch-checkpoint {message}"):
        LeaderEpochCheckpointFile(path).read()


def test_concurrent_writes_and_reads_never_see_a_mix(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    mappings = [{TopicPartition("t", p): n for p in range(n % 5 + 1)} for n in range(40)]
    seen: list[dict[TopicPartition, int]] = []
    errors: list[Exception] = []

    def writer(chunk: list[dict[TopicPartition, int]]) -> None:
        try:
            for mapping in chunk:
                checkpoint.write(mapping)
                seen.append(checkpoint.read())
        except Exception as exc:  # reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(mappings[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not errors
    assert all(mapping in mappings for mapping in seen) and len(seen) == 40


def test_log_config_parsing() -> None:
    config = LogConfig.from_properties(
        {"segment.bytes": "1024", "cleanup.policy": "compact,delete", "retention.ms": "-1"}
    )
    assert config.segment_bytes == 1024 and config.compact and config.delete
    assert config.retention_ms == -1
    assert LogConfig.from_properties(config.to_properties()) == config
    with pytest.raises(ValueError, match="unknown log config 'segment.byte'"):
        LogConfig.from_properties({"segment.byte": "1"})
    with pytest.raises(ValueError, match="invalid value 'big' for log config 'segment.bytes'"):
        LogConfig.from_properties({"segment.bytes": "big"})
    with pytest.raises(ValueError, match="cleanup.policy"):
        LogConfig.from_properties({"cleanup.policy": "shred"})
    with pytest.raises(ValueError, match="min.cleanable.dirty.ratio"):
        LogConfig.from_properties({"min.cleanable.dirty.ratio": "1.5"})


def test_log_config_errors_say_what_was_expected() -> None:
    """No Python wording leaks (``invalid literal for int()``); near misses of a name
    get a suggestion, as a user of kafka-configs.sh would want."""
    wrong = {
        "retention.mss": "unknown log config 'retention.mss'; did you mean 'retention.ms'?",
        "retention.ms": "'abc' for log config 'retention.ms': expected a whole number",
        "min.cleanable.dirty.ratio": "expected a ratio between 0 and 1",
        "message.format.version": "expected a Kafka version",
    }
    for name, message in wrong.items():
        with pytest.raises(ValueError) as refused:
            LogConfig.from_properties({name: "abc" if name != "retention.mss" else "1"})
        assert message in str(refused.value) and "literal" not in str(refused.value)
    with pytest.raises(ValueError) as unknown:
        LogConfig.from_properties({"colour": "blue"})
    assert "did you mean" not in str(unknown.value)
