"""Lines to records and records to lines, as Kafka's console tools do it.

``LineReader`` is kafka-console-producer.sh's line reader: each line is one
record; with ``parse.headers=true`` the line starts with its headers
(``h1:v1,h2:v2``, then ``headers.delimiter``), with ``parse.key=true`` the
key comes next (then ``key.separator``), and the rest is the value.  A key,
value or header value equal to ``null.marker`` is null.  A line without a
delimiter it needs is an error (``LineError``), unless ``ignore.error=true``:
then that part is taken as absent.  ``headers.separator`` is a regular
expression, as in Kafka.

``MessageFormatter`` is kafka-console-consumer.sh's DefaultMessageFormatter:
the columns asked for, in Kafka's order (timestamp, partition, offset,
headers, key, value), each followed by ``key.separator`` and the last by
``line.separator``; null keys and values print ``null.literal``.  The bytes
of keys, values and header values are written as they are, or as the
deserializer named by ``key.deserializer``, ``value.deserializer`` or
``headers.deserializer`` reads them (``deserializers.py``).

Both refuse a property they do not know, by name, rather than ignore it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from annal.deserializers import apply, deserializer

READER_PROPERTIES = (
    "parse.key",
    "key.separator",
    "ignore.error",
    "parse.headers",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
    "null.marker",
)

FORMATTER_PROPERTIES = (
    "print.timestamp",
    "print.key",
    "print.offset",
    "print.partition",
    "print.headers",
    "print.value",
    "key.separator",
    "line.separator",
    "headers.separator",
    "null.literal",
    "key.deserializer",
    "value.deserializer",
    "headers.deserializer",
)

# --formatter: Kafka's class names (2.x's kafka.tools, 3.x's package) → ours
FORMATTERS = {
    f"{package}.{name}": name
    for package in ("kafka.tools", "org.apache.kafka.tools.consumer")
    for name in ("DefaultMessageFormatter", "LoggingMessageFormatter", "NoOpMessageFormatter")
}


class LineError(ValueError):
    """A line the reader cannot turn into a record."""


def parse_properties(pairs: list[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` pairs (the value may contain ``=``); ValueError for one without."""
    props: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} expects KEY=VALUE, got {pair!r}")
        props[key] = value
    return props


def _unknown(props: Mapping[str, str], known: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(props) - set(known))
    if unknown:
        raise ValueError(
            f"unknown {what} {', '.join(unknown)} (known: {', '.join(known)})"
        )


def _flag(props: Mapping[str, str], name: str, default: bool) -> bool:
    return props[name].strip().lower() == "true" if name in props else default


@dataclass(frozen=True, slots=True)
class LineRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class LineReader:
    """See the module docstring; ValueError for unknown or clashing properties."""

    def __init__(self, props: Mapping[str, str]) -> None:
        _unknown(props, READER_PROPERTIES, "--property")
        self.parse_key = _flag(props, "parse.key", False)
        self.parse_headers = _flag(props, "parse.headers", False)
        self.ignore_error = _flag(props, "ignore.error", False)
        self.key_separator = props.get("key.separator", "\t")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        for name in ("key.separator", "headers.delimiter", "headers.separator",
                     "headers.key.separator"):  # fmt: skip
            if name in props and not props[name]:
                raise ValueError(f"{name} may not be empty")
        try:
            self._split_headers = re.compile(self.headers_separator)
        except re.error as exc:
            raise ValueError(f"headers.separator is not a regular expression: {exc}") from None
        clashes = [
            ("headers.delimiter", self.headers_delimiter, "headers.separator",
             self.headers_separator),
            ("headers.delimiter", self.headers_delimiter, "headers.key.separator",
             self.headers_key_separator),
            ("headers.separator", self.headers_separator, "headers.key.separator",
             self.headers_key_separator),
            ("null.marker", self.null_marker, "key.separator", self.key_separator),
            ("null.marker", self.null_marker, "headers.separator", self.headers_separator),
            ("null.marker", self.null_marker, "headers.delimiter", self.headers_delimiter),
            ("null.marker", self.null_marker, "headers.key.separator",
             self.headers_key_separator),
        ]  # fmt: skip
        for one, first, other, second in clashes:
            if first == second:
                raise ValueError(f"{one} and {other} may not be equal")

    def _part(self, enabled: bool, line: str, start: int, mark: str, what: str,
              number: int) -> str | None:  # fmt: skip
        if not enabled:
            return None
        end = line.find(mark, start)
        if end < 0:
            if self.ignore_error:
                return None
            raise LineError(f"line {number}: no {what} {mark!r} found: {line!r}")
        return line[start:end]

    def _nullable(self, text: str | None) -> bytes | None:
        return (
            None if text is None or text == self.null_marker
            else text.encode("utf-8", "surrogateescape")  # bytes that are not UTF-8 kept
        )  # fmt: skip

    def read(self, line: str, number: int) -> LineRecord:
        """The record of ``line`` (without its line end), line ``number`` of the input."""
        headers = self._part(self.parse_headers, line, 0, self.headers_delimiter,
                             "headers delimiter", number)  # fmt: skip
        at = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._part(self.parse_key, line, at, self.key_separator, "key separator", number)
        at += 0 if key is None else len(key) + len(self.key_separator)
        record = LineRecord(self._nullable(key), self._nullable(line[at:]))
        if headers is not None and headers != self.null_marker:
            record.headers.extend(self._headers(headers, number))
        return record

    def _headers(self, text: str, number: int) -> list[tuple[str, bytes | None]]:
        pairs = self._split_headers.split(text)
        while pairs and not pairs[-1]:  # as Java's split: no trailing empty strings
            pairs.pop()
        out: list[tuple[str, bytes | None]] = []
        for pair in pairs:
            name, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if self.ignore_error:
                    out.append((pair, None))
                    continue
                raise LineError(
                    f"line {number}: no header key separator {self.headers_key_separator!r} "
                    f"in {pair!r}"
                )
            if name == self.null_marker:
                raise LineError(
                    f"line {number}: a header key may not be the null marker "
                    f"{self.null_marker!r}: header keys cannot be null"
                )
            out.append((name, self._nullable(value)))
        return out


