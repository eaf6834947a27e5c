"""Kafka's deserializers, for what the console consumer prints.

``kafka-console-consumer.sh --key-deserializer CLASS`` (and ``--value-deserializer``,
or the formatter's ``key.deserializer``/``value.deserializer``/``headers.deserializer``
properties) turns the stored bytes into a value and prints its text.  The classes
of Kafka's ``org.apache.kafka.common.serialization`` package are known by their
full or short names:

* ``StringDeserializer``: the bytes as UTF-8 text;
* ``ByteArrayDeserializer``, ``BytesDeserializer``, ``ByteBufferDeserializer``: the
  bytes as they are (Kafka's formatter would print the Java object's identity);
* ``ShortDeserializer``, ``IntegerDeserializer``, ``LongDeserializer``: 2, 4 or 8
  bytes, big-endian two's complement;
* ``FloatDeserializer``, ``DoubleDeserializer``: 4 or 8 bytes, IEEE 754 big-endian;
* ``UUIDDeserializer``: a UUID's text, checked;
* ``VoidDeserializer``: nothing (a record with bytes there is an error).

A null stays null (the formatter prints ``null.literal``).  Bytes a deserializer
cannot read raise ``DeserializationError`` naming the class and what was wrong,
as Kafka's SerializationException does.
"""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import Callable
from decimal import Decimal

PACKAGE = "org.apache.kafka.common.serialization"

Deserialize = Callable[[bytes], bytes]


class DeserializationError(ValueError):
    """Stored bytes that the chosen deserializer cannot read."""


def _same(data: bytes) -> bytes:
    return data


def _text(data: bytes) -> bytes:
    return data.decode("utf-8", "replace").encode("utf-8")


def _number(name: str, fmt: str) -> Deserialize:
    size = struct.calcsize(fmt)

    def read(data: bytes) -> bytes:
        if len(data) != size:
            raise DeserializationError(
                f"{name}: size of data received is {len(data)} bytes, not {size}"
            )
        (value,) = struct.unpack(fmt, data)
        if isinstance(value, float):
            return _java_float(value, _shortest(value, data, fmt)).encode()
        return str(value).encode()

    return read


def _shortest(value: float, data: bytes, fmt: str) -> str:
    """The fewest significant digits that read back as the same float (for a
    4-byte float, as Java's Float.toString chooses them)."""
    if fmt == ">d":
        return repr(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack(fmt, float(text)) == data:
            return text
    return repr(value)


def _java_float(value: float, shortest: str) -> str:
    """A float's text as Java's Double.toString and Float.toString write it:
    positional from 10^-3 up to 10^7, else ``d.dddE±n``; at least one digit
    after the point."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    number = Decimal(shortest)
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) + exponent - 1  # of the first digit
    if 1e-3 <= abs(value) < 1e7:
        if power >= 0:
            whole, fraction = text[: power + 1].ljust(power + 1, "0"), text[power + 1 :]
        else:
            whole, fraction = "0", "0" * (-power - 1) + text
        out = f"{whole}.{fraction or '0'}"
    else:
        out = f"{text[0]}.{text[1:] or '0'}E{power}"
    return ("-" if sign else "") + out


def _uuid(data: bytes) -> bytes:
    try:
        return str(uuid.UUID(data.decode("utf-8"))).encode()
    except (UnicodeDecodeError, ValueError):
        raise DeserializationError(
            f"UUIDDeserializer: {data[:40]!r} is not the text of a UUID"
        ) from None


def _void(data: bytes) -> bytes:
    raise DeserializationError(f"VoidDeserializer: expected null, got {len(data)} bytes")


DESERIALIZERS: dict[str, Deserialize] = {
    "StringDeserializer": _text,
    "ByteArrayDeserializer": _same,
    "BytesDeserializer": _same,
    "ByteBufferDeserializer": _same,
    "ShortDeserializer": _number("ShortDeserializer", ">h"),
    "IntegerDeserializer": _number("IntegerDeserializer", ">i"),
    "LongDeserializer": _number("LongDeserializer", ">q"),
    "FloatDeserializer": _number("FloatDeserializer", ">f"),
    "DoubleDeserializer": _number("DoubleDeserializer", ">d"),
    "UUIDDeserializer": _uuid,
    "VoidDeserializer": _void,
}


def deserializer(name: str) -> Deserialize:
    """The deserializer of a class name (``org.apache...LongDeserializer`` or
    ``LongDeserializer``); ValueError naming the known ones otherwise."""
    short = name.removeprefix(PACKAGE + ".")
    found = DESERIALIZERS.get(short)
    if found is None:
        raise ValueError(
            f"deserializer {name!r} is not available (known: {', '.join(DESERIALIZERS)}, "
            f"also as {PACKAGE}.NAME)"
        )
    return found


def apply(deserialize: Deserialize | None, data: bytes | None) -> bytes | None:
    """``data`` through ``deserialize`` (None: as stored); a null stays null."""
    if data is None or deserialize is None:
        return data
    return deserialize(data)
