"""Storage engine benchmark: the log against plain file I/O, in the same run.

    .venv/bin/python bench/storage.py [--quick] [--mb N] [--dir DIR]

Appends 100-byte records in ~16 KiB batches through ``Log.append_as_leader``
and writes the same bytes with plain sequential writes, and again with each
batch's CRC-32C checked before its write (``crc_checked_write_vs_raw``: the
most any validating append could reach here); reads both back;
times batch encoding against kafka-python's builder, the leader's record
validation (``validate_records_per_s``: uncompressed and lz4 batches through
the compiled walker, and through its pure-Python fallback), recovery of an
unclean log and one compaction pass.  Ratios against the raw baselines are what to
compare across machines.  The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
from annal.storage import walker
from annal.storage.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, Compression, check_batch, last_header
from annal.storage.cleaner import clean_log, describe_dirty_range
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.records import BatchBuilder, Record, encode_batch
from annal.storage.validator import RecordValidator

RECORD_SIZE = 100
BATCH_BYTES = 16 * 1024
READ_BYTES = 1 << 20
CRC_COVERS_FROM = ATTRIBUTES_OFFSET  # a v2 batch's CRC covers attributes to the end
CRC = struct.Struct(f">{CRC_OFFSET}xI")


def best_of(runs: int, fn: Callable[[], float]) -> float:
    """The shortest of ``runs`` timings: the least disturbed by a shared machine."""
    return min(fn() for _ in range(runs))


def make_values(count: int) -> list[bytes]:
    return [(b"%010d" % i) + b"v" * (RECORD_SIZE - 10) for i in range(count)]


def build_batches(values: list[bytes], timestamp: int, per_record: bool = False) -> list[bytes]:
    """~16 KiB batches of ``values``: record by record (``append``) or in bulk (``extend``)."""
    per_batch = BATCH_BYTES // (RECORD_SIZE + 8)
    batches: list[bytes] = []
    for start in range(0, len(values), per_batch):
        builder = BatchBuilder()
        chunk = values[start : start + per_batch]
        if per_record:
            for value in chunk:
                builder.append(None, value, timestamp)
        else:
            builder.extend(chunk, None, timestamp)
        batches.append(builder.build())
    return batches


def bench_encode(values: list[bytes], timestamp: int, runs: int) -> dict[str, float]:
    """Records per second building the same batches with annal's builder (bulk and
    record by record) and with kafka-python's, all over the same 100,000 records."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    per_batch = BATCH_BYTES // (RECORD_SIZE + 8)
    sample = values[:100_000]

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            fn()
            return time.perf_counter() - started

        return run

    def theirs() -> None:
        for start in range(0, len(sample), per_batch):
            builder = DefaultRecordBatchBuilder(
                magic=2,
                compression_type=0,
                is_transactional=False,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                batch_size=1 << 30,
            )
            for i, value in enumerate(sample[start : start + per_batch]):
                builder.append(i, timestamp, None, value, [])
            builder.build()

    bulk = best_of(runs, timed(lambda: build_batches(sample, timestamp)))
    per_record = best_of(runs, timed(lambda: build_batches(sample, timestamp, per_record=True)))
    kafka_python = best_of(runs, timed(theirs))
    return {
        "bulk": len(sample) / bulk,
        "append": len(sample) / per_record,
        "kafka_python": len(sample) / kafka_python,
    }


def bench_validate(values: list[bytes], timestamp: int, runs: int) -> dict[str, float]:
    """Records/s through the leader's validation of ~16 KiB producer batches."""
    per_batch = BATCH_BYTES // (RECORD_SIZE + 8)
    sample = values[: per_batch * 200]
    out: dict[str, float] = {}
    for codec in (Compression.NONE, Compression.LZ4):
        batches = []
        for start in range(0, len(sample), per_batch):
            builder = BatchBuilder(codec)
            builder.extend(sample[start : start + per_batch], None, timestamp)
            data = builder.build()
            batches.append((data, [check_batch(data, 0, len(data))]))
        for name, walk in (("c", walker.walk_records), ("python", walker.walk_records_py)):
            if name == "c" and walker.IMPLEMENTATION != "c":
                continue
            validator = RecordValidator(LogConfig(), walk)

            def run(
                batches: list[tuple[bytes, list[Any]]] = batches, v: RecordValidator = validator
            ) -> float:
                started = time.perf_counter()
                for data, headers in batches:
                    v.validate(data, headers)
                return time.perf_counter() - started

            out[f"{codec.name.lower()}_{name}"] = len(sample) / best_of(runs, run)
    return out


