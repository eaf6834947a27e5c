"""Run librdkafka's own integration test suite against a local annal cluster.

librdkafka's ``tests/`` directory holds a C test runner (``test-runner``) whose
tests use an existing cluster named in ``tests/test.conf``.  This script:

1. takes librdkafka's source package from Debian's archive: the version that
   ``apt-cache policy librdkafka-dev`` offers (bookworm: 2.0.2-1), its ``.dsc``
   from the pool directory of the mirror apt uses, and the tarballs the
   ``.dsc`` lists (checked against its SHA-256 sums; ``dpkg-source`` also checks
   the ``.dsc``'s signature when ``debian-keyring`` is installed).  Everything
   is cached in ``--workdir``;
2. installs the missing build dependencies with apt-get (Debian's ``-dev``
   packages), runs ``./configure``, ``make libs`` and ``make -C tests build``;
3. starts three brokers with ``annal cluster up``, writes ``tests/test.conf``
   with the Kafka bootstrap servers it prints, and runs the tests one test
   number at a time (``TESTS=NNNN test-runner -p1 -L``; ``--parallel N``:
   ``-pN``), each under a time limit.  With ``--security ssl`` the cluster
   serves Kafka's protocol on ``SSL://`` with client certificates required
   (``annal cluster up --security ssl``), test.conf says how to connect as the
   cluster's admin, and the ``SSL_*`` variables that librdkafka's SSL tests
   read (0097) name that certificate, its key and the CA in each form;
4. stops the cluster with ``annal cluster down`` whatever happens;
5. prints one row per test and, as its last line, one JSON object.

Run it from the repository root::

    .venv/bin/python bench/librdkafka_suite.py                  # every broker test
    .venv/bin/python bench/librdkafka_suite.py --tests 0001,0012
    .venv/bin/python bench/librdkafka_suite.py --tests 0097 --security ssl

The test runner's output for test number NNNN is kept in
``WORKDIR/results/NNNN.log``; with ``--keep`` the cluster's directory (each
broker's ``broker.log``) is kept in ``WORKDIR/cluster`` too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

if TYPE_CHECKING:
    from annal.deploy.certs import Identity

# also KAFKA_PATH: Kafka's tool names (bin/kafka-*.sh) for the tests that run them
REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = Path(
    os.environ.get("ANNAL_LIBRDKAFKA_DIR", Path.home() / ".cache" / "annal-librdkafka")
)
BINARY_PACKAGE = "librdkafka-dev"
# librdkafka's build dependencies as Debian's source package declares them
# (Build-Depends), plus the compilers and dpkg-source.
BUILD_PACKAGES = (
    "build-essential",
    "dpkg-dev",
    "pkg-config",
    "python3",
    "libssl-dev",
    "zlib1g-dev",
    "libzstd-dev",
    "liblz4-dev",
    "libsasl2-dev",
    "rapidjson-dev",
)
# The broker settings of librdkafka's tests/scenarios/default.json.
SCENARIO_DEFAULT = {"num.partitions": "4", "default.replication.factor": "3"}
# What each of librdkafka's scenarios (tests/scenarios/*.json) is about: set for
# every run of that scenario, with or without --scenario-settings.
SCENARIOS = {
    "default": {},
    "noautocreate": {"auto.create.topics.enable": "false"},
}
# What the ACL tests (0081, 0115, 0119) need: an authorizer, allowing what no ACL names.
ACL_TESTS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
# What fetch from follower (0101, KIP-392) needs: each broker in a rack of its own
# (RACK<id>, set per broker) and leaders that send a consumer to its rack's replica.
FOLLOWER_FETCH = {
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUMMARY_ROW = re.compile(
    r"^\|\s*(?P<name>\S+)\s*\|\s*(?P<state>PASSED|FAILED|SKIPPED|RUNNING|DNS)\s*\|"
    r"\s*(?P<secs>[\d.]+)s\s*\|\s?(?P<reason>.*)$"
)
FAILURE_HEADER = re.compile(r'^### Test "(?P<name>[^"]+)" failed at (?P<where>\S+)')
TIMED_OUT = re.compile(r"timed out \(timeout set to \d+ seconds\)")
# What test-runner prints as each test ends well, before its summary (kept when
# it is killed before the summary, e.g. with --parallel beside a test that hangs)
PASSED_LINE = re.compile(r"=+ Test (?P<name>\S+) PASSED =+")
DURATION_LINE = re.compile(r"\] (?P<name>\S+): duration (?P<ms>[\d.]+)ms")
SECURITY_CHOICES = ("plaintext", "ssl")


class SuiteError(Exception):
    """A step that cannot go on; the message says which and why."""


@dataclass
class TestEntry:
    """One entry of test.c's ``tests[]`` table."""

    name: str
    flags: str
    scenario: str = "default"

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]

    @property
    def local(self) -> bool:
        return "TEST_F_LOCAL" in self.flags

    @property
    def manual(self) -> bool:
        return "TEST_F_MANUAL" in self.flags


