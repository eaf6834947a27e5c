"""``annal console``: serve the web console (annal.webconsole) until SIGINT/SIGTERM.

It binds ``--host``:``--port`` (0: a free port), prints the URL it serves and
samples the cluster every ``--sample-interval`` seconds for its charts.
Cluster access is a client's: ``--bootstrap-server`` (or ``--zookeeper``,
added by annal.cli as for every command that takes brokers) and the
``--command-config`` security settings, so the cluster's ACLs apply to what
the console shows and does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

logger = logging.getLogger(__name__)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def add_parser(commands: Any) -> None:
    console = commands.add_parser(
        "console",
        help="serve a web console: brokers, topics, groups, lag, messages, admin forms",
        description="Serve a web console for operators: the cluster's brokers (up or down, "
        "the controller), topics and their partitions (leader, replicas, ISR, offsets, "
        "size, configs), consumer groups of both kinds (members, committed offsets, lag, "
        "with charts of the last hour), a message browser, and forms to create a topic, "
        "alter a topic config, reset a group's offsets and elect preferred leaders. It "
        "reads and acts as a client with the --command-config credentials, so the "
        "cluster's ACLs apply. Runs until SIGINT or SIGTERM.",
        epilog="example: annal console --bootstrap-server localhost:9092 --port 8080",
    )
    console.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact (gRPC endpoints)",
    )  # fmt: skip
    console.add_argument(
        "--port", type=int, default=8080,
        help="the HTTP port to serve on; 0 picks a free one (default: %(default)s)",
    )  # fmt: skip
    console.add_argument(
        "--host", default="127.0.0.1",
        help="the address to bind (default: %(default)s; 0.0.0.0 for every interface: "
        "the console has no login of its own, so put it behind one)",
    )  # fmt: skip
    console.add_argument(
        "--sample-interval", type=_positive, default=5.0, metavar="SECONDS",
        help="how often to read log end and committed offsets for the lag and rate "
        "charts; an hour of samples is kept (default: %(default)s)",
    )  # fmt: skip
    console.add_argument(
        "--read-only", action="store_true",
        help="refuse every change (the admin forms): a console to look only",
    )  # fmt: skip
    console.add_argument(
        "--request-timeout", type=_positive, default=5.0, metavar="SECONDS",
        help="how long each request to the cluster may take (default: %(default)s)",
    )  # fmt: skip
    console.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import aiohttp  # noqa: F401
        import jinja2  # noqa: F401
        import plotly  # noqa: F401
    except ImportError as exc:
        print(f"annal console: {exc.name} is not installed: pip install 'annal[console]'",
              file=sys.stderr)  # fmt: skip
        return 1
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from annal.webconsole.app import Console, make_app
    from annal.webconsole.cluster_view import ClusterView
    from annal.webconsole.sampler import Sampler

    # page requests wait on cluster calls: room for many at once
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=32, thread_name_prefix="console")
    )
    view = ClusterView(args.bootstrap_server, getattr(args, "zookeeper", None),
                       timeout_s=args.request_timeout)  # fmt: skip
    sampler = Sampler(view.sample, args.sample_interval)
    console = Console(view, sampler, read_only=args.read_only)
    runner = web.AppRunner(make_app(console), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        view.close()
        print(f"annal console: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    sampler.start()
    port = runner.addresses[0][1]
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
    host = f"[{shown}]" if ":" in shown else shown
    mode = " (read-only)" if args.read_only else ""
    print(f"annal console: serving http://{host}:{port}/{mode}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    print("annal console: stopping", flush=True)
    sampler.stop()
    await runner.cleanup()
    view.close()
    return 0
