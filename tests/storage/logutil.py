"""Helpers shared by the storage tests: batch builders and a fake clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from annal.storage.batch import Compression, iter_batches
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch, iter_records


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    timestamp: int = 1_700_000_000_000,
    compression: Compression = Compression.NONE,
    base_offset: int = 0,
    producer_id: int = -1,
) -> bytes:
    """A producer batch (offsets from 0) of the given values and keys."""
    keys = keys if keys is not None else [None] * len(values)
    records = [
        Record(base_offset + i, timestamp, k, v)
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    return encode_batch(
        records, base_offset=base_offset, compression=compression, producer_id=producer_id
    )


def values_of(data: bytes) -> list[bytes | None]:
    return [r.value for r in iter_records(data)]


def read_all(log: Log, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (the log start) to the log end."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        out.extend(r for r in iter_records(data) if r.offset >= offset)
        offset = list(iter_batches(data))[-1].next_offset
    return out


def open_log(directory: Path, clock: FakeClock | None = None, **props: str | int) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(directory, config, time_ms=clock)
