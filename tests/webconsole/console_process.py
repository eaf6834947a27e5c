"""Run ``annal console`` as an operator does: a subprocess serving a free port."""

from __future__ import annotations

import select
import subprocess
import sys
import time


def start_console(bootstrap: str, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``annal console --port 0`` (sampling every second) and the URL it says it serves."""
    process = subprocess.Popen(
        [sys.executable, "-m", "annal", "console", "--bootstrap-server", bootstrap,
         "--port", "0", "--sample-interval", "1", *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1)
        if ready:
            line = process.stdout.readline()
            if line.startswith("annal console: serving "):
                return process, line.split()[-1]
            assert line, "annal console exited before serving"
    process.kill()
    raise AssertionError("annal console printed no URL within 30 s")
