"""Arrow record batches from decoded columns, without Spark (pipeline/read.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from annal.pipeline.read import Repeated, arrow_batch, arrow_schema
from annal.storage.columns import decode_fetched
from annal.storage.records import encode_values


def fetched(values: list[bytes], base_offset: int) -> bytes:
    return encode_values(values, timestamp_ms=1_700_000_000_000, base_offset=base_offset)


@pytest.mark.timeout(30)
def test_the_topic_and_partition_columns_fit_every_batch_as_lengths_rise_and_fall() -> None:
    repeated = Repeated("orders", 3)
    schema = arrow_schema(False)
    offset = 0
    for n in (5, 2, 9, 9, 1, 12, 4):
        data = fetched([b"v%d" % i for i in range(n)], offset)
        columns, next_offset = decode_fetched(data, offset, offset + n, False)
        batch = arrow_batch(schema, repeated, columns)
        batch.validate(full=True)
        assert batch.schema == schema
        assert batch.column("topic").to_pylist() == ["orders"] * n
        assert batch.column("partition").to_pylist() == [3] * n
        assert batch.column("offset").to_pylist() == list(range(offset, offset + n))
        assert batch.column("value").to_pylist() == [b"v%d" % i for i in range(n)]
        # what Spark receives: the batch through Arrow's IPC stream
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(batch)
        assert pa.ipc.open_stream(sink.getvalue()).read_all().to_batches()[0].equals(batch)
        offset = next_offset
