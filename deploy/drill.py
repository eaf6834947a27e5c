"""The failover drill: crash leaders of a local cluster while records flow, then
check that nothing acknowledged was lost.

``run_drill`` creates (or reuses) a replicated topic, keeps an ``acks=all``
producer sending at a steady rate, and for each round SIGKILLs the broker
leading partition 0, waits for the controller to elect another leader,
restarts the broker, waits until it is back in every ISR, and hands
leaderships back to preferred replicas.  Then it reads every partition back
and checks each acknowledged record at its acknowledged offset, and that none
is stored twice (the producer is idempotent).  Each step is
reported as one event (a dict) as it happens; the last one is the summary.
"""

from __future__ import annotations

import functools
import itertools
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from annal.admin.client import AdminClient, AdminError
from annal.consumer.simple import SimpleConsumer
from annal.deploy.cluster import ClusterError, LocalCluster
from annal.deploy.runner import wait_until
from annal.producer.producer import Producer, RecordFuture

from annal import errors

Report = Callable[[dict[str, Any]], None]


@dataclass
class DrillSettings:
    topic: str = "drill"
    partitions: int = 3
    rounds: int = 2
    rate: int = 500  # records per second
    timeout_s: float = 60.0


@dataclass
class _Acks:
    """What the producer heard back; written from its I/O threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    at: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> partition, offset
    times: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def note(self, value: bytes, future: RecordFuture) -> None:
        error = future.exception()
        with self.lock:
            if error is not None:
                self.errors.append(str(error))
            else:
                meta = future.result()
                self.at[value] = (meta.partition, meta.offset)
                self.times.append(time.monotonic())

    def count(self) -> int:
        with self.lock:
            return len(self.at)


def run_drill(cluster: LocalCluster, settings: DrillSettings, report: Report) -> bool:
    """Run the drill; True when no acknowledged record was lost."""
    status = cluster.status()
    alive = [b for b in status["brokers"] if b["alive"]]
    if len(alive) < 2:
        raise ClusterError(f"a drill needs at least 2 live brokers; {len(alive)} alive")
    bootstrap = ",".join(b["endpoint"] for b in alive)
    replication = min(3, len(alive))
    min_insync = max(1, replication - 1)
    with AdminClient(bootstrap, timeout_s=settings.timeout_s) as admin:
        try:
            admin.create_topic(
                settings.topic,
                settings.partitions,
                replication,
                {"min.insync.replicas": str(min_insync)},
            )
        except AdminError as exc:
            if exc.code is not errors.TOPIC_ALREADY_EXISTS:
                raise
        report(
            {
                "event": "topic_ready",
                "topic": settings.topic,
                "partitions": settings.partitions,
                "replication_factor": replication,
                "min_insync_replicas": min_insync,
            }
        )
        acks = _Acks()
        stop = threading.Event()
        producing = threading.Thread(
            target=_produce, args=(bootstrap, settings, acks, stop), name="drill-producer"
        )
        started = time.monotonic()
        producing.start()
        try:
            for round_number in range(1, settings.rounds + 1):
                _round(cluster, admin, settings, acks, round_number, report)
            _wait_for_acks(acks, acks.count() + settings.rate, settings.timeout_s)
        finally:
            stop.set()
            producing.join(settings.timeout_s * 2)
        return _verify(bootstrap, settings, acks, time.monotonic() - started, report)


def _produce(bootstrap: str, settings: DrillSettings, acks: _Acks, stop: threading.Event) -> None:
    interval = 1.0 / max(settings.rate, 1)
    with Producer(
        bootstrap,
        acks="all",
        retries=1_000_000,
        retry_backoff_ms=100,
        linger_ms=5,
        enable_idempotence=True,  # a retry of an acknowledged batch is not stored twice
    ) as producer:
        n = 0
        next_send = time.monotonic()
        while not stop.is_set():
            value = b"drill-%09d" % n
            future = producer.send(settings.topic, value=value)
            future.add_done_callback(functools.partial(acks.note, value))
            n += 1
            next_send += interval
            delay = next_send - time.monotonic()
            if delay > 0:
                stop.wait(delay)
        producer.flush(settings.timeout_s * 2)


def _wait_for_acks(acks: _Acks, target: int, timeout_s: float) -> None:
    wait_until(lambda: acks.count() >= target, timeout_s, f"{target} acknowledged records")


def _leaders(admin: AdminClient, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, ISR)."""
    (info,) = admin.describe_topics([topic])
    return {p.partition: (p.leader, p.isr) for p in info.partitions}


