"""``annal dump-log``: print what segment files hold, like kafka-dump-log.sh.

Usage: ``annal dump-log [--deep-iteration] [--print-data-log] [--json] FILE...``

``.log`` files are read entry by entry (a 17-byte prefix, then the entry; a
v2 batch is validated whole, CRC included), never all at once:

* text: ``Dumping <path>``, then one ``baseOffset: ... isvalid: true`` line per
  batch; with ``--deep-iteration`` one ``| offset: ...`` line per record, and
  with ``--print-data-log`` (which implies ``--deep-iteration``) its key,
  payload and header values.  A last line counts the batches.
* ``--json``: one object per batch with ``base_offset``, ``last_offset``,
  ``count``, ``position``, ``size``, ``crc_valid``, ``compression``,
  ``timestamp_type``, ``max_timestamp``, ``partition_leader_epoch``,
  ``producer_id``, ``producer_epoch``, ``base_sequence``, ``is_transactional``
  and ``is_control``; with ``--deep-iteration`` also ``records``, each
  ``{offset, timestamp, key, value, headers: [{key, value}]}``.  A JSON
  consumer needs a fixed shape and must be able to tell a null key from a
  hidden one, so in JSON keys and values are always present in records.
  Bytes that are valid UTF-8 appear as strings, other bytes as
  ``{"base64": "..."}``, and null as null.

Legacy entries (magic 0 or 1 at byte 16, as a pre-0.11 broker wrote them)
are decoded through ``annal.storage.legacy``: one line (or object, with the
batch fields plus ``magic`` and ``note``) per top-level message, whose
records are the unpacked inner messages of a compressed wrapper.

A run of zero bytes up to the end of a ``.log`` is space reserved ahead of the
data (preallocation, or a crash that extended the file without writing it): it
is reported and not an error.  Anything else that is not a valid entry stops
the dump after everything valid before it has been printed; the position and
the reason go to stderr (and with ``--json`` a last ``{"error", "position"}``
object to stdout) and the command exits with 1.

``.index`` and ``.timeindex`` files print their entries (``offset: N
position: P`` and ``timestamp: T offset: N``), without the zero-filled
preallocated tail.  ``.txnindex`` files print their aborted transactions
as Kafka's tool does (``version: 0 producerId: .. firstOffset: ..
lastOffset: .. lastStableOffset: ..``).  With ``--deep-iteration`` a
control record's line ends with its marker (``endTxnMarker: COMMIT
coordinatorEpoch: N``; in JSON ``end_txn_marker``) instead of its bytes.

``.snapshot`` files (producer state, ``annal.storage.producer_state``) print
one line per producer id, as Kafka's tool does: ``producerId: ..
producerEpoch: .. coordinatorEpoch: .. currentTxnFirstOffset: ..
lastTimestamp: ..`` and, when it has a stored batch, ``firstSequence: ..
lastSequence: .. lastOffset: .. offsetDelta: .. timestamp: ..``; with
``--json`` one object per producer.  A snapshot whose CRC or length is wrong
is an error.

A missing file or one of an unknown kind is reported and skipped; the exit
status is 1 if any file failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from annal.dumpindex import IndexMode, dump_offset_index, dump_time_index
from annal.dumpoffsets import offsets_key_value
from annal.dumptxnlog import transaction_key_value
from annal.storage import files
from annal.storage.batch import (
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    TimestampType,
    check_batch,
)
from annal.storage.control import decode_end_txn_marker
from annal.storage.errors import CorruptRecordError, StorageError
from annal.storage.legacy import iter_legacy_records
from annal.storage.producer_state import read_snapshot
from annal.storage.records import Record, decode_batch
from annal.storage.txn_index import read_entries as read_txn_index

_PROG = "annal dump-log"
_TIMESTAMP_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
_PREFIX = struct.Struct(">qi")  # offset, length: what v2 batches and legacy entries share
_PREFIX_TO_MAGIC = MAGIC_OFFSET + 1
_LEGACY_MESSAGE = struct.Struct(">Ibb")  # crc, magic, attributes (after the prefix)
_LEGACY_TIMESTAMP = struct.Struct(">q")  # magic 1 only, after the attributes
_CODECS = frozenset(int(c) for c in Compression)
_LEGACY_CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)
_LEGACY_TIMESTAMP_TYPE_FLAG = 0x08
_SEQUENCE_MODULUS = 1 << 31  # producer sequences wrap from int32 max to 0
_READ_BUFFER = 1 << 20
# Control characters would break the one-line-per-record layout of the text output.
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "dump-log",
        help="print the contents of .log, .index, .timeindex, .txnindex and .snapshot files",
        description=(
            "Print the batches of .log segment files (and with --deep-iteration their "
            "records), the entries of .index, .timeindex and .txnindex files and the "
            "producers of .snapshot files. Exits 1 when a file "
            "is missing, of an unknown kind, or corrupt (after printing what is valid)."
        ),
    )
    p.add_argument("files", nargs="*", metavar="FILE", type=Path, help="segment files to dump")
    p.add_argument(
        "--files", dest="listed", action="append", default=[], metavar="FILE[,FILE]",
        help="files to dump, comma-separated (kafka-dump-log.sh's spelling)",
    )  # fmt: skip
    p.add_argument(
        "--deep-iteration", action="store_true", help="also print every record of each batch"
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print record keys, values and header values (implies --deep-iteration)",
    )
    p.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="read records as __consumer_offsets records: committed offsets and group "
        "metadata, as Kafka prints them (implies --print-data-log)",
    )
    p.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="read records as __transaction_state records: each transactional id's "
        "producer, state and partitions, as Kafka prints them (implies --print-data-log)",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only check .index and .timeindex files (the check a broker makes before "
        "using them): '<file> passed sanity check.' or what is wrong",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="only check indexes, against their .log too; print the problems found",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line per batch or index entry; with --deep-iteration "
        "the records carry their keys and values",
    )
    p.set_defaults(run=run, dump_parser=p)


Decoder = Callable[[Record], tuple[str, str]]  # a record's (key, payload) as text


class _Options(NamedTuple):
    deep: bool
    data: bool
    as_json: bool
    # --offsets-decoder, --transaction-log-decoder: a record's (key, payload) as text
    decoder: Decoder | None = None
    indexes: IndexMode = IndexMode()


_CONTROL_OPTIONS = _Options(deep=True, data=False, as_json=False)  # a control record's line


def run(args: argparse.Namespace) -> int:
    paths = [*args.files, *(Path(f) for group in args.listed for f in group.split(",") if f)]
    if not paths:
        args.dump_parser.error("no file given (FILE ... or --files FILE[,FILE])")
    if args.offsets_decoder and args.transaction_log_decoder:
        args.dump_parser.error(
            "--offsets-decoder and --transaction-log-decoder read different topics: give one"
        )
    decoder = (
        offsets_key_value if args.offsets_decoder
        else transaction_key_value if args.transaction_log_decoder
        else None
    )  # fmt: skip
    data = args.print_data_log or decoder is not None
    options = _Options(
        deep=args.deep_iteration or data,
        data=data,
        as_json=args.json,
        decoder=decoder,
        indexes=IndexMode(args.json, args.index_sanity_check, args.verify_index_only),
    )
    status = 0
    for path in paths:
        if not dump_file(path, options, sys.stdout, sys.stderr):
            status = 1
    return status


def dump_file(path: Path, options: _Options, out: IO[str], err: IO[str]) -> bool:
    """Dump one file; False (after saying why on ``err``) when it is missing, unknown or bad."""
    if not path.exists():
        print(f"{_PROG}: {path}: no such file", file=err)
        return False
    if not path.is_file():
        print(f"{_PROG}: {path}: not a regular file", file=err)
        return False
    parsed = files.parse_segment_file_name(path.name)
    suffix = parsed[1] if parsed else path.suffix
    if suffix not in (*files.SEGMENT_SUFFIXES, files.PRODUCER_SNAPSHOT_SUFFIX):
        print(
            f"{_PROG}: {path}: unknown file kind "
            "(expected .log, .index, .timeindex, .txnindex or .snapshot)",
            file=err,
        )
        return False
    if not options.as_json:
        print(f"Dumping {path}", file=out)
    try:
        if suffix == files.LOG_SUFFIX:
            return _dump_log(path, options, out, err)
        if suffix == files.INDEX_SUFFIX:
            return dump_offset_index(path, options.indexes, out, err)
        if suffix == files.PRODUCER_SNAPSHOT_SUFFIX:
            return _dump_producer_snapshot(path, options, out)
        if suffix == files.TXN_INDEX_SUFFIX:
            return _dump_txn_index(path, options, out)
        return dump_time_index(path, options.indexes, out, err)
    except BrokenPipeError:
        raise  # the reader went away; the command line stops quietly
    except (OSError, StorageError) as exc:
        print(f"{_PROG}: {path}: {exc}", file=err)
        return False


# -- reading .log files ----------------------------------------------------


class _Batch(NamedTuple):
    """A v2 batch that passed ``check_batch``; ``raw`` is the whole batch."""

    header: BatchHeader
    raw: bytes


class _Legacy(NamedTuple):
    """A top-level v0/v1 entry, decoded; ``records`` are its (inner) messages."""

    offset: int
    position: int
    size: int
    crc: int
    magic: int
    compression: Compression
    timestamp_type: TimestampType
    timestamp: int
    records: list[Record]


class _ZeroTail(NamedTuple):
    """Zero bytes from ``position`` to the end of the file."""

    position: int
    size: int


def _read_entries(stream: IO[bytes], size: int) -> Iterator[_Batch | _Legacy | _ZeroTail]:
    """Every entry of a ``.log`` in order; raises CorruptRecordError at the first bad one.

    Reads one entry at a time: the prefix up to the magic byte says the format
    and the length, then exactly that many bytes are read.
    """
    position = 0
    while position < size:
        stream.seek(position)
        prefix = stream.read(_PREFIX_TO_MAGIC)
        if not any(prefix[:LOG_OVERHEAD]):
            yield _ZeroTail(position, _zero_run(stream, position, size))
            return
        remaining = size - position
        if len(prefix) < _PREFIX_TO_MAGIC:
            raise CorruptRecordError(
                f"truncated entry: {remaining} bytes left, too few for an entry header", position
            )
        _, length = _PREFIX.unpack_from(prefix)
        entry_size = length + LOG_OVERHEAD
        magic = prefix[MAGIC_OFFSET]
        if magic not in (0, 1, CURRENT_MAGIC):
            raise CorruptRecordError(f"unknown magic {magic}", position)
        minimum = HEADER.size if magic == CURRENT_MAGIC else LOG_OVERHEAD + _LEGACY_MESSAGE.size
        if entry_size < minimum:
            raise CorruptRecordError(
                f"entry length {length} is smaller than the minimum {minimum - LOG_OVERHEAD} "
                f"for magic {magic}",
                position,
            )
        if entry_size > remaining:
            raise CorruptRecordError(
                f"truncated entry: it declares {entry_size} bytes but only {remaining} remain",
                position,
            )
        stream.seek(position)
        raw = stream.read(entry_size)
        if len(raw) < entry_size:
            raise CorruptRecordError(
                f"file ended while reading: {len(raw)} of {entry_size} bytes", position
            )
        if magic == CURRENT_MAGIC:
            yield _check_v2(raw, position)
        else:
            yield _decode_legacy(raw, position)
        position += entry_size


def _zero_run(stream: IO[bytes], position: int, size: int) -> int:
    """Length of the zeros from ``position`` to the end; raises if data follows them."""
    stream.seek(position)
    scanned = position
    while scanned < size:
        chunk = stream.read(min(_READ_BUFFER, size - scanned))
        if not chunk:
            break
        rest = chunk.lstrip(b"\x00")
        if rest:
            data_at = scanned + len(chunk) - len(rest)
            raise CorruptRecordError(
                f"{data_at - position} zero bytes, then data at position {data_at}", position
            )
        scanned += len(chunk)
    return scanned - position


def _check_v2(raw: bytes, position: int) -> _Batch:
    try:
        header = check_batch(raw, 0, len(raw))
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, position) from None
    codec = header.attributes & COMPRESSION_MASK
    if codec not in _CODECS:
        raise CorruptRecordError(f"unknown compression codec {codec}", position)
    return _Batch(header._replace(position=position), raw)


def _decode_legacy(raw: bytes, position: int) -> _Legacy:
    offset, _ = _PREFIX.unpack_from(raw)
    crc, magic, attributes = _LEGACY_MESSAGE.unpack_from(raw, LOG_OVERHEAD)
    codec = attributes & COMPRESSION_MASK
    if codec not in _LEGACY_CODECS:
        raise CorruptRecordError(f"codec {codec} is not valid in a legacy message", position)
    try:
        records = list(iter_legacy_records(raw))
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, position) from None
    timestamp = NO_TIMESTAMP
    timestamp_type = TimestampType.CREATE_TIME
    if magic == 1:
        (timestamp,) = _LEGACY_TIMESTAMP.unpack_from(raw, LOG_OVERHEAD + _LEGACY_MESSAGE.size)
        if attributes & _LEGACY_TIMESTAMP_TYPE_FLAG:
            timestamp_type = TimestampType.LOG_APPEND_TIME
    return _Legacy(
        offset=offset,
        position=position,
        size=len(raw),
        crc=crc,
        magic=magic,
        compression=Compression(codec),
        timestamp_type=timestamp_type,
        timestamp=timestamp,
        records=records,
    )


# -- printing .log files ---------------------------------------------------


def _dump_log(path: Path, options: _Options, out: IO[str], err: IO[str]) -> bool:
    batches = legacy = 0
    with open(path, "rb", buffering=_READ_BUFFER) as stream:
        size = os.fstat(stream.fileno()).st_size
        position = 0
        try:
            for entry in _read_entries(stream, size):
                if isinstance(entry, _Batch):
                    position = entry.header.position
                    _print_batch(entry, options, out)
                    batches += 1
                elif isinstance(entry, _Legacy):
                    position = entry.position
                    _print_legacy(entry, options, out)
                    legacy += 1
                else:
                    note = f"{entry.size} zero bytes from position {entry.position}, not data"
                    if options.as_json:
                        print(f"{_PROG}: {path}: {note}", file=err)
                    else:
                        print(f"zero-filled tail: {note}", file=out)
        except CorruptRecordError as exc:
            at = position if exc.position is None else exc.position
            if options.as_json:
                print(json.dumps({"error": exc.reason, "position": at}), file=out)
            else:
                print(f"{_count(batches, legacy)} before the corruption", file=out)
            print(f"{_PROG}: {path}: corrupt batch at position {at}: {exc.reason}", file=err)
            return False
    if not options.as_json:
        print(_count(batches, legacy), file=out)
    return True


def _count(batches: int, legacy: int) -> str:
    text = f"{batches} batch" + ("" if batches == 1 else "es")
    if legacy:
        text += f", {legacy} legacy message" + ("" if legacy == 1 else "s")
    return text


def _print_batch(batch: _Batch, options: _Options, out: IO[str]) -> None:
    header = batch.header
    records: list[Record] | None = None
    if options.deep:
        try:
            _, records = decode_batch(batch.raw)
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, header.position) from None
    fields = batch_fields(header)
    if options.as_json:
        if records is not None:
            decoder = None if header.is_control else options.decoder
            fields["records"] = [record_json(r, decoder) for r in records]
            if header.is_control:
                for shown, record in zip(fields["records"], records, strict=True):
                    shown["end_txn_marker"] = _marker_json(record)
        print(json.dumps(fields), file=out)
        return
    last_sequence = _sequence(header.base_sequence, header.last_offset_delta)
    print(
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {header.position} "
        f"{fields['timestamp_type']}: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: {fields['compression']} crc: {header.crc} "
        f"isvalid: true",
        file=out,
    )
    for record in records or ():
        sequence = _sequence(header.base_sequence, record.offset - header.base_offset)
        if header.is_control:  # the marker, not its bytes
            line = record_text(record, fields["timestamp_type"], sequence, _CONTROL_OPTIONS)
            print(line + _marker_text(record), file=out)
            continue
        print(record_text(record, fields["timestamp_type"], sequence, options), file=out)


def _marker_text(record: Record) -> str:
    """Kafka's `` endTxnMarker: COMMIT coordinatorEpoch: N`` for a control record."""
    try:
        marker = decode_end_txn_marker(record.key, record.value)
    except CorruptRecordError as exc:
        return f" controlRecord: {exc.reason}"
    return f" endTxnMarker: {marker.control_type.name} coordinatorEpoch: {marker.coordinator_epoch}"


