"""``TopicPartition``: how every module names one partition of one topic."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic; printed (and its log directory named) ``<topic>-<partition>``.

    A named tuple, so it equals, hashes and unpacks as the plain
    ``(topic, partition)`` tuple: callers may pass either."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
