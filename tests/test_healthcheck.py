"""``python -m annal.deploy.healthcheck``: the compose services' broker health check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from annal.deploy.healthcheck import main
from annal.deploy.runner import BrokerProcess, wait_until
from annal.deploy.secure import ensure_secure_files
from annal.deploy.zookeeper import free_port


def test_a_serving_broker_is_healthy(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(1)
    assert main([broker.endpoint]) == 0


def test_nothing_listening_is_unhealthy(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    assert main([address]) == 1
    assert address in capsys.readouterr().err


def test_usage() -> None:
    assert main([]) == 2
    assert main(["9092"]) == 2


@pytest.mark.timeout(120)
def test_a_tls_broker_is_checked_with_the_command_config(
    zk_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docker-compose.secure.yml's check: GRPCS:// with client certificates required,
    reached with the admin's --command-config."""
    files, _, _ = ensure_secure_files(tmp_path / "security", 1)
    broker = BrokerProcess(1, zk_connect, tmp_path)
    broker.settings.update(
        {
            "listeners": "GRPCS://127.0.0.1:0",
            "ssl.keystore.location": str(files.keystore("broker-1")),
            "ssl.truststore.location": str(files.ca),
            "ssl.client.auth": "required",
        }
    )
    broker.start()
    try:
        config = ["--command-config", str(files.admin_config)]
        wait_until(lambda: main([*config, broker.endpoint]) == 0, 60, "healthy over TLS", 0.5)
        assert main([broker.endpoint]) == 1  # plaintext to a TLS listener
        assert main(["--command-config", str(tmp_path / "missing"), broker.endpoint]) == 2
        assert "cannot read --command-config" in capsys.readouterr().err
    finally:
        broker.kill()
