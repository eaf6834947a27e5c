"""Many partitions: what a 3-broker cluster (RF 2) costs and how fast it moves, by size.

    .venv/bin/python bench/scale.py [--sizes 600,3000] [--topic-partitions 30]

For each size, on a fresh local cluster (``annal cluster up --brokers 3``):

* ``create_s``: CreateTopics (Kafka's protocol, confluent-kafka's admin
  client) for ``size`` partitions in topics of ``--topic-partitions``, until
  every partition has a leader and both replicas in its ISR;
* ``one_record_each_s``: one acks=all record to every partition;
* ``idle_cpu_percent``: each broker's CPU over 10 s with no traffic (the
  highest of the three, and the controller's);
* ``controlled_shutdown_s``: SIGTERM to the broker leading the most partitions
  until its process exits (``leaders_moved``: how many it led;
  ``controlled_shutdown_handover_s``: until the controller answered that every
  leadership moved, the rest being the logs' flush and close;
  ``controlled_shutdown_slow_steps``: the stop's steps that took a second or
  more, from the broker's log), and whether
  any partition was left without a leader meanwhile
  (``leaderless_seen``, sampled);
* ``restart_until_isr_full_s``: that broker started again until every ISR is
  full;
* ``controller_kill_until_led_s``: SIGKILL to the controller until every
  partition has a live leader in ZooKeeper, and
  ``controller_kill_until_metadata_s`` until every survivor's Metadata says so
  (``controller_kill_until_elected_s``: until a survivor became controller,
  mostly the ZooKeeper session's expiry; ``controller_took_office_in_s``: its
  loading, deciding and queueing, from its log);
* ``rss_mib_by_broker``: each broker's resident memory after the idle interval.

Targets: at 3,000 partitions, create <= 15 s, one record each <= 3 s, idle
CPU <= 3 %, controlled shutdown of a broker leading 1,000 <= 3 s with no
partition leaderless, restart <= 10 s, controller SIGKILL <= session timeout
+ 3 s (Metadata + 4 s); at 10,000 partitions within twice those.  Run it with
nothing else on the machine.  The last line printed is one JSON object: the
figures by size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from annal.admin.client import AdminClient
from annal.deploy.cluster import SETTINGS as CLUSTER_SETTINGS
from annal.deploy.cluster import ClusterState, LocalCluster
from annal.deploy.runner import wait_until
from annal.zk.batched import BatchedZk
from annal.zk.client import ZkClient

from annal.topic_partition import TopicPartition

RF = 2
SESSION_TIMEOUT_S = int(CLUSTER_SETTINGS["zookeeper.session.timeout.ms"]) / 1000
IDLE_S = 10.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def partitions_of(endpoint: str, topics: list[str]) -> list[tuple[int, tuple[int, ...]]]:
    """(leader, isr) of every partition of ``topics``, from one broker's Metadata."""
    with AdminClient(endpoint, timeout_s=60) as admin:
        return [(p.leader, p.isr) for t in admin.describe_topics(topics) for p in t.partitions]


def all_full(endpoint: str, topics: list[str], size: int, live: set[int]) -> bool:
    try:
        found = partitions_of(endpoint, topics)
    except Exception:  # a broker still starting, a topic not in its cache yet
        return False
    return len(found) == size and all(
        leader in live and len(isr) == RF and set(isr) <= live for leader, isr in found
    )


def all_led(endpoint: str, topics: list[str], size: int, live: set[int]) -> bool:
    try:
        found = partitions_of(endpoint, topics)
    except Exception:
        return False
    return len(found) == size and all(leader in live for leader, _ in found)


def measure(size: int, per_topic: int) -> dict[str, Any]:
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import NewTopic

    root = Path(tempfile.mkdtemp(prefix=f"annal-bench-scale-{size}-"))
    cluster = LocalCluster(root)
    figures: dict[str, Any] = {"partitions": size, "session_timeout_s": SESSION_TIMEOUT_S}
    try:
        state: ClusterState = cluster.up(3)
        endpoints = {b.id: f"127.0.0.1:{b.port}" for b in state.brokers}
        kafka = ",".join(f"127.0.0.1:{b.kafka_port}" for b in state.brokers)
        live = set(endpoints)
        topics = [f"scale-{i}" for i in range((size + per_topic - 1) // per_topic)]
        counts = [min(per_topic, size - i * per_topic) for i in range(len(topics))]

        started = time.monotonic()
        admin = KafkaAdmin({"bootstrap.servers": kafka})
        futures = admin.create_topics(
            [NewTopic(t, n, RF) for t, n in zip(topics, counts, strict=True)],
            request_timeout=120,
        )
        for future in futures.values():
            future.result(180)
        wait_until(lambda: all_full(endpoints[1], topics, size, live), 600, "ISRs full")
        figures["create_s"] = round(time.monotonic() - started, 1)
        print(f"{size}: created in {figures['create_s']} s", flush=True)

        producer = KafkaProducer({"bootstrap.servers": kafka, "acks": "all", "linger.ms": 5})
        producer.list_topics(timeout=60)
        started = time.monotonic()
        for topic, n in zip(topics, counts, strict=True):
            for p in range(n):
                producer.produce(topic, b"v", partition=p)
        left = producer.flush(300)
        figures["one_record_each_s"] = round(time.monotonic() - started, 1)
        figures["one_record_each_undelivered"] = left
        print(f"{size}: one record each in {figures['one_record_each_s']} s", flush=True)

        pids = {b.id: b.pid for b in state.brokers if b.pid is not None}
        before = {b: cpu_s(pid) for b, pid in pids.items()}
        time.sleep(IDLE_S)  # the idle interval itself is what is measured
        idle = {b: (cpu_s(pid) - before[b]) / IDLE_S * 100 for b, pid in pids.items()}
        figures["idle_cpu_percent_max"] = round(max(idle.values()), 1)
        figures["idle_cpu_percent_by_broker"] = {str(b): round(v, 1) for b, v in idle.items()}

        figures["rss_mib_by_broker"] = {str(b): rss_mib(pid) for b, pid in pids.items()}

        found = partitions_of(endpoints[1], topics)
        leads = {b: sum(1 for leader, _ in found if leader == b) for b in live}
        victim = max(leads, key=lambda b: leads[b])
        figures["leaders_moved"] = leads[victim]
        survivor = endpoints[min(live - {victim})]
        sampler = LeaderlessSampler(survivor, topics, live)
        sampler.start()
        started = time.monotonic()
        cluster.signal_broker(victim, signal.SIGTERM, timeout_s=300)
        figures["controlled_shutdown_s"] = round(time.monotonic() - started, 1)
        victim_log = root / f"broker-{victim}" / "broker.log"
        figures["controlled_shutdown_handover_s"] = handover_s(victim_log)
        figures["controlled_shutdown_slow_steps"] = slow_steps(victim_log)
        sampler.stop()
        figures["leaderless_seen_during_shutdown"] = sampler.worst
        figures["leaderless_after_shutdown"] = not all_led(
            survivor, topics, size, live - {victim}
        )
        print(f"{size}: controlled shutdown in {figures['controlled_shutdown_s']} s", flush=True)

        started = time.monotonic()
        cluster.start_broker(victim, timeout_s=300)
        wait_until(lambda: all_full(survivor, topics, size, live), 600, "ISRs full again")
        figures["restart_until_isr_full_s"] = round(time.monotonic() - started, 1)

        state = cluster.load()
        controller = _controller_id(state)
        others = live - {controller}
        started, killed_at = time.monotonic(), time.time()
        cluster.signal_broker(controller, signal.SIGKILL)
        with ZkClient(state.zookeeper_connect) as zk:
            wait_until(lambda: led_in_zookeeper(zk, topics, counts, others), 600,
                       "every partition led by a survivor in ZooKeeper")  # fmt: skip
        figures["controller_kill_until_led_s"] = round(time.monotonic() - started, 1)
        wait_until(
            lambda: all(all_led(endpoints[b], topics, size, others) for b in others),
            600,
            "every partition led, in every survivor's Metadata",
        )
        figures["controller_kill_until_metadata_s"] = round(time.monotonic() - started, 1)
        elected, office = failover(root, others, killed_at)
        figures["controller_kill_until_elected_s"] = elected
        figures["controller_took_office_in_s"] = office
        print(f"{size}: {figures}", flush=True)
    finally:
        try:
            cluster.down()
        except Exception as exc:  # report the figures' failure, not the clean-up's
            print(f"clean-up: {exc}", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
    return figures


def handover_s(broker_log: Path) -> float:
    """From SIGTERM until the controller answered that every leadership moved
    (the rest of the stop is flushing and closing the logs), from the broker's log."""

    lines = broker_log.read_text().splitlines()
    began = [_at(line) for line in lines if "received SIGTERM" in line]
    done = [_at(line) for line in lines if "controlled shutdown of broker" in line
            and line.rstrip().endswith("complete")]  # fmt: skip
    return round(done[-1] - began[-1], 1) if began and done else -1.0


def failover(root: Path, brokers: set[int], killed_at: float) -> tuple[float, float]:
    """From the kill until a survivor became the controller, and how long it took
    office (loading, deciding, queueing to every broker), from its log."""
    for broker in brokers:
        lines = (root / f"broker-{broker}" / "broker.log").read_text().splitlines()
        won = [_at(line) for line in lines if "is the controller (epoch" in line]
        took = [line for line in lines if " took office: " in line]
        if won and won[-1] > killed_at and took:
            return round(won[-1] - killed_at, 1), float(took[-1].rsplit(" in ", 1)[1].split()[0])
    return -1.0, -1.0


def _at(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def slow_steps(broker_log: Path) -> dict[str, float]:
    """The steps of the broker's last stop that took a second or more, from its log."""
    steps: dict[str, float] = {}
    for line in broker_log.read_text().splitlines():
        if "received SIGTERM" in line:
            steps = {}
        elif "stopping: " in line and line.rstrip().endswith(" s"):
            what, _, took = line.split("stopping: ", 1)[1].rpartition(" took ")
            steps[what] = float(took.split()[0])
    return steps


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def led_in_zookeeper(zk: ZkClient, topics: list[str], counts: list[int], live: set[int]) -> bool:
    wanted = [TopicPartition(t, p) for t, n in zip(topics, counts, strict=True) for p in range(n)]
    found = BatchedZk(zk).partition_states(wanted)
    return len(found) == len(wanted) and all(s.leader in live for s, _ in found.values())


class LeaderlessSampler:
    """Polls one broker's Metadata in the background: the most partitions seen
    at once with no live leader (leader -1, or a broker that is gone)."""

    def __init__(self, endpoint: str, topics: list[str], live: set[int]) -> None:
        self.endpoint, self.topics, self.live = endpoint, topics, live
        self.worst = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                found = partitions_of(self.endpoint, self.topics)
            except Exception:
                continue
            self.worst = max(self.worst, sum(1 for leader, _ in found if leader not in self.live))


def _controller_id(state: ClusterState) -> int:
    with ZkClient(state.zookeeper_connect) as zk:
        found = zk.get_controller()
    assert found is not None
    return int(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="600,3000", help="partition counts (default 600,3000)")
    parser.add_argument("--topic-partitions", type=int, default=30, help="partitions per topic")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    results = [measure(size, args.topic_partitions) for size in sizes]
    print(json.dumps({"brokers": 3, "replication_factor": RF, "sizes": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