class MessageFormatter:
    """See the module docstring; ``kind`` is DefaultMessageFormatter,
    LoggingMessageFormatter (the same lines, and each record logged at INFO) or
    NoOpMessageFormatter (nothing)."""

    def __init__(self, props: Mapping[str, str], kind: str = "DefaultMessageFormatter") -> None:
        _unknown(props, FORMATTER_PROPERTIES, "--property")
        self.kind = kind
        self.show = {
            name: _flag(props, f"print.{name}", name == "value")
            for name in ("timestamp", "partition", "offset", "headers", "key", "value")
        }
        encode: dict[str, bytes] = {
            name: props.get(name, default).encode("utf-8")
            for name, default in (("key.separator", "\t"), ("line.separator", "\n"),
                                  ("headers.separator", ","), ("null.literal", "null"))
        }  # fmt: skip
        self.key_separator = encode["key.separator"]
        self.line_separator = encode["line.separator"]
        self.headers_separator = encode["headers.separator"]
        self.null_literal = encode["null.literal"]
        self.deserialize = {
            part: deserializer(props[f"{part}.deserializer"])
            if f"{part}.deserializer" in props
            else None
            for part in ("key", "value", "headers")
        }
        self._log = logging.getLogger("annal.console.LoggingMessageFormatter")

    def format(self, record: Any) -> bytes:
        """The bytes printed for ``record`` (a ``ConsumerRecord``)."""
        if self.kind == "NoOpMessageFormatter":
            return b""
        # As Kafka's formatter, a part is deserialized only when it is printed
        # (or logged): a key no deserializer can read stops nobody who hides it.
        logged = self.kind == "LoggingMessageFormatter"
        key = apply(self.deserialize["key"], record.key) if self.show["key"] or logged else None
        value = (
            apply(self.deserialize["value"], record.value)
            if self.show["value"] or logged
            else None
        )
        columns: list[bytes] = []
        if self.show["timestamp"]:
            timestamp = record.timestamp
            columns.append(b"NO_TIMESTAMP" if timestamp < 0 else f"CreateTime:{timestamp}".encode())
        if self.show["partition"]:
            columns.append(f"Partition:{record.partition}".encode())
        if self.show["offset"]:
            columns.append(f"Offset:{record.offset}".encode())
        if self.show["headers"]:
            columns.append(
                self.headers_separator.join(
                    h[0].encode("utf-8")
                    + b":"
                    + self._bytes(apply(self.deserialize["headers"], h[1]))
                    for h in record.headers
                )
                if record.headers
                else b"NO_HEADERS"
            )
        if self.show["key"]:
            columns.append(self._bytes(key))
        if self.show["value"]:
            columns.append(self._bytes(value))
        if self.kind == "LoggingMessageFormatter":
            self._log.info(
                "%skey:%s, value:%s",
                "" if record.timestamp < 0 else f"CreateTime:{record.timestamp}, ",
                _text(key), _text(value),
            )  # fmt: skip
        if not columns:
            return b""
        return self.key_separator.join(columns) + self.line_separator

    def _bytes(self, raw: bytes | None) -> bytes:
        return self.null_literal if raw is None else raw

    def write(self, record: Any, out: BinaryIO) -> None:
        text = self.format(record)
        if text:
            out.write(text)
            out.flush()


def _text(raw: bytes | None) -> str:
    return "null" if raw is None else raw.decode("utf-8", "backslashreplace")
