"""Spark benchmark: annal's data source against a trivial Arrow source, on one
local broker and a local Spark (``local[2]``).

    .venv/bin/python bench/spark.py [--quick] [--records N]

Measures, in one run:

* ``spark_read_rows_per_s``: a batch read of N 100-byte records from four
  partitions into Spark's ``noop`` sink;
* ``arrow_ceiling_rows_per_s``: the same read from a trivial Python data
  source whose four partitions yield pre-built Arrow batches of the same
  schema and sizes (what Spark's Python data source path costs with no
  fetching or decoding at all), and ``read_vs_arrow_ceiling``, the ratio;
* ``consumer_records_per_s``: the simple consumer alone reading the topic in
  this process (``SimpleConsumer.stream``);
* ``spark_write_rows_per_s``: a batch write of a pre-built, cached DataFrame
  of N rows (binary key and value) into a four-partition topic, acks=all.

Each figure is the best of three interleaved runs (the machine's load
changes from second to second).  The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from annal.admin.client import AdminClient
from annal.consumer.simple import SimpleConsumer
from annal.deploy.cluster import LocalCluster
from annal.pipeline.read import arrow_schema
from annal.pipeline.source import AnnalDataSource
from annal.producer.producer import Producer
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

PARTITIONS = 4
RECORD_SIZE = 100
ARROW_BATCH = 10_000


class CeilingSource(DataSource):
    """Pre-built Arrow batches of annal's schema: the Python data source floor."""

    @classmethod
    def name(cls) -> str:
        return "arrow_ceiling"

    def schema(self) -> str:
        from annal.pipeline.source import SCHEMA_WITHOUT_HEADERS

        return SCHEMA_WITHOUT_HEADERS

    def reader(self, schema: Any) -> DataSourceReader:
        return CeilingReader(int(self.options["records"]))


class CeilingReader(DataSourceReader):
    def __init__(self, records: int) -> None:
        self.records = records

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        n = ARROW_BATCH
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([None] * n, pa.binary()),
                pa.array([b"v" * RECORD_SIZE] * n, pa.binary()),
                pa.repeat(pa.scalar("bench", pa.string()), n),
                pa.repeat(pa.scalar(partition.value, pa.int32()), n),
                pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(
                    pa.timestamp("us", tz="UTC")
                ),
                pa.repeat(pa.scalar(0, pa.int32()), n),
            ],
            schema=arrow_schema(False),
        )
        for _ in range(self.records // PARTITIONS // n):
            yield batch


def fill(bootstrap: str, topic: str, records: int) -> None:
    value = b"v" * RECORD_SIZE
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024) as producer:
        for i in range(records):
            producer.send(topic, value=value, partition=i % PARTITIONS)


def timed(action: Any) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def consume(bootstrap: str, topic: str, records: int) -> float:
    began = time.perf_counter()
    seen = 0
    with SimpleConsumer(bootstrap, max_wait_ms=0) as consumer:
        offsets = {(topic, p): 0 for p in range(PARTITIONS)}
        for results in consumer.stream(offsets):
            seen += sum(len(r.records) for r in results.values())
            if seen >= records:
                break
    return records / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, under three minutes")
    parser.add_argument("--records", type=int, help="records per run")
    args = parser.parse_args()
    records = args.records or (400_000 if args.quick else 1_500_000)
    records -= records % (PARTITIONS * ARROW_BATCH)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    root = Path(tempfile.mkdtemp(prefix="annal-bench-spark-"))
    cluster = LocalCluster(root / "cluster")
    spark = None
    try:
        state = cluster.up(1)
        bootstrap = f"127.0.0.1:{state.brokers[0].port}"
        with AdminClient(bootstrap) as admin:
            admin.create_topic("bench", partitions=PARTITIONS)
            admin.create_topic("written", partitions=PARTITIONS)
        print(f"producing {records:,} records ...", flush=True)
        fill(bootstrap, "bench", records)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("annal-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.dataSource.register(AnnalDataSource)
        spark.dataSource.register(CeilingSource)

        def read_annal() -> None:
            spark.read.format("annal").option("bootstrap.servers", bootstrap).option(
                "subscribe", "bench"
            ).load().write.format("noop").mode("overwrite").save()

        def read_ceiling() -> None:
            spark.read.format("arrow_ceiling").option("records", str(records)).load().write.format(
                "noop"
            ).mode("overwrite").save()

        frame = spark.read.format("arrow_ceiling").option("records", str(records)).load()
        to_write = frame.selectExpr("key", "value").repartition(PARTITIONS).cache()
        to_write.count()

        def write() -> None:
            to_write.write.format("annal").mode("append").option(
                "bootstrap.servers", bootstrap
            ).option("topic", "written").option("kafka.acks", "all").save()

        read_annal()  # warm the workers
        read_s = ceiling_s = write_s = float("inf")
        consumed = 0.0
        for run in range(3):
            print(f"run {run + 1} of 3 ...", flush=True)
            read_s = min(read_s, timed(read_annal))
            ceiling_s = min(ceiling_s, timed(read_ceiling))
            consumed = max(consumed, consume(bootstrap, "bench", records))
            write_s = min(write_s, timed(write))
    finally:
        if spark is not None:
            spark.stop()
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "records": records,
        "record_bytes": RECORD_SIZE,
        "partitions": PARTITIONS,
        "spark_read_rows_per_s": round(records / read_s),
        "arrow_ceiling_rows_per_s": round(records / ceiling_s),
        "read_vs_arrow_ceiling": round(ceiling_s / read_s, 3),
        "consumer_records_per_s": round(consumed),
        "spark_write_rows_per_s": round(records / write_s),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
