"""``annal dump-log`` on real segment files, damaged copies of them and legacy message sets."""

from __future__ import annotations

import itertools
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from annal.storage.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    Compression,
    TimestampType,
    compute_crc,
)
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.records import Header, Record, encode_batch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from annal.cli import main

SEGMENT = "00000000000000000000.log"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BATCH_FIELDS = {
    "base_offset", "last_offset", "count", "position", "size", "crc_valid", "compression",
    "timestamp_type", "max_timestamp", "partition_leader_epoch", "producer_id",
    "producer_epoch", "base_sequence", "is_transactional", "is_control",
}  # fmt: skip


def _batches() -> list[bytes]:
    """Five batches, one per codec: headers, null key and value, binary and multi-line values."""
    return [
        encode_batch(
            [Record(0, 1000, b"key", b"hello", (Header("h", b"\xff\x00"), Header("n", None)))]
        ),
        encode_batch(
            [Record(0, 2000, None, None), Record(1, 2001, b"k", b"\xff\xfe")],
            compression=Compression.GZIP,
        ),
        encode_batch(
            [Record(0, 3000, "clé".encode(), b"line 1\nline 2")],
            compression=Compression.SNAPPY,
            producer_id=7,
            producer_epoch=2,
            base_sequence=0,
        ),
        encode_batch([Record(0, 4000, b"l", b"lz4")], compression=Compression.LZ4),
        encode_batch([Record(0, 5000, b"z", b"zstd")], compression=Compression.ZSTD),
    ]


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    """A real segment written by the log: offsets 0..5 in five batches, leader epochs 3 and 4."""
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"index.interval.bytes": "1"}))
    for n, batch in enumerate(_batches()):
        log.append_as_leader(batch, 3 if n < 2 else 4)
    log.close()
    return tmp_path / "t-0" / SEGMENT


