"""A broker whose disk starts failing its writes with EIO (injected with libfiu:
the broker runs under ``fiu-run -x``, and ``fiu-ctrl`` turns the failure of
``writev``, the call every log append makes, on while producers write): its
only log dir goes offline, it stops cleanly, the partition it led and the one it
followed move on within seconds with acks=all, nothing acknowledged is lost, and
restarted it catches up to byte-identical copies."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.zk.client import ZkClient
from environment import require_command
from replicas import copy_of, stored_offsets

from annal.errors import AnnalError

pytestmark = pytest.mark.timeout(240)

EIO = 5
SETTINGS = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "30000"}


def state_of(zk_connect: str, partition: int) -> tuple[int, tuple[int, ...]]:
    with ZkClient(zk_connect) as zk:
        found = zk.get_partition_state("eio", partition)
    assert found is not None
    return found[0].leader, tuple(sorted(found[0].isr))


def test_injected_eio_moves_leadership_and_loses_nothing(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str
) -> None:
    fiu_run = require_command("fiu-run", "make setup installs fiu-utils")
    fiu_ctrl = require_command("fiu-ctrl", "make setup installs fiu-utils")
    one = broker_factory(1, SETTINGS)
    two = broker_factory(2, SETTINGS)
    three = broker_factory(3, SETTINGS, wrapper=[fiu_run, "-x"])
    with AdminClient(one.endpoint) as admin:
        admin.create_topic("eio", assignment={0: [3, 1, 2], 1: [1, 2, 3]})
    wait_until(lambda: all(len(state_of(zk_connect, p)[1]) == 3 for p in (0, 1)), 30, "ISRs")

    acknowledged: dict[int, list[tuple[int, float]]] = {0: [], 1: []}
    stop = threading.Event()

    def produce() -> None:
        with Producer(one.endpoint, acks="all", request_timeout_ms=3000) as producer:
            i = 0
            while not stop.is_set():
                futures = [(p, producer.send("eio", b"v%d" % i, partition=p)) for p in (0, 1)]
                for p, future in futures:
                    try:
                        acknowledged[p].append((future.result(30).offset, time.monotonic()))
                    except AnnalError:
                        pass  # retried and refused: not acknowledged, may or may not be stored
                i += 1

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    wait_until(lambda: len(acknowledged[0]) > 50 and len(acknowledged[1]) > 50, 30, "traffic")
    assert three.pid is not None
    failing = time.monotonic()
    command = f"enable name=posix/io/rw/writev,failinfo={EIO}"
    subprocess.run([fiu_ctrl, "-c", command, str(three.pid)], check=True)

    def moved() -> bool:
        return all(state_of(zk_connect, p) == (state_of(zk_connect, p)[0], (1, 2)) and
                   state_of(zk_connect, p)[0] != 3 for p in (0, 1))  # fmt: skip

    wait_until(moved, 15, "leadership and ISR places away from broker 3")
    moved_after = time.monotonic() - failing
    wait_until(
        lambda: all(any(t > failing + 0.5 for _, t in acknowledged[p]) for p in (0, 1)),
        15,
        "acks=all writes acknowledged again on both partitions",
    )
    resumed_after = max(min(t for _, t in acknowledged[p] if t > failing + 0.5) for p in (0, 1))
    print(f"moved {moved_after:.1f} s, acks=all again {resumed_after - failing:.1f} s after EIO")
    assert moved_after < 5 and resumed_after - failing < 8
    assert three.process is not None and three.process.wait(60) == 1  # it stopped by itself
    log = three.log_path.read_text()
    assert "is offline" in log and "Input/output error" in log
    stop.set()
    writer.join(60)

    three.wrapper = []  # the disk is healthy again
    three.start()
    wait_until(lambda: all(3 in state_of(zk_connect, p)[1] for p in (0, 1)), 60, "3 back in")
    wait_until(
        lambda: all(
            copy_of([one.log_dir], "eio", p)
            == copy_of([two.log_dir], "eio", p)
            == copy_of([three.log_dir], "eio", p)
            for p in (0, 1)
        ),
        60,
        "byte-identical copies",
    )
    with SimpleConsumer(one.endpoint) as consumer:
        for p in (0, 1):
            assert {o for o, _ in acknowledged[p]} <= stored_offsets(consumer, "eio", p), p
