"""Random input against the leader's validation: refused with a specific error and
nothing changed, or stored and readable by the consumer's decoder."""

from __future__ import annotations

import struct

import pytest
from annal.storage import walker
from annal.storage.batch import CRC_OFFSET, RECORD_BATCH_OVERHEAD, Compression, compute_crc
from annal.storage.config import LogConfig
from annal.storage.errors import InvalidRecordError
from annal.storage.log import Log
from annal.storage.records import Header, Record, encode_batch, iter_records
from environment import require_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logutil import FakeClock

NOW = 1_700_000_000_000

compiled = require_module("annal.storage._walker")

records = st.lists(
    st.builds(
        lambda ts, key, value, headers: (ts, key, value, headers),
        st.integers(-5, 5),
        st.none() | st.binary(max_size=12),
        st.none() | st.binary(max_size=40),
        st.lists(
            st.builds(Header, st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2
        ),
    ),
    min_size=1,
    max_size=6,
)


def build(items: list[tuple[int, bytes | None, bytes | None, list[Header]]], codec: int) -> bytes:
    return encode_batch(
        [Record(i, NOW + ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(items)],
        compression=Compression(codec),
    )


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    """A valid batch with bytes flipped, inserted or cut, its CRC (and length) mended
    so that only the record-level checks stand between it and the log."""
    data = bytearray(build(draw(records), draw(st.sampled_from([0, 0, 0, 1, 3, 4]))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "insert", "cut", "header"]))
        if kind == "header":
            position = draw(st.integers(21, RECORD_BATCH_OVERHEAD - 1))
            data[position] = draw(st.integers(0, 255))
            continue
        if len(data) <= RECORD_BATCH_OVERHEAD:
            break
        position = draw(st.integers(RECORD_BATCH_OVERHEAD, len(data) - 1))
        if kind == "flip":
            data[position] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[position : position + draw(st.integers(1, 4))]
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, CRC_OFFSET, compute_crc(data, 0, len(data)))
    return bytes(data)


sections = st.one_of(
    st.binary(max_size=80),
    mutated_batches().map(lambda b: b[RECORD_BATCH_OVERHEAD:]),
)


@settings(max_examples=600, deadline=None)
@given(
    section=sections,
    count=st.integers(0, 8) | st.sampled_from([2**31 - 1, 1000]),
    first=st.sampled_from([NOW, -1, 0, 2**63 - 1, -(2**63)]),
    window=st.sampled_from([(-(2**63), 2**63 - 1), (NOW - 3, NOW + 3)]),
    keys=st.booleans(),
)
def test_compiled_and_python_walkers_agree(
    section: bytes, count: int, first: int, window: tuple[int, int], keys: bool
) -> None:
    args = (section, count, first, window[0], window[1], keys)
    assert compiled.walk_records(*args) == walker.walk_records_py(*args)


def _state(log: Log) -> tuple[int, bytes]:
    return log.log_end_offset, bytes(log.read(0, 1 << 22))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.one_of(st.binary(max_size=200), mutated_batches()),
    compact=st.booleans(),
)
def test_leader_append_refuses_cleanly_or_stores_readable_records(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, compact: bool
) -> None:
    config = LogConfig(
        cleanup_policy=("compact",) if compact else ("delete",),
        message_timestamp_difference_max_ms=3_600_000,
    )
    log = Log.open(tmp_path_factory.mktemp("fuzz") / "t-0", config, time_ms=FakeClock(NOW))
    try:
        log.append_as_leader(build([(0, b"k", b"v", [])], 0), 0)
        before = _state(log)
        try:
            info = log.append_as_leader(data, 0)
        except InvalidRecordError as exc:
            assert exc.code.name in {
                "CORRUPT_MESSAGE",
                "INVALID_RECORD",
                "INVALID_TIMESTAMP",
                "MESSAGE_TOO_LARGE",
                "INVALID_PRODUCER_ID_MAPPING",
                # two batches of one producer id in one append, out of sequence
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                "INVALID_PRODUCER_EPOCH",
            }
            assert str(exc)
            assert _state(log) == before
            return
        stored = list(iter_records(log.read(0, 1 << 22)))  # the consumer's decoder
        assert [r.offset for r in stored] == list(range(info.last_offset + 1))
        if compact:
            assert all(r.key is not None for r in stored)
    finally:
        log.close()
