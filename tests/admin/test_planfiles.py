"""The partition tools' JSON files: what Kafka's tools accept is read, anything else
is refused naming where and what (and nothing else escapes, whatever the bytes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from annal.deleterecordscmd import read_offsets
from annal.reassigncmd import read_plan
from annal.topic_partition import TopicPartition


def plan(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def entry(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "partitions": [{"topic": "t", "partition": 0, **fields}]}


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        (entry(partition=0.9, replicas=[1]), r"partitions\[0\].partition: 0.9 is not a whole"),
        (entry(partition=True, replicas=[1]), r"partitions\[0\].partition: true is not a whole"),
        (entry(replicas=[3, 2.5]), r"partitions\[0\].replicas\[1\]: 2.5 is not a whole"),
        (entry(replicas=["3"]), r"replicas\[0\]: \"3\" is not a whole"),
        (entry(replicas=[]), r"replicas: \[\] should be non-empty"),
        (entry(replicas=[1, 1]), r"replicas: \[1, 1\] lists an entry twice"),
        (entry(partition=-1, replicas=[1]), r"partition: -1 is less than the minimum of 0"),
        ({**entry(replicas=[1]), "version": 7}, r"version: version 7 is not 1"),
        ({"version": 1, "partitions": []}, r"partitions: \[\] should be non-empty"),
        ([1, 2], r"the file: \[1, 2\] is not of type 'object'"),
        ("{nope", r"is not JSON"),
    ],
)
def test_a_bad_plan_is_refused_naming_where(tmp_path: Path, content: Any, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        read_plan(plan(tmp_path, content))


def test_good_files_are_read(tmp_path: Path) -> None:
    assert read_plan(plan(tmp_path, entry(replicas=[2, 3]))) == {TopicPartition("t", 0): [2, 3]}
    assert read_offsets(plan(tmp_path, entry(offset=-1))) == {TopicPartition("t", 0): -1}
    with pytest.raises(ValueError, match="offset: -2 is less than the minimum of -1"):
        read_offsets(plan(tmp_path, entry(offset=-2)))
    twice = {"version": 1, "partitions": [entry(replicas=[1])["partitions"][0]] * 2}
    with pytest.raises(ValueError, match="listed twice"):
        read_plan(plan(tmp_path, twice))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(
    json_values,
    st.builds(lambda p: {"version": 1, "partitions": p}, st.lists(
        st.dictionaries(st.sampled_from(["topic", "partition", "replicas", "offset"]),
                        json_values), max_size=3)),
))  # fmt: skip
def test_random_json_is_read_or_refused_with_a_value_error(content: Any) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = plan(Path(directory), content)
        for read in (read_plan, read_offsets):
            try:
                read(path)
            except ValueError as exc:
                assert str(path) in str(exc)
