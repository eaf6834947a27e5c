"""Helpers for the transaction tests: transactional batches and a seeded writer
that interleaves transactions of a few producers with plain batches."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from annal.storage.control import AppendOrigin, ControlRecordType
from annal.storage.log import Log
from annal.storage.records import Record, encode_batch
from annal.storage.txn_index import AbortedTxn

TIMESTAMP = 1_700_000_000_000


def txn_batch(
    producer_id: int,
    values: Sequence[bytes],
    *,
    epoch: int = 0,
    sequence: int = 0,
    transactional: bool = True,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int = TIMESTAMP,
) -> bytes:
    """A batch of ``producer_id`` (offsets from 0), transactional by default."""
    keys = keys if keys is not None else [None] * len(values)
    records = [
        Record(i, timestamp, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    return encode_batch(
        records,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


class TxnWriter:
    """Appends a seeded mix to ``log`` as its leader: transactional batches of
    producers 1..n (through the coordinator origin: clients may not write them
    yet), their COMMIT and ABORT markers, and plain batches."""

    def __init__(self, log: Log, seed: int = 0, producers: int = 3) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.producers = producers
        self.sequences = dict.fromkeys(range(1, producers + 1), 0)
        self.open: set[int] = set()

    def step(self) -> None:
        rng, log = self.rng, self.log
        pid = rng.randrange(1, self.producers + 1)
        roll = rng.random()
        if pid in self.open and roll < 0.3:
            kind = ControlRecordType.ABORT if rng.random() < 0.5 else ControlRecordType.COMMIT
            log.append_control(pid, 0, kind, 0, 1, timestamp=TIMESTAMP)
            self.open.discard(pid)
        elif roll < 0.8:
            count = rng.randrange(1, 4)
            data = txn_batch(pid, [b"v" * 20] * count, sequence=self.sequences[pid])
            log.append_as_leader(data, 1, origin=AppendOrigin.COORDINATOR)
            self.sequences[pid] += count
            self.open.add(pid)
        else:
            records = [Record(0, TIMESTAMP, None, b"plain" * 4)]
            log.append_as_leader(encode_batch(records), 1)


def txn_entries(log: Log) -> list[AbortedTxn]:
    """Every ``.txnindex`` entry of the log, segment by segment."""
    return [entry for segment in log.segments() for entry in segment.txn_index.entries()]


def entries_by_segment(directory: Path) -> dict[str, list[AbortedTxn]]:
    from annal.storage.txn_index import read_entries

    return {
        p.name: read_entries(p) for p in sorted(directory.glob("*.txnindex")) if p.stat().st_size
    }
