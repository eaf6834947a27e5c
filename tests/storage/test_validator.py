"""The leader's record-level validation (Kafka's LogValidator), with both walkers."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard
from annal.storage import walker
from annal.storage.batch import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    check_batch,
    iter_batches,
)
from annal.storage.config import LogConfig
from annal.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KeylessRecordError,
    RecordTooLargeError,
)
from annal.storage.log import Log
from annal.storage.records import Header, Record, decode_batch, encode_batch, iter_records
from annal.storage.validator import RecordValidator
from logutil import FakeClock, batch, read_all
from poison import poison_batches, resealed

NOW = 1_700_000_000_000
WALKS = [pytest.param(walker.walk_records_py, id="python")]
try:
    from annal.storage._walker import walk_records as compiled_walk

    WALKS.append(pytest.param(compiled_walk, id="c"))
except ImportError:  # pragma: no cover - test_compiled.py says why
    pass


def validate(
    data: bytes,
    walk: walker.Walk,
    *,
    now_ms: int = NOW,
    **config: object,
) -> tuple[bytes | bytearray | memoryview, object]:
    settings = LogConfig(**config)  # type: ignore[arg-type]
    header = check_batch(data, 0, len(data), settings.max_message_bytes)
    return RecordValidator(settings, walk).validate(data, [header], now_ms)


def good(n: int = 3, **kwargs: object) -> bytes:
    return encode_batch(
        [Record(i, NOW + i, b"k%d" % i, b"v%d" % i) for i in range(n)],
        **kwargs,  # type: ignore[arg-type]
    )


# -- the cases that were stored before ---------------------------------------------


@pytest.mark.parametrize("walk", WALKS)
def test_sound_batches_pass_unchanged(walk: walker.Walk) -> None:
    for codec in Compression:
        data = good(5, compression=codec)
        stored, _ = validate(data, walk)
        assert stored is data
    with_headers = encode_batch(
        [Record(0, NOW, None, None, (Header("h", None), Header("ключ", b"v")))]
    )
    assert validate(with_headers, walk)[0] is with_headers


@pytest.mark.parametrize("walk", WALKS)
def test_garbage_record_body_with_a_valid_crc_is_refused(walk: walker.Walk) -> None:
    data = resealed(good(), records=b"\xff" * 40)
    with pytest.raises(CorruptRecordError, match=r"record 0: a varint is too long .*byte 61"):
        validate(data, walk)


@pytest.mark.parametrize("walk", WALKS)
def test_negative_header_count_is_refused(walk: walker.Walk) -> None:
    plain = encode_batch([Record(0, NOW, b"k", b"v")])
    records = bytearray(plain[RECORD_BATCH_OVERHEAD:])
    assert records[-1] == 0  # header count 0 ...
    records[-1] = 0x03  # ... becomes -2
    with pytest.raises(CorruptRecordError, match="record 0: negative header count -2"):
        validate(resealed(plain, records=bytes(records)), walk)


@pytest.mark.parametrize("walk", WALKS)
def test_gzip_payload_that_does_not_inflate_is_refused(walk: walker.Walk) -> None:
    data = resealed(good(compression=Compression.GZIP), records=b"\x1f\x8b" + b"\x00" * 30)
    with pytest.raises(CorruptRecordError, match="gzip"):
        validate(data, walk)


@pytest.mark.parametrize("walk", WALKS)
def test_unknown_codec_is_refused(walk: walker.Walk) -> None:
    data = resealed(good(), attributes=7)
    with pytest.raises(CorruptRecordError, match="unknown compression codec 7"):
        validate(data, walk)


@pytest.mark.parametrize("walk", WALKS)
def test_tiny_zstd_batch_claiming_two_billion_records_is_refused(walk: walker.Walk) -> None:
    body = zstandard.ZstdCompressor().compress(good(1)[RECORD_BATCH_OVERHEAD:])
    data = resealed(
        good(1, compression=Compression.ZSTD),
        records=body,
        count=2**31 - 1,
        last_offset_delta=2**31 - 2,
    )
    assert len(data) < 100
    with pytest.raises(CorruptRecordError, match="record 1 of the 2147483647"):
        validate(data, walk)


@pytest.mark.parametrize("walk", WALKS)
def test_decompression_bomb_is_refused_not_expanded(walk: walker.Walk) -> None:
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\x00" * (64 << 20))
    data = resealed(good(compression=Compression.ZSTD), records=bomb)
    with pytest.raises(RecordTooLargeError, match="inflate past 1048588"):
        validate(data, walk)
    declared = zstandard.ZstdCompressor().compress(b"\x00" * (64 << 20))
    with pytest.raises(RecordTooLargeError, match="declare 67108864"):
        validate(resealed(data, records=declared), walk)


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"attributes": 0x20}, InvalidRecordError, "control batches"),
        ({"producer_id": 5, "base_sequence": -1}, InvalidRecordError, "without a sequence"),
        ({"attributes": 0x08}, InvalidTimestampError, "claims LogAppendTime"),
        ({"count": 2}, CorruptRecordError, "does not match lastOffsetDelta"),
    ],
)  # fmt: skip
def test_what_clients_may_not_send(
    walk: walker.Walk, change: dict[str, int], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as info:
        validate(resealed(good(), **change), walk)
    assert type(info.value) is error


@pytest.mark.parametrize("walk", WALKS)
def test_control_batches_are_refused_and_transactional_ones_pass(walk: walker.Walk) -> None:
    with pytest.raises(InvalidRecordError) as control:
        validate(resealed(good(), attributes=0x20), walk)
    assert control.value.code.name == "INVALID_RECORD"
    # a transactional batch is a client's to send (KIP-98), as in Kafka's LogValidator
    transactional = resealed(good(), attributes=0x10, producer_id=5, base_sequence=0)
    assert validate(transactional, walk)[0] == transactional


@pytest.mark.parametrize("walk", WALKS)
def test_offset_deltas_must_count_from_zero(walk: walker.Walk) -> None:
    gappy = encode_batch([Record(0, NOW, b"a", b"1"), Record(2, NOW, b"b", b"2")])
    data = resealed(gappy, count=2, last_offset_delta=1)
    with pytest.raises(CorruptRecordError, match="record 1: offset delta 2, expected 1"):
        validate(data, walk)


@pytest.mark.parametrize("walk", WALKS)
def test_record_length_that_disagrees_with_its_fields(walk: walker.Walk) -> None:
    plain = encode_batch([Record(0, NOW, b"k", b"value")])
    records = bytearray(plain[RECORD_BATCH_OVERHEAD:])
    records[0] -= 2  # length 12 -> 11: the header count falls outside the record
    with pytest.raises(CorruptRecordError, match="record 0: a varint runs past the end"):
        validate(resealed(plain, records=bytes(records) + b"\x00"), walk)
    records[0] += 4  # length 13: one byte more than the fields take
    with pytest.raises(
        CorruptRecordError, match="record 0: declares 13 bytes but its fields take 12"
    ):
        validate(resealed(plain, records=bytes(records) + b"\x00"), walk)
    extra = bytes(plain[RECORD_BATCH_OVERHEAD:]) + b"\x00\x00"
    with pytest.raises(CorruptRecordError, match="2 bytes left after the last record"):
        validate(resealed(plain, records=extra), walk)


@pytest.mark.parametrize("walk", WALKS)
def test_header_key_must_be_utf8(walk: walker.Walk) -> None:
    plain = encode_batch([Record(0, NOW, b"k", b"v", (Header("ab", b"x"),))])
    records = bytes(plain[RECORD_BATCH_OVERHEAD:]).replace(b"ab", b"\xc3\x28")
    with pytest.raises(CorruptRecordError, match="header 0 key is not UTF-8"):
        validate(resealed(plain, records=records), walk)


@pytest.mark.parametrize("walk", WALKS)
def test_compacted_topics_need_keys(walk: walker.Walk) -> None:
    data = encode_batch([Record(0, NOW, b"k", b"v"), Record(1, NOW, None, b"v")])
    with pytest.raises(KeylessRecordError, match="record 1: null key"):
        validate(data, walk, cleanup_policy=("compact",))
    for codec in (Compression.LZ4, Compression.SNAPPY):
        compressed = encode_batch([Record(0, NOW, None, b"v")], compression=codec)
        with pytest.raises(KeylessRecordError, match="inflated"):
            validate(compressed, walk, cleanup_policy=("compact",))


@pytest.mark.parametrize("walk", WALKS)
def test_timestamps_within_the_allowed_difference(walk: walker.Walk) -> None:
    hour = 3_600_000
    data = encode_batch([Record(0, NOW, b"k", b"v"), Record(1, NOW - 2 * hour, b"k", b"v")])
    assert validate(data, walk)[0] is data  # the default allows any difference
    with pytest.raises(InvalidTimestampError, match=r"record 1: timestamp \d+ is out of range"):
        validate(data, walk, message_timestamp_difference_max_ms=hour)
    future = encode_batch([Record(0, NOW + 2 * hour, b"k", b"v")])
    with pytest.raises(InvalidTimestampError, match="difference.max.ms 3600000"):
        validate(future, walk, message_timestamp_difference_max_ms=hour)
    assert validate(data, walk, message_timestamp_difference_max_ms=3 * hour)[0] is data
    # LogAppendTime topics overwrite the timestamps: nothing to check
    appended = validate(
        data,
        walk,
        message_timestamp_difference_max_ms=hour,
        message_timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    assert appended[0] is data


@pytest.mark.parametrize("walk", WALKS)
def test_wrong_max_timestamp_is_corrected_as_kafka_does(walk: walker.Walk) -> None:
    data = resealed(good(3), max_timestamp=NOW + 10_000)
    stored, headers = validate(data, walk)
    assert stored != data
    header = check_batch(stored, 0, len(stored))  # the CRC matches again
    assert header.max_timestamp == NOW + 2 == headers[0].max_timestamp  # type: ignore[index]
    assert [r.timestamp for r in decode_batch(stored)[1]] == [NOW, NOW + 1, NOW + 2]


@pytest.mark.parametrize("walk", WALKS)
def test_every_poison_batch_gets_its_kafka_error(walk: walker.Walk) -> None:
    for name, (data, code) in poison_batches(NOW).items():
        with pytest.raises(InvalidRecordError) as info:
            validate(data, walk)
        assert info.value.code.name == code, name


# -- in a log ---------------------------------------------------------------------


def open_log(directory: Path, **config: object) -> Log:
    return Log.open(directory, LogConfig(**config), time_ms=FakeClock(NOW))  # type: ignore[arg-type]


def test_refused_batch_leaves_the_log_unchanged(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch([b"a", b"b"], timestamp=NOW), 0)
    before = (log.log_end_offset, log.read(0, 1 << 20))
    poison = resealed(good(), records=b"\xff" * 40)
    for bad in (poison, batch([b"c"], timestamp=NOW) + poison):
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(bad, 0)
        assert (log.log_end_offset, log.read(0, 1 << 20)) == before
    log.append_as_leader(batch([b"c"], timestamp=NOW), 0)
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"c"]
    log.close()


def test_log_stores_the_corrected_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    info = log.append_as_leader(resealed(good(3), max_timestamp=NOW + 10_000), 0)
    assert info.max_timestamp == NOW + 2
    assert check_batch(log.read(0, 1 << 20), 0, log.size).max_timestamp == NOW + 2
    log.close()


def test_compacted_log_refuses_keyless_records_in_a_multi_batch_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy=("compact",))
    ok = batch([b"1"], [b"k"], timestamp=NOW)
    with pytest.raises(KeylessRecordError):
        log.append_as_leader(ok + batch([b"2"], [None], timestamp=NOW), 0)
    assert log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("source", list(Compression))
def test_compression_type_stores_every_batch_in_the_topics_codec(
    tmp_path: Path, source: Compression, target: str
) -> None:
    log = Log.open(
        tmp_path / f"t-{source.value}",
        LogConfig.from_properties({"compression.type": target}),
    )
    values = [b"value %d " % i * 20 for i in range(50)]
    records = [Record(i, 1_700_000_000_000 + i, None, v) for i, v in enumerate(values)]
    sent = encode_batch(
        records, compression=source, producer_id=7, producer_epoch=0, base_sequence=0
    )
    info = log.append_as_leader(sent + batch([b"second"], compression=source), 3)
    assert (info.first_offset, info.last_offset) == (0, 50)
    stored = b"".join(s.read_all() for s in log.segments())
    headers = list(iter_batches(stored))  # frames and CRCs check out
    codec = Compression.NONE if target == "uncompressed" else Compression[target.upper()]
    assert [h.attributes & 0x07 for h in headers] == [codec, codec]
    assert headers[0].producer_id == 7 and headers[0].partition_leader_epoch == 3
    assert [r.value for r in iter_records(stored)] == [*values, b"second"]
    log.close()


def test_compression_type_producer_keeps_what_came(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"compression.type": "producer"}))
    sent = batch([b"a" * 100], compression=Compression.GZIP)
    log.append_as_leader(sent, 0)
    assert log.segments()[0].read_all()[16:] == sent[16:]  # past offset, length, epoch
    log.close()


@pytest.mark.parametrize("bad", ["GZIP", "brotli", "", "none"])
def test_an_unknown_compression_type_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match=r"invalid value .* for log config 'compression.type'"):
        LogConfig.from_properties({"compression.type": bad})
