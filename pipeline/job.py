"""The deployment's Spark job: a streaming mirror from one topic to another.

    python -m annal.pipeline.job --bootstrap-server B --source events \\
        --sink events-mirror --checkpoint /var/lib/annal-job [--available-now]

It reads ``--source`` with the ``annal`` data source and writes every record's
key, value and headers to ``--sink`` (partitioned by key, as the producer
does) with the exactly-once streaming sink (``sink.py``).  The offsets and
the sink's state live in ``--checkpoint``: stopped, or killed at any moment,
and started again, the job goes on where it left off, and the mirror holds
every source record exactly once.  ``--available-now`` copies what is there and exits (for
batch-style runs and tests); otherwise it runs until stopped.

``--command-config FILE`` reaches a secured cluster: the file's security
settings, in Kafka's client names (``security.protocol``,
``ssl.truststore.location``, ``sasl.jaas.config``, ...: docs/security.md), are
given to the source and the sink as their ``kafka.*`` options.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")


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
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, help="at most this many records a micro-batch"
    )
    parser.add_argument(
        "--sink-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the sink, such as kafka.compression.type=lz4 (repeatable)",
    )
    parser.add_argument(
        "--command-config", type=Path, metavar="FILE",
        help="client security settings (a properties file in Kafka's names), for the source "
        "and the sink",
    )  # fmt: skip
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    return parser


def security_options(path: Path) -> dict[str, str]:
    """The security settings of a properties file as the source's and sink's
    ``kafka.*`` options, checked (an OptionError naming what is wrong)."""
    from annal.client.properties import PropertiesError, read_properties
    from annal.pipeline.options import OptionError, parse_security

    try:
        props = read_properties(path, "--command-config")
    except PropertiesError as exc:
        raise OptionError(str(exc)) from None
    options = {f"kafka.{k}": v for k, v in props.items() if k.startswith(SECURITY_PREFIXES)}
    try:
        parse_security(options)
    except OptionError as exc:
        raise OptionError(f"--command-config {path}: {exc}") from None
    return options


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sink_options = {}
    for option in args.sink_option:
        key, sep, value = option.partition("=")
        if not sep or not key:
            parser.error(f"--sink-option {option!r} is not KEY=VALUE")
        sink_options[key] = value
    security: dict[str, str] = {}
    if args.command_config is not None:
        from annal.pipeline.options import OptionError

        try:
            security = security_options(args.command_config)
        except OptionError as exc:
            parser.error(str(exc))
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
        reader = (
            spark.readStream.format("annal")
            .option("bootstrap.servers", args.bootstrap_server)
            .option("subscribe", args.source)
            .option("startingOffsets", args.starting_offsets)
            .option("includeHeaders", "true")
            .options(**security)
        )
        if args.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        records = reader.load().selectExpr("key", "value", "headers")
        writer = (
            records.writeStream.format("annal")
            .option("bootstrap.servers", args.bootstrap_server)
            .option("topic", args.sink)
            .option("checkpointLocation", args.checkpoint)
            .options(**security)
            .options(**sink_options)
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
