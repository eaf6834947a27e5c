"""The message browser: N records of one partition, from an offset or a time.

Records are read with annal's simple consumer (Fetch from the partition's
leader; ListOffsets for the first offset at or after a timestamp, as
``KafkaConsumer.offsetsForTimes`` finds it).  Keys, values and header values
are untrusted bytes: they are turned into text here (UTF-8 with replacement
characters, pretty JSON, or hex) and escaped by the templates.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from annal.consumer.simple import SimpleConsumer

EARLIEST = -2
LATEST = -1
FORMATS = ("text", "json", "hex")
MAX_RECORDS = 500


def render(data: bytes | None, fmt: str) -> dict[str, Any]:
    """``data`` shown as ``fmt``: ``{"text": ..., "null": bool, "note": ...}``; JSON
    that does not parse is shown as text, with a note saying so."""
    if data is None:
        return {"text": "null", "null": True, "note": ""}
    if fmt == "hex":
        lines = [data[i : i + 16].hex(" ") for i in range(0, len(data), 16)]
        return {"text": "\n".join(lines), "null": False, "note": ""}
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            parsed = json.loads(text)
        except ValueError:
            return {"text": text, "null": False, "note": "not JSON"}
        return {"text": json.dumps(parsed, indent=2, ensure_ascii=False), "null": False,
                "note": ""}  # fmt: skip
    return {"text": text, "null": False, "note": ""}


def browse(
    bootstrap: str,
    topic: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int = 20,
    fmt: str = "text",
    timeout_s: float = 5.0,
) -> dict[str, Any]:
    """Up to ``limit`` records of ``topic``-``partition`` from ``offset`` (default:
    the log start) or from the first record at or after ``timestamp_ms``."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    limit = max(1, min(limit, MAX_RECORDS))
    with SimpleConsumer(bootstrap, timeout_s=timeout_s, retries=1) as consumer:
        start = consumer.offsets_before(topic, partition, EARLIEST)
        end = consumer.offsets_before(topic, partition, LATEST)
        if timestamp_ms is not None:
            found = consumer.offsets_before(topic, partition, timestamp_ms)
            position = end if found < 0 else found
        else:
            position = start if offset is None else min(max(offset, start), end)
        first = position
        records: list[dict[str, Any]] = []
        while len(records) < limit and position < end:
            result = consumer.fetch(topic, partition, position)
            for r in result.records:
                if r.offset >= position and len(records) < limit:
                    records.append(_shown(r, fmt))
            if result.next_offset <= position:
                break
            position = result.next_offset
    return {"topic": topic, "partition": partition, "log_start": start, "log_end": end,
            "from": first, "records": records, "format": fmt}  # fmt: skip


def _shown(record: Any, fmt: str) -> dict[str, Any]:
    when = datetime.datetime.fromtimestamp(record.timestamp / 1000, datetime.UTC)
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "time": when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC",
        "key": render(record.key, fmt),
        "value": render(record.value, fmt),
        "headers": [{"key": h.key, "value": render(h.value, fmt)} for h in record.headers],
    }


def parse_time(text: str) -> int:
    """Milliseconds since the epoch of ``text``: a number of milliseconds, or an
    ISO 8601 time (UTC unless it says otherwise)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a time like 2026-11-27T08:00:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)
