"""``annal cluster``: up, status --json, kill, start, stop, down, as a user runs them."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from kafka.admin import KafkaAdminClient
from runcli import annal


@pytest.mark.timeout(300)
def test_local_cluster_lifecycle(tmp_path: Path) -> None:
    d = str(tmp_path / "cluster")
    wrong = annal("cluster", "up", "--dir", d, "--override", "num.partitons=3")
    assert wrong.returncode == 1 and "did you mean 'num.partitions'" in wrong.stderr
    no_broker = annal("cluster", "up", "--brokers", "2", "--dir", d,
                      "--broker-override", "9:broker.rack=r9")  # fmt: skip
    assert no_broker.returncode == 1 and "no broker 9 (the brokers are 1..2)" in no_broker.stderr
    malformed = annal("cluster", "up", "--dir", d, "--broker-override", "broker.rack=r1")
    assert malformed.returncode == 2 and "expected ID:NAME=VALUE" in malformed.stderr
    up = annal(  # options after the action
        "cluster", "up", "--brokers", "2", "--dir", d, "--override", "num.partitions=3",
        "--broker-override", "2:broker.rack=rack-b",
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert "bootstrap servers: 127.0.0.1:" in up.stdout and "/annal" in up.stdout
        assert "Kafka bootstrap servers: 127.0.0.1:" in up.stdout
        # progress while it waits, on stderr: ZooKeeper, the brokers, the controller
        assert "ZooKeeper serving on" in up.stderr and "is the controller" in up.stderr
        status = json.loads(annal("cluster", "status", "--json", "--dir", d).stdout)
        assert set(status) >= {"zookeeper", "controller", "brokers", "dir"}
        assert status["zookeeper"].endswith("/annal")
        assert status["controller"] in (1, 2)
        assert [(b["id"], b["alive"]) for b in status["brokers"]] == [(1, True), (2, True)]
        assert all(
            {"id", "endpoint", "kafka_endpoint", "pid", "alive"} <= set(b)
            for b in status["brokers"]
        )
        kafka_endpoints = [b["kafka_endpoint"] for b in status["brokers"]]
        assert all(e.startswith("127.0.0.1:") for e in kafka_endpoints)
        assert kafka_endpoints[0] != kafka_endpoints[1]
        # the local runner serves each broker's metrics, and status tells where
        for b in status["brokers"]:
            with urllib.request.urlopen(f"http://{b['metrics_endpoint']}/metrics") as scrape:
                assert b"annal_server_replicamanager_leadercount" in scrape.read()
        assert status["partitions"] == {
            "partitions": 0, "under-replicated": 0, "unavailable": 0, "under-min-isr": 0,
            "at-min-isr": 0,
        }  # fmt: skip
        with AdminClient(status["brokers"][0]["endpoint"]) as admin:  # the override's default
            admin.create_topic("defaults")
            assert len(admin.describe_topics(["defaults"])[0].partitions) == 3
        state = json.loads((Path(d) / "cluster.json").read_text())
        assert state["overrides"] == {"num.partitions": "3"}  # restarted brokers take it too
        assert state["broker_overrides"] == {"2": {"broker.rack": "rack-b"}}
        kafka = KafkaAdminClient(bootstrap_servers=status["brokers"][0]["kafka_endpoint"])
        try:  # one broker's own setting: its rack in Metadata
            racks = {b["broker_id"]: b["rack"] for b in kafka.describe_cluster()["brokers"]}
        finally:
            kafka.close()
        assert racks == {1: None, 2: "rack-b"}
        text = annal("cluster", "status", "--dir", d).stdout
        assert "metrics=127.0.0.1:" in text and "under-replicated=0" in text

        # the kernel picked every port (none was chosen before the broker bound it)
        addresses = [(b["endpoint"], b["kafka_endpoint"], b["metrics_endpoint"])
                     for b in status["brokers"]]  # fmt: skip
        assert not any(a.endswith(":0") for broker in addresses for a in broker)
        killed = annal("cluster", "--dir", d, "kill", "2")
        assert killed.returncode == 0 and "broker 2 killed (SIGKILL)" in killed.stdout
        status = json.loads(annal("cluster", "--dir", d, "status", "--json").stdout)
        assert [b["alive"] for b in status["brokers"]] == [True, False]
        again = annal("cluster", "--dir", d, "kill", "2")
        assert again.returncode == 1 and "broker 2 is not running" in again.stderr
        started = annal("cluster", "--dir", d, "start", "2")
        assert started.returncode == 0, started.stderr
        assert "broker 2 started: registered and serving metadata in" in started.stdout
        status = json.loads(annal("cluster", "--dir", d, "status", "--json").stdout)
        again_at = [(b["endpoint"], b["kafka_endpoint"], b["metrics_endpoint"])
                    for b in status["brokers"]]  # fmt: skip
        assert again_at == addresses  # a restarted broker keeps its addresses
        stopped = annal("cluster", "--dir", d, "stop", "1")
        assert stopped.returncode == 0 and "broker 1 stopped in" in stopped.stdout
        status = json.loads(annal("cluster", "--dir", d, "status", "--json").stdout)
        assert [b["alive"] for b in status["brokers"]] == [False, True]
        unknown = annal("cluster", "--dir", d, "stop", "9")
        assert unknown.returncode == 1 and "no broker 9" in unknown.stderr
    finally:
        down = annal("cluster", "--dir", d, "down")
    assert down.returncode == 0, down.stderr
    missing = annal("cluster", "--dir", d, "status")
    assert missing.returncode == 1 and "no cluster in" in missing.stderr
    bad = annal("cluster", "--dir", d, "up", "--brokers", "x")
    assert bad.returncode == 2


@pytest.mark.timeout(300)
def test_failover_drill(tmp_path: Path) -> None:
    """``annal cluster drill``: a leader crashes while an acks=all producer runs, and
    every acknowledged record is found at its offset afterwards."""
    d = str(tmp_path / "cluster")
    up = annal("cluster", "--dir", d, "up", "--brokers", "3")
    try:
        assert up.returncode == 0, up.stderr
        drill = annal("cluster", "--dir", d, "drill", "--rounds", "1", "--rate", "300", "--json")
        assert drill.returncode == 0, drill.stdout + drill.stderr
        events = [json.loads(line) for line in drill.stdout.splitlines()]
        assert [e["event"] for e in events] == [
            "topic_ready", "kill", "leaders_elected", "broker_restarted", "back_in_sync",
            "preferred_leaders_restored", "summary",
        ]  # fmt: skip
        assert events[0]["replication_factor"] == 3 and events[0]["min_insync_replicas"] == 2
        summary = events[-1]
        assert summary["ok"] and summary["lost"] == 0 and summary["acked"] > 600
        assert summary["duplicates"] == 0  # the drill's producer is idempotent
        assert events[1]["broker"] not in events[2]["leaders"].values()
        assert annal("cluster", "--dir", d, "kill", "2").returncode == 0
        assert annal("cluster", "--dir", d, "kill", "3").returncode == 0
        alone = annal("cluster", "--dir", d, "drill")
        assert alone.returncode == 1 and "needs at least 2 live brokers" in alone.stderr
    finally:
        assert annal("cluster", "--dir", d, "down").returncode == 0
