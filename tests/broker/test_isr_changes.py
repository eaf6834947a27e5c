"""The ISR-change writer: changes queued together are written in one batched call
(when the broker has one), each outcome reported, one notification after."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from annal.broker.replication import isr_changes
from annal.broker.replication.isr_changes import IsrChangeWriter
from annal.broker.replication.partition import IsrChange
from annal.storage.files import TopicPartition
from annal.zk.client import SessionEvent, StaleVersionError, ZkError
from annal.zk.layout import PartitionState

Written = tuple[TopicPartition, PartitionState, int]


def change(p: int) -> IsrChange:
    return IsrChange(TopicPartition("t", p), PartitionState(1, 1, (1, 2), 1), p, f"change {p}")


class Recorder:
    """The writer's ZooKeeper and listeners: what it was asked and told."""

    def __init__(self, expected: int) -> None:
        self.batches: list[list[int]] = []
        self.singles: list[int] = []
        self.reported: dict[int, int | None] = {}
        self.notified: list[list[int]] = []
        self.done = threading.Event()
        self.expected = expected

    def write_state(self, tp: TopicPartition, state: PartitionState, version: int) -> int:
        self.singles.append(tp.partition)
        return self.outcome(tp.partition, version)

    def write_states(self, wanted: Sequence[Written]) -> list[int | Exception]:
        self.batches.append([tp.partition for tp, _, _ in wanted])
        out: list[int | Exception] = []
        for tp, _, version in wanted:
            try:
                out.append(self.outcome(tp.partition, version))
            except (StaleVersionError, ZkError) as exc:
                out.append(exc)
        return out

    @staticmethod
    def outcome(p: int, version: int) -> int:
        if p == 1:
            raise StaleVersionError("the controller wrote first")
        if p == 3:
            raise ZkError("connection loss")
        return version + 1

    def on_written(self, c: IsrChange, version: int | None) -> None:
        self.reported[c.tp.partition] = version
        if len(self.reported) == self.expected:
            self.done.set()

    def notify(self, written: list[TopicPartition]) -> None:
        self.notified.append([tp.partition for tp in written])


def run(recorder: Recorder, batched: bool, count: int) -> None:
    writer = IsrChangeWriter(
        recorder.write_state,
        recorder.notify,
        recorder.on_written,
        write_states=recorder.write_states if batched else None,
    )
    writer.session_changed(SessionEvent.SUSPENDED)  # held: the changes queue up
    writer.start()
    try:
        for p in range(count):
            writer.submit(change(p))
        writer.session_changed(SessionEvent.CONNECTED)
        assert recorder.done.wait(10)
    finally:
        writer.initiate_shutdown()
        writer.await_shutdown()


def test_changes_queued_together_are_written_in_one_call() -> None:
    recorder = Recorder(6)
    run(recorder, batched=True, count=6)
    assert recorder.batches == [[0, 1, 2, 3, 4, 5]] and recorder.singles == []
    assert recorder.reported == {0: 1, 1: None, 2: 3, 3: None, 4: 5, 5: 6}
    assert recorder.notified == [[0, 2, 4, 5]]


def test_without_a_batched_writer_one_write_after_another() -> None:
    recorder = Recorder(6)
    run(recorder, batched=False, count=6)
    assert recorder.batches == [] and recorder.singles == [0, 1, 2, 3, 4, 5]
    assert recorder.reported == {0: 1, 1: None, 2: 3, 3: None, 4: 5, 5: 6}
    assert [p for batch in recorder.notified for p in batch] == [0, 2, 4, 5]


def test_batches_are_bounded_and_a_failed_batch_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isr_changes, "MAX_BATCH", 4)
    recorder = Recorder(10)
    run(recorder, batched=True, count=10)
    assert recorder.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]

    failing = Recorder(4)

    def refused(wanted: Sequence[Written]) -> list[int | Exception]:
        raise ZkError("session expired")

    failing.write_states = refused  # type: ignore[method-assign]
    run(failing, batched=True, count=4)
    assert failing.reported == dict.fromkeys(range(4))
    assert failing.notified == []
