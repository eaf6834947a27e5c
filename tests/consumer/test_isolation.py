"""What a consumer hands out of fetched batches when producers write transactions
(KIP-98): control batches never, an aborted transaction's batches not with
read_committed, exactly as Kafka's Fetcher decides from the answer's aborted
transactions."""

from __future__ import annotations

import pytest
from annal.consumer.simple import ConsumerRecord
from annal.consumer.transactions import (
    AbortedTransaction,
    committed_batches,
    isolation_number,
)
from annal.storage.control import ControlRecordType, EndTransactionMarker, build_control_batch
from annal.storage.records import Record, decode_located, encode_batch

TS = 1_700_000_000_000


class Log:
    """Batches with offsets assigned, as a fetch answers them."""

    def __init__(self) -> None:
        self.data = b""
        self.next = 0
        self.sequences: dict[int, int] = {}

    def plain(self, *values: bytes) -> None:
        self._add(encode_batch(self._records(values), base_offset=self.next), len(values))

    def txn(self, pid: int, *values: bytes) -> None:
        seq = self.sequences.get(pid, 0)
        self.sequences[pid] = seq + len(values)
        data = encode_batch(
            self._records(values),
            base_offset=self.next,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=True,
        )
        self._add(data, len(values))

    def end(self, pid: int, commit: bool) -> None:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self._add(
            build_control_batch(pid, 0, EndTransactionMarker(kind, 0), TS, base_offset=self.next),
            1,
        )

    def _records(self, values: tuple[bytes, ...]) -> list[Record]:
        return [Record(self.next + i, TS, None, v) for i, v in enumerate(values)]

    def _add(self, data: bytes, count: int) -> None:
        self.data += data
        self.next += count


def values(buf: bytes | bytearray, start: int = 0) -> list[bytes | None]:
    return [r.value for r in decode_located(buf, ConsumerRecord, "t", 0, start)]


def interleaved() -> Log:
    """Producers 1 and 2 interleaved: 1 aborts, 2 commits, then 1 again, committed."""
    log = Log()
    log.plain(b"p0")  # 0
    log.txn(1, b"a1", b"a2")  # 1-2
    log.txn(2, b"c1")  # 3
    log.txn(1, b"a3")  # 4
    log.end(1, commit=False)  # 5
    log.txn(2, b"c2")  # 6
    log.end(2, commit=True)  # 7
    log.txn(1, b"k1")  # 8
    log.plain(b"p1")  # 9
    log.end(1, commit=True)  # 10
    return log


def test_read_committed_drops_the_aborted_transaction_and_every_marker() -> None:
    log = interleaved()
    aborted = [AbortedTransaction(1, 1)]
    assert values(committed_batches(log.data, aborted)) == [
        b"p0", b"c1", b"c2", b"k1", b"p1",
    ]  # fmt: skip
    # read_uncommitted: everything but the markers
    assert values(committed_batches(log.data, None)) == [
        b"p0", b"a1", b"a2", b"c1", b"a3", b"c2", b"k1", b"p1",
    ]  # fmt: skip


def test_a_producers_abort_marker_ends_its_aborted_range() -> None:
    """Producer 1 aborts one transaction and commits the next: only the first is
    dropped, though the answer names producer 1 once."""
    log = Log()
    log.txn(1, b"x")  # 0
    log.end(1, commit=False)  # 1
    log.txn(1, b"y")  # 2
    log.end(1, commit=True)  # 3
    assert values(committed_batches(log.data, [AbortedTransaction(1, 0)])) == [b"y"]
    # two aborted transactions of one producer: both dropped
    log = Log()
    log.txn(1, b"x")
    log.end(1, commit=False)
    log.txn(1, b"y")
    log.end(1, commit=False)
    log.plain(b"z")
    aborted = [AbortedTransaction(1, 2), AbortedTransaction(1, 0)]  # in any order
    assert values(committed_batches(log.data, aborted)) == [b"z"]


def test_a_fetch_that_starts_inside_an_aborted_transaction() -> None:
    log = interleaved()
    # an answer from offset 4: the first batch holds 4, the aborted range began at 1
    start = 4
    data = log.data[_position_of(log.data, start) :]
    assert values(committed_batches(data, [AbortedTransaction(1, 1)]), start) == [
        b"c2", b"k1", b"p1",
    ]  # fmt: skip


def test_nothing_dropped_gives_the_same_bytes_and_a_torn_tail_is_kept() -> None:
    log = Log()
    log.plain(b"a")
    log.txn(3, b"b")
    assert committed_batches(log.data, []) is log.data
    log.end(3, commit=True)
    log.plain(b"c")
    torn = log.data + log.data[:30]
    kept = committed_batches(torn, [])
    assert kept.endswith(log.data[:30]) and values(kept[:-30]) == [b"a", b"b", b"c"]


def test_isolation_levels_have_kafkas_names() -> None:
    assert (isolation_number("read_uncommitted"), isolation_number("read_committed")) == (0, 1)
    with pytest.raises(ValueError, match="read_uncommitted or read_committed"):
        isolation_number("READ_COMMITTED")


def _position_of(data: bytes, offset: int) -> int:
    from annal.storage.batch import iter_batches

    for header in iter_batches(data):
        if header.last_offset >= offset:
            return header.position
    raise AssertionError(offset)
