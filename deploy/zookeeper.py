"""A standalone ZooKeeper server from the machine's own installation.

The tests, the demo and ``annal cluster up`` all run a real ZooKeeper: the
Debian package (``apt-get install zookeeper``: ``/usr/share/java/zookeeper.jar``)
or an Apache release unpacked at ``$ZOOKEEPER_HOME``.  The server runs as a
child process (``ZooKeeperServerMain``) bound to 127.0.0.1, with its data,
``zoo.cfg`` and log under one directory.

Thread safety: a ``ZooKeeperServer`` is driven by one thread.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_CONF = Path("/etc/zookeeper/conf")
DEBIAN_LOGGER = Path("/usr/share/java/slf4j-simple.jar")
# with these, the server logs through log4j to a size-rotated zookeeper.log
DEBIAN_LOG4J = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
LOG_MAX_BYTES = 64 * 1024 * 1024  # as the brokers' broker.log (deploy/runner.py)
LOG_BACKUPS = 3
INSTALL_HINT = (
    "ZooKeeper is not installed: run `sudo apt-get install zookeeper` (Debian/Ubuntu), "
    "or unpack an Apache ZooKeeper release and set ZOOKEEPER_HOME to it"
)


class ZooKeeperError(Exception):
    """ZooKeeper could not be found, started or stopped."""


@dataclass(frozen=True, slots=True)
class ZooKeeperInstall:
    """How to launch the installed server: the java binary and the classpath."""

    java: str
    classpath: str
    log4j: bool = False  # logs through log4j 1.2 (a rotated file) rather than to stdout


def find_zookeeper() -> ZooKeeperInstall:
    """The ZooKeeper installation on this machine; ZooKeeperError naming the fix if none."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ZooKeeperError(
            "java is not installed: run `sudo apt-get install default-jre-headless` "
            "or set JAVA_HOME"
        )
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        root = Path(home)
        jars = sorted(root.glob("lib/*.jar")) + sorted(root.glob("zookeeper-*.jar"))
        if not jars:
            raise ZooKeeperError(f"ZOOKEEPER_HOME={home} holds no ZooKeeper jars (lib/*.jar)")
        parts = [str(root / "conf"), *map(str, jars)]
        return ZooKeeperInstall(java, os.pathsep.join(parts))
    if DEBIAN_JAR.exists():
        parts = [str(DEBIAN_CONF), str(DEBIAN_JAR)]
        if all(jar.exists() for jar in DEBIAN_LOG4J):
            parts.extend(map(str, DEBIAN_LOG4J))
            return ZooKeeperInstall(java, os.pathsep.join(parts), log4j=True)
        if DEBIAN_LOGGER.exists():
            parts.append(str(DEBIAN_LOGGER))
        return ZooKeeperInstall(java, os.pathsep.join(parts))
    raise ZooKeeperError(INSTALL_HINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for a server started soon after.

    It is picked at random below the kernel's ephemeral range: a port the
    kernel handed out (bind to port 0) is one it may also give any outgoing
    connection as its local port before the server binds it, which made a
    broker fail to start with "address already in use".  A process never gets
    the same port twice.  ``ANNAL_FREE_PORTS=FIRST-LAST`` narrows the choice,
    so that processes started side by side (parallel test workers, with the
    brokers and clusters each starts) never pick each other's ports."""
    first, end = free_port_range()
    for _ in range(200):
        port = random.randrange(first, end)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # all taken: the kernel's pick
        s.bind((host, 0))
        picked: int = s.getsockname()[1]
        return picked


# how many ports a server whose port was taken before it bound it tries in all
PICKS = 3
# Above the host ports docker-compose.yml publishes (9092-9094, 19092-19094).
FREE_PORTS_FROM = 20_000
_handed_out: set[int] = set()


def free_port_range() -> tuple[int, int]:
    """The ports ``free_port`` picks from, as ``range``'s bounds: ``ANNAL_FREE_PORTS``
    where it is set, else from ``FREE_PORTS_FROM`` up to the ephemeral range."""
    setting = os.environ.get("ANNAL_FREE_PORTS")
    if not setting:
        return FREE_PORTS_FROM, _ephemeral_low()
    try:
        first, last = (int(part) for part in setting.split("-"))
    except ValueError:
        first, last = 0, -1
    if not 0 < first <= last < 65536:
        raise ValueError(f"ANNAL_FREE_PORTS={setting!r}: expected FIRST-LAST, e.g. 20000-25999")
    return first, last + 1


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > FREE_PORTS_FROM + 1000 else 32768


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        conn.sendall(word.encode("ascii"))
        chunks = []
        while True:
            data = conn.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """One standalone server under ``directory`` (``data/``, ``zoo.cfg``, ``zookeeper.log``).

    With Debian's log4j jars the server writes ``zookeeper.log`` itself, rotated
    by size into ``zookeeper.log.1`` to ``.3``, and the process's own output
    (a JVM that fails to start) goes to ``zookeeper.out``; otherwise all of it
    is appended to ``zookeeper.log``."""

    def __init__(self, directory: Path, port: int = 0, host: str = "127.0.0.1") -> None:
        self.directory = Path(directory)
        self.host = host
        self.port = port or free_port(host)
        self._picked = not port  # a port picked here is picked again if taken
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def out_path(self) -> Path:
        return self.directory / "zookeeper.out"

    def write_log4j_config(self) -> Path:
        config = self.directory / "log4j.properties"
        config.write_text(
            "\n".join(
                [
                    "log4j.rootLogger=INFO, FILE",
                    "log4j.appender.FILE=org.apache.log4j.RollingFileAppender",
                    f"log4j.appender.FILE.File={self.log_path}",
                    f"log4j.appender.FILE.MaxFileSize={LOG_MAX_BYTES}",
                    f"log4j.appender.FILE.MaxBackupIndex={LOG_BACKUPS}",
                    "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
                    "log4j.appender.FILE.layout.ConversionPattern="
                    "%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n",
                    "",
                ]
            )
        )
        return config

    def write_config(self) -> Path:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    "initLimit=10",
                    "syncLimit=5",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "maxClientCnxns=0",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server and wait until it serves requests (``srvr`` answers).

        ZooKeeper cannot listen on port 0 and say where it listens, so its port is
        picked here (``free_port``); should another process bind it first, the
        server fails to start, and starts again on another port picked anew."""
        for attempt in range(PICKS):
            try:
                self._start(timeout_s)
                return
            except ZooKeeperError as exc:
                taken = "Address already in use" in str(exc)
                if not (self._picked and taken) or attempt == PICKS - 1:
                    raise
                self.port = free_port(self.host)

    def _start(self, timeout_s: float) -> None:
        install = find_zookeeper()
        config = self.write_config()
        logging = (
            [f"-Dlog4j.configuration=file:{self.write_log4j_config()}"]
            if install.log4j
            else ["-Dorg.slf4j.simpleLogger.defaultLogLevel=info"]
        )
        output = self.out_path if install.log4j else self.log_path
        log = open(output, "ab")  # noqa: SIM115 - handed to the child process
        try:
            self.process = subprocess.Popen(
                [
                    install.java,
                    "-Xmx256m",
                    "-Dzookeeper.admin.enableServer=false",
                    *logging,
                    "-cp",
                    install.classpath,
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {self.process.returncode}; "
                    f"last log lines:\n{self.tail_log()}"
                )
            try:
                # "ruok" answers "imok" as soon as the process listens; "srvr"
                # reports the version only once the server takes requests.
                if "Zookeeper version" in four_letter_word(self.host, self.port, "srvr"):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperError(
            f"ZooKeeper did not answer on {self.connect_string} within {timeout_s:.0f} s; "
            f"last log lines:\n{self.tail_log()}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)

    def tail_log(self, lines: int = 40) -> str:
        """The last lines of the log, after what the process printed (if anything)."""
        found = []
        for path in (self.out_path, self.log_path):
            try:
                found += path.read_text("utf-8", "replace").splitlines()
            except FileNotFoundError:
                continue
        return "\n".join(found[-lines:]) if found else "(no log)"

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
