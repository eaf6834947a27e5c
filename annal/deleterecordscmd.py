"""``annal delete-records``: move partitions' log start offsets up, deleting the
records before, as kafka-delete-records.sh does."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from annal import errors
from annal.clierrors import fail
from annal.planfiles import OFFSET, read_partition_file
from annal.topic_partition import TopicPartition

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
    delete.add_argument(
        "--json", action="store_true",
        help="one JSON object per partition {topic, partition, low_watermark, error, message}",
    )  # fmt: skip
    delete.set_defaults(run=run)


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """The file's (topic, partition) → offset; ValueError naming what is wrong."""
    return read_partition_file(path, EXAMPLE, "offset", OFFSET, int)


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
            return fail("annal delete-records", exc)
    if args.json:
        for r in results:
            print(json.dumps({**asdict(r), "error": r.error.name}))
        return 0 if all(r.error is errors.NONE for r in results) else 1
    print("Records delete operation completed:")
    for r in results:
        if r.error is errors.NONE:
            print(f"partition: {r.topic}-{r.partition}\tlow_watermark: {r.low_watermark}")
        else:
            print(f"partition: {r.topic}-{r.partition}\terror: {r.error} {r.message}".rstrip())
    return 0 if all(r.error is errors.NONE for r in results) else 1
