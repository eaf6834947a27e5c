"""Kafka's default partitioner: Java client vectors, kafka-python agreement, stickiness."""

from __future__ import annotations

import random

import pytest
from annal.producer.partitioner import DefaultPartitioner, murmur2, to_positive
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Utils.murmur2 results from Kafka's own Java test suite.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS)
def test_java_client_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64))
def test_agrees_with_kafka_python(key: bytes) -> None:
    theirs = kafka_python_murmur2(key)
    assert to_positive(murmur2(key)) == theirs & 0x7FFFFFFF


def test_same_key_same_partition_and_positive() -> None:
    partitioner = DefaultPartitioner()
    assert to_positive(-1) == 0x7FFFFFFF
    for key, _ in JAVA_VECTORS:
        chosen = {partitioner.partition("t", key, 12) for _ in range(5)}
        assert chosen == {to_positive(murmur2(key)) % 12}


def test_null_keys_stick_until_a_batch_closes() -> None:
    partitioner = DefaultPartitioner(random.Random(7))
    first = partitioner.partition("t", None, 6)
    assert {partitioner.partition("t", None, 6) for _ in range(20)} == {first}
    partitioner.on_new_batch("t", first)
    seen = {first}
    for _ in range(30):
        current = partitioner.partition("t", None, 6)
        seen.add(current)
        partitioner.on_new_batch("t", current)
    assert len(seen) > 3  # spread over the partitions, one batch at a time
    only_available = partitioner.partition("u", None, 6, available=[4])
    assert only_available == 4
    with pytest.raises(ValueError, match="no partitions"):
        partitioner.partition("t", b"k", 0)
