"""The deployment's Spark job: a streaming mirror from one topic to another.

    python -m annal.pipeline.job --bootstrap-server B --source events \\
        --sink events-mirror --checkpoint /var/lib/annal-job [--available-now]

It reads ``--source`` with the ``annal`` data source and writes every record's
key and value to ``--sink`` (partitioned by key, as the producer does).  The
offsets live in ``--checkpoint``:
stopped and started again, the job goes on where it left off, with no gap
and no duplicate.  ``--available-now`` copies what is there and exits (for
batch-style runs and tests); otherwise it runs until stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m annal.pipeline.job",
        description="Mirror one topic into another with Spark Structured Streaming.",
    )
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--source", required=True, help="topic to read")
    parser.add_argument("--sink", required=True, help="topic to write (must exist)")
    parser.add_argument("--checkpoint", required=True, help="directory for Spark's offsets")
    parser.add_argument(
        "--starting-offsets", default="earliest", help="earliest (default) or latest"
    )
    parser.add_argument(
        "--available-now", action="store_true", help="copy what is there now, then exit"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from annal.pipeline.source import AnnalDataSource
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName(f"annal-mirror-{args.source}-to-{args.sink}")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.dataSource.register(AnnalDataSource)
    try:
        records = (
            spark.readStream.format("annal")
            .option("bootstrap.servers", args.bootstrap_server)
            .option("subscribe", args.source)
            .option("startingOffsets", args.starting_offsets)
            .load()
            .selectExpr("key", "value")
        )
        writer = (
            records.writeStream.format("annal")
            .option("bootstrap.servers", args.bootstrap_server)
            .option("topic", args.sink)
            .option("checkpointLocation", args.checkpoint)
        )
        writer = writer.trigger(availableNow=True) if args.available_now else writer
        query = writer.start()
        query.awaitTermination()
        error = query.exception()
        if error is not None:
            print(f"annal mirror job failed: {error}", file=sys.stderr)
            return 1
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
