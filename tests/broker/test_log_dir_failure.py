"""A broker whose log dir fills up (a real 2 MiB tmpfs) takes that dir offline and the
controller moves its replicas' leaderships (where it led) and ISR places (where it
followed) away within seconds;
partitions on its other dir keep it in their ISRs; acks=all writes go on;
nothing acknowledged is lost; after a restart with space freed it rejoins."""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.storage import files
from annal.zk.client import ZkClient
from replicas import copy_of, stored_offsets
from small_disk import small_disk as mounted

from annal.errors import AnnalError

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4
VALUE = b"x" * 2000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (a disk that fills up for real); needs root."""
    with mounted(tmp_path / "small", "2m") as disk:
        yield disk


def isr_of(zk_connect: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, isr), from ZooKeeper."""
    out = {}
    with ZkClient(zk_connect) as zk:
        for p in range(PARTITIONS):
            found = zk.get_partition_state(topic, p)
            assert found is not None
            out[p] = (found[0].leader, tuple(sorted(found[0].isr)))
    return out


def test_a_full_log_dir_moves_leadership_and_isr_away_and_loses_nothing(
    broker_factory: Callable[..., BrokerProcess],
    zk_connect: str,
    small_disk: Path,
    tmp_path: Path,
) -> None:
    settings = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "30000",
                "log.segment.bytes": "262144"}  # fmt: skip
    one = broker_factory(1, settings)
    two = broker_factory(2, settings)
    big = tmp_path / "big"
    three = broker_factory(
        3, {**settings, "log.dirs": f"{small_disk},{big}", "metrics.port": "0"}
    )
    with AdminClient(one.endpoint) as admin:
        # broker 3 leads 0 and 3, follows 1 and 2; its dirs take them in turn, so
        # the small one holds a partition it leads and one it follows
        assignment = {0: [3, 1, 2], 1: [1, 2, 3], 2: [1, 2, 3], 3: [3, 1, 2]}
        admin.create_topic("filling", assignment=assignment)

        def placed() -> dict[str, set[int]]:
            dirs = admin.describe_log_dirs([3], ["filling"])
            return {d.path: {p.partition for p in d.partitions} for d in dirs}

        wait_until(lambda: sum(map(len, placed().values())) == PARTITIONS, 30, "logs on 3")
        where = placed()
    on_small, on_big = where[str(small_disk)], where[str(big.resolve())]
    assert {assignment[p][0] == 3 for p in on_small} == {True, False}, on_small
    assert on_small and on_big and on_small | on_big == set(range(PARTITIONS))

    acknowledged: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    # the partitions on the healthy dir are written all along, by a producer of
    # their own, and each acknowledgement's time kept
    acked_at: dict[int, list[float]] = {p: [] for p in on_big}
    stop = threading.Event()

    def keep_writing() -> None:
        with Producer(one.endpoint, acks="all", request_timeout_ms=5000) as healthy:
            while not stop.is_set():
                for p in sorted(on_big):
                    acknowledged[p].append(healthy.send("filling", b"h", partition=p)
                                           .result(30).offset)  # fmt: skip
                    acked_at[p].append(time.monotonic())

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    first_refusal: float | None = None
    with Producer(one.endpoint, acks="all", request_timeout_ms=5000, retries=0,
                  max_block_ms=10_000) as producer:  # fmt: skip
        for _ in range(2000):
            futures = [(p, producer.send("filling", VALUE, partition=p)) for p in sorted(on_small)]
            for p, future in futures:
                try:
                    acknowledged[p].append(future.result(30).offset)
                except AnnalError:
                    first_refusal = first_refusal or time.monotonic()
            if first_refusal is not None:
                break
    assert first_refusal is not None, "the small disk never filled up"

    def moved() -> bool:
        states = isr_of(zk_connect, "filling")
        return all(
            (3 not in states[p][1] and states[p][0] != 3) if p in on_small else 3 in states[p][1]
            for p in range(PARTITIONS)
        )

    wait_until(moved, 10, "broker 3 out of the ISRs of its partitions on the full dir")
    moved_after = time.monotonic() - first_refusal
    print(f"ISRs and leaders moved {moved_after:.1f} s after the first refused write")
    assert moved_after < 5
    assert "log dir" in three.log_path.read_text() and "is offline" in three.log_path.read_text()

    # acks=all goes on everywhere, within seconds
    with Producer(one.endpoint, acks="all", request_timeout_ms=5000) as producer:
        for p in range(PARTITIONS):
            sent = producer.send("filling", b"after", partition=p)
            acknowledged[p].append(sent.result(30).offset)
    resumed_after = time.monotonic() - first_refusal
    print(f"acks=all writes to every partition acknowledged {resumed_after:.1f} s after it")
    assert resumed_after < 10
    with AdminClient(one.endpoint) as admin:
        offline = {d.path: d for d in admin.describe_log_dirs([3])}
    assert offline[str(small_disk)].error.name == "KAFKA_STORAGE_ERROR"
    with urllib.request.urlopen(f"http://{three.metrics_endpoint}/metrics", timeout=10) as page:
        assert "annal_log_logmanager_offlinelogdirectorycount 1.0" in page.read().decode()
    counts = {p: len(t) for p, t in acked_at.items()}
    wait_until(lambda: all(len(acked_at[p]) > counts[p] + 20 for p in acked_at), 30,
               "the healthy dir's partitions still written")  # fmt: skip
    stop.set()
    writer.join(60)
    for p, times in acked_at.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        print(f"partition {p} (healthy dir): longest wait between acknowledgements "
              f"{max(gaps):.2f} s")  # fmt: skip
        assert max(gaps) < 2.0, p

    # nothing acknowledged is lost
    with SimpleConsumer(one.endpoint) as consumer:
        for p in range(PARTITIONS):
            assert set(acknowledged[p]) <= stored_offsets(consumer, "filling", p), p

    # space returns (the tmpfs grows), broker 3 restarts: recovery, then it catches
    # up and is back in every ISR
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    three.kill()
    three.start()
    wait_until(
        lambda: all(3 in isr for _, isr in isr_of(zk_connect, "filling").values()),
        60,
        "broker 3 back in every ISR",
    )
    with AdminClient(one.endpoint) as admin:
        back = {d.path: d for d in admin.describe_log_dirs([3])}
    assert back[str(small_disk)].error.name == "NONE"

    def identical() -> bool:
        return all(
            copy_of([one.log_dir], "filling", p)
            == copy_of([two.log_dir], "filling", p)
            == copy_of([small_disk, big], "filling", p)
            for p in range(PARTITIONS)
        )

    wait_until(identical, 60, "the three copies of every partition byte-identical")