@dataclass
class Outcome:
    name: str
    state: str  # PASSED, FAILED, SKIPPED or TIMEOUT
    reason: str = ""
    seconds: float = 0.0


@dataclass
class Source:
    """librdkafka's Debian source package, unpacked."""

    package: str
    debian_version: str
    upstream_version: str
    directory: Path
    files: list[Path] = field(default_factory=list)


def say(text: str) -> None:
    print(text, flush=True)


def run(cmd: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), text=True, capture_output=True, check=False, env=env)


# ---------------------------------------------------------------------------
# 1. The source package from Debian's archive


def apt_candidate(package: str) -> tuple[str, str, str]:
    """The version apt would install, the mirror it comes from and its component
    (``main``), from ``apt-cache policy``; runs ``apt-get update`` once when apt
    knows no candidate yet."""
    for attempt in range(2):
        out = run(["apt-cache", "policy", package]).stdout
        version = re.search(r"Candidate:\s*(\S+)", out)
        if version and version.group(1) != "(none)":
            break
        if attempt == 0:
            say(f"apt knows no candidate for {package}: running apt-get update")
            update = run(["apt-get", "update"])
            if update.returncode != 0:
                raise SuiteError(f"apt-get update failed:\n{update.stderr.strip()}")
    else:
        raise SuiteError(f"apt-cache policy {package}: no candidate version\n{out}")
    candidate = version.group(1)
    table = out.split("Version table:", 1)[-1].splitlines()
    for i, line in enumerate(table):
        if line.strip().lstrip("*").strip().startswith(candidate + " "):
            for origin in table[i + 1 :]:
                found = re.match(r"\s+\d+\s+(https?://\S+)\s+(\S+)/(\S+)\s+\S+\s+Packages", origin)
                if found:
                    return candidate, found.group(1).rstrip("/"), found.group(3)
    raise SuiteError(f"apt-cache policy {package}: no http(s) mirror for {candidate}\n{out}")


def source_of(package: str, version: str) -> tuple[str, str]:
    """The source package's name and version that built ``package`` ``version``."""
    out = run(["apt-cache", "show", f"{package}={version}"]).stdout
    found = re.search(r"^Source:\s*(\S+)(?:\s+\((\S+)\))?", out, re.MULTILINE)
    if not found:
        return package, version
    # A binary-only rebuild (+bN) has the source's version in parentheses.
    return found.group(1), found.group(2) or version


def pool_url(mirror: str, component: str, source: str) -> str:
    prefix = source[:4] if source.startswith("lib") else source[0]
    return f"{mirror}/pool/{component}/{prefix}/{source}"


def download(url: str, target: Path) -> None:
    if target.exists():
        return
    say(f"  downloading {url}")
    partial = target.with_name(target.name + ".part")
    with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
        shutil.copyfileobj(response, out)
    partial.replace(target)


