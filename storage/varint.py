"""Zig-zag varints, as Kafka's v2 records use them.

A signed 64-bit value ``v`` is first zig-zag mapped to an unsigned one,
``z = (v << 1) ^ (v >> 63)`` (0, -1, 1, -2, ... become 0, 1, 2, 3, ...),
then written 7 bits a byte, least significant group first, with the high bit
of every byte but the last set.  This is protobuf's ``sint64``; at most 10
bytes.  Examples::

    0 -> 00     -1 -> 01     1 -> 02     63 -> 7e     64 -> 80 01

Besides the codec this module holds the precomputed tables the record
encoder indexes instead of encoding small numbers one by one.  They are
built once at import and never change, so sharing them between threads is
safe.
"""

from __future__ import annotations

from .errors import CorruptRecordError

MAX_VARINT_BYTES = 10


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """(value, position after it) for the zig-zag varint at ``position``.

    Raises CorruptRecordError naming the position for a varint that runs
    past the end of ``buf`` or is longer than 10 bytes.
    """
    start = position
    result = 0
    shift = 0
    while True:
        try:
            byte = buf[position]
        except IndexError:
            raise CorruptRecordError("varint runs past the end of the records", start) from None
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise CorruptRecordError(f"varint longer than {MAX_VARINT_BYTES} bytes", start)


# -- tables ------------------------------------------------------------------

TABLE_SIZE = 1 << 16
"""Values in ``[-1, TABLE_SIZE)`` are looked up, not encoded."""

VARINTS: list[bytes] = [encode_varint(n) for n in range(-1, TABLE_SIZE)]
"""``VARINTS[n + 1]`` is the varint of ``n``; -1 (a null length) is ``VARINTS[0]``."""

LENGTHS: list[bytes] = VARINTS[1:]
"""``LENGTHS[n]`` is the varint of ``n >= 0``: a key or value length, looked up by ``map``."""

FIELD_SIZES: list[int] = [len(VARINTS[n + 1]) + n for n in range(TABLE_SIZE)]
"""``FIELD_SIZES[n]``: bytes of an ``n``-byte key or value with its length varint."""


def varint(value: int) -> bytes:
    """``encode_varint``, from the table when it can."""
    if -1 <= value < TABLE_SIZE:
        return VARINTS[value + 1]
    return encode_varint(value)
