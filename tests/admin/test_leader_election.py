"""Preferred leader election on real brokers: by command, and by the controller's
own leader rebalance."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until

from annal.cli import main

QUICK = {"zookeeper.session.timeout.ms": "4000", "auto.leader.rebalance.enable": "false"}


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    return {p.partition: p.leader for p in admin.describe_topics([topic])[0].partitions}


def in_sync(admin: AdminClient, topic: str, partition: int) -> list[int]:
    return sorted(admin.describe_topics([topic])[0].partitions[partition].isr)


def fail_over(broker: BrokerProcess, admin: AdminClient, topic: str) -> None:
    """SIGKILL ``broker``, wait for its partitions to move, restart it, wait for it
    to be back in sync: the survivor leads what it led."""
    broker.kill()
    wait_until(lambda: broker.broker_id not in leaders(admin, topic).values(), 60, "failover")
    broker.start()
    wait_until(lambda: in_sync(admin, topic, 0) == [1, 2], 60, "the broker back in sync")


@pytest.mark.timeout(240)
def test_leader_election_command(
    broker_factory: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    brokers = {i: broker_factory(i, QUICK) for i in (1, 2)}
    bs = ["--bootstrap-server", ",".join(b.endpoint for b in brokers.values())]
    with AdminClient(brokers[2].endpoint) as admin:
        admin.create_topic("pref", assignment={0: [1, 2], 1: [2, 1]})
        assert leaders(admin, "pref") == {0: 1, 1: 2}
        fail_over(brokers[1], admin, "pref")
        assert leaders(admin, "pref") == {0: 2, 1: 2}

        assert main(["leader-election", *bs, "--all-topic-partitions"]) == 0
        out = capsys.readouterr().out
        assert "Successfully completed leader election (PREFERRED) for partitions pref-0" in out
        assert "Valid replica already elected for partitions pref-1" in out
        # the answering broker's cache shows it; this one's a moment later
        wait_until(lambda: leaders(admin, "pref") == {0: 1, 1: 2}, 30, "broker 2 told")

        assert main(["leader-election", *bs, "--topic", "pref", "--partition", "0", "--json"]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert json.loads(line)["error"] == "ELECTION_NOT_NEEDED"

        # the preferred replica down: nothing to elect, said why, exit 1
        fail_over(brokers[1], admin, "pref")
        brokers[1].kill()
        wait_until(lambda: in_sync(admin, "pref", 0) == [2], 60, "broker 1 out of the ISR")
        assert main(["leader-election", *bs, "--topic", "pref", "--partition", "0"]) == 1
        out = capsys.readouterr().out
        assert "pref-0: PREFERRED_LEADER_NOT_AVAILABLE the preferred replica 1 is down" in out
        assert leaders(admin, "pref") == {0: 2, 1: 2}

    assert main(["leader-election", *bs, "--topic", "nope"]) == 1
    assert "nope: UNKNOWN_TOPIC_OR_PARTITION unknown topic nope" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        main(["leader-election", *bs])  # neither --topic nor --all-topic-partitions
    assert usage.value.code == 2
    assert main(["leader-election", *bs, "--all-topic-partitions", "--partition", "0"]) == 2
    assert "--partition needs --topic" in capsys.readouterr().err


@pytest.mark.timeout(240)
def test_the_controller_rebalances_leaders_by_itself(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    settings = {**QUICK, "auto.leader.rebalance.enable": "true"}
    settings["leader.imbalance.check.interval.seconds"] = "1"
    brokers = {i: broker_factory(i, settings) for i in (1, 2)}
    with AdminClient(brokers[2].endpoint) as admin:
        admin.create_topic("spread", assignment={0: [1, 2], 1: [2, 1]})
        brokers[1].kill()
        wait_until(lambda: leaders(admin, "spread") == {0: 2, 1: 2}, 60, "failover")
        brokers[1].start()
        wait_until(lambda: leaders(admin, "spread") == {0: 1, 1: 2}, 60, "broker 1 leading again")
