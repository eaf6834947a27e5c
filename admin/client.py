"""AdminClient: topic administration over the brokers' gRPC API.

Any broker answers Metadata; CreateTopics, DeleteTopics, CreatePartitions and
ElectLeaders write ZooKeeper through the broker that receives them and wait
for the controller to act.
Kafka error codes come back as ``AdminError`` carrying the error name.

ACLs and SCRAM credentials go through the first bootstrap server that answers,
which stores them in ZooKeeper (every broker follows within seconds) and shows
its own changes at once.  A SCRAM password is salted here (PBKDF2 with the
mechanism's hash, a fresh random salt each time) and only the salted password
is sent, as Kafka's admin client does (KIP-554).

Thread safety: as ``ClusterConnection``; gRPC stubs are thread-safe.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from annal.client.acl_messages import binding_from_pb, binding_to_pb, filter_to_pb
from annal.client.bootstrap import resolve_bootstrap
from annal.client.cluster import ClientError, ClusterConnection
from annal.client.security import client_security
from annal.security.acl import (
    AclBinding,
    AclBindingFilter,
)
from annal.security.scram import ScramCredentialUpsertion
from annal.v1 import annal_pb2 as pb
from scramp import ScramMechanism  # type: ignore[import-untyped]
from scramp.utils import hi as pbkdf2  # type: ignore[import-untyped]

from annal import errors
from annal.errors import ErrorCode
from annal.topic_partition import TopicPartition

DEFAULT_TIMEOUT_S = 30.0


class AdminError(ClientError):
    """A request the cluster refused; ``error`` is Kafka's error name."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """One log dir of one broker (``describe_log_dirs``)."""

    broker: int
    path: str
    error: ErrorCode
    partitions: tuple[LogDirPartition, ...]
    total_bytes: int
    usable_bytes: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True, slots=True, order=True)
class PartitionOutcome:
    """One partition's answer to an election or a reassignment: ``error`` is
    ``errors.NONE`` (elected, or started) or another of Kafka's codes
    (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, INVALID_REPLICA_ASSIGNMENT, ...)."""

    topic: str
    partition: int  # -1 for an unknown topic named without partitions
    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True, order=True)
class DeletedRecords:
    """One partition's DeleteRecords answer."""

    topic: str
    partition: int
    low_watermark: int  # the log start offset afterwards; -1 on an error
    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True, order=True)
class ScramCredentialInfo:
    """One of a user's SCRAM credentials, as a broker describes it (never its keys)."""

    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True, order=True)
class UserScramCredentials:
    """A user's SCRAM credentials (``describe_user_scram_credentials``); ``error`` is
    RESOURCE_NOT_FOUND for a user named that has none."""

    user: str
    credentials: tuple[ScramCredentialInfo, ...]
    error: ErrorCode = errors.NONE
    message: str = ""


SALT_BYTES = 24


