"""What the controller tells brokers, and ``RequestBatch``, which gathers it per event.

As Kafka's ControllerBrokerRequestBatch: while one event is handled, every
partition that changed is added to the batch for the brokers that must hear of
it, and when the event is done the batch goes out as *one* LeaderAndIsr per
broker covering all its changed partitions, one UpdateMetadata per live broker
and one StopReplica per broker (per delete flag).  A controlled shutdown of a
broker leading a thousand partitions is thus a handful of requests, not
thousands.  Per broker the order is Kafka's: LeaderAndIsr, UpdateMetadata,
StopReplica.

The batch is pure bookkeeping; ``send`` hands each request to the channel's
send callables (``controller/channel.py`` in a broker, a recorder in tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from annal.zk.layout import BrokerRegistration, PartitionState

from annal.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class PartitionUpdate:
    """What the controller tells a replica about one partition."""

    topic: str
    partition: int
    state: PartitionState
    replicas: tuple[int, ...]
    zk_version: int

    @property
    def key(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """What every broker's metadata cache hears after an event."""

    partitions: Sequence[PartitionUpdate]
    live: Sequence[BrokerRegistration]
    deleted_topics: Sequence[str] = ()
    full: bool = False


# (broker, controller epoch, partitions, live brokers, on_storage_errors=...) -> None;
# on_storage_errors(broker id, partitions) hears of replicas on an offline log dir
SendLeaderAndIsr = Callable[..., None]
# (broker, controller epoch, partitions, delete the logs) -> None
SendStopReplica = Callable[[BrokerRegistration, int, Sequence[TopicPartition], bool], None]
# (broker, controller epoch, update) -> None
SendUpdateMetadata = Callable[[BrokerRegistration, int, MetadataUpdate], None]


@dataclass(frozen=True, slots=True)
class Senders:
    """The channel's three send callables; each raises on failure."""

    leader_and_isr: SendLeaderAndIsr
    stop_replica: SendStopReplica
    update_metadata: SendUpdateMetadata


class RequestBatch:
    """The requests one event makes, gathered per broker until ``send``."""

    def __init__(self) -> None:
        self.leader_and_isr: dict[int, dict[TopicPartition, PartitionUpdate]] = {}
        self.stop_replica: dict[int, dict[TopicPartition, bool]] = {}
        self.metadata: dict[TopicPartition, PartitionUpdate] = {}
        self.deleted_topics: list[str] = []
        self.full_metadata = False  # every live broker gets the whole view

    def add_leader_and_isr(self, brokers: Iterable[int], update: PartitionUpdate) -> None:
        """``brokers`` hear ``update`` (a later one for the same partition wins);
        every broker's cache hears of it too."""
        for broker in brokers:
            self.leader_and_isr.setdefault(broker, {})[update.key] = update
        self.metadata[update.key] = update

    def add_update_metadata(self, updates: Iterable[PartitionUpdate]) -> None:
        for update in updates:
            self.metadata[update.key] = update

    def add_stop_replica(self, broker: int, partition: TopicPartition, delete: bool) -> None:
        """``broker`` stops its replica (and deletes its log when ``delete``); a
        delete asked once stays asked."""
        stops = self.stop_replica.setdefault(broker, {})
        stops[partition] = stops.get(partition, False) or delete

    def add_deleted_topic(self, topic: str) -> None:
        self.deleted_topics.append(topic)

    def empty(self) -> bool:
        return not (self.leader_and_isr or self.stop_replica or self.metadata
                    or self.deleted_topics or self.full_metadata)  # fmt: skip

    def send(
        self,
        epoch: int,
        live: dict[int, BrokerRegistration],
        view: Callable[[], Sequence[PartitionUpdate]],
        senders: Senders,
        on_storage_errors: Callable[[int, list[TopicPartition]], None],
        call: Callable[[Callable[[], None]], None],
    ) -> None:
        """Hand every gathered request to ``call`` (which sends it, or raises when
        the controller may no longer act): LeaderAndIsr to each live broker that
        must hear, then UpdateMetadata to every live broker (``view()``, the
        whole view, when ``full_metadata``), then StopReplica.  Requests for
        brokers that are not live are dropped."""
        brokers = list(live.values())
        for broker_id, updates in sorted(self.leader_and_isr.items()):
            broker = live.get(broker_id)
            if broker is not None and updates:
                batch = [updates[k] for k in sorted(updates)]
                call(partial(senders.leader_and_isr, broker, epoch, batch, brokers,
                             on_storage_errors=on_storage_errors))  # fmt: skip
        if self.full_metadata:
            update = MetadataUpdate(list(view()), brokers, self.deleted_topics, full=True)
        elif self.metadata or self.deleted_topics:
            changed = [self.metadata[k] for k in sorted(self.metadata)]
            update = MetadataUpdate(changed, brokers, self.deleted_topics)
        else:
            update = None
        if update is not None:
            for broker in brokers:
                call(partial(senders.update_metadata, broker, epoch, update))
        for broker_id, stops in sorted(self.stop_replica.items()):
            broker = live.get(broker_id)
            if broker is None:
                continue
            for delete in (False, True):
                partitions = sorted(tp for tp, d in stops.items() if d is delete)
                if partitions:
                    call(partial(senders.stop_replica, broker, epoch, partitions, delete))
