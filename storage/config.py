"""Per-log configuration, under Kafka's topic-level property names.

``LogConfig.from_properties({"segment.bytes": "1048576", ...})`` parses and
checks a property map (strings, as they come from a properties file or a
``/config/topics`` znode); an unknown name or a bad value is a ValueError
that names the property.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .batch import TimestampType

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1024 * 1024 + 12
    retention_ms: int = 7 * DAY_MS  # -1: unlimited
    retention_bytes: int = -1  # -1: unlimited
    file_delete_delay_ms: int = 60_000
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    delete_retention_ms: int = DAY_MS
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_difference_max_ms: int = 2**63 - 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    # the codec batches are stored in: "producer" keeps the producer's,
    # "uncompressed", "gzip", "snappy", "lz4" or "zstd" recompress to it
    compression_type: str = "producer"
    # accepted and shown for Kafka clients and tools that set it; records are always
    # stored in format v2, as Kafka 3.x stores them (KIP-724): docs/storage.md
    message_format_version: str = "3.0-IV1"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str | int | float], base: LogConfig | None = None
    ) -> LogConfig:
        """Overlay Kafka-named properties on ``base`` (the defaults when None)."""
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            attr = name.replace(".", "_")
            if attr not in _FIELDS:
                raise ValueError(f"unknown log config {name!r}{_did_you_mean(name)}")
            changes[attr] = _parse(name, attr, raw)
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """The inverse of from_properties, for znodes and dump output."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                text = ",".join(value)
            elif isinstance(value, TimestampType):
                text = "LogAppendTime" if value is TimestampType.LOG_APPEND_TIME else "CreateTime"
            elif isinstance(value, bool):
                text = str(value).lower()
            else:
                text = str(value)
            out[f.name.replace("_", ".")] = text
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(LogConfig)}
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
# Kafka's inter-broker/message format version names: 0.8.0 ... 0.11.0, 1.0 ... 3.x, an
# optional fourth part (0.10.0.0) or internal version (-IV1)
_FORMAT_VERSION = re.compile(r"(0\.(8|9|10|11)\.\d|[1-3]\.\d{1,2})(\.\d+)?(-IV\d+)?")


def _did_you_mean(name: str) -> str:
    """``; did you mean 'retention.ms'?`` for a near miss of a known name."""
    known = [f.replace("_", ".") for f in _FIELDS]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def _parse(name: str, attr: str, raw: str | int | float) -> object:
    kind = _FIELDS[attr].type
    text = str(raw).strip()
    try:
        if attr == "cleanup_policy":
            policies = tuple(p.strip() for p in text.split(",") if p.strip())
            if not policies or any(p not in ("delete", "compact") for p in policies):
                raise ValueError("expected 'delete', 'compact' or 'compact,delete'")
            return policies
        if attr == "compression_type":
            if text not in COMPRESSION_TYPES:
                raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}")
            return text
        if attr == "message_format_version":
            if not _FORMAT_VERSION.fullmatch(text):
                raise ValueError("expected a Kafka version such as 0.10.0, 2.8 or 3.0-IV1")
            return text
        if attr == "message_timestamp_type":
            if text == "CreateTime":
                return TimestampType.CREATE_TIME
            if text == "LogAppendTime":
                return TimestampType.LOG_APPEND_TIME
            raise ValueError("expected CreateTime or LogAppendTime")
        if kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return text.lower() == "true"
        if kind == "float":
            try:
                value: float = float(text)
            except ValueError:
                raise ValueError("expected a ratio between 0 and 1") from None
            if not 0.0 <= value <= 1.0:
                raise ValueError("expected a ratio between 0 and 1")
            return value
        try:
            number = int(text)
        except ValueError:
            raise ValueError("expected a whole number") from None
    except ValueError as exc:
        raise ValueError(f"invalid value {raw!r} for log config {name!r}: {exc}") from None
    if number < 0 and attr not in ("retention_ms", "retention_bytes"):
        raise ValueError(f"invalid value {raw!r} for log config {name!r}: must not be negative")
    if attr == "segment_bytes" and number < 14:
        raise ValueError(f"invalid value {raw!r} for log config {name!r}: at least 14")
    if attr == "segment_index_bytes" and number < 12:
        raise ValueError(f"invalid value {raw!r} for log config {name!r}: at least 12")
    return number