def dsc_files(dsc: Path) -> list[tuple[str, str]]:
    """(sha256, file name) for every file the ``.dsc`` lists."""
    files: list[tuple[str, str]] = []
    section = False
    for line in dsc.read_text().splitlines():
        if line.startswith("Checksums-Sha256:"):
            section = True
        elif section and line.startswith(" "):
            digest, _size, name = line.split()
            files.append((digest, name))
        elif section:
            break
    if not files:
        raise SuiteError(f"{dsc}: no Checksums-Sha256 field")
    return files


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_source(workdir: Path) -> Source:
    say(f"== librdkafka's source package (cache: {workdir / 'debian'})")
    binary_version, mirror, component = apt_candidate(BINARY_PACKAGE)
    package, version = source_of(BINARY_PACKAGE, binary_version)
    bare = version.split(":", 1)[-1]  # file names carry no epoch
    upstream = bare.rsplit("-", 1)[0]
    say(f"  {BINARY_PACKAGE} {binary_version} from {mirror} ({component}): source {package} {bare}")
    cache = workdir / "debian"
    cache.mkdir(parents=True, exist_ok=True)
    base = pool_url(mirror, component, package)
    dsc = cache / f"{package}_{bare}.dsc"
    download(f"{base}/{dsc.name}", dsc)
    files = [dsc]
    for digest, name in dsc_files(dsc):
        target = cache / name
        download(f"{base}/{name}", target)
        if sha256(target) != digest:
            target.unlink()
            raise SuiteError(f"{name}: SHA-256 differs from the one in {dsc.name}")
        files.append(target)
    directory = workdir / f"{package}-{upstream}"
    if not (directory / "tests" / "test.c").exists():
        shutil.rmtree(directory, ignore_errors=True)
        say(f"  unpacking with dpkg-source -x into {directory}")
        unpack = run(["dpkg-source", "-x", str(dsc), str(directory)])
        if unpack.returncode != 0:
            raise SuiteError(f"dpkg-source -x {dsc} failed:\n{unpack.stdout}{unpack.stderr}")
        for line in (unpack.stdout + unpack.stderr).splitlines():
            say(f"    {line}")
    return Source(package, bare, upstream, directory, files)


# ---------------------------------------------------------------------------
# 2. Building the library and the test runner


def missing_packages(packages: Sequence[str]) -> list[str]:
    missing = []
    for name in packages:
        status = run(["dpkg-query", "-W", "-f=${Status}", name]).stdout
        if "install ok installed" not in status:
            missing.append(name)
    return missing


def install_build_packages() -> None:
    missing = missing_packages(BUILD_PACKAGES)
    if not missing:
        say(f"== build dependencies present: {' '.join(BUILD_PACKAGES)}")
        return
    say(f"== installing with apt-get: {' '.join(missing)}")
    if os.geteuid() != 0:
        raise SuiteError(
            "not root: install them first with\n"
            f"  sudo apt-get install --no-install-recommends {' '.join(missing)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    result = run(cmd, env=env)
    if result.returncode != 0 and "Unable to locate package" in result.stderr:
        run(["apt-get", "update"])
        result = run(cmd, env=env)
    if result.returncode != 0:
        raise SuiteError(f"{' '.join(cmd)} failed:\n{result.stderr.strip()}")


def stream(cmd: Sequence[str], cwd: Path, log: Path, total: int, done: list[int]) -> None:
    """Run a build step, its output appended to ``log``; one progress line per
    compiled file."""
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}  (in {cwd})\n")
        out.flush()
        process = subprocess.Popen(
            list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            compiled = re.search(r"\s-c\s+(\S+\.(?:c|cpp))\b", line)
            if compiled:
                done[0] += 1
                say(f"  [{done[0]:3d}/~{total}] {compiled.group(1)}")
        if process.wait() != 0:
            tail = "".join(log.read_text().splitlines(keepends=True)[-40:])
            raise SuiteError(
                f"{' '.join(cmd)} failed (exit {process.returncode}); log {log}:\n{tail}"
            )


def build(source: Source, jobs: int, workdir: Path) -> Path:
    src = source.directory
    runner = src / "tests" / "test-runner"
    stamp = src / ".annal-build-done"
    if runner.exists() and stamp.exists():
        say(f"== already built: {runner}")
        return runner
    install_build_packages()
    log = workdir / "build.log"
    log.write_text("")
    say(f"== building librdkafka {source.upstream_version} (make -j{jobs}; log {log})")
    total = sum(
        1
        for sub in ("src", "src-cpp", "tests", "tests/interceptor_test")
        for path in (src / sub).glob("*.c*")
        if path.suffix in (".c", ".cpp")
    )
    done = [0]
    started = time.monotonic()
    say("  ./configure")
    stream(["./configure", "--no-download"], src, log, total, done)
    stream(["make", f"-j{jobs}", "libs"], src, log, total, done)
    stream(["make", f"-j{jobs}", "-C", "tests", "build"], src, log, total, done)
    if not runner.exists():
        raise SuiteError(f"the build finished without {runner}; log {log}")
    stamp.write_text(f"built in {time.monotonic() - started:.0f}s\n")
    say(f"  built {runner} in {time.monotonic() - started:.0f}s")
    return runner


# ---------------------------------------------------------------------------
# The test list (test.c's tests[] table)


def _calls(text: str, name: str) -> Iterator[str]:
    """The argument text of every ``name(...)`` in ``text``."""
    start = 0
    while (at := text.find(name + "(", start)) != -1:
        depth, i = 0, at + len(name)
        in_string = False
        while i < len(text):
            c = text[i]
            if in_string:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        yield text[at + len(name) + 1 : i]
        start = i


def test_entries(test_c: Path) -> list[TestEntry]:
    text = test_c.read_text(errors="replace")
    body = text.split("struct test tests[] = {", 1)[-1].split("{NULL}", 1)[0]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.DOTALL)
    entries = []
    for args in _calls(body, "_TEST"):
        name, _, rest = args.partition(",")
        flags = rest.split(",", 1)[0].strip()
        scenario = re.search(r'\.scenario\s*=\s*"([^"]*)"', rest)
        entries.append(TestEntry(name.strip(), flags, scenario.group(1) if scenario else "default"))
    if not entries:
        raise SuiteError(f"{test_c}: no _TEST() entries found")
    return entries


