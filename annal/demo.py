"""``make demo``: a three-broker cluster at work, narrated in a few lines.

``python -m annal.demo`` brings up ZooKeeper and three brokers as local
processes, creates a topic with 6 partitions, produces 100,000 records,
reads them back with the simple consumer, checks count and content, and
takes the cluster down (``--keep`` leaves it up).

``python -m annal.demo storage`` shows the storage engine alone: appends
across segments, a simulated crash and its recovery, retention and a
compaction pass, on a real log directory in Kafka's on-disk format.
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
from typing import TYPE_CHECKING

from annal.storage.batch import Compression, iter_batches
from annal.storage.cleaner import clean_log, describe_dirty_range
from annal.storage.config import LogConfig
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch, iter_records

if TYPE_CHECKING:
    from annal.deploy.cluster import LocalCluster


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


def read_back(bootstrap: str, expected: set[bytes]) -> tuple[dict[int, int], bool]:
    """Records per partition, and whether they are exactly ``expected``, once each."""
    from annal.consumer.simple import SimpleConsumer

    counts: dict[int, int] = {}
    seen: set[bytes | None] = set()
    with SimpleConsumer(bootstrap) as consumer:
        for p in range(6):
            partition_records = list(consumer.iterate("demo-events", p, 0))
            counts[p] = len(partition_records)
            seen.update(r.value for r in partition_records)
    ok = seen == expected and sum(counts.values()) == len(expected)
    return counts, ok


def crash_leader(cluster: LocalCluster, bootstrap: str) -> None:
    """SIGKILL the leader of partition 0 and wait for its partitions to move."""
    import signal

    from annal.admin.client import AdminClient
    from annal.deploy.runner import wait_until

    with AdminClient(bootstrap) as admin:

        def leaders() -> dict[int, int]:
            (topic,) = admin.describe_topics(["demo-events"])
            return {p.partition: p.leader for p in topic.partitions}

        victim = leaders()[0]
        led = sorted(p for p, leader in leaders().items() if leader == victim)
        started = time.perf_counter()
        cluster.signal_broker(victim, signal.SIGKILL)
        wait_until(lambda: all(leaders()[p] not in (-1, victim) for p in led), 60, "new leaders")
        moved = ", ".join(f"{p}→{leaders()[p]}" for p in led)
    say(
        f"SIGKILLed broker {victim}, leader of partitions {led}: new leaders in "
        f"{time.perf_counter() - started:.1f} s ({moved}), elected from the ISR"
    )


def cluster_demo(root: Path, keep: bool, records: int = 100_000) -> None:
    from annal.admin.client import AdminClient
    from annal.deploy.cluster import LocalCluster
    from annal.producer.producer import Producer

    cluster = LocalCluster(root)
    started = time.perf_counter()
    state = cluster.up(3)
    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in state.brokers)
    elapsed = time.perf_counter() - started
    say(f"cluster up in {elapsed:.1f} s: ZooKeeper {state.zookeeper_connect}, brokers {bootstrap}")
    try:
        with AdminClient(bootstrap) as admin:
            admin.create_topic(
                "demo-events",
                partitions=6,
                replication_factor=3,
                config={"min.insync.replicas": "2"},
            )
            topic = admin.describe_topics(["demo-events"])[0]
        leaders = ", ".join(f"{p.partition}→{p.leader}" for p in topic.partitions)
        say(
            "created demo-events: 6 partitions, 3 replicas each, min.insync.replicas 2 "
            f"(partition→leader: {leaders})"
        )
        expected: dict[bytes, int] = {}
        started = time.perf_counter()
        with Producer(
            bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024, compression="lz4"
        ) as producer:
            futures = []
            for i in range(records):
                value = b"event-%06d " % i + b"x" * 88
                expected[value] = i
                futures.append(
                    producer.send("demo-events", value=value, key=b"user-%d" % (i % 1000))
                )
            producer.flush(120)
        produced = time.perf_counter() - started
        failures = [f for f in futures if f.exception() is not None]
        say(
            f"produced {records:,} records of ~100 bytes in {produced:.1f} s "
            f"({records / produced:,.0f} records/s, lz4, acks=all), {len(failures)} failed"
        )
        started = time.perf_counter()
        counts, ok = read_back(bootstrap, set(expected))
        consumed = time.perf_counter() - started
        say(
            f"read back {sum(counts.values()):,} records in {consumed:.1f} s "
            f"({sum(counts.values()) / consumed:,.0f} records/s); per partition {counts}"
        )
        say("verified: every record read back once, byte for byte" if ok else "MISMATCH")
        if not ok:
            raise SystemExit(1)
        crash_leader(cluster, bootstrap)
        # Like any consumer, keep reading until the new leaders' high watermarks
        # (the followers' view of what was replicated) catch up with their logs.
        deadline = time.monotonic() + 60
        while not (ok := read_back(bootstrap, set(expected))[1]) and time.monotonic() < deadline:
            time.sleep(0.2)
        say(
            "verified after the crash: every record still there, from the survivors"
            if ok
            else "MISMATCH after the crash"
        )
        if not ok:
            raise SystemExit(1)
    finally:
        if keep:
            say(f"cluster left running: annal cluster --dir {root} status | down")
        else:
            cluster.down()
            say("cluster down")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Show annal at work.")
    parser.add_argument(
        "what", nargs="?", choices=["cluster", "storage"], default="cluster",
        help="the three-broker cluster (default) or the storage engine alone",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, help="where to put the demo (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="leave the demo running / on disk")
    args = parser.parse_args(argv)
    logging.basicConfig(format="  [annal] %(message)s", level=logging.WARNING)
    root = args.dir or Path(tempfile.mkdtemp(prefix="annal-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.what == "cluster":
        cluster_demo(root, args.keep)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        return 0
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
