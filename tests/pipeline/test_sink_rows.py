"""The sink's staging of one task's rows, without Spark: a task whose partition of
the micro-batch is empty stages nothing (it failed the whole query before)."""

from __future__ import annotations

import pyarrow as pa
from annal.pipeline.sink import staged_table


def test_a_task_without_rows_stages_an_empty_table() -> None:
    empty = staged_table(iter([]), "events")
    assert empty.num_rows == 0
    assert empty.column_names == ["topic", "partition", "key", "value"]


def test_rows_are_staged_in_the_sinks_columns() -> None:
    batch = pa.record_batch({"value": pa.array(["a", "b"]), "key": pa.array([b"k", None])})
    table = staged_table(iter([batch]), "events")
    assert table.column("topic").to_pylist() == ["events", "events"]
    assert table.column("value").to_pylist() == [b"a", b"b"]
    assert table.column("partition").null_count == 2
