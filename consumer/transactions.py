"""What a consumer hands its user of a fetched partition when producers write
transactions (KIP-98): never a control record (the COMMIT and ABORT markers),
and with read_committed nothing of an aborted transaction.

``ISOLATION_LEVELS`` are Kafka's names for the ``isolation.level`` setting:
``read_uncommitted`` (the default: up to the high watermark, aborted
transactions included) and ``read_committed`` (up to the last stable offset,
where the broker also answers the aborted transactions overlapping what it
returned).

``committed_batches`` works batch by batch on the fetched bytes, from the
headers alone, as Kafka's consumer (Fetcher's CompletedFetch) decides:

* the aborted transactions, ordered by first offset, join the set of aborted
  producers once a batch reaches their first offset (a batch whose last
  offset is at or past it);
* a control batch of a producer in that set whose marker is ABORT ends that
  producer's aborted transaction: the producer leaves the set;
* a transactional batch of a producer in the set is dropped;
* every control batch is dropped, in either isolation level.

What is dropped still counts for the position: the next fetch starts after
the last batch fetched (``last_header`` of the bytes as fetched).

Thread safety: pure functions.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import NamedTuple

from annal.storage.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    CONTROL_FLAG,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
    read_header,
)
from annal.storage.control import ControlRecordType, marker_of_batch
from annal.storage.errors import CorruptRecordError

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = {READ_UNCOMMITTED: 0, READ_COMMITTED: 1}  # Kafka's names and numbers


class AbortedTransaction(NamedTuple):
    """An aborted transaction a fetch answer names: its producer and first offset."""

    producer_id: int
    first_offset: int


def isolation_number(level: str) -> int:
    """Kafka's number for an ``isolation.level`` name; ValueError for another name."""
    try:
        return ISOLATION_LEVELS[level]
    except KeyError:
        raise ValueError(
            f"isolation_level must be read_uncommitted or read_committed, not {level!r}"
        ) from None


def committed_batches(
    buf: bytes, aborted: Iterable[AbortedTransaction] | None
) -> bytes | bytearray:
    """``buf`` (whole batches, as fetched) without its control batches and, when
    ``aborted`` is given (read_committed), without the batches of the aborted
    transactions it lists.  ``buf`` itself when nothing is dropped.  A torn
    batch at the end (a fetch's size limit) is kept as it came: the decoder
    stops at it as before."""
    pending = [(a.first_offset, a.producer_id) for a in aborted or ()]
    heapq.heapify(pending)
    aborting: set[int] = set()
    kept: list[tuple[int, int]] = []  # (start, end) of the byte ranges kept
    dropped = False
    position = 0
    end = len(buf)
    while position + RECORD_BATCH_OVERHEAD <= end:
        length = int.from_bytes(buf[position + BATCH_LENGTH_OFFSET : position + LOG_OVERHEAD])
        following = position + LOG_OVERHEAD + length
        if following > end or buf[position + MAGIC_OFFSET] < CURRENT_MAGIC:
            break  # a torn tail, or a legacy entry: kept as it came
        attributes = buf[position + ATTRIBUTES_OFFSET + 1]
        drop = bool(attributes & CONTROL_FLAG)
        if aborted is not None and (attributes & (CONTROL_FLAG | TRANSACTIONAL_FLAG)):
            header = read_header(buf, position)
            if header.producer_id >= 0:
                while pending and pending[0][0] <= header.last_offset:
                    aborting.add(heapq.heappop(pending)[1])
                if header.is_control:
                    if _is_abort_marker(buf, position):
                        aborting.discard(header.producer_id)
                elif header.producer_id in aborting:
                    drop = True
        if drop:
            dropped = True
        elif kept and kept[-1][1] == position:
            kept[-1] = (kept[-1][0], following)
        else:
            kept.append((position, following))
        position = following
    if not dropped:
        return buf
    if position < end:
        kept.append((position, end))
    return bytearray().join(buf[start:stop] for start, stop in kept)


def _is_abort_marker(buf: bytes, position: int) -> bool:
    """Whether the control batch at ``position`` holds an ABORT marker (a control
    record of another type is not one, as Kafka's consumer reads it)."""
    try:
        marker = marker_of_batch(buf, position)
    except CorruptRecordError:
        return False
    return marker is not None and marker.control_type is ControlRecordType.ABORT