def bench_append_and_read(root: Path, batches: list[bytes], runs: int) -> dict[str, float]:
    total = sum(len(b) for b in batches)
    config = LogConfig.from_properties({"segment.bytes": str(128 * 1024 * 1024)})

    def append() -> float:
        directory = root / "append-0"
        shutil.rmtree(directory, ignore_errors=True)
        log = Log.open(directory, config)
        started = time.perf_counter()
        for data in batches:
            log.append_as_leader(data, 0)
        elapsed = time.perf_counter() - started
        log.flush()
        log.close()
        return elapsed

    def raw_write() -> float:
        path = root / "raw.bin"
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        started = time.perf_counter()
        for data in batches:
            os.write(fd, data)
        elapsed = time.perf_counter() - started
        os.fsync(fd)
        os.close(fd)
        return elapsed

    def checked_write() -> float:
        """The raw writes plus the one check no broker may skip, each batch's CRC-32C:
        the ceiling of any append that validates what it stores."""
        path = root / "checked.bin"
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        started = time.perf_counter()
        for data in batches:
            if crc32c.crc32c(memoryview(data)[CRC_COVERS_FROM:]) != CRC.unpack_from(data)[0]:
                raise AssertionError("bad CRC in a benchmark batch")
            os.write(fd, data)
        elapsed = time.perf_counter() - started
        os.close(fd)
        path.unlink()
        return elapsed

    # Interleaved, best of each: all see the same machine and page-cache weather.
    # No timing includes the final fsync: Kafka does not fsync per append either.
    timings = [(append(), raw_write(), checked_write()) for _ in range(runs)]
    append_s = min(a for a, _, _ in timings)
    raw_write_s = min(r for _, r, _ in timings)
    checked_write_s = min(c for _, _, c in timings)

    log = Log.open(root / "append-0", config)

    def read() -> float:
        started = time.perf_counter()
        offset, got = 0, 0
        while offset < log.log_end_offset:
            data = log.read(offset, READ_BYTES)
            got += len(data)
            offset = last_next_offset(data)
        assert got == total, (got, total)
        return time.perf_counter() - started

    def raw_read() -> float:
        started = time.perf_counter()
        fd = os.open(root / "raw.bin", os.O_RDONLY)
        position = 0
        while True:
            chunk = os.pread(fd, READ_BYTES, position)
            if not chunk:
                break
            position += len(chunk)
        os.close(fd)
        return time.perf_counter() - started

    reads = [(read(), raw_read()) for _ in range(runs)]
    read_s = min(r for r, _ in reads)
    raw_read_s = min(r for _, r in reads)
    log.close()

    mb = total / 1e6
    per_batch_us = 1e6 / len(batches)
    return {
        # Beyond its CRC check and its write, what an append spends per batch, and
        # what it could spend while staying at 0.8 of the raw writes.
        "append_extra_us_per_batch": (append_s - checked_write_s) * per_batch_us,
        "extra_allowed_at_0_8_us_per_batch": (raw_write_s / 0.8 - checked_write_s) * per_batch_us,
        "append_mb_s": mb / append_s,
        "raw_write_mb_s": mb / raw_write_s,
        "crc_checked_write_mb_s": mb / checked_write_s,
        "read_mb_s": mb / read_s,
        "raw_read_mb_s": mb / raw_read_s,
    }


def last_next_offset(data: bytes | memoryview) -> int:
    """Next offset after the last whole batch in ``data``, from its header alone."""
    header = last_header(data)
    assert header is not None
    return header.next_offset


