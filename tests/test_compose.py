"""docker-compose.yml: valid for a real Compose, and the same brokers the local runner starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from annal.broker.config import BrokerConfig
from annal.deploy.cluster import SETTINGS
from environment import require_command

from annal.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_is_valid_for_docker_compose() -> None:
    require_command("docker-compose")
    result = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_broker_commands_parse_and_match_the_local_runner() -> None:
    services = compose()["services"]
    brokers = {name: s for name, s in services.items() if name.startswith("broker-")}
    assert sorted(brokers) == ["broker-1", "broker-2", "broker-3"]
    volumes = set()
    for name, service in brokers.items():
        args = build_parser().parse_args(service["command"])
        assert args.command == "broker" and args.action == "start"
        settings = dict(pair.split("=", 1) for pair in args.settings)
        config = BrokerConfig.from_properties(settings)
        assert config.broker_id == int(name.split("-")[1])
        assert config.zookeeper_connect == "zookeeper:2181/annal"
        assert config.advertised_listener.host == name
        kafka = config.kafka_advertised_listener
        assert kafka is not None and (kafka.host, kafka.port) == (name, 10000 + port_of(name))
        for key, value in SETTINGS.items():  # the runner's settings hold in compose too
            assert settings[key] == value
        volumes.add(service["volumes"][0].split(":")[0])
        assert "healthcheck" in service
    assert len(volumes) == 3  # a volume of its own for each broker


def port_of(broker: str) -> int:
    """broker-1 serves gRPC on 9092, broker-2 on 9093, ... (Kafka's protocol 10000 up)."""
    return 9091 + int(broker.split("-")[1])


def test_each_broker_publishes_the_port_it_advertises() -> None:
    """Clients outside the network follow the advertised addresses: each broker's
    advertised port is the one it listens on, publishes and health-checks."""
    services = compose()["services"]
    ports = set()
    for name in ("broker-1", "broker-2", "broker-3"):
        service = services[name]
        settings = dict(pair.split("=", 1) for pair in service["command"][2:])
        config = BrokerConfig.from_properties(settings)
        port = config.advertised_listener.port
        kafka = config.kafka_advertised_listener
        assert config.listener.port == port and kafka is not None
        assert config.kafka_listener is not None and config.kafka_listener.port == kafka.port
        assert service["ports"] == [f"{port}:{port}", f"{kafka.port}:{kafka.port}"]
        assert service["healthcheck"]["test"][-1] == f"localhost:{port}"
        ports.add(port)
    assert len(ports) == 3


def test_every_image_is_built_from_the_dockerfile_on_one_base() -> None:
    services = compose()["services"]
    targets = {name: s["build"]["target"] for name, s in services.items() if "build" in s}
    assert targets == {"zookeeper": "zookeeper", "broker-1": "broker", "spark-job": "spark"}
    built = {services[name]["image"] for name in targets}
    for name, service in services.items():  # the other services reuse a built image
        assert service["image"] in built, name
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
    stages = [line.split()[-1] for line in dockerfile if line.startswith("FROM ")]
    bases = [line.split()[1] for line in dockerfile if line.startswith("FROM ")]
    assert set(targets.values()) <= set(stages)
    assert {b for b in bases if b not in stages} == {"debian:bookworm-slim"}


def test_spark_job_command_parses() -> None:
    from annal.pipeline.job import build_parser as job_parser

    job = compose()["services"]["spark-job"]
    assert job["build"]["target"] == "spark"
    args = job_parser().parse_args(job["command"])
    assert (args.source, args.sink) == ("events", "events-mirror")
    assert args.bootstrap_server == "broker-1:9092,broker-2:9093,broker-3:9094"
    assert args.checkpoint.startswith(job["volumes"][0].split(":")[1])


def test_the_image_holds_every_package() -> None:
    """deploy/Dockerfile copies each folder pyproject.toml installs (a folder left
    out would fail the image's `pip install .`) and setup.py, which builds the
    compiled record walker."""
    import tomllib

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {path.split("/")[0] for path in mapping["package-dir"].values()}
    copied = {
        source
        for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }
    assert {"pyproject.toml", "setup.py"} <= copied
    assert folders <= copied, f"not copied into the image: {sorted(folders - copied)}"
