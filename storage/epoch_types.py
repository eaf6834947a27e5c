"""The leader-epoch value type, shared by the cache and its checkpoint file."""

from __future__ import annotations

from typing import NamedTuple


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` started at ``start_offset``.  Immutable, so thread-safe."""

    epoch: int
    start_offset: int