def _marker_json(record: Record) -> dict[str, Any]:
    try:
        marker = decode_end_txn_marker(record.key, record.value)
    except CorruptRecordError as exc:
        return {"error": exc.reason}
    return {"type": marker.control_type.name, "coordinator_epoch": marker.coordinator_epoch}


def _print_legacy(entry: _Legacy, options: _Options, out: IO[str]) -> None:
    fields = legacy_fields(entry)
    timestamp_type = fields["timestamp_type"]
    note = f"legacy message (magic {entry.magic})"
    if options.as_json:
        fields |= {"magic": entry.magic, "note": note}
        if options.deep:
            fields["records"] = [record_json(r, options.decoder) for r in entry.records]
        print(json.dumps(fields), file=out)
        return
    print(
        f"offset: {entry.offset} position: {entry.position} size: {entry.size} "
        f"magic: {entry.magic} compresscodec: {entry.compression.name.lower()} "
        f"{timestamp_type}: {fields['max_timestamp']} count: {len(entry.records)} "
        f"crc: {entry.crc} "
        f"isvalid: true note: {note}",
        file=out,
    )
    if options.deep:
        for record in entry.records:
            print(record_text(record, timestamp_type, -1, options), file=out)


def batch_fields(header: BatchHeader) -> dict[str, Any]:
    """The JSON fields of a v2 batch that passed ``check_batch``."""
    return {
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "count": header.record_count,
        "position": header.position,
        "size": header.size,
        "crc_valid": True,  # a batch whose CRC does not match stops the dump instead
        "compression": header.compression.name.lower(),
        "timestamp_type": _TIMESTAMP_NAMES[header.timestamp_type],
        "max_timestamp": header.max_timestamp,
        "partition_leader_epoch": header.partition_leader_epoch,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
    }


