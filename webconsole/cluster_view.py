"""What the console shows of the cluster, read as any client reads it.

Everything here goes through annal's client libraries, as Kafka's own tools
do: ``AdminClient`` (Metadata, DescribeLogDirs, DescribeConfigs, ListGroups),
``GroupOffsets`` (committed offsets at the group coordinator), ListOffsets to
the partition leaders, and the functions of ``annal consumer-groups`` for a
group's members and lag (``annal.groupscmd``: both kinds of group, the
ZooKeeper-era consumers' and those of Kafka's clients).  With ``--zookeeper``
ZooKeeper is also read, as kafka-consumer-groups.sh reads it: the brokers'
registrations (an ephemeral znode per broker: its ZooKeeper session is alive
while it is there) and the ZooKeeper-era groups under ``/consumers``.

A broker is *down* when it is known (seen alive since the console started, or
named as a replica of some partition) but not among the live brokers that
Metadata lists: in ZooKeeper mode a client sees no other state of a broker.

Calls block (gRPC); the web layer runs them on worker threads.  The
``AdminClient`` is shared (it is thread-safe); consumers are made per call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from annal.admin.client import AdminClient
from annal.admin.health import unavailable
from annal.client.cluster import ClientError
from annal.consumer.group_offsets import GroupOffsets
from annal.v1 import annal_pb2 as pb
from annal.webconsole.sampler import Sample

from annal import errors
from annal.topic_partition import TopicPartition

EARLIEST = -2
LATEST = -1
ACTION_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class BrokerSeen:
    """A broker as Metadata last listed it."""

    id: int
    endpoint: str
    rack: str
    listeners: tuple[str, ...]


def under_replicated(p: Any) -> bool:
    return len(p.isr) < len(p.replicas)


def offline(p: Any) -> bool:
    return bool(unavailable(p))


class ClusterView:
    """See the module docstring.  ``timeout_s`` bounds each request."""

    def __init__(self, bootstrap: str, zookeeper: str | None = None, timeout_s: float = 5.0):
        self._given = [s.strip() for s in bootstrap.split(",") if s.strip()]
        self.zookeeper = zookeeper
        self.timeout_s = timeout_s
        self.admin = AdminClient(bootstrap, timeout_s=timeout_s)
        # changes wait for the controller (leaders of a new topic, an election)
        self.actions_admin = AdminClient(bootstrap, timeout_s=max(timeout_s, ACTION_TIMEOUT_S))
        self._seen: dict[int, BrokerSeen] = {}
        self._lock = threading.Lock()
        self._zk: Any = None
        self._zk_lock = threading.Lock()
        self._offsets: dict[str, GroupOffsets] = {}  # the sampler's, one per group

    @property
    def bootstrap(self) -> str:
        """The servers given, then every broker Metadata has named since: the
        console still finds the cluster when the brokers it was given are gone."""
        with self._lock:
            seen = [b.endpoint for b in self._seen.values()]
        return ",".join(dict.fromkeys(self._given + seen))

    # -- ZooKeeper (optional) -------------------------------------------------------

    def zk(self) -> Any:
        """A read-only ZooKeeper session, started on first use (None without --zookeeper)."""
        if self.zookeeper is None:
            return None
        with self._zk_lock:
            if self._zk is None:
                from annal.zk.client import ZkClient

                client = ZkClient(self.zookeeper, timeout_s=self.timeout_s, create_chroot=False)
                client.start()
                self._zk = client
            return self._zk

    # -- metadata -------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] = ()) -> Any:
        """Metadata of ``topics`` (all when none named); remembers the live brokers."""
        answer = self.admin.cluster.call_any("Metadata", pb.MetadataRequest(topics=list(topics)))
        with self._lock:
            for b in answer.brokers:
                listeners = [f"GRPC://{b.host}:{b.port}"] + [
                    f"{e.listener_name}://{e.host}:{e.port}" for e in b.kafka_endpoints
                ]
                if not b.kafka_endpoints and b.kafka_port:
                    listeners.append(f"PLAINTEXT://{b.kafka_host}:{b.kafka_port}")
                self._seen[b.id] = BrokerSeen(b.id, f"{b.host}:{b.port}", b.rack, tuple(listeners))
        servers = self.bootstrap.split(",")
        for admin in (self.admin, self.actions_admin):
            if admin.cluster.bootstrap != servers:
                admin.cluster.bootstrap = servers  # call_any tries each in turn
        return answer

    def ping(self) -> None:
        """Raise when no broker answers Metadata."""
        self.metadata()

    def overview(self) -> dict[str, Any]:
        """Brokers (live and down), the controller, partition health counts, and
        ZooKeeper's view of the brokers' sessions when it is readable."""
        md = self.metadata()
        live = {b.id for b in md.brokers}
        referenced = {r for t in md.topics for p in t.partitions for r in p.replicas}
        registered = self._registrations()
        with self._lock:
            seen = dict(self._seen)
        brokers = []
        for broker_id in sorted(live | referenced | set(seen) | set(registered or {})):
            known = seen.get(broker_id)
            zk_state = None
            if registered is not None:
                zk_state = registered.get(broker_id, "no session (not registered)")
            brokers.append({
                "id": broker_id,
                "endpoint": known.endpoint if known else "-",
                "rack": (known.rack if known else "") or "-",
                "listeners": list(known.listeners) if known else [],
                "up": broker_id in live,
                "controller": broker_id == md.controller_id,
                "zookeeper": zk_state,
            })  # fmt: skip
        partitions = [p for t in md.topics for p in t.partitions]
        return {
            "cluster_id": md.cluster_id,
            "controller": md.controller_id,
            "brokers": brokers,
            "topics": len(md.topics),
            "partitions": len(partitions),
            "under_replicated": sum(1 for p in partitions if under_replicated(p)),
            "offline": sum(1 for p in partitions if offline(p)),
            "zookeeper": self._zk_summary(),
        }

    def _registrations(self) -> dict[int, str] | None:
        zk = self.zk()
        if zk is None:
            return None
        import datetime

        out = {}
        for r in zk.get_brokers():
            since = datetime.datetime.fromtimestamp(r.timestamp_ms / 1000, datetime.UTC)
            out[r.broker_id] = f"registered since {since:%Y-%m-%d %H:%M:%S} UTC"
        return out

    def _zk_summary(self) -> dict[str, Any] | None:
        zk = self.zk()
        if zk is None:
            return None
        return {"connect": self.zookeeper, "session": zk.session_state.name}

    # -- topics ---------------------------------------------------------------------

    def partition_sizes(self) -> dict[TopicPartition, int]:
        """Each partition's size: its largest replica's (DescribeLogDirs of the live
        brokers; a broker that does not answer is left out)."""
        sizes: dict[TopicPartition, int] = {}
        try:
            dirs = self.admin.describe_log_dirs()
        except ClientError:
            return sizes
        for d in dirs:
            for p in d.partitions:
                if not p.is_future:
                    tp = TopicPartition(p.topic, p.partition)
                    sizes[tp] = max(sizes.get(tp, 0), p.size)
        return sizes

    def log_offsets(self, md: Any, timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets (``EARLIEST``/``LATEST``) of every partition in ``md`` that has
        a live leader, one request per leader; partitions whose leader does not
        answer are left out."""
        endpoints = {b.id: f"{b.host}:{b.port}" for b in md.brokers}
        wanted: dict[str, dict[str, list[int]]] = {}
        for t in md.topics:
            for p in t.partitions:
                if p.leader in endpoints:
                    wanted.setdefault(endpoints[p.leader], {}).setdefault(t.name, []).append(
                        p.partition
                    )
        out: dict[TopicPartition, int] = {}
        for leader, topics in wanted.items():
            request = pb.ListOffsetsRequest(replica_id=-1, topics=[
                pb.TopicListOffsets(name=name, partitions=[
                    pb.PartitionListOffsets(partition=p, timestamp=timestamp) for p in partitions
                ])
                for name, partitions in topics.items()
            ])  # fmt: skip
            try:
                stub = self.admin.cluster.stub(leader)
                answer = stub.ListOffsets(request, timeout=self.timeout_s)
            except grpc.RpcError:
                continue
            for t in answer.topics:
                for r in t.partitions:
                    if r.error == pb.NONE:
                        out[TopicPartition(t.name, r.partition)] = r.offset
        return out

    def topics(self) -> list[dict[str, Any]]:
        md = self.metadata()
        sizes = self.partition_sizes()
        out = []
        for t in sorted(md.topics, key=lambda t: t.name):
            out.append({
                "name": t.name,
                "internal": t.is_internal,
                "partitions": len(t.partitions),
                "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
                "size": sum(sizes.get(TopicPartition(t.name, p.partition), 0)
                            for p in t.partitions),
                "under_replicated": sum(1 for p in t.partitions if under_replicated(p)),
                "offline": sum(1 for p in t.partitions if offline(p)),
            })  # fmt: skip
        return out

    def topic(self, name: str) -> dict[str, Any]:
        """One topic's partitions (leader, replicas, ISR, offsets, size) and configs."""
        (info,) = self.admin.describe_topics([name])  # AdminError for a missing topic
        md = self.metadata([name])
        starts = self.log_offsets(md, EARLIEST)
        ends = self.log_offsets(md, LATEST)
        sizes = self.partition_sizes()
        partitions = []
        for p in info.partitions:
            tp = TopicPartition(name, p.partition)
            partitions.append({
                "partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                "isr": list(p.isr), "offline_replicas": list(p.offline_replicas),
                "log_start": starts.get(tp), "log_end": ends.get(tp), "size": sizes.get(tp),
                "under_replicated": under_replicated(p), "offline": offline(p),
            })  # fmt: skip
        configs = [
            {"name": n, "value": v, "default": d}
            for n, v, d in self.admin.describe_configs(name, include_defaults=True)
        ]
        return {"name": name, "internal": info.internal, "partitions": partitions,
                "configs": configs}  # fmt: skip

    # -- groups ---------------------------------------------------------------------

    def groups(self) -> list[dict[str, Any]]:
        """Every group: those the coordinators know (Kafka's clients, and groups
        with committed offsets) and, with ZooKeeper, the ZooKeeper-era consumers'."""
        found: dict[str, dict[str, Any]] = {}
        for group, protocol_type, state in self.admin.list_groups():
            found[group] = {"group": group, "kind": "coordinator", "state": state or "Empty",
                            "protocol_type": protocol_type or "-"}  # fmt: skip
        zk = self.zk()
        if zk is not None:
            from annal.zk import layout

            for group in zk.consumer_groups():
                entry = found.setdefault(group, {"group": group, "state": "Empty",
                                                 "protocol_type": "-"})  # fmt: skip
                entry["kind"] = "zookeeper"
                if zk.children(layout.consumer_ids_path(group)):  # registered consumers
                    entry["state"] = "Stable"
        return [found[g] for g in sorted(found)]

    def group(self, name: str) -> dict[str, Any]:
        """A group's state, members and per-partition offsets and lag, as
        ``annal consumer-groups --describe`` shows them."""
        from annal import groupscmd

        self.metadata()  # fails at once when no broker answers
        zk = self.zk()
        status = groupscmd.group_status(self.bootstrap, zk, name)
        rows = groupscmd.describe(zk, self.bootstrap, self.zookeeper, name)
        return {**status, "partitions": rows}

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[TopicPartition, int]]:
        """The committed offsets of ``groups`` (the sampler's thread only); a group
        whose coordinator does not answer is left out."""
        out: dict[str, dict[TopicPartition, int]] = {}
        for group in groups:
            offsets = self._offsets.get(group)
            if offsets is None:
                offsets = self._offsets[group] = GroupOffsets(
                    self.bootstrap, group, timeout_s=self.timeout_s
                )
            try:
                out[group] = offsets.committed()
            except ClientError as exc:
                if exc.code is errors.GROUP_AUTHORIZATION_FAILED:
                    continue
                offsets.close()
                del self._offsets[group]
        return out

    def sample(self) -> Sample:
        """One sample for the sampler: log end offsets of the topics (internal ones
        left out) and the committed offsets of every group."""
        md = self.metadata()
        md_topics = [t for t in md.topics if not t.is_internal]
        del md.topics[:]
        md.topics.extend(md_topics)
        ends = self.log_offsets(md, LATEST)
        committed = self.committed_offsets(g["group"] for g in self.groups())
        return Sample(time.time(), ends, committed)

    def close(self) -> None:
        for offsets in self._offsets.values():
            offsets.close()
        self.admin.close()
        self.actions_admin.close()
        if self._zk is not None:
            self._zk.stop()