# ---------------------------------------------------------------------------
# 3. The cluster and the tests


def annal_command() -> list[str]:
    script = Path(sys.executable).parent / "annal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "annal"]


def annal_default(name: str) -> str:
    try:
        from annal.broker.config import SETTINGS

        return str(SETTINGS[name][1])
    except Exception:  # only for a message
        return "?"


def _settings_note() -> None:
    defaults = {name: annal_default(name) for name in SCENARIO_DEFAULT}
    if defaults != SCENARIO_DEFAULT:
        settings = ", ".join(f"{k}={v}" for k, v in defaults.items())
        wanted = ", ".join(f"{k}={v}" for k, v in SCENARIO_DEFAULT.items())
        say(
            f"  note: the brokers run with annal's defaults ({settings}), not those of "
            f"librdkafka's scenarios/default.json ({wanted}); --scenario-settings starts "
            f"them with the latter"
        )


class SslClient(NamedTuple):
    """How the tests connect to an ``SSL://`` cluster: test.conf's settings, and
    the ``SSL_*`` variables librdkafka's cluster tool (trivup) sets, which its
    SSL tests read (0097)."""

    conf: dict[str, str]
    env: dict[str, str]


class Cluster(NamedTuple):
    """Where the tests find the cluster: its Kafka bootstrap servers (test.conf and
    ``BROKERS``), its ZooKeeper (``ZK_ADDRESS``, for kafka-topics.sh) and, with
    ``--security ssl``, how to connect."""

    bootstrap: str
    zookeeper: str
    ssl: SslClient | None = None


def cluster_up(
    directory: Path,
    brokers: int,
    scenario_settings: bool,
    scenario: str = "default",
    security: str = "plaintext",
) -> Cluster:
    """Start the cluster (with the scenario's own setting; with scenarios/default.json's
    broker settings, an authorizer that allows what no ACL names, and a rack per
    broker with a rack-aware replica selector when ``scenario_settings``; secured
    as ``annal cluster up --security`` secures it)."""
    cmd = [*annal_command(), "cluster", "up", "--dir", str(directory), "--brokers", str(brokers)]
    cmd += ["--security", security]
    for name, value in SCENARIOS[scenario].items():
        cmd += ["--override", f"{name}={value}"]
    if scenario_settings:
        for name, value in {**SCENARIO_DEFAULT, **ACL_TESTS, **FOLLOWER_FETCH}.items():
            cmd += ["--override", f"{name}={value}"]
        for broker in range(1, brokers + 1):
            cmd += ["--broker-override", f"{broker}:broker.rack=RACK{broker}"]
    say(f"== starting the cluster: {' '.join(cmd)}")
    result = run(cmd)
    for line in result.stdout.splitlines():
        say(f"  {line}")
    if result.returncode != 0:
        raise SuiteError(f"annal cluster up failed:\n{result.stderr.strip()}")
    found = re.search(r"^Kafka bootstrap servers:\s*(\S+)", result.stdout, re.MULTILINE)
    if not found:
        raise SuiteError("annal cluster up printed no 'Kafka bootstrap servers' line")
    zookeeper = re.search(r"^zookeeper:\s*(\S+)", result.stdout, re.MULTILINE)
    if not zookeeper:
        raise SuiteError("annal cluster up printed no 'zookeeper' line")
    if not scenario_settings:
        _settings_note()
    return Cluster(found.group(1), zookeeper.group(1))


# ---------------------------------------------------------------------------
# SSL: the files librdkafka's SSL tests expect (as trivup makes them)


