"""One broker's per-partition costs, in process: start-up, LeaderAndIsr, idle ticks.

    .venv/bin/python bench/broker_scale.py [--partitions 2000] [--threads 1,4] [--no-zookeeper]

On ``--partitions`` logs (topics of ``--topic-partitions``, a few records each,
in ``--dirs`` log dirs):

* ``startup_s``: ``LogManager.startup`` after a clean stop and after a crash
  (no clean-shutdown marker and no recovery-point checkpoint: every segment
  is recovered), with each ``num.recovery.threads.per.data.dir`` of ``--threads``;
* ``leader_and_isr_s``: ``ReplicaManager.become_leader_or_follower`` for every
  partition at once on a broker that just loaded its logs (half led, half
  followed from two other brokers), then again with every leadership swapped
  (``flip``); topic configs are read from a real ZooKeeper (``--no-zookeeper``:
  a 0.5 ms stand-in), and ``topic_config_reads`` counts the reads;
* ``idle_tick_ms``: one run of each background task of the log manager and of
  the ISR expiration over the idle partitions (what each costs when nothing
  happens).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from annal.broker.replication.partition import LeaderAndIsrState
from annal.broker.replication.replica_manager import ReplicaManager
from annal.storage import files
from annal.storage.cleaner import LogCleaner
from annal.storage.files import TopicPartition
from annal.storage.manager import LogManager, LogManagerConfig
from annal.storage.records import Record, encode_batch

from annal import errors

QUIET = LogManagerConfig(cleaner_enable=False)
LEADERS = (2, 3)  # the other brokers, which lead the partitions broker 1 follows


def partitions(count: int, per_topic: int) -> list[TopicPartition]:
    return [TopicPartition(f"scale-{i // per_topic}", i % per_topic) for i in range(count)]


def fill(dirs: list[Path], tps: list[TopicPartition], records: int) -> None:
    manager = LogManager(dirs, broker_id=1, settings=QUIET)
    manager.startup()
    now = int(time.time() * 1000)
    for tp in tps:
        log = manager.get_or_create_log(tp)
        for i in range(records):
            log.append_as_leader(encode_batch([Record(0, now, None, b"v%d" % i)]), 0)
    manager.shutdown()


def crash(dirs: list[Path]) -> None:
    """What a killed broker leaves: no marker, and recovery from the start."""
    for d in dirs:
        (d / files.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        (d / files.RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)


def timed_startup(dirs: list[Path], threads: int, clean: bool) -> tuple[float, int]:
    if not clean:
        crash(dirs)
    manager = LogManager(dirs, broker_id=1, settings=_settings(threads))
    started = time.perf_counter()
    manager.startup()
    elapsed = time.perf_counter() - started
    count = len(manager.all_logs())
    manager.shutdown()
    return elapsed, count


def _settings(threads: int) -> LogManagerConfig:
    return LogManagerConfig(cleaner_enable=False, recovery_threads_per_data_dir=threads)


class Fetchers:
    """Stands in for the replica fetcher manager: counts what it is told."""

    def __init__(self) -> None:
        self.calls = 0
        self.followed: dict[TopicPartition, int] = {}

    def follow(self, tp: TopicPartition, leader: int, *args: object) -> None:
        self.calls += 1
        self.followed[tp] = leader

    def unfollow(self, tps: Iterable[TopicPartition]) -> None:
        self.calls += 1
        for tp in tps:
            self.followed.pop(tp, None)


class CountingConfigs:
    """Topic configs from ``read`` (ZooKeeper), counting the reads."""

    def __init__(self, read: Callable[[str], Mapping[str, str]]) -> None:
        self.read = read
        self.reads = 0

    def __call__(self, topic: str) -> Mapping[str, str]:
        self.reads += 1
        return self.read(topic)


def states(tps: list[TopicPartition], epoch: int, swap: bool) -> list[LeaderAndIsrState]:
    out = []
    for i, tp in enumerate(tps):
        other = LEADERS[i % 2]
        leads = (i % 2 == 0) != swap
        replicas = (1, other) if leads else (other, 1)
        leader = 1 if leads else other
        out.append(
            LeaderAndIsrState(tp.topic, tp.partition, 1, leader, epoch, replicas, replicas, 0)
        )
    return out


def leader_and_isr(
    dirs: list[Path],
    tps: list[TopicPartition],
    read_config: Callable[[str], Mapping[str, str]],
) -> dict[str, Any]:
    manager = LogManager(dirs, broker_id=1, settings=QUIET)
    manager.startup()
    configs = CountingConfigs(read_config)
    fetchers = Fetchers()
    replicas = ReplicaManager(1, manager, configs, fetchers=fetchers)  # type: ignore[arg-type]
    leaders = {b: f"127.0.0.1:{9000 + b}" for b in (1, *LEADERS)}
    figures: dict[str, Any] = {}
    try:
        for name, epoch, swap in (("first", 1, False), ("flip", 2, True)):
            calls, reads = fetchers.calls, configs.reads
            started = time.perf_counter()
            results = replicas.become_leader_or_follower(states(tps, epoch, swap), leaders)
            figures[f"{name}_s"] = round(time.perf_counter() - started, 3)
            assert len(results) == len(tps) and all(e is errors.NONE for e in results.values())
            figures[f"{name}_fetcher_calls"] = fetchers.calls - calls
            figures[f"{name}_topic_config_reads"] = configs.reads - reads
        figures["idle_tick_ms"] = idle_ticks(manager, replicas)
    finally:
        replicas.shutdown()
        manager.shutdown()
    return figures


def idle_ticks(manager: LogManager, replicas: ReplicaManager) -> dict[str, float]:
    """Each background task run once over the idle logs (the best of 5), in ms,
    once every follower has caught up."""
    cleaner = LogCleaner(manager)
    for partition in replicas.hosted():
        if partition.is_leader:
            end = partition.log.log_end_offset
            for follower in partition.replicas[1:]:
                partition.record_follower_fetch(follower, end, end)
    tasks: dict[str, Callable[[], object]] = {
        "flush": manager.flush_dirty_logs,
        "recovery_point_checkpoint": manager.checkpoint_changed_recovery_points,
        "log_start_offset_checkpoint": manager.checkpoint_changed_log_start_offsets,
        "retention": manager.cleanup_logs,
        "producer_expiration": manager.remove_expired_producers,
        "cleaner": cleaner.clean_once,
        "isr_expiration": replicas.expire_isr_once,
    }
    out = {}
    for name, task in tasks.items():
        task()  # a first run may have real work (a first checkpoint)
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            task()
            best = min(best, time.perf_counter() - started)
        out[name] = round(best * 1000, 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--topic-partitions", type=int, default=30)
    parser.add_argument("--records", type=int, default=3, help="records per partition")
    parser.add_argument("--dirs", type=int, default=1, help="log dirs")
    parser.add_argument("--threads", default="1,4", help="recovery threads per dir to time")
    parser.add_argument("--no-zookeeper", action="store_true", help="a stand-in for its reads")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="annal-bench-broker-"))
    zookeeper = None
    try:
        dirs = [root / f"logs-{i}" for i in range(args.dirs)]
        tps = partitions(args.partitions, args.topic_partitions)
        fill(dirs, tps, args.records)
        figures: dict[str, Any] = {"partitions": args.partitions, "dirs": args.dirs}
        startup: dict[str, float] = {}
        for threads in (int(t) for t in args.threads.split(",")):
            for clean in (True, False):
                elapsed, count = min(timed_startup(dirs, threads, clean) for _ in range(2))
                assert count == len(tps), (count, len(tps))
                startup[f"{'clean' if clean else 'crashed'}_threads_{threads}"] = round(elapsed, 3)
                print(f"start-up {'clean' if clean else 'crashed'}, {threads} threads: "
                      f"{elapsed:.3f} s", flush=True)  # fmt: skip
        figures["startup_s"] = startup
        read_config, zookeeper = _config_reader(root, args.no_zookeeper)
        figures["leader_and_isr"] = leader_and_isr(dirs, tps, read_config)
        print(f"LeaderAndIsr: {figures['leader_and_isr']}", flush=True)
    finally:
        if zookeeper is not None:
            zookeeper[0].stop()
            zookeeper[1].stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures))
    return 0


def _config_reader(root: Path, stand_in: bool) -> tuple[Callable[[str], Mapping[str, str]], Any]:
    if stand_in:

        def read(topic: str) -> Mapping[str, str]:
            time.sleep(0.0005)
            return {}

        return read, None
    from annal.deploy.zookeeper import ZooKeeperServer
    from annal.zk.client import ZkClient

    server = ZooKeeperServer(root / "zookeeper")
    server.start()
    client = ZkClient(server.connect_string + "/bench").start()
    return client.get_topic_config, (client, server)


if __name__ == "__main__":
    sys.exit(main())
