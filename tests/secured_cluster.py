"""A one-broker cluster made by ``annal cluster up --security sasl_ssl`` for tests
that need a secured cluster, set up by its admin through annal's CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runcli import annal


@contextmanager
def secured_cluster(
    directory: Path, admin_steps: Sequence[Sequence[str]]
) -> Iterator[dict[str, Any]]:
    """The cluster's ``status --json`` (plus ``endpoint``, its broker's gRPC
    listener), after each of ``admin_steps`` ran as the admin: a CLI command and
    its arguments, to which the admin's ``--bootstrap-server`` and
    ``--command-config`` are added after the command's words (``"topics",
    "create"``: the first two; others: the first)."""
    d = str(directory)
    up = annal("cluster", "up", "--brokers", "1", "--security", "sasl_ssl", "--dir", d)
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(annal("cluster", "status", "--json", "--dir", d).stdout)
        endpoint = status["brokers"][0]["endpoint"]
        admin = ["--bootstrap-server", endpoint, "--command-config", status["admin_config"]]
        for step in admin_steps:
            words = 2 if step[0] == "topics" else 1
            done = annal(*step[:words], *admin, *step[words:])
            assert done.returncode == 0, (step, done.stderr)
        yield {**status, "endpoint": endpoint, "dir": d}
    finally:
        annal("cluster", "down", "--dir", d)