def legacy_fields(entry: _Legacy) -> dict[str, Any]:
    """The batch fields for a legacy entry, as its up-converted batch would have them."""
    timestamps = [r.timestamp for r in entry.records]
    return {
        "base_offset": entry.records[0].offset if entry.records else entry.offset,
        "last_offset": entry.offset,
        "count": len(entry.records),
        "position": entry.position,
        "size": entry.size,
        "crc_valid": True,
        "compression": entry.compression.name.lower(),
        "timestamp_type": _TIMESTAMP_NAMES[entry.timestamp_type],
        "max_timestamp": max(timestamps) if timestamps else entry.timestamp,
        "partition_leader_epoch": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "base_sequence": -1,
        "is_transactional": False,
        "is_control": False,
    }


def record_json(record: Record, decoder: Decoder | None = None) -> dict[str, Any]:
    if decoder is not None:
        key, value = decoder(record)
        return {"offset": record.offset, "timestamp": record.timestamp, "key": key,
                "value": value, "headers": []}  # fmt: skip
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_json(record.key),
        "value": bytes_json(record.value),
        "headers": [{"key": h.key, "value": bytes_json(h.value)} for h in record.headers],
    }


def bytes_json(raw: bytes | None) -> str | dict[str, str] | None:
    """UTF-8 text as a string; anything else as ``{"base64": ...}``; null stays null."""
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}


