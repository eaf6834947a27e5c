"""Run ``annal`` as a user does: a subprocess of this interpreter."""

from __future__ import annotations

import subprocess
import sys


def annal(*args: str, stdin: str = "", timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "annal", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
