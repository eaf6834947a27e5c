"""``annal dump-log``: print what segment files hold, like kafka-dump-log.sh.

For a ``.log`` file, one line (or JSON object) per batch; with
``--deep-iteration`` the records too, and with ``--print-data-log`` their keys
and values.  For ``.index`` and ``.timeindex`` files, their entries.  A file
is read batch by batch, never whole.  At the first invalid batch the dump
stops, names the position and the reason, and the command exits with 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from annal.storage import files
from annal.storage.batch import (
    HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    Compression,
    TimestampType,
    check_batch,
    compute_crc,
    read_header,
)
from annal.storage.errors import CorruptRecordError, StorageError
from annal.storage.index import read_offset_index_entries, read_time_index_entries
from annal.storage.legacy import iter_legacy_records
from annal.storage.records import Record, decode_batch

_TIMESTAMP_TYPES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


def add_parser(commands: Any) -> None:
    p: argparse.ArgumentParser = commands.add_parser(
        "dump-log",
        help="print the contents of .log, .index and .timeindex files",
        description=(
            "Print the batches of .log segment files (and with --deep-iteration their "
            "records) and the entries of .index and .timeindex files. Exits 1 when a file "
            "is missing, of an unknown kind, or corrupt (after printing what is valid)."
        ),
    )
    p.add_argument("files", nargs="+", metavar="FILE", type=Path, help="segment files to dump")
    p.add_argument(
        "--deep-iteration", action="store_true", help="also print every record of each batch"
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print record keys, values and headers (implies --deep-iteration)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line per batch")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    deep = args.deep_iteration or args.print_data_log
    out = sys.stdout
    status = 0
    for path in args.files:
        parsed = files.parse_segment_file_name(path.name)
        suffix = parsed[1] if parsed else path.suffix
        if not path.is_file():
            print(f"annal dump-log: {path}: no such file", file=sys.stderr)
            status = 1
            continue
        if not args.json:
            print(f"Dumping {path}", file=out)
        try:
            if suffix == files.LOG_SUFFIX:
                ok = dump_log_file(
                    path, out, deep=deep, data=args.print_data_log, as_json=args.json
                )
            elif suffix == files.INDEX_SUFFIX:
                ok = dump_offset_index(path, out, as_json=args.json)
            elif suffix == files.TIME_INDEX_SUFFIX:
                ok = dump_time_index(path, out, as_json=args.json)
            else:
                print(
                    f"annal dump-log: {path}: unknown file kind (expected .log, .index or "
                    ".timeindex)",
                    file=sys.stderr,
                )
                ok = False
        except BrokenPipeError:
            raise
        except (OSError, StorageError) as exc:
            print(f"annal dump-log: {path}: {exc}", file=sys.stderr)
            ok = False
        if not ok:
            status = 1
    return status


# -- .log ------------------------------------------------------------------


class _LegacyAt(CorruptRecordError):
    """Not an error: the file continues with a legacy (v0/v1) message set."""

    def __init__(self, position: int) -> None:
        super().__init__("legacy message set", position)


def _batches(path: Path) -> Iterator[tuple[BatchHeader | None, bytes, CorruptRecordError | None]]:
    """(header, batch bytes, None) per valid batch; (None, b"", error) at the first bad one."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        while position < size:
            head = os.pread(fd, HEADER.size, position)
            if not any(head[:LOG_OVERHEAD]):
                return  # zeros: space an active segment reserved ahead of its data
            if len(head) > MAGIC_OFFSET and head[MAGIC_OFFSET] in (0, 1):
                yield None, b"", _LegacyAt(position)
                return
            if len(head) < HEADER.size:
                yield (
                    None,
                    b"",
                    CorruptRecordError(f"truncated batch: {len(head)} bytes left", position),
                )
                return
            header = read_header(head)
            length = min(max(header.size, HEADER.size), size - position)
            data = os.pread(fd, length, position)
            try:
                check_batch(data, 0, len(data))
            except CorruptRecordError as exc:
                yield None, b"", CorruptRecordError(exc.reason, position)
                return
            yield header._replace(position=position), data, None
            position += header.size
    finally:
        os.close(fd)


def dump_log_file(path: Path, out: IO[str], *, deep: bool, data: bool, as_json: bool) -> bool:
    count = 0
    for header, raw, error in _batches(path):
        if isinstance(error, _LegacyAt):
            return dump_legacy(
                path, error.position or 0, out, deep=deep, data=data, as_json=as_json
            )
        if error is not None or header is None:
            assert error is not None
            report_error(out, error, as_json, count)
            return False
        records: list[Record] | None = None
        if deep:
            try:
                _, records = decode_batch(raw)
            except CorruptRecordError as exc:
                report_error(out, CorruptRecordError(exc.reason, header.position), as_json, count)
                return False
        count += 1
        crc_valid = compute_crc(raw, 0, len(raw)) == header.crc
        if as_json:
            print(json.dumps(batch_json(header, crc_valid, records, data)), file=out)
        else:
            print(batch_text(header, crc_valid), file=out)
            for record in records or []:
                print(record_text(record, data), file=out)
    if not as_json:
        print(f"{count} batches", file=out)
    return True


