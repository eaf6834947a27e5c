"""The record walk of the leader's validator: one pass over a records section.

``walk_records(section, count, first_timestamp, timestamp_low, timestamp_high,
require_keys)`` checks every record of one v2 batch's records section (the
bytes after the 61-byte header, inflated when the batch is compressed; the
layout is in ``records.py``) and returns five integers::

    (OK, max_timestamp, index_of_max, 0, 0)          every record is sound
    (reason, record_index, position, value, extra)   the first fault found

``position`` is the byte of the section where the faulty record or field
starts; ``value`` and ``extra`` are what the reason's message names (see
``REASONS``).  What a sound record is:

- its length varint is at least 6 (the smallest record body) and fits the
  section; its fields take exactly that many bytes;
- its offset delta is its index in the batch (0 .. count-1);
- key and value lengths are -1 (null) or fit the record; a null key fails
  when ``require_keys`` (compacted topics);
- the header count is not negative; header keys are UTF-8 of a length that
  fits, header values -1 or a length that fits;
- its timestamp (first_timestamp + delta, no int64 overflow) is -1 or within
  ``[timestamp_low, timestamp_high]``;
- and after ``count`` records the section ends.

Length fields are zig-zag varints of at most 5 bytes in int32 range; the
timestamp delta a varlong of at most 10 bytes.

Two implementations agree on every input: ``annal.storage._walker`` (C,
built by ``pip install``; no Python object per record) and ``walk_records_py``
below, the fallback when the extension is missing, or when the environment
sets ``ANNAL_PURE_PYTHON=1``.  Both are pure functions, safe from any thread.
"""

from __future__ import annotations

from collections.abc import Callable

from .compiled import compiled

Walk = Callable[[bytes | bytearray | memoryview, int, int, int, int, bool], tuple[int, ...]]

OK = 0
SECTION_ENDS = 1
VARINT_PAST_END = 2
VARINT_TOO_LONG = 3
LENGTH_TOO_SMALL = 4
LENGTH_OVERRUNS = 5
OFFSET_DELTA = 6
KEY_LENGTH = 7
VALUE_LENGTH = 8
HEADER_COUNT = 9
HEADER_KEY_LENGTH = 10
HEADER_KEY_NOT_UTF8 = 11
HEADER_VALUE_LENGTH = 12
SIZE_MISMATCH = 13
TRAILING_BYTES = 14
NULL_KEY = 15
TIMESTAMP_RANGE = 16
TIMESTAMP_OVERFLOW = 17

REASONS: dict[int, str] = {
    SECTION_ENDS: "the records end before record {index} of the {value} the batch counts",
    VARINT_PAST_END: "record {index}: a varint runs past the end of the record",
    VARINT_TOO_LONG: "record {index}: a varint is too long for its field",
    LENGTH_TOO_SMALL: "record {index}: length {value} is below the minimum record size 6",
    LENGTH_OVERRUNS: "record {index}: length {value} overruns the batch ({extra} bytes left)",
    OFFSET_DELTA: "record {index}: offset delta {value}, expected {index}",
    KEY_LENGTH: "record {index}: key length {value} does not fit the record",
    VALUE_LENGTH: "record {index}: value length {value} does not fit the record",
    HEADER_COUNT: "record {index}: negative header count {value}",
    HEADER_KEY_LENGTH: "record {index}: header {extra} key length {value} does not fit the record",
    HEADER_KEY_NOT_UTF8: "record {index}: header {value} key is not UTF-8",
    HEADER_VALUE_LENGTH: (
        "record {index}: header {extra} value length {value} does not fit the record"
    ),
    SIZE_MISMATCH: "record {index}: declares {value} bytes but its fields take {extra}",
    TRAILING_BYTES: "{value} bytes left after the last record the batch counts",
    NULL_KEY: "record {index}: null key; compacted topics require keys",
    TIMESTAMP_RANGE: "record {index}: timestamp {value} is out of range",
    TIMESTAMP_OVERFLOW: "record {index}: timestamp delta {value} overflows",
}

_MIN_RECORD_BODY = 6
_NO_TIMESTAMP = -1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1


class _Fault(Exception):
    def __init__(self, reason: int, position: int, value: int = 0, extra: int = 0) -> None:
        self.reason, self.position, self.value, self.extra = reason, position, value, extra


