"""One local SparkSession for every Spark test (starting one costs seconds)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers import annal from this venv
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from annal.pipeline.source import AnnalDataSource
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("annal-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.dataSource.register(AnnalDataSource)
    yield session
    session.stop()
