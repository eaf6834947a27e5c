"""``__consumer_offsets`` records: Kafka's key v1 / value v3 bytes and the group →
partition formula."""

from __future__ import annotations

import struct

import pytest
from annal.broker.groups.offsets_schema import (
    OffsetKey,
    OffsetsSchemaError,
    OffsetValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)


def test_java_string_hash_and_partition_for() -> None:
    # values of Java's String.hashCode
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\u00e9t\u00e9") == 233 * 31 * 31 + 116 * 31 + 233
    assert java_string_hash("\U0001f600") == (0xD83D * 31 + 0xDE00)  # UTF-16 surrogates
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    negative = "abcdefgh"  # hashCode -1 * ...: check abs
    assert partition_for(negative, 7) == abs(java_string_hash(negative)) % 7


def test_key_and_value_bytes_are_kafkas() -> None:
    key = encode_key(OffsetKey("g", "events", 3))
    assert key == struct.pack(">hh1sh6si", 1, 1, b"g", 6, b"events", 3)
    value = encode_value(OffsetValue(42, 7, "meta", 1700000000000))
    assert value == struct.pack(">hqih4sq", 3, 42, 7, 4, b"meta", 1700000000000)
    assert decode_key(key) == OffsetKey("g", "events", 3)
    assert decode_value(value) == OffsetValue(42, 7, "meta", 1700000000000)


def test_older_values_and_other_keys() -> None:
    v1 = struct.pack(">hqh2sqq", 1, 9, 2, b"md", 5, 6)  # with expire_timestamp
    assert decode_value(v1) == OffsetValue(9, -1, "md", 5)
    v2 = struct.pack(">hqh0sq", 2, 9, 0, b"", 5)
    assert decode_value(v2) == OffsetValue(9, -1, "", 5)
    group_metadata_key = struct.pack(">hh1s", 2, 1, b"g")
    assert decode_key(group_metadata_key) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack(">h", 3), "ends at byte 2"),
        (struct.pack(">hqih", 3, 1, 1, 50), "bad string length 50"),
        (struct.pack(">hq", 9, 1), "version 9 is unknown"),
    ],
)
def test_bad_values_are_named(raw: bytes, message: str) -> None:
    with pytest.raises(OffsetsSchemaError, match=message):
        decode_value(raw)
