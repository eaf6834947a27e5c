"""``annal console-consumer --group``: a group member that commits what it printed,
so the next member of the group goes on where it stopped."""

from __future__ import annotations

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from annal.producer.producer import Producer
from runcli import annal


@pytest.mark.timeout(180)
def test_console_consumers_of_one_group_go_on_where_the_last_stopped(
    broker: BrokerProcess, zk_connect: str
) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("lines", 2)
    with Producer(broker.endpoint) as producer:
        for i in range(10):
            producer.send("lines", value=b"line-%d" % i, partition=i % 2)
        producer.flush(30)

    def consume(*extra: str) -> list[str]:
        run = annal("console-consumer", "--zookeeper", zk_connect, "--topic", "lines",
                    "--group", "printers", "--from-beginning", "--timeout-ms", "4000",
                    *extra)  # fmt: skip
        assert run.returncode == 0, run.stderr
        return run.stdout.splitlines()

    first = consume("--max-messages", "4")
    second = consume("--max-messages", "3")
    rest = consume()
    assert len(first) == 4 and len(second) == 3
    seen = first + second + rest
    assert sorted(seen) == sorted(f"line-{i}" for i in range(10)), seen  # each once
    assert consume() == []  # everything committed: nothing left for the group

    described = annal("consumer-groups", "--zookeeper", zk_connect, "--describe", "--group",
                      "printers", "--json")  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert '"lag": 0' in described.stdout and described.stdout.count("\n") == 2

    bad = annal("console-consumer", "--bootstrap-server", broker.endpoint, "--topic", "lines",
                "--group", "printers", "--partition", "0")  # fmt: skip
    assert bad.returncode == 2 and "--group takes no --partition" in bad.stderr