def ssl_client(cluster_dir: Path, target: Path) -> SslClient:
    """The admin of an ``annal cluster up --security ssl`` cluster (a super user
    whose certificate the cluster's CA signed) as librdkafka's tests take it,
    written to ``target``: its key (PEM encrypted with a password made here, and
    DER), its certificate (PEM, DER), the CA (PEM, DER), the CA with another one
    (PEM) and all of it in PKCS#12 under the same password.  test.conf reads the
    encrypted key, so ``ssl.key.password`` is used."""
    from annal.deploy.certs import Identity, make_ca
    from annal.deploy.secure import ADMIN, SecureFiles

    secured = SecureFiles(cluster_dir / "security")
    client = Identity.from_pem(secured.keystore(ADMIN).read_bytes())
    ca = x509.load_pem_x509_certificate(secured.ca.read_bytes())
    other = make_ca("librdkafka_suite: another CA").cert  # only its certificate is used
    password = secrets.token_urlsafe(18)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, mode=0o700)
    env = {"SSL_password": password}
    for variable, (name, data) in ssl_forms(client, ca, other, password.encode()).items():
        private_file(target / name, data)
        env[variable] = str(target / name)
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": env["SSL_ca_pem"],
        "ssl.certificate.location": env["SSL_pub_pem"],
        "ssl.key.location": env["SSL_priv_pem"],
        "ssl.key.password": password,
    }
    return SslClient(conf, env)


def ssl_forms(
    client: Identity, ca: x509.Certificate, other: x509.Certificate, password: bytes
) -> dict[str, tuple[str, bytes]]:
    """Each ``SSL_*`` variable's file name and contents.  librdkafka 2.0.2 reads
    the PEM key and the PKCS#12 file with ``ssl.key.password`` and the DER key
    without one (src/rdkafka_cert.c), so only the DER key is left unencrypted."""
    pem, der = serialization.Encoding.PEM, serialization.Encoding.DER
    pkcs8 = serialization.PrivateFormat.PKCS8
    locked = serialization.BestAvailableEncryption(password)
    return {
        "SSL_priv_pem": ("client.key.pem", client.key.private_bytes(pem, pkcs8, locked)),
        "SSL_priv_der": (
            "client.key.der",
            client.key.private_bytes(der, pkcs8, serialization.NoEncryption()),
        ),
        "SSL_pub_pem": ("client.pem", client.cert.public_bytes(pem)),
        "SSL_pub_der": ("client.der", client.cert.public_bytes(der)),
        "SSL_ca_pem": ("ca.pem", ca.public_bytes(pem)),
        "SSL_ca_der": ("ca.der", ca.public_bytes(der)),
        # more than one CA, the cluster's not the first
        "SSL_all_cas_pem": ("all-cas.pem", other.public_bytes(pem) + ca.public_bytes(pem)),
        "SSL_pkcs": (
            "client.p12",
            pkcs12.serialize_key_and_certificates(
                client.common_name().encode(), client.key, client.cert, [ca], locked
            ),
        ),
    }


def private_file(path: Path, data: bytes) -> None:
    from annal.deploy.certs import write_private

    write_private(path, data)


def cluster_down(directory: Path, scenario_settings: bool) -> None:
    if not (directory / "cluster.json").exists():
        return
    cmd = [*annal_command(), "cluster", "down", "--dir", str(directory)]
    say(f"== stopping the cluster: {' '.join(cmd)}")
    result = run(cmd)
    text = (result.stdout + result.stderr).strip()
    if text:
        say(f"  {text}")


def write_test_conf(
    tests_dir: Path, bootstrap: str, multiplier: float, extra: Mapping[str, str] | None = None
) -> Path:
    """test.conf (owner only: ``extra`` may hold ``ssl.key.password``)."""
    conf = tests_dir / "test.conf"
    lines = [
        "# Written by annal's bench/librdkafka_suite.py: the annal cluster under test.",
        f"bootstrap.servers={bootstrap}",
        f"test.timeout.multiplier={multiplier}",
        *(f"{name}={value}" for name, value in (extra or {}).items()),
    ]
    private_file(conf, ("\n".join(lines) + "\n").encode())
    return conf


