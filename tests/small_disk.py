"""A small tmpfs mounted for a test: a disk that fills up for real (needs root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from environment import require_command, unavailable


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``1m``, ``2m``) mounted at ``path`` (made here),
    unmounted afterwards."""
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root")
    mount = require_command("mount", "util-linux provides it")
    path.mkdir()
    subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
