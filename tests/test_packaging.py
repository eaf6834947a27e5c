"""The wheel installs the top-level folders as subpackages of ``annal``."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_wheel_installs_into_a_fresh_virtualenv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        cwd=tmp_path,
    )
    wheel = next(dist.glob("annal-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "annal/storage/log.py" in names
    assert [n for n in names if n.startswith("annal/storage/_walker") and n.endswith(".so")]
    assert not [n for n in names if n.startswith(("storage/", "tests/", "bench/"))]

    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True)
    out = subprocess.run(
        [str(env / "bin" / "annal"), "--help"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "dump-log" in out.stdout
    walk = subprocess.run(
        [str(python), "-c", "from annal.storage import walker; print(walker.IMPLEMENTATION)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert walk.stdout.strip() == "c", "the wheel carries the compiled record walker"
    bare = subprocess.run(
        [str(python), "-c", "import storage"], capture_output=True, text=True, cwd=tmp_path
    )
    assert bare.returncode != 0, "a bare 'storage' package must not be installed"