def test_a_broker_whose_every_log_dir_fails_shuts_down_cleanly(
    broker_factory: Callable[..., BrokerProcess], small_disk: Path
) -> None:
    broker = broker_factory(1, {"log.dirs": str(small_disk)})
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("only", 1, 1)
    refused = False
    with Producer(broker.endpoint, acks=1, retries=0, request_timeout_ms=5000) as producer:
        for _ in range(2000):
            try:
                producer.send("only", VALUE, partition=0).result(30)
            except AnnalError:
                refused = True
                break
    assert refused, "the small disk never filled up"
    assert broker.process is not None
    assert broker.process.wait(60) == 1
    log = broker.log_path.read_text()
    assert "every log dir of broker 1 is offline: shutting down" in log
    assert "broker 1 stopped cleanly" in log
    assert not (small_disk / files.CLEAN_SHUTDOWN_FILE).exists()  # recovery runs next time


def test_kafka_clients_are_answered_kafka_storage_error_for_an_offline_dir(
    broker_factory: Callable[..., BrokerProcess], small_disk: Path, tmp_path: Path
) -> None:
    """On Kafka's protocol too: with no other replica to move to, the partition on
    the full dir answers KAFKA_STORAGE_ERROR (56), the one on the other dir is
    written on."""
    big = tmp_path / "big"
    broker = broker_factory(1, {"log.dirs": f"{small_disk},{big}"})
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("kafka-side", 2, 1)
        wait_until(lambda: sum(len(d.partitions) for d in admin.describe_log_dirs([1])) >= 2,
                   30, "both logs")  # fmt: skip
        where = {d.path: {p.partition for p in d.partitions if p.topic == "kafka-side"}
                 for d in admin.describe_log_dirs([1])}  # fmt: skip
    (full,) = where[str(small_disk)]
    (fine,) = where[str(big.resolve())]
    producer = ck.Producer({"bootstrap.servers": broker.kafka_endpoint, "acks": "1",
                            "retries": 0, "enable.idempotence": False,
                            "message.timeout.ms": 10000})  # fmt: skip
    failures: list[ck.KafkaError] = []
    for _ in range(2000):
        producer.produce("kafka-side", VALUE, partition=full,
                         on_delivery=lambda e, _m: e and failures.append(e))  # fmt: skip
        producer.flush(10)
        if failures:
            break
    assert failures and failures[0].code() == ck.KafkaError.KAFKA_STORAGE_ERROR, failures
    delivered: list[object] = []
    producer.produce("kafka-side", b"fine", partition=fine,
                     on_delivery=lambda e, _m: delivered.append(e))  # fmt: skip
    producer.flush(10)
    assert delivered == [None]
