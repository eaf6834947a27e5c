"""Where the storage package's compiled paths are looked up.

The C extensions (``_walker``, ``_columns``, ``_encoder``) are built by
``pip install`` and each has a pure-Python twin that gives the same results.
``compiled`` hands out a function of one of them, or None where the module
is missing or the environment sets ``ANNAL_PURE_PYTHON=1`` (the tests run
both ways).
"""

from __future__ import annotations

import importlib
import os
from typing import Any


def compiled(module: str, name: str) -> Any:
    """``annal.storage.<module>.<name>``, or None (see the module docstring)."""
    if os.environ.get("ANNAL_PURE_PYTHON") == "1":
        return None
    try:
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)
    except ImportError:
        return None
