"""The exactly-once streaming sink: the publishing protocol resumed after a crash
at its worst moment (a round stored but not recorded), and the deployment's
mirror job SIGKILLed twice mid-batch, on a real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from annal.admin.client import AdminClient
from annal.client.cluster import ClusterConnection
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.pipeline.options import write_options
from annal.pipeline.publish import Publisher, RoundData, plan_rounds
from annal.pipeline.sink import AnnalStreamWriter, SinkState, Staged
from annal.producer.producer import Producer
from annal.storage.batch import Compression


def all_records(endpoint: str, topic: str) -> list[tuple[bytes | None, bytes | None, tuple]]:
    with SimpleConsumer(endpoint) as consumer:
        return [
            (r.key, r.value, tuple(r.headers))
            for p in consumer.partitions_for(topic)
            for r in consumer.iterate(topic, p, 0)
        ]


def test_rounds_hold_one_batch_per_partition() -> None:
    rounds = plan_rounds(["t"] * 5 + ["u"], [0, 1, 0, 0, 0, 0], [40, 10, 40, 90, 5, 1], 100)
    assert rounds == [{("t", 0): [0, 2], ("t", 1): [1], ("u", 0): [5]}, {("t", 0): [3, 4]}]
    assert plan_rounds([], [], [], 100) == []
    assert plan_rounds(["t"], [0], [500], 100) == [{("t", 0): [0]}]  # a big record: alone


@pytest.mark.timeout(120)
def test_a_round_stored_but_not_recorded_is_not_stored_again(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("out", partitions=2)
    options = write_options(
        {
            "bootstrap.servers": broker.endpoint,
            "topic": "out",
            "checkpointLocation": str(tmp_path),
            "kafka.batch.size": "200",
        },
        streaming=True,
    )
    writer = AnnalStreamWriter(options, ["key", "value", "headers"])
    rows = pa.RecordBatch.from_pydict(
        {
            "key": [b"k%d" % i for i in range(60)],
            "value": [f"v{i}" for i in range(60)],
            "headers": [[{"key": "n", "value": b"%d" % i}] for i in range(60)],
        }
    )
    messages: list[Staged | None] = [writer.write(iter([rows])), None]
    # The driver dies after storing round 2 and before recording it.
    state = SinkState(str(tmp_path))
    cluster = ClusterConnection(broker.endpoint)
    intent = writer._new_intent(state, 0, list(messages), cluster, 30)
    state.write_intent(0, intent)
    rounds = intent.rounds()
    assert len(rounds) >= 4 and all(len(r) <= 2 for r in rounds)
    publisher = Publisher(cluster, Compression.NONE, 30)
    data = RoundData.of(intent.table, intent.timestamp_ms)
    for r in range(3):
        publisher.send_round(data, rounds[r], intent.producer_id, intent.first_epoch + r)
        if r < 2:
            state.round_done(0, r)
    publisher.close()
    cluster.close()
    # The restarted query stages different rows for batch 0: the intent wins.
    replay = pa.RecordBatch.from_pydict({"key": [b"x"], "value": [b"other"], "headers": [[]]})
    writer.commit([writer.write(iter([replay]))], 0)
    writer.commit([writer.write(iter([replay]))], 0)  # published: nothing more
    got = all_records(broker.endpoint, "out")
    assert Counter(v for _, v, _ in got) == Counter(b"v%d" % i for i in range(60))
    assert {(k, h) for k, v, h in got if v == b"v7"} == {(b"k7", (("n", b"7"),))}
    # The next batch goes on with the same producer id and the epochs after.
    writer.commit([writer.write(iter([replay]))], 1)
    assert state.done(1) == {
        "producer_id": intent.producer_id,
        "next_epoch": intent.first_epoch + len(rounds) + 1,
        "records": 1,
    }
    assert not list(tmp_path.glob("annal-sink/0.*intent*"))


def kill_while_publishing(command: list[str], log_path: Path, state: Path) -> None:
    """Run the job until it is between a round it sent and the batch's done
    marker, then SIGKILL its driver (Python, its JVM and its workers)."""

    def progress() -> dict[str, int]:
        return {p.name: p.stat().st_size for p in state.glob("*.progress")}

    before = progress() if state.exists() else {}

    def publishing() -> bool:
        for name, size in progress().items():
            if size > before.get(name, 0) and not (state / name).with_suffix(".done").exists():
                return True
        return False

    with open(log_path, "wb") as log:
        job = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_until(
                lambda: publishing() or job.poll() is not None,
                240,
                "the job publishing a micro-batch",
                poll_s=0.01,
            )
            assert job.poll() is None, "the job ended before it was killed"
        except (TimeoutError, AssertionError):
            print(log_path.read_text()[-5000:])
            raise
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)


@pytest.mark.timeout(600)
def test_the_mirror_job_holds_every_record_once_through_two_driver_kills(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("src", partitions=2)
        admin.create_topic("dst", partitions=3)
    pad = b"." * 100
    with Producer(broker.endpoint) as producer:
        for i in range(6000):
            key = b"k%d" % i if i % 3 else None
            producer.send("src", key=key, value=b"v%d" % i + pad, headers=[("i", b"%d" % i)])
    checkpoint = tmp_path / "job"
    command = [
        sys.executable, "-m", "annal.pipeline.job", "--bootstrap-server", broker.endpoint,
        "--source", "src", "--sink", "dst", "--checkpoint", str(checkpoint),
        "--max-offsets-per-trigger", "1500", "--sink-option", "kafka.batch.size=600",
    ]  # fmt: skip
    state = checkpoint / "annal-sink"

    for run in range(2):
        kill_while_publishing(command, tmp_path / f"job-{run}.log", state)
    assert len(all_records(broker.endpoint, "dst")) < 6000  # killed before the end
    finished = subprocess.run(
        [*command, "--available-now"], capture_output=True, text=True, timeout=300
    )
    assert finished.returncode == 0, finished.stderr[-5000:]
    got = all_records(broker.endpoint, "dst")
    expected = [
        (b"k%d" % i if i % 3 else None, b"v%d" % i + pad, (("i", b"%d" % i),)) for i in range(6000)
    ]
    duplicates = sum(n - 1 for n in Counter(got).values() if n > 1)
    batches = sorted(os.listdir(checkpoint / "commits"))
    print(f"{len(got)} records, {duplicates} duplicates; batches {batches}")
    assert duplicates == 0 and sorted(got, key=repr) == sorted(expected, key=repr)
