"""verifiable-producer and verifiable-consumer: JSON events a drill can check."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess


def events(*args: str) -> list[dict[str, object]]:
    result = subprocess.run(
        [sys.executable, "-m", "annal", *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.timeout(180)
def test_every_acknowledged_value_is_read_back(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("drill", partitions=3)
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "drill"]
    produced = events("verifiable-producer", *bs, "--max-messages", "500", "--acks", "1")
    names = [e["name"] for e in produced]
    assert names[0] == "startup_complete" and names[-2:] == ["shutdown_complete", "tool_data"]
    acked = [e for e in produced if e["name"] == "producer_send_success"]
    assert len(acked) == 500
    assert {str(i) for i in range(500)} == {e["value"] for e in acked}
    assert all({"topic", "partition", "offset", "key", "value"} <= set(e) for e in acked)
    assert produced[-1]["sent"] == 500 and produced[-1]["acked"] == 500

    consumed = events("verifiable-consumer", *bs, "--timeout-ms", "1000", "--verbose")
    assert consumed[0]["name"] == "startup_complete"
    assert consumed[1]["name"] == "partitions_assigned" and len(consumed[1]["partitions"]) == 3  # type: ignore[arg-type]
    read = {
        (e["partition"], e["offset"]): e["value"] for e in consumed if e["name"] == "record_data"
    }
    assert read == {(e["partition"], e["offset"]): e["value"] for e in acked}
    batches = [e for e in consumed if e["name"] == "records_consumed"]
    assert sum(e["count"] for e in batches) == 500  # type: ignore[misc]
    assert consumed[-1] == {
        **consumed[-1], "name": "shutdown_complete", "total": 500, "duplicates": 0,
    }  # fmt: skip
    # the same values sent again (as a retried, non-idempotent batch would store
    # them): the consumer counts each second copy
    again = events("verifiable-producer", *bs, "--max-messages", "200", "--acks", "all")
    assert again[-1]["acked"] == 200
    consumed = events("verifiable-consumer", *bs, "--timeout-ms", "1000")
    assert consumed[-1]["total"] == 700 and consumed[-1]["duplicates"] == 200
