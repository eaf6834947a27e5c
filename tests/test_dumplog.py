"""``annal dump-log`` on real segment files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from annal.storage.batch import Compression
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.records import Header, Record, encode_batch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from annal.cli import main


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"index.interval.bytes": "1"}))
    log.append_as_leader(
        encode_batch([Record(0, 1000, b"key", b"hello", (Header("h", b"\xff\x00"),))]), 3
    )
    log.append_as_leader(
        encode_batch(
            [Record(0, 2000, None, None), Record(1, 2001, b"k", b"\xff\xfe")],
            compression=Compression.GZIP,
        ),
        3,
    )
    log.append_as_leader(
        encode_batch([Record(0, 3000, b"z", b"zstd")], compression=Compression.ZSTD), 4
    )
    log.close()
    return tmp_path / "t-0" / "00000000000000000000.log"


def test_text_output(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log", "--print-data-log", str(segment)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Dumping {segment}"
    assert out[1].startswith("baseOffset: 0 lastOffset: 0 count: 1")
    assert "partitionLeaderEpoch: 3" in out[1] and "isvalid: true" in out[1]
    assert "| offset: 0 timestamp: 1000 keySize: 3 valueSize: 5" in out[2]
    assert "key: key payload: hello" in out[2]
    assert "compresscodec: gzip" in out[3]
    assert "key: null payload: null" in out[4]
    assert "payload: base64://4=" in out[5]
    assert out[-1] == "3 batches"


def test_json_output(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log", "--json", "--deep-iteration", "--print-data-log", str(segment)]) == 0
    batches = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [b["base_offset"] for b in batches] == [0, 1, 3]
    first = batches[0]
    assert set(first) == {
        "base_offset", "last_offset", "count", "position", "size", "crc_valid", "compression",
        "timestamp_type", "max_timestamp", "partition_leader_epoch", "producer_id",
        "producer_epoch", "base_sequence", "is_transactional", "is_control", "records",
    }  # fmt: skip
    assert first["records"] == [
        {"offset": 0, "timestamp": 1000, "key": "key", "value": "hello",
         "headers": [{"key": "h", "value": {"base64": "/wA="}}]}
    ]  # fmt: skip
    assert batches[1]["compression"] == "gzip" and batches[2]["compression"] == "zstd"
    assert batches[1]["records"][0]["key"] is None
    assert batches[1]["records"][1]["value"] == {"base64": "//4="}


def test_indexes(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = segment.with_suffix(".index")
    timeindex = segment.with_suffix(".timeindex")
    assert main(["dump-log", str(index), str(timeindex)]) == 0
    out = capsys.readouterr().out
    assert "offset: 2 position: " in out and "timestamp: 2001 offset: 2" in out
    assert main(["dump-log", "--json", str(timeindex)]) == 0
    assert {"timestamp": 2001, "offset": 2} in [
        json.loads(line) for line in capsys.readouterr().out.splitlines()
    ]


def test_corrupt_file_prints_what_is_valid_then_fails(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(segment.read_bytes())
    first_size = int.from_bytes(data[8:12], "big") + 12
    data[first_size + 30] ^= 0xFF
    broken = tmp_path / "00000000000000000000.log"
    broken.write_bytes(bytes(data))
    assert main(["dump-log", str(broken)]) == 1
    captured = capsys.readouterr()
    assert "baseOffset: 0" in captured.out and "baseOffset: 1" not in captured.out
    assert f"corrupt batch at position {first_size}: CRC mismatch" in captured.err
    assert main(["dump-log", "--json", str(broken)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[-1])["position"] == first_size


def test_truncated_and_missing_files(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.log"
    cut.write_bytes(segment.read_bytes()[:-4])
    assert main(["dump-log", str(cut), str(tmp_path / "missing.log")]) == 1
    err = capsys.readouterr().err
    assert "truncated batch" in err and "missing.log: no such file" in err
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert main(["dump-log", str(other)]) == 1
    assert "unknown file kind" in capsys.readouterr().err


def test_legacy_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, 5, b"k", b"v")
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(builder.build()))
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert "magic: 1" in out and "key: k payload: v" in out


def test_bad_arguments_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dump-log"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["dump-log", "--no-such-flag", "x.log"])
    assert exit_info.value.code == 2
    result = subprocess.run(
        [str(Path(sys.executable).parent / "annal"), "dump-log", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--deep-iteration" in result.stdout and "--print-data-log" in result.stdout