def runner_env(
    source: Source, kafka_version: str, number: str, cluster: Cluster, scenario: str = "default"
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TESTS_SKIP", "SUBTESTS")}
    library_path = f"{source.directory / 'src'}:{source.directory / 'src-cpp'}"
    env.update(
        TESTS=number,
        TEST_KAFKA_VERSION=kafka_version,
        TEST_MODE="bare",
        TEST_SCENARIO=scenario,
        RDKAFKA_GITVER=f"debian-{source.debian_version}",
        KAFKA_PATH=str(REPO),
        ANNAL=" ".join(annal_command()),
        ZK_ADDRESS=cluster.zookeeper,
        BROKERS=cluster.bootstrap,
        LD_LIBRARY_PATH=library_path
        + (":" + env["LD_LIBRARY_PATH"] if "LD_LIBRARY_PATH" in env else ""),
    )
    if cluster.ssl is not None:
        env.update(cluster.ssl.env)
    return env


def first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def parse_log(log: str) -> tuple[dict[str, Outcome], dict[str, str]]:
    """The final summary rows of a test-runner's output (or, for a run killed
    before its summary, a row for each test it said had passed), and the first
    failure line printed for each test."""
    rows: dict[str, Outcome] = {}
    failures: dict[str, str] = {}
    lines = [ANSI.sub("", line) for line in log.splitlines()]
    rows.update(passed_before_summary(lines))
    for i, line in enumerate(lines):
        row = SUMMARY_ROW.match(line)
        if row and row.group("name") != "<MAIN>":
            state = {"RUNNING": "FAILED", "DNS": "FAILED"}.get(
                row.group("state"), row.group("state")
            )
            rows[row.group("name")] = Outcome(
                row.group("name"), state, row.group("reason").strip(), float(row.group("secs"))
            )
        header = FAILURE_HEADER.match(line)
        if header:
            name = header.group("name").split(" (", 1)[0]
            reason = lines[i + 1].strip() if i + 1 < len(lines) else header.group("where")
            failures.setdefault(name, reason)
    return rows, failures


def passed_before_summary(lines: list[str]) -> dict[str, Outcome]:
    """A PASSED row for each "Test NAME PASSED" line, with the test's duration."""
    seconds = {
        found.group("name"): float(found.group("ms")) / 1000
        for found in map(DURATION_LINE.search, lines)
        if found
    }
    return {
        found.group("name"): Outcome(
            found.group("name"),
            "PASSED",
            "passed before test-runner ended without its summary",
            seconds.get(found.group("name"), 0.0),
        )
        for found in map(PASSED_LINE.search, lines)
        if found
    }


def run_number(
    runner: Path,
    source: Source,
    number: str,
    entries: list[TestEntry],
    args: argparse.Namespace,
    results: Path,
    cluster: Cluster,
) -> list[Outcome]:
    """Run every test of one test number; one outcome per test name shown."""
    flags = [f"-p{args.parallel}"] + ([] if args.include_local else ["-L"])
    flags += ["-Q"] if args.quick else []
    log_path = results / f"{number}.log"
    started = time.monotonic()
    killed = False
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [str(runner), *flags],
            cwd=runner.parent,
            env=runner_env(source, args.kafka_version, number, cluster, args.scenario),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            killed = True
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        if killed:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    elapsed = time.monotonic() - started
    rows, failures = parse_log(log_path.read_text(errors="replace"))
    outcomes = []
    for entry in entries:
        if entry.local and not args.include_local:
            continue
        row = rows.get(entry.name)
        if row is None:
            if args.scenario not in entry.scenario.split(","):
                row = Outcome(entry.name, "SKIPPED", f"requires test scenario {entry.scenario}")
            elif killed:
                detail = failures.get(entry.name, "")
                row = Outcome(
                    entry.name,
                    "TIMEOUT",
                    f"no result within {args.timeout:.0f}s, test-runner killed"
                    + (f"; first failure: {detail}" if detail else ""),
                    elapsed,
                )
            else:
                code = process.returncode
                how = f"signal {-code}" if code < 0 else f"exit code {code}"
                detail = failures.get(entry.name, f"test-runner ended ({how}) without a summary")
                row = Outcome(entry.name, "FAILED", detail, elapsed)
        elif row.state == "SKIPPED" and not row.reason and entry.scenario != args.scenario:
            row.reason = f"requires test scenario {entry.scenario}"
        elif row.state == "SKIPPED" and row.reason == "Filtered due to negative test flags":
            row.reason = "flagged as a known issue of librdkafka (TEST_F_KNOWN_ISSUE): not run"
        if row.state in ("FAILED", "TIMEOUT") and not row.reason:
            row.reason = failures.get(entry.name, "")
        row.reason = first_line(row.reason)
        if row.state == "FAILED" and TIMED_OUT.search(row.reason):
            row.state = "TIMEOUT"
        outcomes.append(row)
    return outcomes


def selected_numbers(entries: list[TestEntry], args: argparse.Namespace) -> list[str]:
    numbers: list[str] = []
    for entry in entries:
        if entry.manual or entry.number in numbers:
            continue
        group = [e for e in entries if e.number == entry.number]
        if not args.include_local and all(e.local for e in group):
            continue
        numbers.append(entry.number)
    if args.tests:
        wanted = [t.strip() for t in args.tests.split(",") if t.strip()]
        unknown = [t for t in wanted if t not in {e.number for e in entries}]
        if unknown:
            raise SuiteError(f"--tests: no such test number(s) in test.c: {', '.join(unknown)}")
        numbers = [n for n in numbers if n in wanted]
        skipped = [t for t in wanted if t not in numbers]
        if skipped:
            say(f"  note: local-only test(s) {', '.join(skipped)} need --include-local; not run")
    return numbers


# ---------------------------------------------------------------------------
# 5. The report


def aggregate(outcomes: list[Outcome]) -> str:
    states = {o.state for o in outcomes}
    for state in ("FAILED", "TIMEOUT", "PASSED"):
        if state in states:
            return state.lower()
    return "skipped"


def print_table(outcomes: list[Outcome]) -> None:
    width = max([len(o.name) for o in outcomes] + [4])
    say("")
    say(f"{'test':<{width}}  {'result':<8}  {'secs':>6}  reason")
    say(f"{'-' * width}  {'-' * 8}  {'-' * 6}  {'-' * 40}")
    for o in outcomes:
        reason = o.reason if len(o.reason) <= 160 else o.reason[:157] + "..."
        say(f"{o.name:<{width}}  {o.state:<8}  {o.seconds:6.1f}  {reason}")


def summary(source: Source | None, by_number: dict[str, list[Outcome]]) -> dict[str, object]:
    tests = {number: aggregate(outs) for number, outs in by_number.items()}
    counts = {
        s: sum(1 for v in tests.values() if v == s)
        for s in ("passed", "failed", "skipped", "timeout")
    }
    return {
        "librdkafka_version": source.upstream_version if source else None,
        "debian_source": f"{source.package} {source.debian_version}" if source else None,
        **counts,
        "tests": tests,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Judge annal's Kafka-protocol compatibility with librdkafka's own test suite: "
            "fetch librdkafka's source package from Debian's archive (the version apt "
            "offers for librdkafka-dev), build it and its test runner, start a 3-broker "
            "cluster with 'annal cluster up', run the tests that need a broker one test "
            "number at a time, stop the cluster and print a table and, as the last line, "
            "a JSON summary. Exit status: 0 when no test failed, 1 when some did, 2 when "
            "the suite could not be built or run."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--tests",
        metavar="NNNN,NNNN",
        help="only these test numbers (as in librdkafka's tests/NNNN-*.c); default: all "
        "tests that need a broker",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help="download cache, build tree, per-test logs (results/NNNN.log) and the "
        "cluster's directory; also $ANNAL_LIBRDKAFKA_DIR",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the cluster's directory (WORKDIR/cluster: each broker's broker.log and "
        "data) after stopping it; without it the directory is removed",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds one test number may take before its test-runner is killed (TIMEOUT)",
    )
    parser.add_argument(
        "--timeout-multiplier",
        type=float,
        default=2.0,
        help="test.timeout.multiplier in test.conf: scales the tests' own timeouts "
        "(librdkafka's CI runs add 2 to the default of 1)",
    )
    parser.add_argument(
        "--kafka-version",
        default="2.8.1",
        help="TEST_KAFKA_VERSION: the broker version the tests assume; it decides which "
        "version-gated tests run (annal follows Kafka 2.x)",
    )
    parser.add_argument(
        "--include-local",
        action="store_true",
        help="also run the tests that need no broker (librdkafka's unit tests and mock "
        "cluster); they do not exercise annal",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="librdkafka's quick mode (-Q, what its CI runs): fewer messages, and every "
        "sub-test not marked quick is left out silently, so some tests pass having done "
        "little; for a fast smoke run only",
    )
    parser.add_argument(
        "--scenario-settings",
        action="store_true",
        help="start the brokers with librdkafka's scenarios/default.json settings "
        "(num.partitions=4, default.replication.factor=3) and the ACL authorizer, "
        "allowing what no ACL names (for the ACL tests), and broker N in rack RACKN "
        "with a rack-aware replica selector (for 0101, fetch from follower), through "
        "'annal cluster up --override/--broker-override'; without it they run with "
        "annal's defaults",
    )
    parser.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="default",
        help="librdkafka's test scenario (TEST_SCENARIO): the tests written for it run, "
        "the others are skipped; noautocreate starts the brokers with "
        "auto.create.topics.enable=false",
    )
    parser.add_argument(
        "--security",
        choices=SECURITY_CHOICES,
        default="plaintext",
        help="ssl: start the cluster with 'annal cluster up --security ssl' (Kafka's protocol "
        "on SSL:// with client certificates required) and connect as its admin: test.conf "
        "gets security.protocol=SSL, ssl.ca.location, ssl.certificate.location, "
        "ssl.key.location (the key encrypted) and ssl.key.password, and the tests get the "
        "SSL_* variables librdkafka's SSL tests read (0097: the certificate, key and CA as "
        "PEM, DER and PKCS#12, more than one CA in SSL_all_cas_pem), files in WORKDIR/ssl",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="test-runner -pN: how many tests of one test number run at once (test numbers "
        "still run one at a time; test-runner adds N/3 to the timeout multiplier). With 1 "
        "they run one after another, so a test that hangs keeps the next tests of its "
        "number from starting: librdkafka 2.0.2's 0045_subscribe_update_topic_remove passes "
        "its checks, then hangs in rd_kafka_destroy (a consumer whose subscribed topic was "
        "deleted; fixed in librdkafka 2.1.0, its #4187), and "
        "0045_subscribe_update_non_exist_and_partchange never starts; with 2 it runs beside "
        "it, and a test that passed is reported even when test-runner is killed later",
    )
    parser.add_argument("--brokers", type=int, default=3, help="brokers in the cluster")
    parser.add_argument("--jobs", type=int, default=2, help="make -j")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir.expanduser().resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    source: Source | None = None
    by_number: dict[str, list[Outcome]] = {}
    cluster_dir = workdir / "cluster"
    status = 0
    try:
        source = fetch_source(workdir)
        runner = build(source, args.jobs, workdir)
        entries = test_entries(source.directory / "tests" / "test.c")
        numbers = selected_numbers(entries, args)
        if not numbers:
            raise SuiteError("no test to run")
        results = workdir / "results"
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir()
        cluster_down(cluster_dir, False)  # a cluster left over by an interrupted run
        shutil.rmtree(cluster_dir, ignore_errors=True)
        cluster = cluster_up(
            cluster_dir, args.brokers, args.scenario_settings, args.scenario, args.security
        )
        if args.security == "ssl":
            cluster = cluster._replace(ssl=ssl_client(cluster_dir, workdir / "ssl"))
            say(f"  SSL: the admin's certificate, its key and the CA in {workdir / 'ssl'}")
        extra = cluster.ssl.conf if cluster.ssl else {}
        conf = write_test_conf(runner.parent, cluster.bootstrap, args.timeout_multiplier, extra)
        say(
            f"== running {len(numbers)} test numbers (TEST_KAFKA_VERSION={args.kafka_version}, "
            f"{conf}, logs in {results})"
        )
        for i, number in enumerate(numbers, 1):
            group = [e for e in entries if e.number == number]
            outcomes = run_number(runner, source, number, group, args, results, cluster)
            by_number[number] = outcomes
            for o in outcomes:
                note = f"  {o.reason}" if o.state != "PASSED" and o.reason else ""
                say(f"  [{i:3d}/{len(numbers)}] {o.name:<45} {o.state:<8} {o.seconds:6.1f}s{note}")
    except SuiteError as exc:
        print(f"librdkafka_suite: {exc}", file=sys.stderr, flush=True)
        status = 2
    except KeyboardInterrupt:
        print("librdkafka_suite: interrupted", file=sys.stderr, flush=True)
        status = 2
    finally:
        cluster_down(cluster_dir, args.scenario_settings)
        if not args.keep:
            shutil.rmtree(cluster_dir, ignore_errors=True)
    outcomes = [o for outs in by_number.values() for o in outs]
    if outcomes:
        print_table(outcomes)
    report = summary(source, by_number)
    if status == 0 and (report["failed"] or report["timeout"]):
        status = 1
    print(json.dumps(report), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
