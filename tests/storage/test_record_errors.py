"""Refusals that name their records (KIP-467), with both walkers: a batch refused
for what some of its records hold (null keys on a compacted topic, timestamps out
of range, a client's LogAppendTime claim) raises one error whose
``record_errors`` lists every such record by its index in the batch, as Kafka's
LogValidator reports them; the batch is still refused whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.storage import walker
from annal.storage.batch import RECORD_BATCH_OVERHEAD, Compression, check_batch
from annal.storage.config import LogConfig
from annal.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KeylessRecordError,
    RecordError,
)
from annal.storage.log import Log
from annal.storage.records import Header, Record, encode_batch
from annal.storage.validator import NULL_KEY_MESSAGE, RecordValidator
from logutil import FakeClock
from poison import resealed

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000_000
HOUR = 3_600_000
COMPACT = {"cleanup_policy": ("compact",)}
WALKS = [pytest.param(walker.walk_records_py, id="python")]
try:
    from annal.storage._walker import walk_records as compiled_walk

    WALKS.append(pytest.param(compiled_walk, id="c"))
except ImportError:  # pragma: no cover - test_compiled.py says why
    pass


def refusal(data: bytes, walk: walker.Walk, **config: object) -> InvalidRecordError:
    """The error the validator refuses the single batch ``data`` with."""
    settings = LogConfig(**config)  # type: ignore[arg-type]
    header = check_batch(data, 0, len(data), settings.max_message_bytes)
    with pytest.raises(InvalidRecordError) as info:
        RecordValidator(settings, walk).validate(data, [header], NOW)
    return info.value


def every_tenth_keyless(n: int = 100, **kwargs: object) -> bytes:
    """librdkafka's test 0011 batch: records 0, 10, 20, ... have no key."""
    return encode_batch(
        [Record(i, NOW, None if i % 10 == 0 else b"k%d" % i, b"v%d" % i) for i in range(n)],
        **kwargs,  # type: ignore[arg-type]
    )


def indexes(error: InvalidRecordError) -> list[int]:
    return [e.batch_index for e in error.record_errors]


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("codec", list(Compression))
def test_every_keyless_record_is_named(walk: walker.Walk, codec: Compression) -> None:
    error = refusal(every_tenth_keyless(compression=codec), walk, **COMPACT)
    assert type(error) is KeylessRecordError
    assert error.code.name == "INVALID_RECORD"
    assert indexes(error) == list(range(0, 100, 10))
    assert all(e == RecordError(e.batch_index, NULL_KEY_MESSAGE) for e in error.record_errors)
    # the error's own message names the first three, and counts the rest
    text = str(error)
    assert text.startswith("10 of the batch's 100 ")
    assert "record 0: null key" in text and "record 20: null key" in text
    assert "record 30" not in text and "and 7 more" in text


@pytest.mark.parametrize("walk", WALKS)
def test_every_timestamp_out_of_range_is_named(walk: walker.Walk) -> None:
    stamps = [NOW, NOW - 2 * HOUR, NOW, NOW + 2 * HOUR, -1, NOW + HOUR - 1]
    data = encode_batch(
        [Record(i, t, b"k", b"v") for i, t in enumerate(stamps)], first_timestamp=NOW
    )
    error = refusal(data, walk, message_timestamp_difference_max_ms=HOUR)
    assert type(error) is InvalidTimestampError
    assert error.code.name == "INVALID_TIMESTAMP"
    assert indexes(error) == [1, 3]  # -1 means no timestamp: never out of range
    low, high = NOW - HOUR, NOW + HOUR
    assert error.record_errors[0].message.startswith(
        f"timestamp {NOW - 2 * HOUR} is out of range [{low}, {high}]"
    )
    assert "message.timestamp.difference.max.ms 3600000" in error.record_errors[1].message


@pytest.mark.parametrize("walk", WALKS)
def test_one_error_per_record_and_a_timestamp_makes_it_invalid_timestamp(
    walk: walker.Walk,
) -> None:
    """Keys are checked before timestamps, one error per record; INVALID_TIMESTAMP
    wins when any timestamp is among them, as Kafka decides."""
    records = [
        Record(0, NOW, b"k", b"v"),
        Record(1, NOW, None, b"v"),  # keyless
        Record(2, NOW - 2 * HOUR, b"k", b"v"),  # too old
        Record(3, NOW - 2 * HOUR, None, b"v"),  # both: named once, for its key
    ]
    limited = {"message_timestamp_difference_max_ms": HOUR, **COMPACT}
    error = refusal(encode_batch(records), walk, **limited)
    assert type(error) is InvalidTimestampError
    assert indexes(error) == [1, 2, 3]
    assert [e.message == NULL_KEY_MESSAGE for e in error.record_errors] == [True, False, True]
    # the same batch on a topic with no time limit: keys alone, INVALID_RECORD
    keyless = refusal(encode_batch(records), walk, **COMPACT)
    assert type(keyless) is KeylessRecordError and indexes(keyless) == [1, 3]


@pytest.mark.parametrize("walk", WALKS)
def test_a_fault_in_the_framing_wins_over_record_errors(walk: walker.Walk) -> None:
    """A batch whose framing is broken after its keyless records is corrupt, and
    names no records (Kafka stops at a record it cannot read)."""
    data = encode_batch(
        [Record(0, NOW, None, b"v"), Record(1, NOW, b"k", b"v", (Header("ab", b"x"),))]
    )
    records = bytes(data[RECORD_BATCH_OVERHEAD:]).replace(b"ab", b"\xc3\x28")
    error = refusal(resealed(data, records=records), walk, **COMPACT)
    assert type(error) is CorruptRecordError
    assert "header 0 key is not UTF-8" in str(error)
    assert error.record_errors == ()


@pytest.mark.parametrize("walk", WALKS)
def test_batch_wide_refusals_name_no_records(walk: walker.Walk) -> None:
    good = encode_batch([Record(i, NOW, b"k", b"v") for i in range(3)])
    for change in ({"attributes": 0x20}, {"count": 2}):
        assert refusal(resealed(good, **change), walk).record_errors == ()


@pytest.mark.parametrize("walk", WALKS)
def test_a_log_append_time_claim_names_every_record(walk: walker.Walk) -> None:
    good = encode_batch([Record(i, NOW, b"k", b"v") for i in range(4)])
    error = refusal(resealed(good, attributes=0x08), walk)
    assert type(error) is InvalidTimestampError
    assert indexes(error) == [0, 1, 2, 3]
    assert "LogAppendTime" in error.record_errors[0].message


def test_indexes_are_within_the_refused_batch_and_nothing_is_stored(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy=("compact",)), time_ms=FakeClock(NOW))
    try:
        first = encode_batch([Record(i, NOW, b"k", b"v") for i in range(5)])
        second = encode_batch(
            [Record(i, NOW, None if i in (2, 4) else b"k", b"v") for i in range(5)]
        )
        with pytest.raises(KeylessRecordError) as info:
            log.append_as_leader(first + second, 0)
        assert indexes(info.value) == [2, 4]  # relative to the second batch
        with pytest.raises(KeylessRecordError) as info:
            log.append_as_leader(every_tenth_keyless(compression=Compression.ZSTD), 0)
        assert len(info.value.record_errors) == 10
        assert (log.log_end_offset, log.size) == (0, 0)
    finally:
        log.close()