def report_error(out: IO[str], error: CorruptRecordError, as_json: bool, valid: int) -> None:
    message = f"corrupt batch at position {error.position}: {error.reason}"
    if as_json:
        print(json.dumps({"error": error.reason, "position": error.position}), file=out)
    else:
        print(f"{valid} valid batches before the corruption", file=out)
    print(f"annal dump-log: {message}", file=sys.stderr)


def batch_fields(header: BatchHeader, crc_valid: bool) -> dict[str, Any]:
    return {
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "count": header.record_count,
        "position": header.position,
        "size": header.size,
        "crc_valid": crc_valid,
        "compression": Compression(header.compression).name.lower(),
        "timestamp_type": _TIMESTAMP_TYPES[header.timestamp_type],
        "max_timestamp": header.max_timestamp,
        "partition_leader_epoch": header.partition_leader_epoch,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
    }


def batch_json(
    header: BatchHeader, crc_valid: bool, records: list[Record] | None, data: bool
) -> dict[str, Any]:
    out = batch_fields(header, crc_valid)
    if records is not None:
        out["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": render_json(r.key) if data else None,
                "value": render_json(r.value) if data else None,
                "headers": [
                    {"key": h.key, "value": render_json(h.value) if data else None}
                    for h in r.headers
                ],
            }
            for r in records
        ]
    return out


def render_json(raw: bytes | None) -> str | dict[str, str] | None:
    """UTF-8 text as a string; anything else as ``{"base64": ...}``; null stays null."""
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}


def render_text(raw: bytes | None) -> str:
    if raw is None:
        return "null"
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode("ascii")


def batch_text(header: BatchHeader, crc_valid: bool) -> str:
    f = batch_fields(header, crc_valid)
    return (
        f"baseOffset: {f['base_offset']} lastOffset: {f['last_offset']} count: {f['count']} "
        f"baseSequence: {f['base_sequence']} lastSequence: "
        f"{f['base_sequence'] + header.last_offset_delta if f['base_sequence'] >= 0 else -1} "
        f"producerId: {f['producer_id']} producerEpoch: {f['producer_epoch']} "
        f"partitionLeaderEpoch: {f['partition_leader_epoch']} "
        f"isTransactional: {str(f['is_transactional']).lower()} "
        f"isControl: {str(f['is_control']).lower()} position: {f['position']} "
        f"{f['timestamp_type']}: {f['max_timestamp']} size: {f['size']} "
        f"magic: {header.magic} compresscodec: {f['compression']} crc: {header.crc} "
        f"isvalid: {str(crc_valid).lower()}"
    )


def record_text(record: Record, data: bool) -> str:
    line = (
        f"| offset: {record.offset} timestamp: {record.timestamp} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)}"
    )
    if record.headers:
        shown = ",".join(
            f"{h.key}:{render_text(h.value) if data else len(h.value or b'')}"
            for h in record.headers
        )
        line += f" headers: {shown}"
    if data:
        line += f" key: {render_text(record.key)} payload: {render_text(record.value)}"
    return line


def dump_legacy(
    path: Path, start: int, out: IO[str], *, deep: bool, data: bool, as_json: bool
) -> bool:
    """Legacy (v0/v1) entries: one line per top-level message, records when deep."""
    raw = path.read_bytes()
    position = start
    while position < len(raw):
        if position + LOG_OVERHEAD > len(raw):
            report_error(out, CorruptRecordError("truncated legacy entry", position), as_json, 0)
            return False
        offset, size = struct.unpack_from(">qi", raw, position)
        entry = raw[position : position + LOG_OVERHEAD + size]
        try:
            records = list(iter_legacy_records(entry))
        except CorruptRecordError as exc:
            report_error(out, CorruptRecordError(exc.reason, position), as_json, 0)
            return False
        magic, attributes = entry[MAGIC_OFFSET], entry[MAGIC_OFFSET + 1]
        codec = Compression(attributes & 0x07).name.lower()
        fields = {"offset": offset, "position": position, "size": len(entry), "magic": magic}
        if as_json:
            fields["compression"] = codec
            if deep:
                fields["records"] = [
                    {
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": render_json(r.key) if data else None,
                        "value": render_json(r.value) if data else None,
                        "headers": [],
                    }
                    for r in records
                ]
            print(json.dumps(fields), file=out)
        else:
            print(
                f"offset: {offset} position: {position} size: {len(entry)} magic: {magic} "
                f"compresscodec: {codec} (legacy message)",
                file=out,
            )
            if deep:
                for record in records:
                    print(record_text(record, data), file=out)
        position += LOG_OVERHEAD + size
    return True


# -- indexes ---------------------------------------------------------------


def dump_offset_index(path: Path, out: IO[str], *, as_json: bool) -> bool:
    for entry in read_offset_index_entries(path):
        if as_json:
            print(json.dumps({"offset": entry.offset, "position": entry.position}), file=out)
        else:
            print(f"offset: {entry.offset} position: {entry.position}", file=out)
    return True


def dump_time_index(path: Path, out: IO[str], *, as_json: bool) -> bool:
    for entry in read_time_index_entries(path):
        if as_json:
            print(json.dumps({"timestamp": entry.timestamp, "offset": entry.offset}), file=out)
        else:
            print(f"timestamp: {entry.timestamp} offset: {entry.offset}", file=out)
    return True
