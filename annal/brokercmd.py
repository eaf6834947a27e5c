"""``annal broker start``: run a broker in the foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from annal import logsetup
from annal.clierrors import fail
from annal.logsetup import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES


def add_parser(commands: Any) -> None:
    broker = commands.add_parser("broker", help="run a broker")
    actions = broker.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    start = actions.add_parser(
        "start",
        help="start a broker in the foreground",
        description=(
            "Start a broker. Settings use Kafka's names (broker.id, zookeeper.connect, "
            "listeners, log.dirs, ...), from a properties file and/or KEY=VALUE arguments, "
            "which win. SIGTERM or Ctrl-C stops it cleanly."
        ),
    )
    start.add_argument("--config", type=Path, metavar="FILE", help="a server.properties file")
    start.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting that overrides the file (repeatable)",
    )
    start.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="more settings")
    start.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    start.add_argument(
        "--log-file", type=Path, metavar="FILE",
        help="write the log (and stdout/stderr) to FILE, rotated by size, instead of stderr",
    )  # fmt: skip
    start.add_argument(
        "--log-file-max-bytes", type=_positive, default=DEFAULT_MAX_BYTES, metavar="BYTES",
        help="rotate --log-file past this size (default: %(default)s)",
    )  # fmt: skip
    start.add_argument(
        "--log-file-backups", type=_positive, default=DEFAULT_BACKUPS, metavar="N",
        help="rotated files kept: FILE.1 (newest) to FILE.N (default: %(default)s)",
    )  # fmt: skip
    start.add_argument(
        "--ports-file", type=Path, metavar="FILE",
        help="once the broker serves, write where it listens to FILE as JSON (the gRPC "
        "listener's name and port, each Kafka listener's port by name, the metrics port): "
        "with a listener on port 0 this is how a script learns the port the kernel gave it",
    )  # fmt: skip
    start.set_defaults(run=run_start)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _write_ports(path: Path, ports: dict[str, object]) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(ports) + "\n")
    tmp.replace(path)


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"annal broker start: expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def run_start(args: argparse.Namespace) -> int:
    from annal.allocator import keep_large_buffers
    from annal.broker.config import BrokerConfig, ConfigError
    from annal.broker.server import BrokerServer, BrokerStartupError

    try:
        config = BrokerConfig.load(args.config, parse_pairs(args.override + args.settings))
    except ConfigError as exc:
        return fail("annal broker start", exc)
    logsetup.configure(
        args.log_level,
        config.log_format,
        args.log_file,
        args.log_file_max_bytes,
        args.log_file_backups,
    )
    if config.ignored:
        logging.getLogger(__name__).warning(
            "ignoring Kafka settings annal does not use: %s", ", ".join(config.ignored)
        )
    keep_large_buffers()
    broker = BrokerServer(config)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        logging.getLogger(__name__).info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        broker.start()
    except BrokerStartupError as exc:
        print(f"annal broker start: broker {config.broker_id} cannot start: {exc}", file=sys.stderr)
        return 1
    if args.ports_file is not None:
        try:
            _write_ports(args.ports_file, broker.bound_ports())
        except OSError as exc:
            logging.getLogger(__name__).error("cannot write --ports-file: %s; stopping", exc)
            broker.must_stop.set()
    while not stop.wait(0.5) and not broker.must_stop.is_set():
        pass
    broker.shutdown()
    code = 1 if broker.must_stop.is_set() else 0
    # Everything is on disk and every connection closed: the process ends now,
    # as a JVM's System.exit does, without the interpreter tearing down the
    # objects of thousands of logs one by one (half a second at 6,667).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
