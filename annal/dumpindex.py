"""``annal dump-log`` for ``.index`` and ``.timeindex`` files: their entries, and
whether they can be trusted.

An entry is printed as read (``offset: N position: P``, ``timestamp: T offset: N``;
the zero-filled preallocated tail is not entries).  Then the index is checked,
as a broker checks it before using it, and against its ``.log`` when that is
beside it, as kafka-dump-log.sh's ``--verify-index-only`` does:

* the file is whole entries (8 bytes for ``.index``, 12 for ``.timeindex``);
* offsets never fall below the segment's base offset (its file name), and rise
  from entry to entry (strictly in ``.index``; timestamps strictly in
  ``.timeindex``), positions rise and stay inside the log;
* an ``.index`` entry names the last offset of the batch that starts at its
  position in the log (Kafka's "mismatch": ``Index offset: N, log offset: M``).

Any problem is printed on stderr and the file counts as failed (exit status 1).
``--index-sanity-check`` prints only ``<file> passed sanity check.`` or the
problem; ``--verify-index-only`` prints only the problems.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, NamedTuple

from annal.storage import files
from annal.storage.batch import HEADER, LOG_OVERHEAD, MAGIC_OFFSET
from annal.storage.index import read_offset_index_entries, read_time_index_entries

_OFFSET_ENTRY, _TIME_ENTRY = 8, 12
_PREFIX = struct.Struct(">qi")  # base offset, length: how every log entry starts
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # in a v2 batch: after offset, length, epoch, magic, crc, attributes
_PROBLEMS_SHOWN = 10


class IndexMode(NamedTuple):
    as_json: bool = False
    sanity_only: bool = False  # --index-sanity-check
    verify_only: bool = False  # --verify-index-only


def dump_offset_index(path: Path, mode: IndexMode, out: IO[str], err: IO[str]) -> bool:
    entries = read_offset_index_entries(path)
    _print_entries(
        mode, out, [{"offset": e.offset, "position": e.position} for e in entries],
        lambda e: f"offset: {e['offset']} position: {e['position']}",
    )  # fmt: skip
    problems = _shape(path, _OFFSET_ENTRY)
    problems += _rising(path, [e.offset for e in entries], "offset", strictly=True)
    problems += _rising(path, [e.position for e in entries], "position", strictly=True)
    log = path.with_suffix(files.LOG_SUFFIX)
    if log.exists() and not _shape(path, _OFFSET_ENTRY):
        problems += _against_log(log, [(e.offset, e.position) for e in entries])
    return _report(path, mode, problems, out, err)


def dump_time_index(path: Path, mode: IndexMode, out: IO[str], err: IO[str]) -> bool:
    entries = read_time_index_entries(path)
    _print_entries(
        mode, out, [{"timestamp": e.timestamp, "offset": e.offset} for e in entries],
        lambda e: f"timestamp: {e['timestamp']} offset: {e['offset']}",
    )  # fmt: skip
    problems = _shape(path, _TIME_ENTRY)
    problems += _rising(path, [e.timestamp for e in entries], "timestamp", strictly=True)
    problems += _rising(path, [e.offset for e in entries], "offset", strictly=False)
    return _report(path, mode, problems, out, err)


def _print_entries(
    mode: IndexMode, out: IO[str], entries: list[dict[str, int]],
    text: Callable[[dict[str, int]], str],
) -> None:  # fmt: skip
    if mode.sanity_only or mode.verify_only:
        return
    for entry in entries:
        print(json.dumps(entry) if mode.as_json else text(entry), file=out)
    if not mode.as_json:
        print(f"{len(entries)} entr" + ("y" if len(entries) == 1 else "ies"), file=out)


def _shape(path: Path, entry_size: int) -> list[str]:
    size = path.stat().st_size
    if size % entry_size:
        return [f"{size} bytes is not a whole number of {entry_size}-byte entries"]
    return []


def _rising(path: Path, values: Sequence[int], what: str, strictly: bool) -> list[str]:
    problems: list[str] = []
    parsed = files.parse_segment_file_name(path.name)
    base = parsed[0] if parsed else 0
    if what == "offset":
        problems += [
            f"entry {i}: offset {v} is below the base offset {base}"
            for i, v in enumerate(values) if v < base
        ]  # fmt: skip
    if what == "position":
        problems += [f"entry {i}: position {v} is negative" for i, v in enumerate(values) if v < 0]
    for i in range(1, len(values)):
        before, now = values[i - 1], values[i]
        if now < before or (strictly and now == before):
            order = "above" if strictly else "at least"
            problems.append(f"entry {i}: {what} {now} is not {order} the one before ({before})")
    return problems


def _against_log(log: Path, entries: Sequence[tuple[int, int]]) -> list[str]:
    """Kafka's mismatches: an entry whose position is not the start of a batch
    whose last offset is the entry's offset."""
    problems = []
    with open(log, "rb") as stream:
        size = log.stat().st_size
        for offset, position in entries:
            if position + LOG_OVERHEAD > size:
                problems.append(f"Index offset: {offset}, position {position} is past the log")
                continue
            stream.seek(position)
            head = stream.read(HEADER.size)
            base, _ = _PREFIX.unpack_from(head)
            if len(head) > MAGIC_OFFSET and head[MAGIC_OFFSET] >= 2 and len(head) >= 27:
                last = base + _LAST_OFFSET_DELTA.unpack_from(head, _LAST_DELTA_AT)[0]
            else:
                last = base  # a legacy entry's offset is its last (the wrapper's)
            if last != offset:
                problems.append(f"Index offset: {offset}, log offset: {last}")
    return problems


def _report(path: Path, mode: IndexMode, problems: list[str], out: IO[str], err: IO[str]) -> bool:
    if not problems:
        if mode.sanity_only:
            print(f"{path} passed sanity check.", file=out)
        return True
    print(f"annal dump-log: {path}: the index cannot be trusted:", file=err)
    for problem in problems[:_PROBLEMS_SHOWN]:
        print(f"  {problem}", file=err)
    if len(problems) > _PROBLEMS_SHOWN:
        print(f"  ... and {len(problems) - _PROBLEMS_SHOWN} more", file=err)
    return False
