"""``annal delete-records`` on real brokers: the log start offset moves up on the
leader and then on its follower; bad requests are refused with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import ConsumerError, SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer

from annal.cli import main

EARLIEST = -2


def offsets_file(tmp_path: Path, name: str, offsets: dict[tuple[str, int], int]) -> str:
    path = tmp_path / name
    entries = [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]
    path.write_text(json.dumps({"version": 1, "partitions": entries}))
    return str(path)


@pytest.mark.timeout(240)
def test_delete_records(
    broker_factory: Callable[..., BrokerProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    quick = {"zookeeper.session.timeout.ms": "4000"}
    brokers = {i: broker_factory(i, quick) for i in (1, 2)}
    bs = ["--bootstrap-server", ",".join(b.endpoint for b in brokers.values())]
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic(
            "trim", assignment={0: [1, 2], 1: [2, 1]},
            config={"segment.bytes": "2048"},
        )  # fmt: skip
    with Producer(bs[1], acks="all") as producer:
        for i in range(500):
            for partition in (0, 1):
                producer.send("trim", value=b"value-%04d" % i, partition=partition)
        producer.flush(60)

    plan = offsets_file(tmp_path, "offsets.json", {("trim", 0): 200, ("trim", 1): -1})
    assert main(["delete-records", *bs, "--offset-json-file", plan]) == 0
    out = capsys.readouterr().out
    assert "partition: trim-0\tlow_watermark: 200" in out
    assert "partition: trim-1\tlow_watermark: 500" in out
    with SimpleConsumer(bs[1]) as consumer:
        assert consumer.offsets_before("trim", 0, EARLIEST) == 200
        assert consumer.offsets_before("trim", 1, EARLIEST) == 500
        with pytest.raises(ConsumerError, match="OFFSET_OUT_OF_RANGE"):
            consumer.fetch("trim", 0, 0)
        values = [r.value for r in consumer.iterate("trim", 0, 200)]
    assert values == [b"value-%04d" % i for i in range(200, 500)]
    # the follower's copy starts at 200 too: once it leads, it says so
    brokers[1].kill()
    with SimpleConsumer(brokers[2].endpoint) as consumer:

        def follower_start() -> int:
            try:
                return consumer.offsets_before("trim", 0, EARLIEST)
            except ConsumerError:
                return -1  # broker 1 still listed as the leader

        wait_until(lambda: follower_start() == 200, 60, "broker 2 leading from offset 200")
    brokers[1].start()

    beyond = offsets_file(tmp_path, "beyond.json", {("trim", 0): 9999, ("nope", 0): 1})
    assert main(["delete-records", *bs, "--offset-json-file", beyond]) == 1
    out = capsys.readouterr().out
    assert "trim-0\terror: OFFSET_OUT_OF_RANGE" in out and "high watermark is 500" in out
    assert "nope-0\terror: UNKNOWN_TOPIC_OR_PARTITION" in out
    assert main(["delete-records", *bs, "--offset-json-file", beyond, "--json"]) == 1
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(a["topic"], a["partition"], a["error"]) for a in answers] == [
        ("nope", 0, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("trim", 0, "OFFSET_OUT_OF_RANGE"),
    ]
    (tmp_path / "bad.json").write_text('{"partitions": [{"topic": "trim"}]}')
    assert main(["delete-records", *bs, "--offset-json-file", str(tmp_path / "bad.json")]) == 2
    assert "partitions[0]: has no 'partition', 'offset'" in capsys.readouterr().err
    with SimpleConsumer(bs[1]) as consumer:
        assert consumer.offsets_before("trim", 0, EARLIEST) == 200  # unchanged
