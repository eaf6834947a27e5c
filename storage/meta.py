"""``meta.properties``: which broker and cluster a log dir belongs to.

Java properties text, written atomically::

    #annal log dir metadata
    version=0
    broker.id=1
    cluster.id=lqc8FzZvRSC0wzRkXh6VjA
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .errors import LogDirError
from .files import atomic_write


class MetaProperties(NamedTuple):
    version: int
    broker_id: int
    cluster_id: str | None


def read_meta_properties(path: Path) -> MetaProperties | None:
    """The file's contents; None when it does not exist."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogDirError(f"cannot read {path}: {exc}") from exc
    props: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise LogDirError(f"{path} line {number}: expected key=value, got {raw!r}")
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    try:
        version = int(props["version"])
        broker_id = int(props["broker.id"])
    except KeyError as exc:
        raise LogDirError(f"{path} has no {exc.args[0]} property") from None
    except ValueError as exc:
        raise LogDirError(f"{path}: {exc}") from None
    if version != 0:
        raise LogDirError(f"{path}: unsupported version {version}")
    return MetaProperties(version, broker_id, props.get("cluster.id") or None)


def write_meta_properties(path: Path, meta: MetaProperties) -> None:
    lines = ["#annal log dir metadata", f"version={meta.version}", f"broker.id={meta.broker_id}"]
    if meta.cluster_id:
        lines.append(f"cluster.id={meta.cluster_id}")
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))
