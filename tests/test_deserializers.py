"""Kafka's deserializers as the console consumer prints with them: Java's text for
numbers, and a clear error (never a traceback) for bytes one cannot read."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from annal.deserializers import DESERIALIZERS, DeserializationError, apply, deserializer


@pytest.mark.parametrize(
    ("name", "data", "text"),
    [
        ("IntegerDeserializer", struct.pack(">i", -42), b"-42"),
        ("ShortDeserializer", struct.pack(">h", 7), b"7"),
        ("LongDeserializer", struct.pack(">q", 2**40), b"1099511627776"),
        ("DoubleDeserializer", struct.pack(">d", 1.0), b"1.0"),
        ("DoubleDeserializer", struct.pack(">d", 12345678.9), b"1.23456789E7"),
        ("DoubleDeserializer", struct.pack(">d", 0.0005), b"5.0E-4"),
        ("DoubleDeserializer", struct.pack(">d", 0.001), b"0.001"),
        ("DoubleDeserializer", struct.pack(">d", float("-inf")), b"-Infinity"),
        ("FloatDeserializer", struct.pack(">f", 1.1), b"1.1"),
        ("FloatDeserializer", struct.pack(">f", 12345678.9), b"1.2345679E7"),
        ("UUIDDeserializer", b"0b5b2a36-1c0e-4b7a-9a51-6f0c1c2e3d4f",
         b"0b5b2a36-1c0e-4b7a-9a51-6f0c1c2e3d4f"),
        ("StringDeserializer", "zürich".encode(), "zürich".encode()),
        ("ByteArrayDeserializer", b"\x00\xff", b"\x00\xff"),
    ],
)  # fmt: skip
def test_java_text(name: str, data: bytes, text: bytes) -> None:
    assert deserializer(name)(data) == text
    assert deserializer(f"org.apache.kafka.common.serialization.{name}")(data) == text


def test_null_stays_null_and_unknown_names_are_refused() -> None:
    assert apply(deserializer("LongDeserializer"), None) is None
    assert apply(None, b"raw") == b"raw"
    with pytest.raises(ValueError, match="'Avro' is not available"):
        deserializer("Avro")
    with pytest.raises(DeserializationError, match="VoidDeserializer: expected null"):
        deserializer("VoidDeserializer")(b"x")


@given(st.sampled_from(sorted(DESERIALIZERS)), st.binary(max_size=40))
def test_random_bytes_print_or_fail_clearly(name: str, data: bytes) -> None:
    try:
        text = deserializer(name)(data)
    except DeserializationError as exc:
        assert str(exc).startswith(name)
    else:
        assert isinstance(text, bytes)