class AdminClient:
    """Topic admin against the cluster reachable through ``bootstrap_servers``
    (``"host:port,..."``) or ``zookeeper_connect=`` (``"host:port[/chroot]"``: the
    brokers registered there, read once within ``timeout_s``); give exactly one."""

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        zookeeper_connect: str | None = None,
        security_protocol: str | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ) -> None:
        bootstrap = resolve_bootstrap(bootstrap_servers, zookeeper_connect, timeout_s)
        security = client_security(
            security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
            sasl_plain_username, sasl_plain_password, sasl_mechanism,
        )  # fmt: skip
        self.cluster = ClusterConnection(bootstrap, timeout_s, security)
        self.timeout_s = timeout_s

    def _call(self, method: str, request: object) -> Any:
        try:
            return self.cluster.call_any(method, request)
        except ClientError as exc:
            raise AdminError(exc.code, exc.message) from exc

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        config: Mapping[str, str] | None = None,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        """Create ``name`` with ``partitions`` and ``replication_factor`` (-1: the
        brokers' defaults), or with an explicit ``assignment`` (partition → broker
        ids, preferred leader first) instead of those two, as Kafka's NewTopic."""
        if assignment and (partitions != -1 or replication_factor != -1):
            raise ValueError(
                "give either an assignment or partitions and replication_factor, not both"
            )
        topic = pb.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            configs=dict(config or {}),
        )
        for partition, brokers in (assignment or {}).items():
            topic.assignment[partition].brokers.extend(brokers)
        request = pb.CreateTopicsRequest(topics=[topic], timeout_ms=int(self.timeout_s * 1000))
        result = self._call("CreateTopics", request).topics[0]
        if result.error != pb.NONE:
            raise AdminError(errors.from_wire(result.error), result.error_message)

    def delete_topic(self, name: str) -> None:
        request = pb.DeleteTopicsRequest(topics=[name], timeout_ms=int(self.timeout_s * 1000))
        result = self._call("DeleteTopics", request).topics[0]
        if result.error != pb.NONE:
            raise AdminError(errors.from_wire(result.error), result.error_message)

    def create_partitions(
        self, name: str, count: int, assignment: Sequence[Sequence[int]] | None = None
    ) -> None:
        """Grow ``name`` to ``count`` partitions (``assignment``: replicas of each new
        one, in order); returns when their leaders are known."""
        topic = pb.CreatePartitionsTopic(
            name=name,
            count=count,
            assignment=[pb.ReplicaList(brokers=list(r)) for r in assignment or ()],
        )
        request = pb.CreatePartitionsRequest(topics=[topic], timeout_ms=int(self.timeout_s * 1000))
        result = self._call("CreatePartitions", request).topics[0]
        if result.error != pb.NONE:
            raise AdminError(errors.from_wire(result.error), result.error_message)

    def list_topics(self) -> list[str]:
        metadata = self._call("Metadata", pb.MetadataRequest())
        return sorted(t.name for t in metadata.topics)

    def describe_topics(self, names: Sequence[str] = ()) -> list[TopicInfo]:
        metadata = self._call("Metadata", pb.MetadataRequest(topics=list(names)))
        out = []
        for topic in metadata.topics:
            if topic.error == pb.UNKNOWN_TOPIC_OR_PARTITION:
                raise AdminError(
                    errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist"
                )
            if topic.error == pb.INVALID_TOPIC_EXCEPTION:
                raise AdminError(
                    errors.INVALID_TOPIC_EXCEPTION, f"illegal topic name {topic.name!r}"
                )
            if topic.error == pb.TOPIC_AUTHORIZATION_FAILED:
                raise AdminError(
                    errors.TOPIC_AUTHORIZATION_FAILED,
                    f"not authorized to describe topic {topic.name!r}",
                )
            out.append(
                TopicInfo(
                    topic.name,
                    tuple(
                        PartitionInfo(
                            p.partition,
                            p.leader,
                            p.leader_epoch,
                            tuple(p.replicas),
                            tuple(p.isr),
                            tuple(p.offline_replicas),
                        )
                        for p in topic.partitions
                    ),
                    topic.is_internal,
                )
            )
        return sorted(out, key=lambda t: t.name)

    def elect_preferred_leaders(
        self, partitions: Mapping[str, Sequence[int]] | None = None
    ) -> list[PartitionOutcome]:
        """Hand leadership back to preferred replicas: of ``partitions`` (topic →
        partition indexes; none listed means all of the topic), or of every
        partition.  One outcome per partition, sorted; ``error`` NONE when elected."""
        request = pb.ElectLeadersRequest(
            topic_partitions=[
                pb.TopicPartitions(topic=t, partitions=list(ps))
                for t, ps in (partitions or {}).items()
            ],
            timeout_ms=int(self.timeout_s * 1000),
        )
        response = self._call("ElectLeaders", request)
        if response.error != pb.NONE:  # refused whole (Alter on the cluster)
            raise AdminError(errors.from_wire(response.error), response.error_message)
        return sorted(
            PartitionOutcome(r.topic, r.partition, errors.from_wire(r.error), r.error_message)
            for r in response.results
        )

    def reassign_partitions(
        self, targets: Mapping[TopicPartition, Sequence[int]]
    ) -> list[PartitionOutcome]:
        """Start moving each (topic, partition) to its target replicas (preferred
        leader first); one outcome per partition, ``error`` NONE when started."""
        request = pb.AlterPartitionReassignmentsRequest(
            partitions=[
                pb.ReassignablePartition(topic=t, partition=p, replicas=list(r))
                for (t, p), r in sorted(targets.items())
            ]
        )
        response = self._call("AlterPartitionReassignments", request)
        return sorted(
            PartitionOutcome(r.topic, r.partition, errors.from_wire(r.error), r.error_message)
            for r in response.results
        )

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> list[DeletedRecords]:
        """Delete the records of each (topic, partition) before its offset (-1: the
        high watermark), through each partition's leader.  One result per
        partition, sorted; ``error`` NONE with the new ``low_watermark``."""
        self._refresh(sorted({t for t, _ in offsets}))
        results: list[DeletedRecords] = []
        retry: dict[TopicPartition, int] = {}
        for attempt in range(2):
            by_leader: dict[str, list[pb.DeleteRecordsPartition]] = {}
            for (topic, partition), offset in sorted((retry or offsets).items()):
                leader = self.cluster.leaders.get(TopicPartition(topic, partition))
                if leader is None:
                    results.append(
                        DeletedRecords(
                            topic, partition, -1, errors.UNKNOWN_TOPIC_OR_PARTITION,
                            f"no live leader known for {topic}-{partition}",
                        )
                    )  # fmt: skip
                    continue
                by_leader.setdefault(leader, []).append(
                    pb.DeleteRecordsPartition(topic=topic, partition=partition, offset=offset)
                )
            retry = {}
            for leader, wanted in by_leader.items():
                request = pb.DeleteRecordsRequest(
                    partitions=wanted, timeout_ms=int(self.timeout_s * 1000)
                )
                try:
                    response = self.cluster.stub(leader).DeleteRecords(
                        request, timeout=self.timeout_s
                    )
                except grpc.RpcError as exc:
                    raise AdminError.from_rpc(exc, f"DeleteRecords to {leader}") from exc
                for r in response.results:
                    error = errors.from_wire(r.error)
                    if error is errors.NOT_LEADER_OR_FOLLOWER and attempt == 0:
                        retry[TopicPartition(r.topic, r.partition)] = offsets[
                            TopicPartition(r.topic, r.partition)
                        ]
                    else:
                        results.append(
                            DeletedRecords(
                                r.topic, r.partition, r.low_watermark, error, r.error_message
                            )
                        )
            if not retry:
                break
            self._refresh(sorted({t for t, _ in retry}))
        return sorted(results)

    def describe_log_dirs(
        self, brokers: Sequence[int] = (), topics: Sequence[str] = ()
    ) -> list[LogDirInfo]:
        """The log dirs of ``brokers`` (default: every live broker) with the
        partitions of ``topics`` (default: all) in each, by broker and path."""
        metadata = self._call("Metadata", pb.MetadataRequest())
        known = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers}
        missing = sorted(set(brokers) - set(known))
        if missing:
            raise AdminError(
                errors.BROKER_NOT_AVAILABLE,
                f"no live broker with id {', '.join(map(str, missing))} (live: {sorted(known)})",
            )
        out: list[LogDirInfo] = []
        for broker in sorted(brokers or known):
            request = pb.DescribeLogDirsRequest(topics=list(topics))
            try:
                response = self.cluster.stub(known[broker]).DescribeLogDirs(
                    request, timeout=self.timeout_s
                )
            except grpc.RpcError as exc:
                raise AdminError.from_rpc(exc, f"DescribeLogDirs to broker {broker}") from exc
            out.extend(
                LogDirInfo(
                    broker,
                    d.path,
                    errors.from_wire(d.error),
                    tuple(
                        LogDirPartition(p.topic, p.partition, p.size, p.offset_lag, p.is_future)
                        for p in d.partitions
                    ),
                    d.total_bytes,
                    d.usable_bytes,
                )
                for d in response.log_dirs
            )
        return out

    def _refresh(self, topics: Sequence[str]) -> None:
        try:
            self.cluster.refresh(topics)
        except ClientError as exc:
            raise AdminError(exc.code, exc.message) from exc

    def describe_configs(
        self, topic: str, include_defaults: bool = False
    ) -> list[tuple[str, str, bool]]:
        """(name, value, is_default) of the topic's overrides, or of every setting
        with ``include_defaults``; sorted by name."""
        request = pb.DescribeConfigsRequest(topics=[topic], include_defaults=include_defaults)
        (result,) = self._call("DescribeConfigs", request).topics
        if result.error != pb.NONE:
            raise AdminError(errors.from_wire(result.error), result.error_message)
        return [(e.name, e.value, e.is_default) for e in result.entries]

    def topic_overrides(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        """Each topic's config overrides (name → value), in one DescribeConfigs
        request; AdminError for the first topic refused."""
        if not topics:
            return {}
        request = pb.DescribeConfigsRequest(topics=list(topics))
        out: dict[str, dict[str, str]] = {}
        for result in self._call("DescribeConfigs", request).topics:
            if result.error != pb.NONE:
                raise AdminError(errors.from_wire(result.error), result.error_message)
            out[result.name] = {e.name: e.value for e in result.entries if not e.is_default}
        return out

    def alter_configs(
        self,
        topic: str,
        set_: Mapping[str, str] | None = None,
        delete: Sequence[str] = (),
        validate_only: bool = False,
    ) -> None:
        """Set and delete overrides of a topic; the hosting brokers apply them."""
        change = pb.TopicConfigChange(name=topic, set=dict(set_ or {}), delete=list(delete))
        request = pb.AlterConfigsRequest(topics=[change], validate_only=validate_only)
        (result,) = self._call("AlterConfigs", request).topics
        if result.error != pb.NONE:
            raise AdminError(errors.from_wire(result.error), result.error_message)

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group, protocol type, state) of every group a coordinator knows: the
        groups of Kafka's clients and groups with committed offsets."""
        brokers = self._call("Metadata", pb.MetadataRequest()).brokers
        found: dict[str, tuple[str, str, str]] = {}
        for broker in brokers:
            stub = self.cluster.stub(f"{broker.host}:{broker.port}")
            try:
                answer = stub.ListGroups(pb.ListGroupsRequest(), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                raise AdminError(errors.transport_error(exc), exc.details() or "") from exc
            for g in answer.groups:
                found[g.group] = (g.group, g.protocol_type, g.state)
        return sorted(found.values())

    # -- ACLs -------------------------------------------------------------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Store ACLs (those present already stay); AdminError for the first one
        refused, naming it (the others are stored)."""
        request = pb.CreateAclsRequest(creations=[binding_to_pb(b) for b in bindings])
        results = self._call("CreateAcls", request).results
        for binding, result in zip(bindings, results, strict=True):
            if result.error != pb.NONE:
                raise AdminError(
                    errors.from_wire(result.error), f"{binding}: {result.error_message}"
                )

    def describe_acls(
        self, binding_filter: AclBindingFilter = AclBindingFilter.ANY
    ) -> list[AclBinding]:
        """The ACLs the filter selects (default: all), sorted."""
        request = pb.DescribeAclsRequest(filter=filter_to_pb(binding_filter))
        answer = self._call("DescribeAcls", request)
        if answer.error != pb.NONE:
            raise AdminError(errors.from_wire(answer.error), answer.error_message)
        return sorted(binding_from_pb(m) for m in answer.acls)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Remove every ACL some filter selects; the ACLs removed, sorted.  AdminError
        for a filter refused, or an ACL that could not be removed."""
        request = pb.DeleteAclsRequest(filters=[filter_to_pb(f) for f in filters])
        deleted: list[AclBinding] = []
        for result in self._call("DeleteAcls", request).results:
            if result.error != pb.NONE:
                raise AdminError(errors.from_wire(result.error), result.error_message)
            for item in result.deleted:
                if item.error != pb.NONE:
                    raise AdminError(errors.from_wire(item.error), item.error_message)
                deleted.append(binding_from_pb(item.acl))
        return sorted(deleted)

    # -- SCRAM credentials ------------------------------------------------------------

    def describe_user_scram_credentials(
        self, users: Sequence[str] = ()
    ) -> list[UserScramCredentials]:
        """The SCRAM mechanisms and iterations of ``users`` (default: every user with
        a credential), one result per user."""
        request = pb.DescribeUserScramCredentialsRequest(users=list(users))
        answer = self._call("DescribeUserScramCredentials", request)
        if answer.error != pb.NONE:
            raise AdminError(errors.from_wire(answer.error), answer.error_message)
        return [
            UserScramCredentials(
                r.user,
                tuple(ScramCredentialInfo(c.mechanism, c.iterations) for c in r.credentials),
                errors.from_wire(r.error),
                r.error_message,
            )
            for r in answer.results
        ]

    def alter_user_scram_credentials(
        self,
        user: str,
        upsertions: Sequence[ScramCredentialUpsertion] = (),
        deletions: Sequence[str] = (),
    ) -> None:
        """Set (``upsertions``, e.g. from ``security.scram.parse_add_config``) and remove
        (mechanism names) one user's credentials, together; AdminError with the
        broker's code when refused (nothing of it is then written)."""
        request = pb.AlterUserScramCredentialsRequest(
            deletions=[pb.ScramCredentialDeletion(user=user, mechanism=m) for m in deletions],
            upsertions=[_salted(user, u) for u in upsertions],
        )
        for result in self._call("AlterUserScramCredentials", request).results:
            if result.error != pb.NONE:
                raise AdminError(errors.from_wire(result.error), result.error_message)

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _salted(user: str, upsertion: ScramCredentialUpsertion) -> pb.ScramCredentialUpsertion:
    """What KIP-554 sends for a password: a fresh salt and PBKDF2 of the password's
    UTF-8 bytes (as Kafka's clients hash it; the upsertion checked that SASLprep would
    not change it)."""
    salt = secrets.token_bytes(SALT_BYTES)
    hash_function = ScramMechanism(upsertion.mechanism).hf
    salted: bytes = pbkdf2(
        hash_function, upsertion.password.encode("utf-8"), salt, upsertion.iterations
    )
    return pb.ScramCredentialUpsertion(
        user=user,
        mechanism=upsertion.mechanism,
        iterations=upsertion.iterations,
        salt=salt,
        salted_password=salted,
    )
