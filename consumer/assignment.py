"""The group consumer's partition assignment: Kafka's range assignment over
consumer threads, the same on every member given the same view.

For each topic, its partitions and the consumer threads subscribed to it
(``<consumer id>-<n>``) are sorted; with P partitions and C threads, thread i
takes ``P // C`` partitions, plus one when ``i < P % C``, in order.  Every
member computes it from ZooKeeper's registrations, so all agree without
talking to each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from annal.topic_partition import TopicPartition


def thread_ids(consumer_id: str, count: int) -> list[str]:
    return [f"{consumer_id}-{n}" for n in range(count)]


def range_assign(
    partitions: Mapping[str, Sequence[int]], threads: Mapping[str, Sequence[str]]
) -> dict[str, list[TopicPartition]]:
    """thread id → its (topic, partition)s; ``threads`` maps each topic to the
    ids of the consumer threads subscribed to it."""
    out: dict[str, list[TopicPartition]] = {}
    for topic, subscribed in sorted(threads.items()):
        ordered = sorted(set(subscribed))
        parts = sorted(partitions.get(topic, ()))
        if not ordered:
            continue
        per, extra = divmod(len(parts), len(ordered))
        start = 0
        for i, thread in enumerate(ordered):
            count = per + (1 if i < extra else 0)
            out.setdefault(thread, []).extend(
                TopicPartition(topic, p) for p in parts[start : start + count]
            )
            start += count
    return out


@dataclass(frozen=True, slots=True)
class TopicFilter:
    """A whitelist or blacklist regex over topic names (internal topics never match)."""

    regex: str
    whitelist: bool = True

    def __post_init__(self) -> None:
        try:
            re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"bad topic filter {self.regex!r}: {exc}") from None

    @property
    def pattern(self) -> str:
        return "white_list" if self.whitelist else "black_list"

    def matches(self, topic: str) -> bool:
        if topic.startswith("__"):
            return False
        hit = re.fullmatch(self.regex, topic) is not None
        return hit if self.whitelist else not hit


def Whitelist(regex: str) -> TopicFilter:
    return TopicFilter(regex, True)


def Blacklist(regex: str) -> TopicFilter:
    return TopicFilter(regex, False)


def subscribed_topics(
    subscription: Mapping[str, int], pattern: str, topics: Sequence[str]
) -> dict[str, int]:
    """topic → stream count of one member, its filter (if any) applied to ``topics``."""
    if pattern == "static":
        return dict(subscription)
    out: dict[str, int] = {}
    for regex, count in subscription.items():
        topic_filter = TopicFilter(regex, pattern == "white_list")
        for topic in topics:
            if topic_filter.matches(topic):
                out[topic] = count
    return out