def bench_recovery(root: Path) -> float:
    """MB/s of a full unclean recovery of the appended log."""
    directory = root / "append-0"
    size = sum(p.stat().st_size for p in directory.glob("*.log"))
    for index in list(directory.glob("*.index")) + list(directory.glob("*.timeindex")):
        index.unlink()
    started = time.perf_counter()
    log = Log.open(directory, LogConfig(), had_clean_shutdown=False, recovery_point=0)
    elapsed = time.perf_counter() - started
    log.close()
    return size / 1e6 / elapsed


def bench_compaction(root: Path, records: int, timestamp: int) -> float:
    """MB/s of input through one compaction pass (10,000 keys, many updates each)."""
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": str(8 * 1024 * 1024)}
    )
    log = Log.open(root / "compact-0", config)
    value = b"v" * (RECORD_SIZE - 16)
    per_batch = BATCH_BYTES // (RECORD_SIZE + 16)
    for start in range(0, records, per_batch):
        batch = [
            Record(i - start, timestamp, b"key-%06d" % (i % 10_000), value)
            for i in range(start, min(start + per_batch, records))
        ]
        log.append_as_leader(encode_batch(batch), 0)
    log.roll()
    size = log.size
    dirty = describe_dirty_range(log, 0, timestamp)
    started = time.perf_counter()
    clean_log(log, dirty.first_dirty_offset, dirty.first_uncleanable_offset, now_ms=timestamp)
    elapsed = time.perf_counter() - started
    log.close()
    return size / 1e6 / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument("--mb", type=int, help="MB of records to append (default 256, quick 64)")
    parser.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    mb = args.mb or (64 if args.quick else 256)
    runs = 3 if args.quick else 5
    root = Path(tempfile.mkdtemp(prefix="annal-bench-", dir=args.dir))
    timestamp = int(time.time() * 1000)
    try:
        count = mb * 1_000_000 // (RECORD_SIZE + 8)
        values = make_values(count)
        print(f"encoding {count:,} records of {RECORD_SIZE} bytes ...", flush=True)
        encode = bench_encode(values, timestamp, max(runs, 3))
        print("validating ...", flush=True)
        validate = bench_validate(values, timestamp, max(runs, 3))
        batches = build_batches(values, timestamp)
        del values
        print(f"appending and reading {sum(map(len, batches)) / 1e6:.0f} MB ...", flush=True)
        io = bench_append_and_read(root, batches, runs)
        print("recovering ...", flush=True)
        recovery = bench_recovery(root)
        print("compacting ...", flush=True)
        compaction = bench_compaction(root, 300_000 if args.quick else 1_000_000, timestamp)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "mb": mb,
        **{k: round(v, 2 if k.endswith("_per_batch") else 1) for k, v in io.items()},
        "append_vs_raw": round(io["append_mb_s"] / io["raw_write_mb_s"], 3),
        "crc_checked_write_vs_raw": round(io["crc_checked_write_mb_s"] / io["raw_write_mb_s"], 3),
        "read_vs_raw": round(io["read_mb_s"] / io["raw_read_mb_s"], 3),
        "encode_records_per_s": round(encode["bulk"]),
        "encode_append_records_per_s": round(encode["append"]),
        "kafka_python_records_per_s": round(encode["kafka_python"]),
        "encode_vs_kafka_python": round(encode["bulk"] / encode["kafka_python"], 2),
        "encode_append_vs_kafka_python": round(encode["append"] / encode["kafka_python"], 2),
        "validate_records_per_s": round(validate.get("none_c", validate["none_python"])),
        "validate_lz4_records_per_s": round(validate.get("lz4_c", validate["lz4_python"])),
        "validate_python_records_per_s": round(validate["none_python"]),
        "validate_lz4_python_records_per_s": round(validate["lz4_python"]),
        "walker": walker.IMPLEMENTATION,
        "recovery_mb_s": round(recovery, 1),
        "compaction_mb_s": round(compaction, 1),
    }
    for key, value in result.items():
        print(f"  {key:28} {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
