"""``python -m annal.deploy.healthcheck``: the compose services' broker health check."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.deploy.healthcheck import main
from annal.deploy.runner import BrokerProcess
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
