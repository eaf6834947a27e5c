"""The compiled modules are built, and ``ANNAL_PURE_PYTHON=1`` puts every path on
its pure-Python twin (``make test`` runs the storage tests both ways)."""

from __future__ import annotations

import importlib.util
import os

import pytest
from annal.storage import columns, records, walker
from environment import require_module

MODULES = ("_walker", "_columns", "_encoder")
PURE = os.environ.get("ANNAL_PURE_PYTHON") == "1"


@pytest.mark.parametrize("module", MODULES)
def test_pip_install_builds_each_compiled_module(module: str) -> None:
    require_module(f"annal.storage.{module}", "pip install builds it with gcc and Python's headers")


def test_each_path_takes_the_compiled_module_unless_pure_python_is_asked_for() -> None:
    built = {m: importlib.util.find_spec(f"annal.storage.{m}") is not None for m in MODULES}
    assert ("c" if built["_walker"] and not PURE else "python") == walker.IMPLEMENTATION
    assert ("c" if built["_columns"] and not PURE else "python") == columns.IMPLEMENTATION
    assert (records._encode_section is not None) == (built["_encoder"] and not PURE)
