"""``meta.properties``: which broker and cluster a log dir belongs to.

Java properties text, written atomically (tmp → fsync → rename → fsync dir)::

    #annal log dir metadata
    version=0
    broker.id=1
    cluster.id=lqc8FzZvRSC0wzRkXh6VjA

Lines starting with ``#`` or ``!`` are comments; blank lines are skipped; a
key and its value are separated by ``=`` (or ``:``, as Java also accepts).
Only ``version=0`` is known.  A malformed file raises LogDirError naming the
file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .errors import LogDirError
from .files import atomic_write

VERSION = 0


class MetaProperties(NamedTuple):
    """The identity stored in a log dir.  Immutable, so thread-safe.

    ``cluster_id`` is None for a log dir written before the broker learned its
    cluster's id.
    """

    version: int
    broker_id: int
    cluster_id: str | None


def _split(line: str) -> tuple[str, str] | None:
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut <= 0:
        return None
    return line[:cut].strip(), line[cut + 1 :].strip()


def read_meta_properties(path: Path) -> MetaProperties | None:
    """The file's contents; None when it does not exist."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogDirError(f"cannot read {path}: {exc}") from exc
    props: dict[str, tuple[int, str]] = {}  # key → (line number, value)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        pair = _split(line)
        if pair is None:
            raise LogDirError(f"{path} line {number}: expected key=value, got {raw!r}")
        key, value = pair
        if key in props:
            raise LogDirError(
                f"{path} line {number}: {key} is set again (first on line {props[key][0]})"
            )
        props[key] = (number, value)

    def integer(key: str) -> int:
        if key not in props:
            raise LogDirError(f"{path} has no {key} property")
        number, value = props[key]
        try:
            return int(value)
        except ValueError:
            raise LogDirError(
                f"{path} line {number}: {key} must be an integer, got {value!r}"
            ) from None

    version = integer("version")
    if version != VERSION:
        raise LogDirError(
            f"{path} line {props['version'][0]}: unsupported version {version} (expected {VERSION})"
        )
    broker_id = integer("broker.id")
    cluster_id = props["cluster.id"][1] if "cluster.id" in props else ""
    return MetaProperties(version, broker_id, cluster_id or None)


def write_meta_properties(path: Path, meta: MetaProperties) -> None:
    """Write ``meta`` to ``path`` atomically (``cluster.id`` omitted when None)."""
    lines = ["#annal log dir metadata", f"version={meta.version}", f"broker.id={meta.broker_id}"]
    if meta.cluster_id:
        lines.append(f"cluster.id={meta.cluster_id}")
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))
