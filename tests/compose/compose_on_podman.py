"""docker-compose.yml on podman: the local base image, podman's Docker API and the health checks.

Podman serves Docker's API (``podman system service``), so Debian's
``docker-compose`` drives it unchanged.  Three things a Docker engine would
give for free are done here:

- ``debian:bookworm-slim``, the one base of deploy/Dockerfile, is built from
  ``debootstrap --variant=minbase bookworm`` when podman's image store does
  not hold it yet (no registry is needed; the image stays as the cache);
- a private API socket, served for the length of the test session;
- the health checks: podman schedules them through systemd timers, so where
  systemd does not run they are run here, every few seconds, for the
  project's containers (``podman healthcheck run``).

``Compose`` runs ``docker-compose`` for one project and removes every
container, volume and network of it on ``down``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from annal.deploy.runner import wait_until

BASE_IMAGE = "debian:bookworm-slim"
DEBIAN_MIRROR = os.environ.get("ANNAL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
TOOLS = ("podman", "docker-compose", "debootstrap")


class ComposeUnavailable(Exception):
    """Containers cannot run here; the message says why (a skip, or under CI a failure)."""


def run(args: list[str], timeout_s: float, check: bool = True, **kwargs: object) -> str:
    """Run a command and return its stdout; RuntimeError with its output if it fails."""
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args[:4])} ... exited {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"
        )
    out: str = result.stdout
    return out


def check_machine() -> None:
    """ComposeUnavailable unless podman can run containers here."""
    if os.name != "posix" or os.geteuid() != 0:
        raise ComposeUnavailable("needs root: debootstrap and rootful podman (CI runs as root)")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise ComposeUnavailable(
            f"{', '.join(missing)} not installed (make setup installs them: "
            "apt-get install podman docker-compose debootstrap)"
        )
    try:
        run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], timeout_s=60)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        raise ComposeUnavailable(f"podman does not work here: {e}") from e


def ensure_base_image(log: list[str]) -> None:
    """``debian:bookworm-slim`` in podman's store: as it is, or built from debootstrap."""
    exists = subprocess.run(["podman", "image", "exists", BASE_IMAGE], check=False)
    if exists.returncode == 0:
        log.append(f"{BASE_IMAGE}: cached")
        return
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="annal-rootfs-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        try:
            run(
                ["debootstrap", "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR],
                timeout_s=600,
            )
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            raise ComposeUnavailable(
                f"debootstrap could not build {BASE_IMAGE} from {DEBIAN_MIRROR} "
                f"(set ANNAL_DEBIAN_MIRROR, or `podman pull {BASE_IMAGE}`): {e}"
            ) from e
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            run(["podman", "import", "-", BASE_IMAGE], timeout_s=300, stdin=tar.stdout)
        finally:
            tar.wait()
    log.append(f"{BASE_IMAGE}: built from debootstrap in {time.monotonic() - started:.0f} s")


def smoke_test() -> None:
    """ComposeUnavailable naming the cause if podman cannot start a container."""
    try:
        run(["podman", "run", "--rm", BASE_IMAGE, "true"], timeout_s=120)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        hint = ""
        if "rlimit" in str(e):
            hint = " (set `default_ulimits = []` in /etc/containers/containers.conf: make setup)"
        raise ComposeUnavailable(f"podman cannot start a container here{hint}: {e}") from e


def extra_ca_certs() -> str:
    """This machine's own CA certificates (a TLS-inspecting proxy's), for the image build."""
    paths = sorted(glob.glob("/usr/local/share/ca-certificates/**/*.crt", recursive=True))
    return "\n".join(Path(p).read_text() for p in paths)


PROJECT_PREFIX = "annaltest"


def project_name() -> str:
    """This process's compose project: its pid tells a later run whether it is left over."""
    return f"{PROJECT_PREFIX}{os.getpid()}"


def remove_leftover_projects(docker_host: str, root: Path) -> list[str]:
    """Remove the projects of test runs that died without cleaning up (SIGKILLed or
    SIGTERMed pytest): they would hold the brokers' published ports."""
    labels = run(
        ["podman", "ps", "-a", "--format", '{{index .Labels "com.docker.compose.project"}}'],
        timeout_s=60,
        check=False,
    ).split()
    removed = []
    for project in sorted(set(labels)):
        pid = project.removeprefix(PROJECT_PREFIX)
        if project == pid or not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        Compose(root, project, docker_host).down()
        removed.append(project)
    return removed


class ApiService:
    """``podman system service`` on a private socket; ``docker_host`` for docker-compose."""

    def __init__(self, directory: Path) -> None:
        self.socket = directory / "podman.sock"
        self.docker_host = f"unix://{self.socket}"
        self._log = (directory / "podman-service.log").open("w")
        self._process = subprocess.Popen(
            ["podman", "system", "service", "--time=0", self.docker_host],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._answers, 30, "podman's API socket", poll_s=0.2)

    def _answers(self) -> bool:
        if self._process.poll() is not None:
            raise RuntimeError(f"podman system service exited {self._process.returncode}")
        return self.socket.exists()

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


class HealthChecks:
    """Runs the health checks of a project's containers every ``interval_s`` (no systemd here)."""

    def __init__(self, project: str, interval_s: float = 2.0) -> None:
        self._project = project
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="health-checks", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            ids = run(
                [
                    "podman",
                    "ps",
                    "-q",
                    "--filter",
                    f"label=com.docker.compose.project={self._project}",
                ],
                timeout_s=30,
                check=False,
            ).split()
            for container in ids:  # "no defined healthcheck" for the others: ignored
                subprocess.run(
                    ["podman", "healthcheck", "run", container],
                    capture_output=True,
                    timeout=30,
                    check=False,
                )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class Compose:
    """``docker-compose`` for one project of docker-compose.yml (and the override
    files given, such as docker-compose.secure.yml), through podman's API."""

    def __init__(
        self, root: Path, project: str, docker_host: str, overrides: tuple[str, ...] = ()
    ) -> None:
        self.root = root
        self.project = project
        self.files = ("docker-compose.yml", *overrides)
        self._env = {**os.environ, "DOCKER_HOST": docker_host, "COMPOSE_PROJECT_NAME": project}

    def __call__(self, *args: str, timeout_s: float = 120, check: bool = True) -> str:
        files = [arg for name in self.files for arg in ("-f", str(self.root / name))]
        return run(
            ["docker-compose", *files, *args],
            timeout_s=timeout_s,
            check=check,
            cwd=self.root,
            env=self._env,
        )

    def client(self, *args: str, timeout_s: float = 120) -> str:
        """An ``annal`` command in a container of the ``client`` service; its stdout.
        (``--no-deps``: ``run`` would otherwise start a broker the test has killed.)"""
        return self("run", "--rm", "--no-deps", "-T", "client", *args, timeout_s=timeout_s)

    def container(self, service: str) -> str:
        return self("ps", "-q", service).strip()

    def health(self, service: str) -> str:
        """``healthy``, ``starting``, ``unhealthy``, ``running`` (no health check) or ``exited``."""
        container = self.container(service)
        if not container:
            return "absent"
        state = json.loads(
            run(["podman", "inspect", "--format", "{{json .State}}", container], timeout_s=30)
        )
        if not state.get("Running"):
            return str(state.get("Status", "exited"))
        health = state.get("Health") or state.get("Healthcheck") or {}
        return str(health.get("Status") or "running")

    def logs(self, tail: int = 150) -> str:
        return self("logs", "--no-color", f"--tail={tail}", timeout_s=60, check=False)

    def down(self) -> None:
        """``down -v``, then whatever of the project is still there, by its label."""
        self("down", "-v", "--remove-orphans", "--timeout", "5", timeout_s=180, check=False)
        label = f"label=com.docker.compose.project={self.project}"
        for kind in ("container", "volume", "network"):
            listing = ["podman", kind, "ls", "-q", "--filter", label]
            if kind == "container":
                listing = ["podman", "ps", "-a", "-q", "--filter", label]
            left = run(listing, timeout_s=60, check=False).split()
            if left:
                run(["podman", kind, "rm", "-f", *left], timeout_s=120, check=False)

    def leftovers(self) -> dict[str, list[str]]:
        """The project's containers, volumes and networks that still exist."""
        label = f"label=com.docker.compose.project={self.project}"
        return {
            "containers": run(["podman", "ps", "-a", "-q", "--filter", label], 60).split(),
            "volumes": run(["podman", "volume", "ls", "-q", "--filter", label], 60).split(),
            "networks": run(["podman", "network", "ls", "-q", "--filter", label], 60).split(),
        }
