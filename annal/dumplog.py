"""``annal dump-log``: print the batches, records and index entries of segment files."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "dump-log", help="print the contents of .log, .index and .timeindex files"
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError
