"""Checkpoint files, meta.properties and the log config parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from annal.storage.config import LogConfig
from annal.storage.epoch_types import EpochEntry
from annal.storage.errors import CheckpointError, LogDirError
from annal.storage.files import TopicPartition
from annal.storage.meta import MetaProperties, read_meta_properties, write_meta_properties


def test_offset_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    assert checkpoint.read() == {}
    offsets = {TopicPartition("orders", 1): 1498, TopicPartition("orders", 0): 1520}
    checkpoint.write(offsets)
    assert path.read_text() == "0\n2\norders 0 1520\norders 1 1498\n"
    assert checkpoint.read() == offsets
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\n0\n", "line 1: unknown version"),
        ("0\nx\n", "line 2: bad entry count"),
        ("0\n2\nt 0 5\n", "declares 2 entries but holds 1"),
        ("0\n1\nt zero 5\n", "line 3: malformed entry"),
        ("0\n1\nt 0\n", "line 3: malformed entry"),
        ("0\n", "truncated"),
    ],
)
def test_malformed_offset_checkpoints(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=message):
        OffsetCheckpointFile(path).read()


def test_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    checkpoint = LeaderEpochCheckpointFile(path)
    checkpoint.write([EpochEntry(0, 0), EpochEntry(3, 1210)])
    assert path.read_text() == "0\n2\n0 0\n3 1210\n"
    assert checkpoint.read() == [EpochEntry(0, 0), EpochEntry(3, 1210)]
    path.write_text("0\n1\n3\n")
    with pytest.raises(CheckpointError, match="line 3"):
        checkpoint.read()


def test_meta_properties(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    assert read_meta_properties(path) is None
    write_meta_properties(path, MetaProperties(0, 7, "lqc8FzZvRSC0wzRkXh6VjA"))
    assert "broker.id=7" in path.read_text()
    assert read_meta_properties(path) == MetaProperties(0, 7, "lqc8FzZvRSC0wzRkXh6VjA")
    path.write_text("version=0\nbroker.id=seven\n")
    with pytest.raises(LogDirError, match="meta.properties"):
        read_meta_properties(path)
    path.write_text("version=0\n")
    with pytest.raises(LogDirError, match="no broker.id"):
        read_meta_properties(path)
    path.write_text("garbage line\n")
    with pytest.raises(LogDirError, match="line 1"):
        read_meta_properties(path)


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
