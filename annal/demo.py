"""``make demo``: the storage engine at work, narrated in a few lines.

Appends across several segments, a simulated crash (a torn write and a lost
index) and the recovery that follows, time and size retention, and a
compaction pass — all on a real log directory, in Kafka's on-disk format.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from annal.storage.batch import Compression, iter_batches
from annal.storage.cleaner import clean_log, describe_dirty_range
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch, iter_records


def say(text: str) -> None:
    print(text, flush=True)


def count_records(log: Log) -> int:
    total, offset = 0, log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        total += sum(1 for r in iter_records(data) if r.offset >= offset)
        offset = list(iter_batches(data))[-1].next_offset
    return total


def demo(root: Path) -> None:
    config = LogConfig.from_properties({"segment.bytes": str(256 * 1024)})
    directory = root / "events-0"
    log = Log.open(directory, config)
    now = int(time.time() * 1000)
    started = time.perf_counter()
    for n in range(200):
        records = [
            Record(i, now, None, b"event-%06d-" % (n * 100 + i) + b"x" * 88) for i in range(100)
        ]
        codec = Compression.LZ4 if n % 2 else Compression.NONE
        log.append_as_leader(encode_batch(records, compression=codec), leader_epoch=0)
    elapsed = time.perf_counter() - started
    say(
        f"appended 20,000 records in 200 batches ({elapsed * 1000:.0f} ms) to {directory}: "
        f"{len(log.segments())} segments, offsets {log.log_start_offset}..{log.log_end_offset - 1}"
    )
    names = sorted(p.name for p in directory.glob("*.log"))
    say(f"  segment files: {names[0]} … {names[-1]}")

    active = log.active_segment
    log.close()
    with open(active.log_path, "r+b") as f:
        f.truncate(active.size - 1000)
    active.offset_index.path.unlink()
    say(f"simulated a crash: cut 1000 bytes off {active.log_path.name}, deleted its index")
    log = Log.open(directory, config, had_clean_shutdown=False)
    say(
        f"  recovery: log end offset now {log.log_end_offset} "
        f"(the torn batch is gone), index rebuilt with {log.active_segment.offset_index.entries} "
        f"entries; {count_records(log)} records readable"
    )

    log.update_config(LogConfig.from_properties({"retention.bytes": str(400 * 1024)}, config))
    removed = log.delete_old_segments()
    log.delete_pending_segments(force=True)
    say(
        f"retention.bytes=400 KiB removed {removed} old segments: log start offset "
        f"{log.log_start_offset}, {log.size // 1024} KiB left"
    )
    log.close()

    compacted = Log.open(
        root / "users-0",
        LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": "65536"}),
    )
    for rnd in range(50):
        records = [Record(i, now, b"user-%03d" % i, b"profile v%d" % rnd) for i in range(100)]
        compacted.append_as_leader(encode_batch(records), leader_epoch=0)
    compacted.roll()
    before = compacted.size
    dirty = describe_dirty_range(compacted, 0, now)
    clean_log(compacted, dirty.first_dirty_offset, dirty.first_uncleanable_offset, now_ms=now)
    compacted.delete_pending_segments(force=True)
    say(
        f"compaction of users-0: dirty ratio {dirty.dirty_ratio:.2f}, "
        f"{before // 1024} KiB → {compacted.size // 1024} KiB, "
        f"{count_records(compacted)} records left (one per key, latest value, offsets kept)"
    )
    compacted.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Show annal's storage engine at work.")
    parser.add_argument("--dir", type=Path, help="where to put the demo logs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="leave the demo logs on disk")
    args = parser.parse_args(argv)
    logging.basicConfig(format="  [storage] %(message)s", level=logging.WARNING)
    root = args.dir or Path(tempfile.mkdtemp(prefix="annal-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        demo(root)
    finally:
        if args.keep:
            say(f"demo logs kept in {root} (try: annal dump-log {root}/events-0/*.log)")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
