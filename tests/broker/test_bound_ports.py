"""A broker whose listeners name port 0 binds ports the kernel picks, registers
those, and logs where it serves: clients reach it at the ports it reports."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.zk.client import ZkClient
from kafka import KafkaProducer

pytestmark = pytest.mark.timeout(120)


def test_port_zero_is_bound_registered_and_reported(zk_connect: str, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "annal", "broker", "start", "broker.id=7",
         f"zookeeper.connect={zk_connect}", f"log.dirs={tmp_path / 'logs'}",
         "listeners=GRPC://127.0.0.1:0,PLAINTEXT://127.0.0.1:0", "metrics.port=0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        metrics_port = 0
        for line in process.stdout:  # its log, on stderr without --log-file
            bound = re.search(r"metrics on http://[\d.]+:(\d+)/metrics", line)
            if bound:
                metrics_port = int(bound.group(1))
            if "broker 7 serving on" in line:
                break
        else:
            pytest.fail("the broker ended without saying where it serves")
        found = re.search(
            r"serving on 127\.0\.0\.1:(\d+) and Kafka's protocol on "
            r"PLAINTEXT://127\.0\.0\.1:(\d+)",
            line,
        )
        assert found, line
        # the rest of its output is read on, so that a full pipe never holds the broker
        threading.Thread(target=process.stdout.read, daemon=True).start()
        grpc_port, kafka_port = (int(p) for p in found.groups())
        assert 0 not in (grpc_port, kafka_port, metrics_port)
        with ZkClient(zk_connect) as zk:
            registered = zk.get_broker(7)
        assert registered is not None
        assert (registered.port, registered.kafka_port) == (grpc_port, kafka_port)
        with AdminClient(f"127.0.0.1:{grpc_port}") as admin:
            admin.create_topic("reached", 1)
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{kafka_port}")
        try:
            producer.send("reached", b"v").get(timeout=30)
        finally:
            producer.close()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
