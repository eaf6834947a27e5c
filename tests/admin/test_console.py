"""console-producer and console-consumer as processes, against a real broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from runcli import annal


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    process = broker_factory()
    with AdminClient(process.endpoint) as admin:
        admin.create_topic("lines", partitions=2)
    return process


@pytest.mark.timeout(180)
def test_console_round_trip(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.endpoint]
    lines = "a:one\nb:two\nc:three\nno separator\n"
    sent = annal("console-producer", *bs, "--topic", "lines", "--property", "parse.key=true",
                 "--property", "key.separator=:", stdin=lines)  # fmt: skip
    assert sent.returncode == 1 and "line 4: no key separator" in sent.stderr
    read = annal("console-consumer", *bs, "--topic", "lines", "--from-beginning",
                 "--max-messages", "3", "--property", "print.key=true")  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.splitlines()) == ["a\tone", "b\ttwo", "c\tthree"]
    one = annal("console-consumer", *bs, "--topic", "lines", "--partition", "0", "--offset",
                "earliest", "--timeout-ms", "500", "--property", "print.offset=true")  # fmt: skip
    assert one.returncode == 0 and "Processed a total of" in one.stderr
    assert all(line.startswith("Offset:") for line in one.stdout.splitlines())
    bad = annal("console-consumer", *bs, "--topic", "lines", "--offset", "5")
    assert bad.returncode == 2 and "--offset needs --partition" in bad.stderr
    missing = annal(
        "console-producer", *bs, "--topic", "nope", "--max-block-ms", "500", stdin="x\n"
    )
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
