"""Partition health as kafka-topics.sh filters it (``annal topics --describe
--under-replicated-partitions`` and its siblings) and log dirs as kafka-log-dirs.sh
describes them, on real brokers."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from runcli import annal

FAST = {"replica.lag.time.max.ms": "1500", "zookeeper.session.timeout.ms": "6000"}


def listed(bootstrap: str, condition: str) -> list[tuple[str, int]]:
    run = annal("topics", "--describe", "--bootstrap-server", bootstrap, f"--{condition}",
                "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    return [(p["topic"], p["partition"]) for p in json.loads(run.stdout)]


@pytest.mark.timeout(240)
def test_describe_filters_partitions_by_health(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = {i: broker_factory(i, settings=FAST) for i in (1, 2)}
    bootstrap = brokers[1].endpoint
    with AdminClient(bootstrap) as admin:
        admin.create_topic("pair", assignment={0: [1, 2], 1: [2, 1]},
                           config={"min.insync.replicas": "2"})  # fmt: skip
        admin.create_topic("lonely", assignment={0: [2]})
        admin.create_topic("safe", assignment={0: [1]})
        wait_until(
            lambda: all(len(p.isr) == 2 for p in admin.describe_topics(["pair"])[0].partitions),
            30,
            "pair in sync",
        )
        for condition in ("under-replicated-partitions", "unavailable-partitions",
                          "under-min-isr-partitions"):  # fmt: skip
            assert listed(bootstrap, condition) == []
        healthy = annal("topics", "describe", "--bootstrap-server", bootstrap,
                        "--under-replicated-partitions")  # fmt: skip
        assert healthy.returncode == 0 and healthy.stdout == ""

        brokers[2].kill()
        wait_until(
            lambda: all(
                p.leader == 1 and p.isr == (1,)
                for p in admin.describe_topics(["pair"])[0].partitions
            ),
            60,
            "broker 1 alone leads pair",
        )
        wait_until(
            lambda: admin.describe_topics(["lonely"])[0].partitions[0].leader < 0,
            60,
            "lonely offline",
        )
    assert listed(bootstrap, "under-replicated-partitions") == [("pair", 0), ("pair", 1)]
    assert listed(bootstrap, "unavailable-partitions") == [("lonely", 0)]
    assert listed(bootstrap, "under-min-isr-partitions") == [("pair", 0), ("pair", 1)]
    assert ("safe", 0) in listed(bootstrap, "at-min-isr-partitions")
    text = annal("topics", "describe", "--bootstrap-server", bootstrap, "--unavailable-partitions")
    assert text.stdout.startswith("\tTopic: lonely\tPartition: 0\tLeader: none\t"), text.stdout
    assert text.stdout.rstrip().endswith("Offline: 2") and len(text.stdout.splitlines()) == 1
    both = annal("topics", "describe", "--bootstrap-server", bootstrap,
                 "--under-replicated-partitions", "--unavailable-partitions")  # fmt: skip
    assert both.returncode == 2 and "not allowed with" in both.stderr


@pytest.mark.timeout(120)
def test_log_dirs_describe_sizes_per_partition_and_dir(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = {i: broker_factory(i) for i in (1, 2)}
    bootstrap = brokers[1].endpoint
    with AdminClient(bootstrap) as admin:
        admin.create_topic("sized", assignment={0: [1], 1: [2]})
        admin.create_topic("other", assignment={0: [1]})
    with Producer(bootstrap) as producer:
        for _ in range(20):
            producer.send("sized", value=b"v" * 1000, partition=0)
        producer.flush()

    run = annal("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--topic-list",
                "sized", "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    described = json.loads(run.stdout)
    assert described["version"] == 1
    assert [b["broker"] for b in described["brokers"]] == [1, 2]
    (one,) = described["brokers"][0]["logDirs"]
    assert one["logDir"] == str(brokers[1].log_dir.resolve()) and one["error"] is None
    assert one["totalBytes"] > 0 and 0 < one["usableBytes"] <= one["totalBytes"]
    (p0,) = one["partitions"]
    assert p0["partition"] == "sized-0" and p0["size"] > 20_000 and p0["offsetLag"] == 0
    sizes = {p.name: p.stat().st_size for p in (brokers[1].log_dir / "sized-0").glob("*.log")}
    assert p0["size"] == sum(sizes.values())
    assert [p["partition"] for p in described["brokers"][1]["logDirs"][0]["partitions"]] == [
        "sized-1"
    ]

    table = annal("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--broker-list", "1")
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0].split()[:2] == ["BROKER", "PARTITION"]
    assert sorted(r.split()[1] for r in rows[1:]) == ["other-0", "sized-0"]
    unknown = annal("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--broker-list", "7")
    assert unknown.returncode == 1 and "no live broker with id 7" in unknown.stderr
    bad = annal("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--broker-list", "x")
    assert bad.returncode == 2 and "--broker-list 'x'" in bad.stderr
