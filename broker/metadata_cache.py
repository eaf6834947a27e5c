"""The broker's metadata cache: the cluster as the controller last described it.

Every broker answers Metadata from this cache, not from ZooKeeper, as Kafka's
brokers do: the controller sends UpdateMetadata to every live broker whenever
leaders, ISRs, topics or the set of live brokers change (a full update when it
takes office or brokers come and go, only the changed partitions otherwise).
A broker that has not yet heard from a controller knows no topics.

Thread safety: ``update`` builds a new immutable ``MetadataSnapshot`` and
swaps it in under ``self._changed``; readers take ``snapshot()`` and never
see a half-applied update.  After each update the cache tells its listener
(the broker's metadata purgatory, where admin requests wait for it to reach
a state, e.g. CreateTopics for its leaders); ``wait_until`` blocks a thread
for the same, for code that is not on the event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from annal.v1 import annal_pb2 as pb
from annal.zk.layout import BrokerRegistration, Endpoint


@dataclass(frozen=True, slots=True)
class LiveBroker:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    kafka_host: str = ""  # the Kafka-protocol listener; "" and 0 when it has none
    kafka_port: int = 0
    endpoints: tuple[Endpoint, ...] = ()  # every Kafka-protocol listener, by name

    def kafka_endpoint_for(self, listener: str) -> Endpoint | None:
        """This broker's endpoint of the listener named ``listener`` (Kafka answers a
        client with the listener it connected to), None when it has none."""
        found = next((e for e in self.endpoints if e.listener == listener), None)
        if found is None and not self.endpoints and self.kafka_host and listener == "PLAINTEXT":
            found = Endpoint("PLAINTEXT", self.kafka_host, self.kafka_port)
        return found


def broker_message(b: LiveBroker | BrokerRegistration) -> pb.Broker:
    """A live broker as the controller's requests and Metadata answers carry it."""
    return pb.Broker(
        id=b.broker_id,
        host=b.host,
        port=b.port,
        rack=b.rack or "",
        kafka_host=b.kafka_host or "",
        kafka_port=b.kafka_port,
        kafka_endpoints=[
            pb.Endpoint(
                listener_name=e.listener, host=e.host, port=e.port,
                security_protocol=e.security_protocol,
            )
            for e in (b.kafka_endpoints if isinstance(b, BrokerRegistration) else b.endpoints)
        ],
    )


def live_broker(b: pb.Broker) -> LiveBroker:
    """The metadata cache's view of a broker the controller's request names."""
    endpoints = tuple(
        Endpoint(e.listener_name, e.host, e.port, e.security_protocol or "PLAINTEXT")
        for e in b.kafka_endpoints
    )
    return LiveBroker(b.id, b.host, b.port, b.rack or None, b.kafka_host, b.kafka_port, endpoints)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as the controller decided it; ``leader`` -1 when offline."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    controller_id: int = -1
    controller_epoch: int = 0
    brokers: Mapping[int, LiveBroker] = field(default_factory=dict)
    topics: Mapping[str, Mapping[int, PartitionView]] = field(default_factory=dict)

    def leader_of(self, topic: str, partition: int) -> int:
        """The live leader's id, or -1 (unknown partition, offline, or leader gone)."""
        view = self.topics.get(topic, {}).get(partition)
        if view is None or view.leader not in self.brokers:
            return -1
        return view.leader


class MetadataCache:
    """See the module docstring."""

    def __init__(self, on_update: Callable[[], None] | None = None) -> None:
        self._changed = threading.Condition()
        self._snapshot = MetadataSnapshot()
        self.on_update = on_update or (lambda: None)

    def snapshot(self) -> MetadataSnapshot:
        return self._snapshot

    def update(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: Iterable[LiveBroker],
        partitions: Iterable[tuple[str, int, PartitionView]],
        deleted_topics: Iterable[str] = (),
        full: bool = False,
    ) -> None:
        """Apply one UpdateMetadata: ``full`` replaces every partition, otherwise
        only the given partitions change (and ``deleted_topics`` disappear)."""
        with self._changed:
            current = self._snapshot
            topics: dict[str, dict[int, PartitionView]] = (
                {} if full else {t: dict(ps) for t, ps in current.topics.items()}
            )
            for topic, partition, view in partitions:
                topics.setdefault(topic, {})[partition] = view
            for topic in deleted_topics:
                topics.pop(topic, None)
            self._snapshot = MetadataSnapshot(
                controller_id,
                controller_epoch,
                MappingProxyType({b.broker_id: b for b in brokers}),
                MappingProxyType({t: MappingProxyType(ps) for t, ps in topics.items()}),
            )
            self._changed.notify_all()
        self.on_update()

    def wait_until(self, predicate: Callable[[MetadataSnapshot], bool], timeout_s: float) -> bool:
        """Block until ``predicate(snapshot)`` holds or ``timeout_s`` passes; its last value."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(self._snapshot):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
