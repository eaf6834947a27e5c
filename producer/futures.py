"""What ``Producer.send`` returns: a ``RecordFuture`` per record, answered by
``RecordMetadata`` (docs/architecture.md).

Thread safety: futures may be read and waited on from any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int


class RecordFuture(tuple):  # type: ignore[type-arg]
    """The acknowledgement of one record: a view on its batch's future (one
    ``concurrent.futures.Future`` per batch, as the Java client's
    FutureRecordMetadata over ProduceRequestResult).  A tuple (batch, index,
    timestamp): ``send`` builds one per record, and a tuple is built faster
    than any object with attributes.  Thread-safe."""

    __slots__ = ()

    def _metadata(self, base_offset: int) -> RecordMetadata:
        batch, index, timestamp = self
        offset = base_offset + index if base_offset >= 0 else -1
        return RecordMetadata(batch.topic, batch.partition, offset, timestamp)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; raises ProduceError if it was not written."""
        return self._metadata(self[0].future.result(timeout))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self[0].future.exception(timeout)  # type: ignore[no-any-return]

    def done(self) -> bool:
        return self[0].future.done()  # type: ignore[no-any-return]

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        self[0].future.add_done_callback(lambda _: fn(self))
