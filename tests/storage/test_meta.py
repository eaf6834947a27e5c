"""meta.properties: round trip, the format on disk, and every malformed-file error."""

from __future__ import annotations

from pathlib import Path

import pytest
from annal.storage.errors import LogDirError
from annal.storage.meta import MetaProperties, read_meta_properties, write_meta_properties

CLUSTER_ID = "lqc8FzZvRSC0wzRkXh6VjA"


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path / "meta.properties") is None


def test_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    write_meta_properties(path, MetaProperties(0, 7, CLUSTER_ID))
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == ["version=0", "broker.id=7", f"cluster.id={CLUSTER_ID}"]
    assert read_meta_properties(path) == MetaProperties(0, 7, CLUSTER_ID)
    assert not list(tmp_path.glob("*.tmp"))
    write_meta_properties(path, MetaProperties(0, 3, None))
    assert "cluster.id" not in path.read_text()
    assert read_meta_properties(path) == MetaProperties(0, 3, None)


def test_reads_a_file_written_by_java_properties(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(
        "#\n#Tue Nov 21 10:00:00 UTC 2023\ncluster.id = x-Y_z\n! other comment\n\n"
        "version=0\nbroker.id:12\n"
    )
    assert read_meta_properties(path) == MetaProperties(0, 12, "x-Y_z")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version=0\nbroker.id=seven\n", r"line 2: broker.id must be an integer, got 'seven'"),
        ("version=zero\nbroker.id=1\n", r"line 1: version must be an integer"),
        ("#c\nversion=1\nbroker.id=1\n", r"line 2: unsupported version 1 \(expected 0\)"),
        ("version=0\n", r"has no broker.id property"),
        ("broker.id=1\n", r"has no version property"),
        (
            "version=0\ngarbage line\nbroker.id=1\n",
            r"line 2: expected key=value, got 'garbage line'",
        ),
        ("version=0\n=5\n", r"line 2: expected key=value"),
        (
            "version=0\nbroker.id=1\nbroker.id=2\n",
            r"line 3: broker.id is set again .first on line 2",
        ),
    ],
)
def test_malformed_files_name_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(text)
    with pytest.raises(LogDirError, match=rf"meta\.properties.*{message}"):
        read_meta_properties(path)


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(b"version=0\nbroker.id=\xff\n")
    with pytest.raises(LogDirError, match=r"cannot read .*meta\.properties"):
        read_meta_properties(path)