def bytes_text(raw: bytes | None) -> str:
    """UTF-8 text with control characters escaped; other bytes as ``base64:...``."""
    if raw is None:
        return "null"
    try:
        return raw.decode("utf-8").translate(_ESCAPES)
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode("ascii")


def record_text(record: Record, timestamp_type: str, sequence: int, options: _Options) -> str:
    """``| offset: ...``; keys, payloads and header values only with ``options.data``,
    decoded by ``options.decoder`` (the offsets topic's, the transaction log's)."""
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    header_keys = ", ".join(h.key.translate(_ESCAPES) for h in record.headers)
    line = (
        f"| offset: {record.offset} {timestamp_type}: {record.timestamp} keySize: {key_size} "
        f"valueSize: {value_size} sequence: {sequence} headerKeys: [{header_keys}]"
    )
    if options.decoder is not None:
        key, payload = options.decoder(record)
        line += f" key: {key.translate(_ESCAPES)} payload: {payload.translate(_ESCAPES)}"
    elif options.data:
        line += f" key: {bytes_text(record.key)} payload: {bytes_text(record.value)}"
        if record.headers:
            shown = ", ".join(
                f"{h.key.translate(_ESCAPES)}={bytes_text(h.value)}" for h in record.headers
            )
            line += f" headers: [{shown}]"
    return line


