"""``make demo`` runs: the cluster demo end to end, and the storage demo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(300)
def test_cluster_demo(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "annal.demo", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified: every record read back once, byte for byte" in result.stdout
    assert "verified after the crash: every record still there" in result.stdout
    assert "cluster down" in result.stdout


@pytest.mark.timeout(120)
def test_storage_demo(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "annal.demo", "storage", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "recovery: log end offset now" in result.stdout
    assert "compaction of users-0" in result.stdout
