"""Kafka's internal-topic record schemas, field by field: big-endian integers,
strings as an int16 length and UTF-8 bytes, byte arrays and arrays as an int32
count.  ``__consumer_offsets`` (``offsets_schema.py``) and
``__transaction_state`` (``transactions/log_schema.py``) are written and read
with these; each names its own error type, so a bad record says which schema
it broke and where.
"""

from __future__ import annotations

import struct

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def encode_string(text: str, error: type[ValueError]) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise error(f"string of {len(raw)} bytes is too long for the schema")
    return INT16.pack(len(raw)) + raw


class SchemaReader:
    """Reads one record's fields in order; ``error`` (with ``what``, the record's
    kind, in its message) for a field that runs past the end or is malformed."""

    def __init__(self, data: bytes, what: str, error: type[ValueError]) -> None:
        self.data = data
        self.at = 0
        self.what = what
        self.error = error

    def take(self, layout: struct.Struct) -> int:
        if self.at + layout.size > len(self.data):
            raise self.error(f"{self.what} ends at byte {len(self.data)}, mid-field")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return int(value)

    def string(self) -> str:
        length = self.take(INT16)
        if length < 0 or self.at + length > len(self.data):
            raise self.error(f"{self.what} has a bad string length {length}")
        raw = self.data[self.at : self.at + length]
        self.at += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{self.what} has a string that is not UTF-8: {exc}") from None

    def nullable(self) -> str | None:
        if self.take(INT16) == -1:
            return None
        self.at -= INT16.size
        return self.string()

    def raw(self) -> bytes:
        length = self.take(INT32)
        if length < 0 or self.at + length > len(self.data):
            raise self.error(f"{self.what} has a bad bytes length {length}")
        out = self.data[self.at : self.at + length]
        self.at += length
        return bytes(out)

    def count(self, nullable: bool = False, item_size: int = 1) -> int:
        """An array's length (-1 for null when ``nullable``), no more than what
        is left could hold."""
        n = self.take(INT32)
        if n < (-1 if nullable else 0) or n * item_size > len(self.data) - self.at:
            raise self.error(f"{self.what} has a bad array length {n}")
        return n
