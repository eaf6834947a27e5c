"""The compiled records-section encoder writes exactly what the Python
encoder writes, and leaves what it does not take to it."""

from __future__ import annotations

import pytest
from annal.storage import records
from annal.storage.records import BatchBuilder, decode_batch
from environment import require_module
from hypothesis import given, settings
from hypothesis import strategies as st

encoder = require_module("annal.storage._encoder")

fields = st.none() | st.binary(max_size=40) | st.binary(min_size=100, max_size=20_000)


def python_section(
    keys: list[bytes | None], values: list[bytes | None], deltas: list[int] | None
) -> bytes:
    saved = records._encode_section
    records._encode_section = None
    try:
        return records._encode_records(keys, values, deltas, None, None)
    finally:
        records._encode_section = saved


@settings(max_examples=400, deadline=None)
@given(
    rows=st.lists(st.tuples(fields, fields, st.integers(-(2**40), 2**40)), max_size=40),
    with_deltas=st.booleans(),
    small_deltas=st.booleans(),
)
def test_the_compiled_section_is_the_python_section_byte_for_byte(
    rows: list[tuple[bytes | None, bytes | None, int]], with_deltas: bool, small_deltas: bool
) -> None:
    keys = [k for k, _, _ in rows]
    values = [v for _, v, _ in rows]
    deltas = [d % 64 if small_deltas else d for _, _, d in rows] if with_deltas else None
    assert encoder.encode_section(keys, values, deltas) == python_section(keys, values, deltas)


def test_what_is_not_bytes_is_left_to_python_and_still_encoded() -> None:
    assert encoder.encode_section([None], [bytearray(b"x")], None) is NotImplemented
    builder = BatchBuilder()
    builder.extend([b"a", bytearray(b"b"), memoryview(b"c")], None, 5)  # type: ignore[list-item]
    _, decoded = decode_batch(builder.build())
    assert [r.value for r in decoded] == [b"a", b"b", b"c"]
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        encoder.encode_section([b"a", b"b"], [b"x"], None)
    with pytest.raises(ValueError, match="1 timestamp deltas for 2 values"):
        encoder.encode_section([None, None], [b"x", b"y"], [0])