def _dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def _json(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- v2 batches --------------------------------------------------------------


def test_text_batches(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _dump(capsys, str(segment))
    assert (code, err) == (0, "")
    assert out[0] == f"Dumping {segment}"
    assert out[1] == (
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false "
        f"isControl: false position: 0 CreateTime: 1000 size: {len(_batches()[0])} magic: 2 "
        f"compresscodec: none crc: {int.from_bytes(_batches()[0][17:21], 'big')} isvalid: true"
    )
    assert [line.split("compresscodec: ")[1].split()[0] for line in out[1:6]] == CODECS
    assert "baseOffset: 3 lastOffset: 3 count: 1 baseSequence: 0 lastSequence: 0" in out[3]
    assert "producerId: 7 producerEpoch: 2 partitionLeaderEpoch: 4" in out[3]
    assert not any(line.startswith("|") for line in out)
    assert out[-1] == "5 batches"


def test_text_records(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _dump(capsys, "--deep-iteration", str(segment))
    assert code == 0
    records = [line for line in out if line.startswith("|")]
    assert records[0] == (
        "| offset: 0 CreateTime: 1000 keySize: 3 valueSize: 5 sequence: -1 headerKeys: [h, n]"
    )
    assert records[1].startswith("| offset: 1 CreateTime: 2000 keySize: -1 valueSize: -1 ")
    assert "sequence: 0 " in records[3]
    assert not any("payload:" in line for line in records)

    code, out, _ = _dump(capsys, "--print-data-log", str(segment))
    assert code == 0
    records = [line for line in out if line.startswith("|")]
    assert len(records) == 6
    assert records[0].endswith("key: key payload: hello headers: [h=base64:/wA=, n=null]")
    assert records[1].endswith("key: null payload: null")
    assert records[2].endswith("key: k payload: base64://4=")
    assert records[3].endswith("key: clé payload: line 1\\nline 2")  # still one line


def test_json_batches(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _dump(capsys, "--json", str(segment))
    assert (code, err) == (0, "")
    batches = _json(out)
    assert all(set(b) == BATCH_FIELDS for b in batches)
    assert [b["compression"] for b in batches] == CODECS
    assert [(b["base_offset"], b["last_offset"], b["count"]) for b in batches] == [
        (0, 0, 1), (1, 2, 2), (3, 3, 1), (4, 4, 1), (5, 5, 1)
    ]  # fmt: skip
    assert [b["partition_leader_epoch"] for b in batches] == [3, 3, 4, 4, 4]
    assert [b["max_timestamp"] for b in batches] == [1000, 2001, 3000, 4000, 5000]
    assert batches[2] | {"position": 0, "size": 0} == {
        "base_offset": 3, "last_offset": 3, "count": 1, "position": 0, "size": 0,
        "crc_valid": True, "compression": "snappy", "timestamp_type": "CreateTime",
        "max_timestamp": 3000, "partition_leader_epoch": 4, "producer_id": 7,
        "producer_epoch": 2, "base_sequence": 0, "is_transactional": False, "is_control": False,
    }  # fmt: skip
    # Batches sit back to back and fill the file.
    assert batches[0]["position"] == 0
    for before, after in itertools.pairwise(batches):
        assert after["position"] == before["position"] + before["size"]
    assert batches[-1]["position"] + batches[-1]["size"] == segment.stat().st_size


def test_json_records(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _dump(capsys, "--json", "--print-data-log", str(segment))
    assert code == 0
    batches = _json(out)
    assert all(set(b) == BATCH_FIELDS | {"records"} for b in batches)
    assert [r for b in batches for r in b["records"]] == [
        {"offset": 0, "timestamp": 1000, "key": "key", "value": "hello",
         "headers": [{"key": "h", "value": {"base64": "/wA="}}, {"key": "n", "value": None}]},
        {"offset": 1, "timestamp": 2000, "key": None, "value": None, "headers": []},
        {"offset": 2, "timestamp": 2001, "key": "k", "value": {"base64": "//4="}, "headers": []},
        {"offset": 3, "timestamp": 3000, "key": "clé", "value": "line 1\nline 2", "headers": []},
        {"offset": 4, "timestamp": 4000, "key": "l", "value": "lz4", "headers": []},
        {"offset": 5, "timestamp": 5000, "key": "z", "value": "zstd", "headers": []},
    ]  # fmt: skip
    # In JSON, --deep-iteration alone gives the same records: null must mean null.
    assert _dump(capsys, "--json", "--deep-iteration", str(segment))[1] == out


def test_transactional_control_and_log_append_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = (
        encode_batch(
            [Record(0, 10, b"a", b"1"), Record(1, 11, b"b", b"2")],
            producer_id=9,
            producer_epoch=1,
            base_sequence=2147483647,
            is_transactional=True,
            partition_leader_epoch=5,
        )
        + encode_batch(
            [Record(2, 12, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")],
            base_offset=2,
            producer_id=9,
            producer_epoch=1,
            is_transactional=True,
            is_control=True,
            partition_leader_epoch=5,
        )
        + encode_batch(
            [Record(3, 20, b"c", b"3"), Record(4, 30, b"d", b"4")],
            base_offset=3,
            max_timestamp=99,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
        )
    )
    path = _write(tmp_path / SEGMENT, data)
    code, out, _ = _dump(capsys, "--json", "--deep-iteration", str(path))
    assert code == 0
    first, control, appended = _json(out)
    assert (first["is_transactional"], first["is_control"], first["producer_id"]) == (
        True, False, 9
    )  # fmt: skip
    assert (control["is_transactional"], control["is_control"]) == (True, True)
    assert control["records"][0]["key"] == "\x00\x00\x00\x01"  # valid UTF-8, so text
    assert appended["timestamp_type"] == "LogAppendTime" and appended["max_timestamp"] == 99
    assert [r["timestamp"] for r in appended["records"]] == [99, 99]

    code, out, _ = _dump(capsys, "--deep-iteration", str(path))
    assert "isTransactional: true isControl: false" in out[1]
    assert "baseSequence: 2147483647 lastSequence: 0" in out[1]  # sequences wrap to 0
    assert "sequence: 0 " in out[3]
    assert "isTransactional: true isControl: true" in out[4]
    assert "LogAppendTime: 99" in out[6] and out[7].startswith("| offset: 3 LogAppendTime: 99")


# -- producer snapshots --------------------------------------------------------


def test_producer_snapshots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    records = [Record(i, 1000 + i, None, b"v") for i in range(3)]
    log.append_as_leader(
        encode_batch(records, producer_id=7, producer_epoch=2, base_sequence=0), 0
    )
    log.append_as_leader(encode_batch(records), 0)
    log.take_producer_snapshot()
    log.close()
    snapshot = tmp_path / "t-0" / "00000000000000000006.snapshot"
    code, out, _ = _dump(capsys, str(snapshot))
    assert code == 0
    assert out == [
        f"Dumping {snapshot}",
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: None "
        "lastTimestamp: 1002 firstSequence: 0 lastSequence: 2 lastOffset: 2 offsetDelta: 2 "
        "timestamp: 1002",
    ]
    code, out, _ = _dump(capsys, "--json", str(snapshot))
    assert _json(out)[0]["producer_id"] == 7 and _json(out)[0]["last_sequence"] == 2
    broken = _write(tmp_path / "copy" / snapshot.name, snapshot.read_bytes()[:-1] + b"x")
    code, out, err = _dump(capsys, str(broken))
    assert code == 1 and "CRC mismatch" in err


# -- indexes -------------------------------------------------------------------


def test_indexes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"index.interval.bytes": "1"}))
    batches = _batches()
    for batch in batches[:2]:
        log.append_as_leader(batch, 0)
    log.roll()
    for batch in batches[2:]:
        log.append_as_leader(batch, 0)
    log.close()
    second = tmp_path / "t-0" / "00000000000000000003"
    index, timeindex = second.with_suffix(".index"), second.with_suffix(".timeindex")

    code, out, _ = _dump(capsys, str(index), str(timeindex))
    assert code == 0
    size3, size4 = len(batches[2]), len(batches[3])
    assert out == [
        f"Dumping {index}",
        f"offset: 4 position: {size3}",
        f"offset: 5 position: {size3 + size4}",
        "2 entries",
        f"Dumping {timeindex}",
        "timestamp: 3000 offset: 3",
        "timestamp: 4000 offset: 4",
        "timestamp: 5000 offset: 5",
        "3 entries",
    ]
    code, out, _ = _dump(capsys, "--json", str(index), str(timeindex))
    assert _json(out) == [
        {"offset": 4, "position": size3},
        {"offset": 5, "position": size3 + size4},
        {"timestamp": 3000, "offset": 3},
        {"timestamp": 4000, "offset": 4},
        {"timestamp": 5000, "offset": 5},
    ]

    # An active segment's indexes are preallocated: the zeros are not entries.
    padded = tmp_path / "copy" / index.name
    _write(padded, index.read_bytes() + bytes(8 * 100))
    padded_time = _write(padded.with_suffix(".timeindex"), timeindex.read_bytes() + bytes(1200))
    code, out, _ = _dump(capsys, str(padded), str(padded_time))
    assert code == 0 and out.count("2 entries") == 1 and out.count("3 entries") == 1


# -- damaged files -----------------------------------------------------------


def test_corrupt_batch_prints_what_is_valid_then_fails(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(segment.read_bytes())
    first_size = len(_batches()[0])
    data[first_size + 40] ^= 0xFF  # inside the second batch's header, covered by the CRC
    broken = _write(tmp_path / "broken" / SEGMENT, bytes(data))

    code, out, err = _dump(capsys, "--deep-iteration", str(broken))
    assert code == 1
    assert out[1].startswith("baseOffset: 0 ") and out[2].startswith("| offset: 0 ")
    assert not any("baseOffset: 1 " in line for line in out)
    assert out[-1] == "1 batch before the corruption"
    assert f"{broken}: corrupt batch at position {first_size}: CRC mismatch" in err

    code, out, err = _dump(capsys, "--json", str(broken))
    assert code == 1
    assert [b["base_offset"] for b in _json(out[:-1])] == [0]
    error = json.loads(out[-1])
    assert error["position"] == first_size and "CRC mismatch" in error["error"]
    assert "CRC mismatch" in err


@pytest.mark.parametrize("cut", [10, 40, -1])
def test_truncated_file(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int
) -> None:
    data = segment.read_bytes()
    last = len(data) - len(_batches()[-1])
    path = _write(tmp_path / "cut" / SEGMENT, data[: last + cut] if cut > 0 else data[:cut])
    code, out, err = _dump(capsys, str(path))
    assert code == 1
    assert out[-2].startswith("baseOffset: 4 ") and out[-1] == "4 batches before the corruption"
    assert f"corrupt batch at position {last}: truncated entry" in err


def test_damage_that_passes_the_length_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = encode_batch([Record(0, 1, b"k", b"v")])

    def with_crc(batch: bytearray) -> bytes:
        struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
        return bytes(batch)

    unknown_codec = bytearray(good)
    unknown_codec[ATTRIBUTES_OFFSET + 1] |= 0x06  # codec 6, with a matching CRC
    path = _write(tmp_path / "codec" / SEGMENT, good + with_crc(unknown_codec))
    code, _, err = _dump(capsys, str(path))
    assert code == 1 and f"position {len(good)}: unknown compression codec 6" in err

    path = _write(tmp_path / "magic" / SEGMENT, good + good[:16] + b"\x07" + good[17:])
    code, _, err = _dump(capsys, str(path))
    assert code == 1 and f"position {len(good)}: unknown magic 7" in err

    # A valid CRC over records that do not parse: only deep iteration notices.
    bad_records = bytearray(good)
    bad_records[-1] = 0x7F  # header count varint: -64
    path = _write(tmp_path / "records" / SEGMENT, good + with_crc(bad_records))
    assert _dump(capsys, str(path))[0] == 0
    code, out, err = _dump(capsys, "--json", "--deep-iteration", str(path))
    assert code == 1 and len(out) == 2 and json.loads(out[1])["position"] == len(good)
    assert f"corrupt batch at position {len(good)}" in err


def test_zero_filled_tail(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = segment.read_bytes()
    path = _write(tmp_path / "zeros" / SEGMENT, data + bytes(5000))
    code, out, _ = _dump(capsys, str(path))
    assert code == 0
    assert out[-2:] == [f"zero-filled tail: 5000 zero bytes from position {len(data)}, not data",
                        "5 batches"]  # fmt: skip
    code, out, err = _dump(capsys, "--json", str(path))
    assert code == 0 and len(_json(out)) == 5 and "5000 zero bytes" in err

    path = _write(tmp_path / "gap" / SEGMENT, data + bytes(100) + b"garbage")
    code, out, err = _dump(capsys, str(path))
    assert code == 1 and out[-1] == "5 batches before the corruption"
    assert f"position {len(data)}: 100 zero bytes, then data at position {len(data) + 100}" in err


def test_missing_and_unknown_files_do_not_stop_the_others(
    segment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = _write(tmp_path / "notes.txt", b"x")
    missing = tmp_path / "missing.log"
    code, out, err = _dump(capsys, str(missing), str(notes), str(tmp_path), str(segment))
    assert code == 1
    assert out[0] == f"Dumping {segment}" and out[-1] == "5 batches"
    assert err.splitlines() == [
        f"annal dump-log: {missing}: no such file",
        f"annal dump-log: {notes}: unknown file kind "
        "(expected .log, .index, .timeindex, .txnindex or .snapshot)",
        f"annal dump-log: {tmp_path}: not a regular file",
    ]
    assert _dump(capsys, str(segment))[0] == 0


# -- legacy message sets -------------------------------------------------------


def _legacy(magic: int, compression: int, records: list[tuple[int, bytes, bytes]]) -> bytes:
    """A message set as a pre-0.11 broker stored it.

    A v1 compressed wrapper holds relative inner offsets (0..n-1) and the
    absolute offset of its last record; the builder writes a producer's
    wrapper (offset 0), so the offset is patched in (it is not under the CRC).
    """
    builder = LegacyRecordBatchBuilder(
        magic=magic, compression_type=compression, batch_size=1 << 20
    )
    for n, (offset, key, value) in enumerate(records):
        relative = magic == 1 and compression != 0
        builder.append(n if relative else offset, 1000 + offset if magic else None, key, value)
    data = bytearray(builder.build())
    if magic == 1 and compression != 0:
        struct.pack_into(">q", data, 0, records[-1][0])
    return bytes(data)


def test_legacy_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v0 = _legacy(0, 0, [(0, b"k0", b"v0")])
    wrapper = _legacy(1, 1, [(1, b"k1", b"v1"), (2, b"k2", b"\xff")])  # gzip: one wrapper
    upgraded = encode_batch([Record(3, 5000, b"k3", b"v3")], base_offset=3)
    path = _write(tmp_path / SEGMENT, v0 + wrapper + upgraded)

    code, out, _ = _dump(capsys, "--print-data-log", str(path))
    assert code == 0
    assert out[1].startswith(f"offset: 0 position: 0 size: {len(v0)} magic: 0 ")
    assert out[1].endswith("note: legacy message (magic 0)")
    assert out[2].startswith("| offset: 0 CreateTime: -1 ") and out[2].endswith("payload: v0")
    assert out[3].startswith(f"offset: 2 position: {len(v0)} size: {len(wrapper)} magic: 1 ")
    assert "compresscodec: gzip" in out[3] and "count: 2" in out[3]
    assert out[4].startswith("| offset: 1 CreateTime: 1001 ")
    assert out[5].endswith("key: k2 payload: base64:/w==")
    assert out[6].startswith("baseOffset: 3 lastOffset: 3 count: 1 ")
    assert out[-1] == "1 batch, 2 legacy messages"

    code, out, _ = _dump(capsys, "--json", "--deep-iteration", str(path))
    assert code == 0
    first, second, third = _json(out)
    assert set(first) == BATCH_FIELDS | {"magic", "note", "records"}
    assert (first["magic"], second["magic"], second["compression"]) == (0, 1, "gzip")
    assert (second["base_offset"], second["last_offset"], second["count"]) == (1, 2, 2)
    assert second["position"] == len(v0) and third["position"] == len(v0) + len(wrapper)
    assert second["records"][1] == {
        "offset": 2, "timestamp": 1002, "key": "k2", "value": {"base64": "/w=="}, "headers": []
    }  # fmt: skip
    assert set(third) == BATCH_FIELDS | {"records"}


def test_corrupt_legacy_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _legacy(1, 0, [(0, b"k", b"v")])
    second = bytearray(_legacy(1, 0, [(1, b"k", b"v")]))
    second[-1] ^= 0xFF
    path = _write(tmp_path / SEGMENT, first + bytes(second))
    code, out, err = _dump(capsys, str(path))
    assert code == 1
    assert out[1].startswith("offset: 0 position: 0 ") and out[-1].endswith("before the corruption")
    assert f"corrupt batch at position {len(first)}: legacy message CRC mismatch" in err


# -- command line ----------------------------------------------------------------


def test_bad_arguments_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["dump-log"], ["dump-log", "--no-such-flag", "x.log"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err
    result = subprocess.run(
        [str(Path(sys.executable).parent / "annal"), "dump-log", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "--deep-iteration" in result.stdout and "--print-data-log" in result.stdout


# -- Kafka's spellings, the offsets decoder, index checks ------------------------


def test_files_takes_kafkas_comma_separated_list(
    segment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _dump(capsys, "--files", f"{segment},{segment}")
    assert code == 0 and out.count(f"Dumping {segment}") == 2


def test_offsets_decoder_prints_commits_and_group_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from annal.broker.groups.offsets_schema import (
        GroupMetadataValue,
        MemberMetadata,
        OffsetKey,
        OffsetValue,
        encode_group_key,
        encode_group_value,
        encode_key,
        encode_value,
    )

    assignment = struct.pack(">hi", 0, 1) + struct.pack(">h", 6) + b"orders" + struct.pack(
        ">iiii", 2, 0, 3, -1
    )  # consumer protocol v0: [orders: 0, 3], no user data
    member = MemberMetadata("m-1", None, "c", "/127.0.0.1", 300_000, 10_000, b"", assignment)
    group = GroupMetadataValue("consumer", 4, "range", "m-1", 0, (member,))
    key3, key0 = encode_key(OffsetKey("g", "orders", 3)), encode_key(OffsetKey("g", "orders", 0))
    records = [
        Record(0, 1, key3, encode_value(OffsetValue(42))),
        Record(1, 1, key0, encode_value(OffsetValue(7, -1, "m"))),
        Record(2, 1, key0, None),
        Record(3, 1, encode_group_key("g"), encode_group_value(group)),
        Record(4, 1, b"\x00\x09junk", b"x"),
    ]
    path = _write(tmp_path / "__consumer_offsets-0" / SEGMENT, encode_batch(records))
    code, out, _ = _dump(capsys, "--offsets-decoder", str(path))
    assert code == 0
    shown = [line.split(" key: ", 1)[1] for line in out if line.startswith("| offset:")]
    assert shown[:3] == [
        "offset_commit::group=g,partition=orders-3 payload: offset=42",
        "offset_commit::group=g,partition=orders-0 payload: offset=7,metadata=m",
        "offset_commit::group=g,partition=orders-0 payload: <DELETE>",
    ]
    assert shown[3] == (
        'group_metadata::group=g payload: {"protocolType":"consumer","protocol":"range",'
        '"generationId":4,"assignment":"{m-1=[orders-0, orders-3]}"}'
    )
    assert shown[4].startswith("<a key of neither kind")
    code, out, _ = _dump(capsys, "--offsets-decoder", "--json", str(path))
    decoded = _json(out)[0]["records"]
    assert decoded[0]["key"] == "offset_commit::group=g,partition=orders-3"
    assert decoded[0]["value"] == "offset=42"


def test_transaction_log_decoder_prints_each_transactional_ids_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from annal.broker.transactions.log_schema import (
        TxnLogValue,
        TxnState,
        encode_key,
        encode_value,
    )

    from annal.topic_partition import TopicPartition

    ongoing = TxnLogValue(
        7, 2, 60_000, TxnState.ONGOING,
        frozenset({TopicPartition("orders", 1), TopicPartition("orders", 0)}), 1000, 900,
    )  # fmt: skip
    records = [
        Record(0, 1, encode_key("tx"), encode_value(ongoing)),
        Record(1, 1, encode_key("tx"), None),
        Record(2, 1, b"\x00\x09junk", b"x"),
    ]
    path = _write(tmp_path / "__transaction_state-0" / SEGMENT, encode_batch(records))
    code, out, _ = _dump(capsys, "--transaction-log-decoder", str(path))
    assert code == 0
    shown = [line.split(" key: ", 1)[1] for line in out if line.startswith("| offset:")]
    assert shown[0] == (
        "transaction_metadata::transactionalId=tx payload: producerId:7,producerEpoch:2,"
        "state=Ongoing,partitions=[orders-0,orders-1],txnLastUpdateTimestamp=1000,"
        "txnTimeoutMs=60000"
    )
    assert shown[1] == "transaction_metadata::transactionalId=tx payload: <DELETE>"
    assert shown[2].startswith("<undecodable: transaction log key")
    code, out, _ = _dump(capsys, "--transaction-log-decoder", "--json", str(path))
    assert _json(out)[0]["records"][1]["value"] == "<DELETE>"
    with pytest.raises(SystemExit):
        main(["dump-log", "--offsets-decoder", "--transaction-log-decoder", str(path)])
    assert "read different topics" in capsys.readouterr().err


def test_index_checks_find_random_bytes_and_mismatches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"index.interval.bytes": "1"}))
    for batch in _batches():
        log.append_as_leader(batch, 0)
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    timeindex = index.with_suffix(".timeindex")
    code, out, err = _dump(capsys, "--index-sanity-check", str(index), str(timeindex))
    assert code == 0, err
    assert out == [f"Dumping {index}", f"{index} passed sanity check.",
                   f"Dumping {timeindex}", f"{timeindex} passed sanity check."]  # fmt: skip

    # 100 random bytes: printed as read, then refused with the reasons
    noise = _write(tmp_path / "noise" / "00000000000000000000.index", bytes(range(7, 107)))
    code, out, err = _dump(capsys, str(noise))
    assert code == 1
    assert "the index cannot be trusted" in err and "not a whole number of 8-byte" in err

    # entries that point into the middle of batches: Kafka's mismatches
    entries = index.read_bytes()
    relative, position = struct.unpack_from(">ii", entries, 8)
    index.write_bytes(entries[:8] + struct.pack(">ii", relative + 1, position) + entries[16:])
    code, out, err = _dump(capsys, "--verify-index-only", str(index))
    assert code == 1 and out == [f"Dumping {index}"]
    assert f"Index offset: {relative + 1}, log offset: {relative}" in err
