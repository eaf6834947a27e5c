"""docker-compose.yml: valid for a real Compose, and the same brokers the local runner
starts; docker-compose.secure.yml: merges with it, and secures the brokers with
deploy/secure.py's settings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from annal.broker.config import BrokerConfig
from annal.broker.listeners import Listener
from annal.deploy.cluster import SETTINGS
from annal.deploy.secure import SecureFiles, ensure_secure_files
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
    assert targets == {
        "zookeeper": "zookeeper", "broker-1": "broker", "spark-job": "spark",
        "prometheus": "prometheus",
    }  # fmt: skip
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


# docker-compose.secure.yml: the override that secures the same services as
# `annal cluster up --security sasl_ssl` secures a local cluster (deploy/secure.py).

SECURE = "docker-compose.secure.yml"
SECURITY_DIR = "/etc/annal/security"  # where the `security` volume is mounted


def secure_override() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / SECURE).read_text())


def merged() -> dict:  # type: ignore[type-arg]
    """What docker-compose makes of the two files together."""
    require_command("docker-compose")
    result = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / SECURE),
         "config"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config: dict = yaml.safe_load(result.stdout)  # type: ignore[type-arg]
    return config


def settings_of(command: list[str]) -> dict[str, str]:
    args = build_parser().parse_args(command)
    assert args.command == "broker" and args.action == "start"
    return dict(pair.split("=", 1) for pair in args.settings)


def test_the_secure_override_merges() -> None:
    services = merged()["services"]
    init = services["security-init"]
    for name in ("broker-1", "broker-2", "broker-3"):
        broker = services[name]
        assert broker["depends_on"]["security-init"] == {
            "condition": "service_completed_successfully"
        }
        assert broker["depends_on"]["zookeeper"] == {"condition": "service_healthy"}
        assert f"security:{SECURITY_DIR}:ro" in broker["volumes"]
        assert broker["volumes"][1].startswith(f"{name}-data:")  # its data volume stays
        published = {int(p["published"]) for p in broker["ports"]}
        assert published == {port_of(name), 10000 + port_of(name)}  # as in the plain file
        assert broker["healthcheck"]["interval"] == "5s"
    assert init["depends_on"] == {"zookeeper": {"condition": "service_healthy"}}
    assert f"security:{SECURITY_DIR}:ro" in services["client"]["volumes"]
    # the CA's key is in a volume of its own that only security-init mounts
    ca_volume = [v for v in init["volumes"] if v.startswith("security-ca:")]
    assert len(ca_volume) == 1
    for name, service in services.items():
        if name != "security-init":
            assert not any(v.startswith("security-ca:") for v in service.get("volumes", []))
    # the console reaches the secured brokers as the admin, and changes nothing
    console = services["console"]
    assert f"security:{SECURITY_DIR}:ro" in console["volumes"]
    args = build_parser().parse_args(console["command"])
    assert args.command == "console" and args.read_only
    assert str(args.command_config) == f"{SECURITY_DIR}/admin.properties"
    assert args.bootstrap_server == services["console"]["command"][2]
    # the Spark job's data source has no TLS or SASL options: left out of `up`
    assert services["spark-job"]["profiles"] == ["plaintext-only"]
    assert "plaintext" in (ROOT / SECURE).read_text().split("spark-job:")[0].lower()


def test_secured_brokers_have_deploy_secure_settings(tmp_path: Path) -> None:
    """Each secured broker runs the plain file's command with its listeners secured
    and exactly deploy/secure.py's broker_settings, and that command is a valid
    configuration with the files security-init makes."""
    plain = compose()["services"]
    override = secure_override()["services"]
    brokers = sorted(name for name in override if name.startswith("broker-"))
    assert brokers == ["broker-1", "broker-2", "broker-3"]
    files, _, _ = ensure_secure_files(tmp_path, len(brokers), "broker-{id}")
    for name in brokers:
        broker_id, port = int(name.split("-")[1]), port_of(name)
        settings = settings_of(override[name]["command"])
        before = settings_of(plain[name]["command"])
        expected = SecureFiles(Path(SECURITY_DIR)).broker_settings(
            broker_id, len(brokers), port, 10000 + port, host="0.0.0.0"
        )
        assert {key: settings[key] for key in expected} == expected
        assert settings["advertised.listeners"] == (
            f"GRPCS://{name}:{port},SASL_SSL://{name}:{10000 + port}"
        )
        secured = {*expected, "advertised.listeners"}
        assert {k: v for k, v in settings.items() if k not in secured} == {
            k: v for k, v in before.items() if k not in secured
        }
        # the same settings, read by the broker with real files in their place
        config = BrokerConfig.from_properties(
            {k: v.replace(SECURITY_DIR, str(files.directory)) for k, v in settings.items()}
        )
        assert config.broker_id == broker_id
        assert config.tls is not None and config.tls.client_auth == "required"
        assert config.advertised_listener == Listener(name, port, "GRPCS")
        (kafka,) = config.kafka_listeners
        assert (kafka.security_protocol, kafka.advertised.host) == ("SASL_SSL", name)
        assert kafka.tls is not None and kafka.tls.client_auth == "none"
        assert config.authorizer and not config.allow_everyone_if_no_acl_found
        assert f"User:{name}" in config.super_users and "User:admin" in config.super_users
        assert config.kafka_advertised_listener is None  # no plaintext listener is left


def test_the_secured_health_checks_use_the_admins_tls_settings() -> None:
    from annal.deploy.healthcheck import build_parser as health_parser

    override = secure_override()["services"]
    for name in ("broker-1", "broker-2", "broker-3"):
        test = override[name]["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python", "-m", "annal.deploy.healthcheck"]
        args = health_parser().parse_args(test[4:])
        assert args.address == f"localhost:{port_of(name)}"
        assert args.command_config == SecureFiles(Path(SECURITY_DIR)).admin_config


def test_security_init_makes_what_the_brokers_read() -> None:
    from annal.deploy.secure import build_parser as secure_parser

    services = secure_override()["services"]
    init = services["security-init"]
    assert init["entrypoint"] == ["python", "-m", "annal.deploy.secure"]
    assert init["image"] == compose()["services"]["broker-1"]["image"]
    assert init["build"] == compose()["services"]["broker-1"]["build"]
    args = secure_parser().parse_args(init["command"])
    assert args.dir == Path(SECURITY_DIR)
    assert f"security:{SECURITY_DIR}" in init["volumes"]
    brokers = [name for name in services if name.startswith("broker-")]
    assert args.brokers == len(brokers)
    assert {args.broker_host.replace("{id}", str(i)) for i in range(1, 4)} == set(brokers)
    assert args.ca_key is not None and f"security-ca:{args.ca_key.parent}" in init["volumes"]
    zookeeper = {settings_of(services[b]["command"])["zookeeper.connect"] for b in brokers}
    assert zookeeper == {args.zookeeper_connect}


def test_prometheus_scrapes_every_brokers_metrics_port() -> None:
    """Each broker serves metrics.port 9404 in the network, the same in both files,
    and deploy/prometheus/prometheus.yml scrapes exactly those."""
    services = compose()["services"]
    secure = secure_override()["services"]
    for name in ("broker-1", "broker-2", "broker-3"):
        assert settings_of(services[name]["command"])["metrics.port"] == "9404"
        assert settings_of(secure[name]["command"])["metrics.port"] == "9404"
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert set(jobs) == {"annal-brokers", "annal-console"}
    (targets,) = jobs["annal-brokers"]["static_configs"]
    assert targets["targets"] == [f"broker-{i}:9404" for i in (1, 2, 3)]
    assert services["prometheus"]["ports"] == ["9090:9090"]
    # the web console's consumer-group lag (its /metrics, on the port it serves)
    (console,) = jobs["annal-console"]["static_configs"]
    assert console["targets"] == ["console:8080"]
    command = services["console"]["command"]
    assert command[0] == "console" and command[command.index("--port") + 1] == "8080"
