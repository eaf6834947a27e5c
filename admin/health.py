"""Partition health, as ``kafka-topics.sh --describe`` filters it, from metadata.

* under-replicated: the ISR is smaller than the replica set;
* unavailable: no leader, or a leader that is not a live broker;
* under min ISR: the ISR is smaller than the topic's ``min.insync.replicas``
  (acks=all produce fails there);
* at min ISR: the ISR is exactly ``min.insync.replicas`` (one more failure
  and acks=all fails).

Used by ``annal topics describe --under-replicated-partitions`` (and its
siblings) and ``annal cluster status``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from annal.admin.client import AdminClient, PartitionInfo, TopicInfo


class Condition(enum.Enum):
    UNDER_REPLICATED = "under-replicated"
    UNAVAILABLE = "unavailable"
    UNDER_MIN_ISR = "under-min-isr"
    AT_MIN_ISR = "at-min-isr"


def unavailable(p: PartitionInfo) -> bool:
    return p.leader < 0 or p.leader in p.offline_replicas


def min_isr(client: AdminClient, topic: str) -> int:
    """The topic's effective ``min.insync.replicas`` (its override or the default)."""
    for name, value, _ in client.describe_configs(topic, include_defaults=True):
        if name == "min.insync.replicas":
            return int(value)
    return 1


def matches(condition: Condition, p: PartitionInfo, topic_min_isr: int) -> bool:
    if condition is Condition.UNDER_REPLICATED:
        return len(p.isr) < len(p.replicas)
    if condition is Condition.UNAVAILABLE:
        return unavailable(p)
    if condition is Condition.UNDER_MIN_ISR:
        return len(p.isr) < topic_min_isr
    return len(p.isr) == topic_min_isr


def select(
    client: AdminClient, topics: Sequence[TopicInfo], condition: Condition
) -> list[tuple[TopicInfo, PartitionInfo]]:
    """The partitions of ``topics`` in ``condition``, in topic and partition order."""
    needs_min_isr = condition in (Condition.UNDER_MIN_ISR, Condition.AT_MIN_ISR)
    out: list[tuple[TopicInfo, PartitionInfo]] = []
    for topic in topics:
        threshold = min_isr(client, topic.name) if needs_min_isr else 0
        out.extend((topic, p) for p in topic.partitions if matches(condition, p, threshold))
    return out


def summary(client: AdminClient) -> dict[str, int]:
    """How many partitions of the cluster are in each condition, and in all."""
    counts = {c.value: 0 for c in Condition}
    counts["partitions"] = 0
    for topic in client.describe_topics():
        threshold = min_isr(client, topic.name)
        counts["partitions"] += len(topic.partitions)
        for condition in Condition:
            counts[condition.value] += sum(
                1 for p in topic.partitions if matches(condition, p, threshold)
            )
    return counts
