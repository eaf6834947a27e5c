"""``annal delete-records``: move partitions' log start offsets up, deleting the
records before, as kafka-delete-records.sh does."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXAMPLE = '{"version": 1, "partitions": [{"topic": "events", "partition": 0, "offset": 1000}]}'


def add_parser(commands: Any) -> None:
    delete = commands.add_parser(
        "delete-records",
        help="delete the records before given offsets",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Delete every record below an offset in each partition a JSON file names:

  {EXAMPLE}

Offset -1 means the high watermark (everything consumers can read). The
partition's log start offset (its low watermark) moves up; whole segments
below it are removed by the leader and, at their next fetch, the followers.""",
    )
    delete.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    delete.add_argument(
        "--offset-json-file", required=True, type=Path, metavar="FILE",
        help="the partitions and offsets",
    )  # fmt: skip
    delete.set_defaults(run=run)


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """The file's (topic, partition) → offset; ValueError naming what is wrong."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    entries = raw.get("partitions") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'{path} has no "partitions" list; expected e.g. {EXAMPLE}')
    offsets: dict[tuple[str, int], int] = {}
    for n, entry in enumerate(entries):
        try:
            key = (str(entry["topic"]), int(entry["partition"]))
            offset = int(entry["offset"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{path}: partitions[{n}] needs topic, partition and offset"
            ) from None
        if offset < -1:
            raise ValueError(f"{path}: partitions[{n}] has offset {offset}; use -1 or more")
        if key in offsets:
            raise ValueError(f"{path}: partition {key[0]}-{key[1]} is listed twice")
        offsets[key] = offset
    return offsets


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient, AdminError

    try:
        offsets = read_offsets(args.offset_json_file)
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"annal delete-records: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            results = client.delete_records(offsets)
        except AdminError as exc:
            print(f"annal delete-records: {exc}", file=sys.stderr)
            return 1
    print("Records delete operation completed:")
    for r in results:
        if r.error == "NONE":
            print(f"partition: {r.topic}-{r.partition}\tlow_watermark: {r.low_watermark}")
        else:
            print(f"partition: {r.topic}-{r.partition}\terror: {r.error} {r.message}".rstrip())
    return 0 if all(r.error == "NONE" for r in results) else 1