def _round(
    cluster: LocalCluster,
    admin: AdminClient,
    settings: DrillSettings,
    acks: _Acks,
    number: int,
    report: Report,
) -> None:
    _wait_for_acks(acks, acks.count() + settings.rate, settings.timeout_s)
    victim, _ = _leaders(admin, settings.topic)[0]
    leaders = _leaders(admin, settings.topic)
    led = sorted(p for p, (leader, _) in leaders.items() if leader == victim)
    report({"event": "kill", "round": number, "broker": victim, "leading": led})
    killed = time.monotonic()
    cluster.signal_broker(victim, signal.SIGKILL)

    def moved() -> bool:
        leaders = _leaders(admin, settings.topic)
        return all(leaders[p][0] not in (-1, victim) for p in led)

    wait_until(moved, settings.timeout_s, "new leaders elected")
    report(
        {
            "event": "leaders_elected",
            "round": number,
            "leaders": {str(p): lead for p, (lead, _) in _leaders(admin, settings.topic).items()},
            "after_ms": round((time.monotonic() - killed) * 1000),
        }
    )
    _wait_for_acks(acks, acks.count() + settings.rate // 2, settings.timeout_s)
    cluster.start_broker(victim)
    restarted = time.monotonic()
    report({"event": "broker_restarted", "round": number, "broker": victim})

    def in_sync() -> bool:
        return all(victim in isr for _, isr in _leaders(admin, settings.topic).values())

    wait_until(in_sync, settings.timeout_s, f"broker {victim} back in every ISR")
    report(
        {
            "event": "back_in_sync",
            "round": number,
            "broker": victim,
            "after_ms": round((time.monotonic() - restarted) * 1000),
        }
    )
    outcomes = admin.elect_preferred_leaders({settings.topic: []})
    report(
        {
            "event": "preferred_leaders_restored",
            "round": number,
            "elected": [o.partition for o in outcomes if o.error is errors.NONE],
        }
    )


def _verify(
    bootstrap: str, settings: DrillSettings, acks: _Acks, elapsed_s: float, report: Report
) -> bool:
    stored: dict[tuple[int, int], bytes | None] = {}
    seen: dict[bytes | None, int] = {}
    with SimpleConsumer(bootstrap) as consumer:
        for partition in range(settings.partitions):
            for record in consumer.iterate(settings.topic, partition, 0):
                stored[(partition, record.offset)] = record.value
                seen[record.value] = seen.get(record.value, 0) + 1
    with acks.lock:
        lost = [v for v, at in acks.at.items() if stored.get(at) != v]
        times = sorted(acks.times)
        errors = list(acks.errors)
        acked = len(acks.at)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    duplicates = sum(n - 1 for v, n in seen.items() if v in acks.at and n > 1)
    summary = {
        "event": "summary",
        "acked": acked,
        "lost": len(lost),
        "lost_examples": [v.decode() for v in lost[:5]],
        "duplicates": duplicates,
        "send_errors": len(errors),
        "max_ack_gap_ms": round(max(gaps, default=0.0) * 1000),
        "rounds": settings.rounds,
        "elapsed_s": round(elapsed_s, 1),
        "ok": not lost and not duplicates,
    }
    report(summary)
    return not lost and not duplicates
