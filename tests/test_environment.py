"""A missing piece of what the README promises skips a test, but fails it under CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

PROBE = """
from environment import require_command, require_module

module = require_module("annal_no_such_module")

def test_uses_it() -> None:
    pass
""", """
from environment import require_command

def test_runs_kcat() -> None:
    require_command("annal-no-such-command")
"""


@pytest.mark.parametrize("probe", PROBE, ids=["module", "command"])
@pytest.mark.parametrize("ci", ["", "true"])
def test_a_missing_dependency_skips_outside_ci_and_fails_under_ci(
    tmp_path: Path, probe: str, ci: str
) -> None:
    (tmp_path / "test_probe.py").write_text(probe)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(TESTS)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    name = "annal_no_such_module" if "require_module(" in probe else "annal-no-such-command"
    assert name in done.stdout
    if ci:
        assert done.returncode in (1, 2) and "CI=true" in done.stdout, done.stdout  # 2: collection
        assert "skipped" not in done.stdout
    else:
        assert done.returncode in (0, 5) and "1 skipped" in done.stdout, done.stdout  # 5: none ran
