"""Which replica a consumer should read a partition from (KIP-392, Kafka 2.4+).

A consumer that says where it runs (Fetch v11+ carries the client's
``client.rack`` as ``rack_id``) may read from a follower in its own rack
instead of crossing racks to the leader.  The leader decides: when the broker
setting ``replica.selector.class`` names a selector, the leader asks it for
each partition of a consumer's fetch, and when it picks another replica the
partition is answered with that broker's id as ``preferred_read_replica`` and
no records; the consumer then fetches the partition from that broker, which
serves it from its copy up to its own high watermark
(``ReplicaManager.read``, ``Partition.fetch_bound``).

The replicas a selector may pick are the leader and the followers that are in
the ISR, alive (the metadata names them, with an endpoint on the listener the
consumer came through) and hold the offset asked for (their log start at or
below it, their log end at or above it), as Kafka's
``ReplicaManager.findPreferredReadReplica`` offers them.

annal has one selector, Kafka's ``RackAwareReplicaSelector``, under Kafka's
class name: the leader when the client gave no rack, when no candidate is in
the client's rack, or when the leader itself is; otherwise the most caught-up
replica of the client's rack (largest log end, then most recently caught up,
then largest broker id).  An empty setting means no selector: consumers read
from the leader only, as before Kafka 2.4.

Thread safety: selectors hold no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from annal.topic_partition import TopicPartition

SETTING = "replica.selector.class"
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a consumer's Fetch v11+ tells about its sender (Kafka's ClientMetadata)."""

    rack_id: str  # client.rack; "" when not set
    client_id: str = ""
    client_address: str = ""
    principal: str = ""
    listener: str = ""  # the name of the listener it connected to


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica as the leader sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int  # 0 for the leader


def most_caught_up(view: ReplicaView) -> tuple[int, int, int]:
    """The order Kafka's ``ReplicaView.comparator`` ranks replicas in, as a key for
    ``max``: larger log end, then more recently caught up, then larger broker id."""
    return view.log_end_offset, -view.time_since_last_caught_up_ms, view.broker_id


class ReplicaSelector(Protocol):
    """Picks the replica a consumer should read a partition from (Kafka's
    ReplicaSelector); None leaves the choice to the leader (it serves)."""

    def select(
        self,
        tp: TopicPartition,
        client: ClientMetadata,
        leader: ReplicaView,
        replicas: Sequence[ReplicaView],
    ) -> ReplicaView | None: ...


class RackAwareReplicaSelector:
    """Kafka's ``RackAwareReplicaSelector``; see the module docstring.  ``replicas``
    holds every candidate, the leader among them."""

    def select(
        self,
        tp: TopicPartition,
        client: ClientMetadata,
        leader: ReplicaView,
        replicas: Sequence[ReplicaView],
    ) -> ReplicaView | None:
        if not client.rack_id:
            return leader
        same_rack = [r for r in replicas if r.rack == client.rack_id]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=most_caught_up)


SELECTORS: dict[str, type[RackAwareReplicaSelector]] = {RACK_AWARE: RackAwareReplicaSelector}


def replica_selector(class_name: str) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None for "" (leader only).
    ValueError, naming the setting, for any other class."""
    name = class_name.strip()
    if not name:
        return None
    found = SELECTORS.get(name)
    if found is None:
        raise ValueError(
            f"{SETTING}={class_name!r}: annal has one replica selector, Kafka's "
            f"{RACK_AWARE} (consumers read from a replica in their client.rack, "
            f"KIP-392); name it, or leave the setting empty to read from leaders only"
        )
    return found()