def _sequence(base_sequence: int, delta: int) -> int:
    return -1 if base_sequence < 0 else (base_sequence + delta) % _SEQUENCE_MODULUS


def _bool(value: bool) -> str:
    return "true" if value else "false"


# -- transaction indexes -----------------------------------------------------


def _dump_txn_index(path: Path, options: _Options, out: IO[str]) -> bool:
    for entry in read_txn_index(path):
        if options.as_json:
            print(json.dumps(entry._asdict()), file=out)
            continue
        print(
            f"version: {entry.version} producerId: {entry.producer_id} "
            f"firstOffset: {entry.first_offset} lastOffset: {entry.last_offset} "
            f"lastStableOffset: {entry.last_stable_offset}",
            file=out,
        )
    return True


# -- producer snapshots ------------------------------------------------------


def _dump_producer_snapshot(path: Path, options: _Options, out: IO[str]) -> bool:
    for entry in read_snapshot(path):
        has_batch = entry.last_offset >= 0
        if options.as_json:
            fields: dict[str, Any] = {
                "producer_id": entry.producer_id,
                "producer_epoch": entry.epoch,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_first_offset": entry.current_txn_first_offset,
                "last_timestamp": entry.timestamp,
            }
            if has_batch:
                fields.update(
                    first_sequence=entry.first_sequence,
                    last_sequence=entry.last_sequence,
                    last_offset=entry.last_offset,
                    offset_delta=entry.offset_delta,
                    timestamp=entry.timestamp,
                )
            print(json.dumps(fields), file=out)
            continue
        txn = entry.current_txn_first_offset
        line = (
            f"producerId: {entry.producer_id} producerEpoch: {entry.epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} "
            f"currentTxnFirstOffset: {txn if txn >= 0 else 'None'} "
            f"lastTimestamp: {entry.timestamp}"
        )
        if has_batch:
            line += (
                f" firstSequence: {entry.first_sequence} lastSequence: {entry.last_sequence} "
                f"lastOffset: {entry.last_offset} offsetDelta: {entry.offset_delta} "
                f"timestamp: {entry.timestamp}"
            )
        print(line, file=out)
    return True
