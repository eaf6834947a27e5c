"""A real broker process on a real ZooKeeper: start-up, registration, health, shutdown."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from annal.deploy.runner import BrokerProcess, metadata_lists, wait_until
from annal.storage import files
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from grpc_health.v1 import health_pb2, health_pb2_grpc


@pytest.fixture
def brokers(
    zk_connect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    failed = getattr(request.node, "rep_call", None)
    for broker in started:
        broker.kill()
        if failed is not None and failed.failed:
            print(
                f"\n--- broker {broker.broker_id} log ({broker.log_path}) ---\n{broker.tail_log()}"
            )


def registered(zk: ZkClient, broker_id: int) -> bool:
    return zk.get_broker(broker_id) is not None


@pytest.mark.timeout(120)
def test_start_register_serve_and_stop_cleanly(
    zk_connect: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = BrokerProcess(1, zk_connect, tmp_path)
    brokers.append(broker)
    broker.start()
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: registered(zk, 1), 60, "broker 1 registered")
        # ready for clients once the controller's UpdateMetadata has arrived
        wait_until(lambda: metadata_lists(broker.endpoint, [1]), 60, "metadata served")
        raw = zk.get("/brokers/ids/1")
        assert raw is not None
        registration = json.loads(raw[0])
        assert registration["version"] == 5
        assert registration["endpoints"] == [
            f"GRPC://127.0.0.1:{broker.port}",
            f"PLAINTEXT://127.0.0.1:{broker.kafka_port}",
        ]
        assert (registration["host"], registration["port"]) == ("127.0.0.1", broker.port)
        cluster_id = zk.get_or_create_cluster_id()

        with grpc.insecure_channel(broker.endpoint) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = health.Check(
                health_pb2.HealthCheckRequest(service="annal.v1.Annal"), timeout=10
            )
            assert status.status == health_pb2.HealthCheckResponse.SERVING
            metadata = annal_pb2_grpc.AnnalStub(channel).Metadata(pb.MetadataRequest(), timeout=10)
            assert [(b.id, b.port) for b in metadata.brokers] == [(1, broker.port)]
            assert metadata.cluster_id == cluster_id
            # an illegal name is that topic's error, as in Kafka; the others are answered
            answer = annal_pb2_grpc.AnnalStub(channel).Metadata(
                pb.MetadataRequest(topics=["bad/name", "absent"]), timeout=10
            )
            assert [(t.name, t.error) for t in answer.topics] == [
                ("bad/name", pb.INVALID_TOPIC_EXCEPTION),
                ("absent", pb.UNKNOWN_TOPIC_OR_PARTITION),
            ]

        assert broker.stop() == 0
        assert zk.get_broker(1) is None  # deregistered at once
    log_dir = broker.log_dir
    assert (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
    meta = (log_dir / files.META_PROPERTIES).read_text()
    assert "broker.id=1" in meta and f"cluster.id={cluster_id}" in meta


@pytest.mark.timeout(120)
def test_a_taken_broker_id_is_a_clear_startup_error(
    zk_connect: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    first = BrokerProcess(7, zk_connect, tmp_path / "a")
    second = BrokerProcess(7, zk_connect, tmp_path / "b")
    brokers.extend([first, second])
    first.start()
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: registered(zk, 7), 60, "broker 7 registered")
    second.start()
    assert second.process is not None
    assert second.process.wait(60) == 1
    assert (
        f"broker.id 7 is registered by a live broker at 127.0.0.1:{first.port}" in second.tail_log()
    )


@pytest.mark.timeout(120)
def test_bad_settings_stop_the_broker_before_it_starts(
    zk_connect: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = BrokerProcess(2, zk_connect, tmp_path, settings={"log.segment.byte": "1"})
    brokers.append(broker)
    broker.start()
    assert broker.process is not None and broker.process.wait(60) == 1
    assert (
        "unknown broker config 'log.segment.byte' (did you mean 'log.segment.bytes'?)"
        in broker.tail_log()
    )


@pytest.mark.timeout(120)
def test_killed_broker_loses_its_registration_with_the_session(
    zk_connect: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = BrokerProcess(
        3, zk_connect, tmp_path, settings={"zookeeper.session.timeout.ms": "2000"}
    )
    brokers.append(broker)
    broker.start()
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: registered(zk, 3), 60, "broker 3 registered")
        broker.kill()
        wait_until(lambda: not registered(zk, 3), 30, "broker 3 registration expired")
    assert not (broker.log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
    broker.start()  # restarts on its existing logs
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: registered(zk, 3), 60, "broker 3 registered again")
    assert broker.stop() == 0


@pytest.mark.timeout(120)
def test_ports_are_bound_by_the_broker_learned_and_kept_across_restarts(
    zk_connect: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    """No port is picked before the broker binds it: every listener starts on port 0,
    the broker writes what it bound (``--ports-file``) and registers it; a restart
    binds the same ports, except one another process took meanwhile, bound anew."""
    broker = BrokerProcess(4, zk_connect, tmp_path, metrics_port=0)
    brokers.append(broker)
    with pytest.raises(RuntimeError, match="broker 4 has not been started"):
        assert broker.endpoint is None
    assert "GRPC://127.0.0.1:0,PLAINTEXT://127.0.0.1:0" in " ".join(broker.command())
    broker.start()
    ports = json.loads(_wait_for_file(broker.ports_path))
    assert ports["grpc"] == {"listener": "GRPC", "port": broker.port}
    assert ports["kafka"] == {"PLAINTEXT": broker.kafka_port} and ports["metrics"]
    assert broker.metrics_port == ports["metrics"] and 0 not in (broker.port, broker.kafka_port)
    with ZkClient(zk_connect) as zk:
        registration = json.loads(zk.get("/brokers/ids/4")[0])  # type: ignore[index]
    assert registration["endpoints"] == [
        f"GRPC://127.0.0.1:{broker.port}",
        f"PLAINTEXT://127.0.0.1:{broker.kafka_port}",
    ]
    first = (broker.port, broker.kafka_port, broker.metrics_port)
    broker.kill()
    with socket.socket() as squatter:  # another process binds the Kafka port meanwhile
        squatter.bind(("127.0.0.1", broker.kafka_port))
        squatter.listen()
        broker.start()
        wait_until(lambda: metadata_lists(broker.endpoint, [4]), 60, "broker 4 serving again")
        assert (broker.port, broker.metrics_port) == (first[0], first[2])
        assert broker.kafka_port not in (0, first[1])
        assert json.loads(broker.ports_path.read_text())["kafka"] == {
            "PLAINTEXT": broker.kafka_port
        }


@pytest.mark.timeout(120)
def test_a_broker_that_exits_before_serving_says_so_where_its_ports_are_asked(
    zk_connect: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = BrokerProcess(5, zk_connect, tmp_path, settings={"num.partitons": "1"})
    brokers.append(broker)
    broker.start()
    with pytest.raises(RuntimeError, match=r"broker 5 exited \(code 1\) before serving") as err:
        assert broker.endpoint is None
    assert "did you mean 'num.partitions'" in str(err.value)


def _wait_for_file(path: Path) -> str:
    wait_until(path.exists, 60, f"{path} written")
    return path.read_text()