def _varint(
    buf: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int
) -> tuple[int, int]:
    start = pos
    raw = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise _Fault(VARINT_PAST_END, start)
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            raw &= _UINT64_MASK  # a tenth byte's high bits fall off, as in Java's readVarlong
            value = (raw >> 1) ^ -(raw & 1)
            if max_bytes == 5 and not _INT32_MIN <= value <= _INT32_MAX:
                raise _Fault(VARINT_TOO_LONG, start)
            return value, pos
        shift += 7
    raise _Fault(VARINT_TOO_LONG, start)


def walk_records_py(
    section: bytes | bytearray | memoryview,
    count: int,
    first_timestamp: int,
    timestamp_low: int,
    timestamp_high: int,
    require_keys: bool,
) -> tuple[int, ...]:
    """The pure-Python walk; see the module docstring."""
    buf = memoryview(section).cast("B") if not isinstance(section, bytes) else section
    end = len(buf)
    pos = 0
    max_ts, index_of_max = _NO_TIMESTAMP, 0
    i = 0
    try:
        for i in range(count):
            start = pos
            if pos >= end:
                raise _Fault(SECTION_ENDS, pos, count)
            length, pos = _varint(buf, pos, end, 5)
            if length < _MIN_RECORD_BODY:
                raise _Fault(LENGTH_TOO_SMALL, start, length)
            if length > end - pos:
                raise _Fault(LENGTH_OVERRUNS, start, length, end - pos)
            record_end = pos + length
            ts_delta, pos = _varint(buf, pos + 1, record_end, 10)  # after the attributes
            offset_delta, pos = _varint(buf, pos, record_end, 5)
            if offset_delta != i:
                raise _Fault(OFFSET_DELTA, start, offset_delta)
            field = pos
            key_length, pos = _varint(buf, pos, record_end, 5)
            if key_length < -1 or key_length > record_end - pos:
                raise _Fault(KEY_LENGTH, field, key_length)
            if key_length < 0:
                if require_keys:
                    raise _Fault(NULL_KEY, field)
            else:
                pos += key_length
            field = pos
            value_length, pos = _varint(buf, pos, record_end, 5)
            if value_length < -1 or value_length > record_end - pos:
                raise _Fault(VALUE_LENGTH, field, value_length)
            pos += max(value_length, 0)
            field = pos
            header_count, pos = _varint(buf, pos, record_end, 5)
            if header_count < 0:
                raise _Fault(HEADER_COUNT, field, header_count)
            for h in range(header_count):
                field = pos
                key_size, pos = _varint(buf, pos, record_end, 5)
                if key_size < 0 or key_size > record_end - pos:
                    raise _Fault(HEADER_KEY_LENGTH, field, key_size, h)
                try:
                    bytes(buf[pos : pos + key_size]).decode("utf-8")
                except UnicodeDecodeError:
                    raise _Fault(HEADER_KEY_NOT_UTF8, pos, h) from None
                pos += key_size
                field = pos
                value_size, pos = _varint(buf, pos, record_end, 5)
                if value_size < -1 or value_size > record_end - pos:
                    raise _Fault(HEADER_VALUE_LENGTH, field, value_size, h)
                pos += max(value_size, 0)
            if pos != record_end:
                raise _Fault(SIZE_MISMATCH, start, length, length - (record_end - pos))
            timestamp = first_timestamp + ts_delta
            if not _INT64_MIN <= timestamp <= _INT64_MAX:
                raise _Fault(TIMESTAMP_OVERFLOW, start, ts_delta)
            if timestamp != _NO_TIMESTAMP and not timestamp_low <= timestamp <= timestamp_high:
                raise _Fault(TIMESTAMP_RANGE, start, timestamp)
            if timestamp > max_ts:
                max_ts, index_of_max = timestamp, i
        else:
            i = count
        if pos != end:
            raise _Fault(TRAILING_BYTES, pos, end - pos)
    except _Fault as fault:
        return (fault.reason, i, fault.position, fault.value, fault.extra)
    return (OK, max_ts, index_of_max, 0, 0)


def _choose() -> tuple[Walk, str]:
    walk: Walk | None = compiled("_walker", "walk_records")
    return (walk_records_py, "python") if walk is None else (walk, "c")


walk_records, IMPLEMENTATION = _choose()
"""The walk in use, and which one it is: ``"c"`` or ``"python"``."""
