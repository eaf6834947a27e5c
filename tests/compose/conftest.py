"""Fixtures for the compose tests: podman's Docker API, the images built once, and
docker-compose.yml (alone, or with docker-compose.secure.yml) brought up on it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from annal.deploy.runner import wait_until
from compose_on_podman import (
    ApiService,
    Compose,
    ComposeUnavailable,
    HealthChecks,
    check_machine,
    ensure_base_image,
    extra_ca_certs,
    project_name,
    remove_leftover_projects,
    smoke_test,
)
from environment import unavailable

ROOT = Path(__file__).resolve().parents[2]
SERVICES_WITH_HEALTH = ("zookeeper", "broker-1", "broker-2", "broker-3")


@pytest.fixture(scope="session")
def podman_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiService]:
    """podman's Docker-compatible API, with debian:bookworm-slim in its store; where
    podman cannot run containers, a skip naming the cause (a failure under CI)."""
    if os.environ.get("ANNAL_SKIP_COMPOSE"):
        unavailable("ANNAL_SKIP_COMPOSE is set")
    steps: list[str] = []
    try:
        check_machine()
        ensure_base_image(steps)
        smoke_test()
    except ComposeUnavailable as e:
        unavailable(str(e))
    print("\n".join(steps))
    service = ApiService(tmp_path_factory.mktemp("podman"))
    for project in remove_leftover_projects(service.docker_host, ROOT):
        print(f"removed {project}, left over by a test run that died")
    yield service
    service.stop()


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM stops the run as Ctrl-C does, so that the finalizers still run."""
    raise KeyboardInterrupt(f"terminated by signal {signum}")


@pytest.fixture(scope="session")
def images(podman_api: ApiService) -> None:
    """deploy/Dockerfile's images, built once for all the compose tests of a run
    (docker-compose.secure.yml runs the same images)."""
    started = time.monotonic()
    builder = Compose(ROOT, project_name(), podman_api.docker_host)
    builder("build", "--build-arg", f"EXTRA_CA_CERTS={extra_ca_certs()}", timeout_s=420)
    print(f"images built in {time.monotonic() - started:.0f} s")


@pytest.fixture
def compose(
    podman_api: ApiService, images: None, request: pytest.FixtureRequest
) -> Iterator[Compose]:
    """docker-compose.yml, unchanged, up with every health check passing.

    Whatever happens, the project's containers, volumes and network are removed
    afterwards; a failed test prints the containers' logs first."""
    yield from _up(Compose(ROOT, project_name(), podman_api.docker_host), request)


@pytest.fixture
def secure_compose(
    podman_api: ApiService, images: None, request: pytest.FixtureRequest
) -> Iterator[Compose]:
    """docker-compose.yml with docker-compose.secure.yml, as ``compose``."""
    overrides = ("docker-compose.secure.yml",)
    yield from _up(Compose(ROOT, project_name(), podman_api.docker_host, overrides), request)


def _up(cluster: Compose, request: pytest.FixtureRequest) -> Iterator[Compose]:
    health = HealthChecks(cluster.project)
    previous = signal.signal(signal.SIGTERM, _terminated)  # clean up on SIGTERM too
    try:
        started = time.monotonic()
        cluster("up", "-d", timeout_s=300)
        for service in SERVICES_WITH_HEALTH:
            wait_until(
                lambda s=service: cluster.health(s) == "healthy", 180, f"{service} healthy", 1
            )
        print(f"{' + '.join(cluster.files)} healthy in {time.monotonic() - started:.0f} s")
        yield cluster
    finally:
        failed = any(
            getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
            for when in ("setup", "call")
        )
        if failed or not hasattr(request.node, "rep_call"):
            print(f"\n--- docker-compose logs ({cluster.project}) ---\n{cluster.logs()}")
        health.stop()
        cluster.down()
        signal.signal(signal.SIGTERM, previous)
        left = {kind: ids for kind, ids in cluster.leftovers().items() if ids}
        assert not left, f"docker-compose down -v left {left}"
