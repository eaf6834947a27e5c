"""Cluster metadata and administration (Kafka's AdminManager): Metadata, topics,
partitions, configs, preferred elections and reassignments.

Topic admin writes ZooKeeper, the source of truth in this era of Kafka's
design, and then waits for this broker's metadata cache (which the controller
keeps current) to show the result, so that a client asking this broker next
finds it.  ZooKeeper calls block, so they run on the broker's small admin
pool (``blocking``), never on the event loop; the waits for the cache are
delayed operations in the metadata purgatory, holding no thread.  Metadata
itself is answered from the cache on the loop.

The handlers take and answer the admin path's own request and answer types
(``broker/requests/admin_types.py``: Kafka's error numbers); the gRPC service
(``grpc_admin.py``) and the Kafka listener (``broker/kafka/admin.py``,
``cluster.py``) each adapt their protocol's messages to them.

Authorization (docs/security.md, "Which operation each API needs"): every
handler takes the caller's ``Session`` and asks the ``RequestAuthorizer`` on
the event loop, before any ZooKeeper work, what Kafka 2.x's broker asks:

* Metadata lists only the topics the caller may Describe; a topic named but
  not describable is TOPIC_AUTHORIZATION_FAILED; auto-creation needs Create on
  the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED);
* CreateTopics needs Create on the cluster or the topic; DeleteTopics Delete,
  CreatePartitions Alter, DescribeConfigs DescribeConfigs and AlterConfigs
  AlterConfigs on the topic (on the cluster for a broker's configs);
* ElectLeaders and AlterPartitionReassignments need Alter on the cluster,
  ListPartitionReassignments Describe on it.

``delete.topic.enable=false`` answers every DeleteTopics TOPIC_DELETION_DISABLED,
before anything else is looked at, as Kafka does.

Thread safety: the handlers run on the event loop; the ``_..._now`` methods
run on the admin pool and touch only ZooKeeper and immutable snapshots.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from annal.broker.config import BrokerConfig
from annal.broker.data_api import Deadline, wait_ms
from annal.broker.dynamic_config import DynamicBrokerConfig
from annal.broker.dynamic_config_admin import BrokerConfigAdmin, Operation
from annal.broker.groups.coordinator import OFFSETS_TOPIC
from annal.broker.metadata_cache import MetadataCache, MetadataSnapshot
from annal.broker.replication.leadership_fence import LeadershipFence
from annal.broker.requests import admin_types as at
from annal.broker.requests import request_checks as checks
from annal.broker.requests.delayed import Purgatories
from annal.broker.requests.request_checks import Refusal
from annal.broker.security.authorization import (
    ALLOW_ALL,
    CLUSTER_RESOURCE,
    INTERNAL,
    TOPIC,
    RequestAuthorizer,
    cluster_denial,
)
from annal.broker.transactions.log_schema import TRANSACTION_STATE_TOPIC
from annal.security.acl import AclOperation, Resource, ResourceType
from annal.security.session import Session
from annal.storage.config import LogConfig
from annal.zk.batched import BatchedZk
from annal.zk.client import StaleVersionError, ZkClient
from annal.zk.layout import TopicAssignment

from annal import errors
from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

T = TypeVar("T")

NONE = errors.NONE.number
TOPIC_AUTHORIZATION_FAILED = errors.TOPIC_AUTHORIZATION_FAILED.number
CLUSTER_AUTHORIZATION_FAILED = errors.CLUSTER_AUTHORIZATION_FAILED.number
INVALID_TOPIC_EXCEPTION = errors.INVALID_TOPIC_EXCEPTION.number
UNKNOWN_TOPIC_OR_PARTITION = errors.UNKNOWN_TOPIC_OR_PARTITION.number
LEADER_NOT_AVAILABLE = errors.LEADER_NOT_AVAILABLE.number
TOPIC_ALREADY_EXISTS = errors.TOPIC_ALREADY_EXISTS.number
PREFERRED_LEADER_NOT_AVAILABLE = errors.PREFERRED_LEADER_NOT_AVAILABLE.number

ELECTION_RETRY_S = 0.05  # an earlier election request is being handled: milliseconds
ALTER_CONFIG_ATTEMPTS = 10


class AdminManager:
    """See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        zk: ZkClient,
        metadata: MetadataCache,
        purgatories: Purgatories,
        run_admin: Callable[[Callable[[], Any]], Awaitable[Any]],
        cluster_id: Callable[[], str | None],
        authorizer: RequestAuthorizer = ALLOW_ALL,
        fence: LeadershipFence | None = None,
        dynamic: DynamicBrokerConfig | None = None,
    ) -> None:
        self._config = config
        # dynamic broker configs (KIP-226): broker/dynamic_config_admin.py
        self.broker_configs = BrokerConfigAdmin(dynamic or DynamicBrokerConfig(config), zk)
        self._fence = fence or LeadershipFence(config.broker_id)
        self._zk = zk
        self._metadata = metadata
        self._purgatories = purgatories
        self._run_admin = run_admin
        self._cluster_id = cluster_id
        self._authorizer = authorizer

    async def blocking(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the admin pool (``NetworkLayer.run_admin``): ZooKeeper
        work, off the event loop."""
        result: T = await self._run_admin(functools.partial(fn, *args))
        return result

    async def wait_for_cache(
        self, ready: Callable[[MetadataSnapshot], bool], timeout_ms: int
    ) -> bool:
        return await self._purgatories.wait_for_metadata(self._metadata, ready, timeout_ms)

    # -- metadata --------------------------------------------------------------------

    async def metadata(
        self, request: at.MetadataRequest, session: Session = INTERNAL
    ) -> at.MetadataResponse:
        """The brokers, and the topics asked for (none: every topic) that the caller
        may Describe; see the module docstring for refusals and auto-creation."""
        cache = self._metadata.snapshot()
        response = at.MetadataResponse(
            brokers=sorted(cache.brokers.values(), key=lambda b: b.broker_id),
            cluster_id=self._cluster_id() or "",
            controller_id=cache.controller_id,
        )
        authorizer = self._authorizer
        if request.topics:
            names = list(request.topics)
            hidden = authorizer.denied(session, AclOperation.DESCRIBE, TOPIC, names)
        else:  # every topic: those it may not describe are left out, quietly
            names = sorted(cache.topics)
            hidden = authorizer.denied(
                session, AclOperation.DESCRIBE, TOPIC, names, log_denied=False
            )
            names = [n for n in names if n not in hidden]
        for name in names:
            if name in hidden:
                response.topics.append(at.TopicMetadata(name, TOPIC_AUTHORIZATION_FAILED))
                continue
            if checks.topic_name(name):
                response.topics.append(at.TopicMetadata(name, INVALID_TOPIC_EXCEPTION))
                continue
            partitions = cache.topics.get(name)
            if partitions is None:
                response.topics.append(await self._unknown_topic(name, request, session))
                continue
            topic = at.TopicMetadata(name, is_internal=name.startswith("__"))
            response.topics.append(topic)
            me = self._config.broker_id if self._fence.fenced else None
            for partition, view in sorted(partitions.items()):
                leader = cache.leader_of(name, partition)
                if leader == me:  # fenced (broker/replication/leadership_fence.py): ask elsewhere
                    leader = -1
                topic.partitions.append(
                    at.PartitionMetadata(
                        partition=partition,
                        leader=leader,
                        leader_epoch=view.leader_epoch,
                        replicas=list(view.replicas),
                        isr=list(view.isr),
                        offline_replicas=[r for r in view.replicas if r not in cache.brokers],
                        error=NONE if leader >= 0 else LEADER_NOT_AVAILABLE,
                    )
                )
        return response

    async def _unknown_topic(
        self, name: str, request: at.MetadataRequest, session: Session
    ) -> at.TopicMetadata:
        """A topic the cache does not know: created when auto-creation is on and
        asked for (its partitions have no leader yet: clients retry), else unknown.
        Creating it needs Create on the cluster or on the topic, as CreateTopics."""
        if request.allow_auto_topic_creation and self._config.auto_create_topics_enable:
            if self._refused_creations(session, [name]):
                return at.TopicMetadata(name, TOPIC_AUTHORIZATION_FAILED)
            return await self.blocking(self._auto_create_now, name)
        return at.TopicMetadata(name, UNKNOWN_TOPIC_OR_PARTITION)

    def _refused_creations(self, session: Session, names: list[str]) -> dict[str, Refusal]:
        """The topics of ``names`` the caller may not create: none with Create on the
        cluster (asked quietly, as it is not the last word), else those without
        Create on the topic."""
        create = AclOperation.CREATE
        if self._authorizer.cluster(session, create, audited=True, log_denied=False):
            return {}
        return self._authorizer.refused_topics(session, create, names, audited=True)

    def cluster_authorized_operations(self, session: Session) -> int:
        """The operations on the cluster the caller may do, as Kafka's bit field
        (DescribeCluster); 0 when it may not Describe the cluster."""
        if not self._authorizer.cluster(session, AclOperation.DESCRIBE):
            return 0
        return self._authorizer.authorized_operations(session, CLUSTER_RESOURCE)

    def topic_authorized_operations(self, session: Session, topic: str) -> int:
        """The operations on ``topic`` the caller may do, as Kafka's bit field
        (Metadata v8+, KIP-430)."""
        return self._authorizer.authorized_operations(session, Resource(ResourceType.TOPIC, topic))

    def _auto_create_now(self, name: str) -> at.TopicMetadata:
        self._create_topic_now(at.CreatableTopic(name, num_partitions=-1, replication_factor=-1))
        found = self._zk.get_topic_assignment(name)
        if found is None:
            return at.TopicMetadata(name, UNKNOWN_TOPIC_OR_PARTITION)
        return at.TopicMetadata(
            name,
            partitions=[
                at.PartitionMetadata(
                    partition=p, leader=-1, replicas=list(replicas), error=LEADER_NOT_AVAILABLE
                )
                for p, replicas in sorted(found[0].partitions.items())
            ],
        )

    # -- topics ------------------------------------------------------------------------

    async def create_topics(
        self, request: at.CreateTopicsRequest, context: Deadline, session: Session = INTERNAL
    ) -> at.CreateTopicsResponse:
        """Create each topic (Create on the cluster, or else on the topic)."""
        checks.check_timeout_ms(request.timeout_ms)
        refused = self._refused_creations(session, [t.name for t in request.topics])
        response, created = await self.blocking(self._create_topics_now, request, refused)
        await self._await_leaders(created, wait_ms(request.timeout_ms, context))
        return response

    def _create_topics_now(
        self, request: at.CreateTopicsRequest, refused: dict[str, Refusal]
    ) -> tuple[at.CreateTopicsResponse, list[TopicPartition]]:
        """Every topic is checked first (existing topics read in one batched round),
        then all the accepted ones are written together (``BatchedZk.create_topics``),
        so the controller takes them in one or two events, not one per topic."""
        repeated = checks.repeated(t.name for t in request.topics)
        batched = BatchedZk(self._zk)
        brokers = [b.broker_id for b in self._zk.get_brokers()]  # read once for all topics
        named = [t.name for t in request.topics if checks.topic_name(t.name) is None]
        existing = set(batched.topic_assignments(named))
        answers: list[tuple[str, int, str, int]] = []
        plans: dict[str, tuple[TopicAssignment, dict[str, str]]] = {}
        for topic in request.topics:
            refusal = (
                checks.repeated_refusal(topic.name)
                if topic.name in repeated
                else refused.get(topic.name)
            )
            if refusal is not None:
                answers.append((topic.name, refusal.error.number, refusal.message, 0))
                continue
            planned = self._plan_topic(topic, brokers, topic.name in existing)
            if isinstance(planned, Refusal):
                answers.append((topic.name, planned.error.number, planned.message, 0))
                continue
            answers.append((topic.name, NONE, "", len(planned)))
            plans[topic.name] = (TopicAssignment(planned), dict(topic.configs))
        made = {} if request.validate_only else batched.create_topics(plans)
        response = at.CreateTopicsResponse()
        created: list[TopicPartition] = []
        for name, error, message, partitions in answers:
            if error == NONE and made.get(name) is False:
                error, message = TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
            response.topics.append(at.TopicResult(name, error, message))
            if error == NONE and not request.validate_only:
                created.append(TopicPartition(name, partitions))
        return response, created

    async def _await_leaders(self, wanted: list[TopicPartition], timeout_ms: int) -> None:
        """Wait (bounded) until this broker's metadata cache knows a live leader for
        every partition of ``wanted`` (topic, partition count), as Kafka's
        delayed CreateTopics/CreatePartitions do; then clients asking this broker
        find the leaders."""
        if not wanted:
            return

        def led(cache: MetadataSnapshot) -> bool:
            return all(cache.leader_of(t, p) >= 0 for t, n in wanted for p in range(n))

        await self.wait_for_cache(led, timeout_ms)

    def _plan_topic(
        self, topic: at.CreatableTopic, brokers: list[int], exists: bool
    ) -> dict[int, tuple[int, ...]] | Refusal:
        """One topic of CreateTopics checked in Kafka's order (the name, whether it
        exists, its configs, then its partitions and replicas): its assignment,
        or why it is refused."""
        config = self._config
        refusal = checks.topic_name(topic.name)
        if refusal is None and exists:
            refusal = Refusal(errors.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
        refusal = refusal or checks.topic_configs(dict(topic.configs))
        if refusal is not None:
            return refusal
        return checks.new_topic_assignment(
            topic.num_partitions,
            topic.replication_factor,
            {p: list(r) for p, r in topic.assignment.items()},
            brokers,
            config.num_partitions,
            config.default_replication_factor,
        )

    def _create_topic_now(self, topic: at.CreatableTopic) -> tuple[int, str]:
        """Create one topic (auto-creation, the offsets topic): (error, message)."""
        zk = self._zk
        named = checks.topic_name(topic.name) is None
        exists = named and zk.get_topic_assignment(topic.name) is not None
        planned = self._plan_topic(topic, [b.broker_id for b in zk.get_brokers()], exists)
        if isinstance(planned, Refusal):
            return planned.error.number, planned.message
        if not zk.create_topic(topic.name, TopicAssignment(planned), dict(topic.configs)):
            return TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"
        return NONE, ""

    def create_offsets_topic_now(self, live_brokers: int) -> None:
        """``__consumer_offsets`` on first use (FindCoordinator), Kafka's settings."""
        config = self._config
        topic = at.CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=max(1, min(config.offsets_topic_replication_factor, live_brokers)),
            configs={"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
        )
        error, message = self._create_topic_now(topic)
        if error not in (NONE, TOPIC_ALREADY_EXISTS):
            logger.warning("cannot create %s: %s", OFFSETS_TOPIC, message)

    def create_transaction_state_topic_now(self, live_brokers: int) -> None:
        """``__transaction_state`` on first use (FindCoordinator for a transactional
        id), with Kafka's settings: compacted, min.insync.replicas from
        transaction.state.log.min.isr (never above the replicas), no unclean
        election."""
        config = self._config
        replicas = max(1, min(config.transaction_state_log_replication_factor, live_brokers))
        topic = at.CreatableTopic(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=config.transaction_state_log_num_partitions,
            replication_factor=replicas,
            configs={
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "min.insync.replicas": str(min(config.transaction_state_log_min_isr, replicas)),
                "segment.bytes": str(config.transaction_state_log_segment_bytes),
                "unclean.leader.election.enable": "false",
            },
        )
        error, message = self._create_topic_now(topic)
        if error not in (NONE, TOPIC_ALREADY_EXISTS):
            logger.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC, message)

    def _topic_refusal_now(self, name: str) -> Refusal | None:
        """Why an existing topic named ``name`` cannot be acted on: an illegal name,
        or ZooKeeper does not hold it; None when it does."""
        if refusal := checks.topic_name(name):
            return refusal
        if self._zk.get_topic_assignment(name) is None:
            return Refusal(errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return None

    async def create_partitions(
        self, request: at.CreatePartitionsRequest, context: Deadline, session: Session = INTERNAL
    ) -> at.CreatePartitionsResponse:
        """Add partitions to each topic (Alter on the topic)."""
        checks.check_timeout_ms(request.timeout_ms)
        refused = self._authorizer.refused_topics(
            session, AclOperation.ALTER, [t.name for t in request.topics], audited=True
        )
        response, grown = await self.blocking(self._create_partitions_now, request, refused)
        await self._await_leaders(grown, wait_ms(request.timeout_ms, context))
        return response

    def _create_partitions_now(
        self, request: at.CreatePartitionsRequest, refused: dict[str, Refusal]
    ) -> tuple[at.CreatePartitionsResponse, list[TopicPartition]]:
        repeated = checks.repeated(t.name for t in request.topics)
        response = at.CreatePartitionsResponse()
        grown: list[TopicPartition] = []
        for topic in request.topics:
            if topic.name in repeated:
                refusal: Refusal | None = checks.repeated_refusal(topic.name)
            else:
                refusal = refused.get(topic.name) or self._grow_topic_now(
                    topic, request.validate_only
                )
            response.topics.append(
                at.TopicResult(
                    topic.name,
                    refusal.error.number if refusal else NONE,
                    refusal.message if refusal else "",
                )
            )
            if refusal is None and not request.validate_only:
                grown.append(TopicPartition(topic.name, topic.count))
        return response, grown

    def _grow_topic_now(
        self, topic: at.CreatePartitionsTopic, validate_only: bool
    ) -> Refusal | None:
        """Extend the topic's assignment in ZooKeeper; the controller's watch on
        the topic brings the new partitions online."""
        zk = self._zk
        name = topic.name
        if refusal := self._topic_refusal_now(name):
            return refusal
        if name in zk.topics_to_delete():
            return Refusal(errors.INVALID_TOPIC_EXCEPTION, f"topic {name!r} is queued for deletion")
        found = zk.get_topic_assignment(name)
        if found is None:
            return Refusal(errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        assignment, version = found
        new = checks.added_partitions_assignment(
            name,
            topic.count,
            assignment.partitions,
            [list(r) for r in topic.assignment],
            [b.broker_id for b in zk.get_brokers()],
        )
        if isinstance(new, Refusal):
            return new
        if validate_only:
            return None
        grown = TopicAssignment(
            {**assignment.partitions, **new},
            assignment.adding_replicas,
            assignment.removing_replicas,
        )
        try:
            zk.update_topic_assignment(name, grown, version)
        except StaleVersionError as exc:
            return Refusal(errors.INVALID_REQUEST, f"{exc}: changed concurrently, try again")
        return None

    async def delete_topics(
        self, request: at.DeleteTopicsRequest, context: Deadline, session: Session = INTERNAL
    ) -> at.DeleteTopicsResponse:
        """Mark each topic for deletion (Delete on the topic), then wait for this
        broker's cache to drop it; every topic is refused TOPIC_DELETION_DISABLED
        when ``delete.topic.enable`` is false."""
        checks.check_timeout_ms(request.timeout_ms)
        if not self._config.delete_topic_enable:
            return at.DeleteTopicsResponse(
                topics=[
                    at.TopicResult(
                        name=name,
                        error=errors.TOPIC_DELETION_DISABLED.number,
                        error_message="topic deletion is disabled on this cluster "
                        "(delete.topic.enable=false)",
                    )
                    for name in request.topics
                ]
            )
        refused = self._authorizer.refused_topics(
            session, AclOperation.DELETE, list(request.topics), audited=True
        )
        response, marked = await self.blocking(self._delete_topics_now, request, refused)
        if marked:
            await self.wait_for_cache(
                lambda cache: not any(t in cache.topics for t in marked),
                wait_ms(request.timeout_ms, context),
            )
        return response

    def _delete_topics_now(
        self, request: at.DeleteTopicsRequest, refused: dict[str, Refusal]
    ) -> tuple[at.DeleteTopicsResponse, list[str]]:
        repeated = checks.repeated(request.topics)
        response = at.DeleteTopicsResponse()
        marked = []
        for name in request.topics:
            refusal = checks.repeated_refusal(name) if name in repeated else refused.get(name)
            if refusal := refusal or self._topic_refusal_now(name):
                response.topics.append(at.TopicResult(name, refusal.error.number, refusal.message))
                continue
            self._zk.mark_topic_for_deletion(name)
            marked.append(name)
            response.topics.append(at.TopicResult(name))
        return response, marked

    # -- configs -----------------------------------------------------------------------

    async def describe_configs(
        self, request: at.DescribeConfigsRequest, session: Session = INTERNAL
    ) -> at.DescribeConfigsResponse:
        """Each topic's configs (DescribeConfigs on the topic), each broker resource's
        (DescribeConfigs on the cluster)."""
        refused = self._authorizer.refused_topics(
            session, AclOperation.DESCRIBE_CONFIGS, list(request.topics)
        )
        response = at.DescribeConfigsResponse()
        if request.topics:
            response = await self.blocking(self._describe_configs_now, request, refused)
        for name in request.brokers:
            if refusal := self.broker_configs_refusal(session):
                response.brokers.append(
                    at.BrokerConfigs(name, refusal.error.number, refusal.message)
                )
            else:
                response.brokers.append(
                    self.broker_configs.describe(name, request.include_synonyms)
                )
        return response

    async def topic_configs(self, topic: str, include_defaults: bool) -> dict[str, str] | None:
        """The broker's own read of a topic's overrides (with its defaults too), None
        for a topic that does not exist.  Not authorized: for the Kafka listener's
        AlterConfigs, which reads before it alters, and whose alteration is checked."""
        request = at.DescribeConfigsRequest(topics=[topic], include_defaults=include_defaults)
        found = (await self.blocking(self._describe_configs_now, request, {})).topics[0]
        return None if found.error != NONE else {e.name: e.value for e in found.entries}

    def broker_configs_refusal(self, session: Session, alter: bool = False) -> Refusal | None:
        """Why the caller may not describe (DescribeConfigs on the cluster) or, with
        ``alter``, change (AlterConfigs on it) a broker's configs; None when it may."""
        operation = AclOperation.ALTER_CONFIGS if alter else AclOperation.DESCRIBE_CONFIGS
        if self._authorizer.cluster(session, operation, audited=alter):
            return None
        return Refusal(errors.CLUSTER_AUTHORIZATION_FAILED, cluster_denial(session, operation))

    def _describe_configs_now(
        self, request: at.DescribeConfigsRequest, refused: dict[str, Refusal]
    ) -> at.DescribeConfigsResponse:
        defaults = self.broker_configs.dynamic.current().log_config()
        response = at.DescribeConfigsResponse()
        for name in request.topics:
            if refusal := refused.get(name) or self._topic_refusal_now(name):
                response.topics.append(at.TopicConfigs(name, refusal.error.number, refusal.message))
                continue
            overrides = self._zk.get_topic_config(name)
            shown = dict(overrides)
            if request.include_defaults:
                effective = LogConfig.from_properties(overrides, defaults).to_properties()
                shown = {**effective, **overrides}
            response.topics.append(
                at.TopicConfigs(
                    name,
                    entries=[
                        at.ConfigEntry(k, v, is_default=k not in overrides)
                        for k, v in sorted(shown.items())
                    ],
                )
            )
        return response

    async def alter_configs(
        self, request: at.AlterConfigsRequest, session: Session = INTERNAL
    ) -> at.AlterConfigsResponse:
        """Change each topic's overrides (AlterConfigs on the topic), each broker
        resource's dynamic settings (AlterConfigs on the cluster)."""
        refused = self._authorizer.refused_topics(
            session, AclOperation.ALTER_CONFIGS, [t.name for t in request.topics], audited=True
        )
        response = at.AlterConfigsResponse()
        if request.topics:
            response = await self.blocking(self._alter_configs_now, request, refused)
        for change in request.brokers:
            refusal = self.broker_configs_refusal(session, alter=True) or await self.blocking(
                self.broker_configs.alter_now, change, request.validate_only
            )
            result = at.TopicResult(change.name)
            response.brokers.append(result)
            if refusal is not None:
                result.error, result.error_message = refusal.error.number, refusal.message
        return response

    async def incremental_alter_broker_configs(
        self,
        name: str,
        operations: list[Operation],
        validate_only: bool,
        session: Session,
        replace: bool = False,
    ) -> Refusal | None:
        """(Incremental)AlterConfigs of a broker resource on Kafka's listener:
        AlterConfigs on the cluster, then broker/dynamic_config_admin.py."""
        if refusal := self.broker_configs_refusal(session, alter=True):
            return refusal
        result: Refusal | None = await self.blocking(
            self.broker_configs.incremental_now, name, operations, validate_only, replace
        )
        return result

    def _alter_configs_now(
        self, request: at.AlterConfigsRequest, refused: dict[str, Refusal]
    ) -> at.AlterConfigsResponse:
        """Validate each topic's new overrides as a whole, then write them (the
        brokers hosting it follow ``/config/changes``)."""
        response = at.AlterConfigsResponse()
        for change in request.topics:
            result = at.TopicResult(change.name)
            response.topics.append(result)
            refusal = (
                refused.get(change.name)
                or self._topic_refusal_now(change.name)
                or self._alter_topic_config_now(change, request.validate_only)
            )
            if refusal is not None:
                result.error = refusal.error.number
                result.error_message = refusal.message
        return response

    def _alter_topic_config_now(
        self, change: at.ConfigChange, validate_only: bool
    ) -> Refusal | None:
        """Read, change and write one topic's overrides, conditioned on the znode's
        version; a concurrent writer makes it read and apply the change again."""
        for _ in range(ALTER_CONFIG_ATTEMPTS):
            overrides, version = self._zk.get_topic_config_versioned(change.name)
            missing = sorted(set(change.delete) - set(overrides))
            if missing:
                return Refusal(
                    errors.INVALID_CONFIG, f"cannot delete {missing}: not set on {change.name}"
                )
            overrides.update(change.set)
            for key in change.delete:
                overrides.pop(key, None)
            if refusal := checks.topic_configs(overrides):
                return refusal
            if validate_only:
                return None
            try:
                self._zk.set_topic_config(change.name, overrides, version)
            except StaleVersionError:
                continue  # another alter wrote in between: apply this one on top of it
            return None
        return Refusal(
            errors.INVALID_REQUEST,
            f"the config of {change.name} kept changing under {ALTER_CONFIG_ATTEMPTS} attempts; "
            "try again",
        )

    # -- elections and reassignments -----------------------------------------------------

    async def elect_leaders(
        self, request: at.ElectLeadersRequest, context: Deadline, session: Session = INTERNAL
    ) -> at.ElectLeadersResponse:
        """Preferred leader election: asks the controller through
        ``/admin/preferred_replica_election`` (as kafka-preferred-replica-election.sh
        did) and answers once this broker's cache shows the new leaders.  Needs
        Alter on the cluster: without it, the whole answer and every partition
        named are CLUSTER_AUTHORIZATION_FAILED."""
        checks.check_timeout_ms(request.timeout_ms)
        if not self._authorizer.cluster(session, AclOperation.ALTER, audited=True):
            message = cluster_denial(session, AclOperation.ALTER)
            return at.ElectLeadersResponse(
                error=CLUSTER_AUTHORIZATION_FAILED,
                error_message=message,
                results=[
                    at.ElectionResult(
                        topic=entry.topic,
                        partition=partition,
                        error=CLUSTER_AUTHORIZATION_FAILED,
                        error_message=message,
                    )
                    for entry in request.topic_partitions
                    for partition in list(entry.partitions) or [-1]
                ],
            )
        deadline = time.monotonic() + wait_ms(request.timeout_ms, context) / 1000
        cache = self._metadata.snapshot()
        outcome: dict[TopicPartition, tuple[int, str]] = {}
        asked: list[TopicPartition] = []
        if request.topic_partitions:
            for entry in request.topic_partitions:
                if refusal := checks.topic_name(entry.topic):
                    for partition in list(entry.partitions) or [-1]:
                        outcome[TopicPartition(entry.topic, partition)] = (
                            refusal.error.number,
                            refusal.message,
                        )
                    continue
                known = cache.topics.get(entry.topic, {})
                for partition in list(entry.partitions) or sorted(known):
                    if refusal := checks.partition_index(entry.topic, partition):
                        outcome[TopicPartition(entry.topic, partition)] = (
                            refusal.error.number,
                            refusal.message,
                        )
                    else:
                        asked.append(TopicPartition(entry.topic, partition))
                if not known and not entry.partitions:
                    outcome[TopicPartition(entry.topic, -1)] = (
                        UNKNOWN_TOPIC_OR_PARTITION,
                        f"unknown topic {entry.topic}",
                    )
        else:
            asked = [
                TopicPartition(t, p) for t, ps in sorted(cache.topics.items()) for p in sorted(ps)
            ]
        pending = []
        for key in asked:
            verdict = preferred_verdict(cache, *key)
            if verdict is None:
                pending.append(key)
            else:
                outcome[key] = verdict
        if pending:
            await self._request_preferred_election(pending, deadline)

            def settled(snapshot: MetadataSnapshot) -> bool:
                return all(
                    preferred_verdict(snapshot, *key, after=True) is not None for key in pending
                )

            remaining_ms = max(int((deadline - time.monotonic()) * 1000), 0)
            await self.wait_for_cache(settled, remaining_ms)
            final = self._metadata.snapshot()
            for key in pending:
                outcome[key] = preferred_verdict(final, *key, after=True) or (
                    errors.REQUEST_TIMED_OUT.number,
                    f"the controller did not move {key[0]}-{key[1]} in time",
                )
        return at.ElectLeadersResponse(
            results=[
                at.ElectionResult(topic=t, partition=p, error=error, error_message=message)
                for (t, p), (error, message) in outcome.items()
            ]
        )

    async def _request_preferred_election(
        self, partitions: list[TopicPartition], deadline: float
    ) -> None:
        """Write the request znode, waiting (bounded) for an earlier one to be taken."""
        while not await self.blocking(self._zk.request_preferred_election, partitions):
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(ELECTION_RETRY_S)

    async def list_reassignments(
        self, session: Session = INTERNAL
    ) -> dict[TopicPartition, tuple[int, ...]] | Refusal:
        """The reassignments still running: partition → its target replicas; a
        CLUSTER_AUTHORIZATION_FAILED refusal for a caller that may not Describe the
        cluster."""
        if not self._authorizer.cluster(session, AclOperation.DESCRIBE):
            return Refusal(
                errors.CLUSTER_AUTHORIZATION_FAILED,
                cluster_denial(session, AclOperation.DESCRIBE),
            )
        found = await self.blocking(self._zk.get_reassignments)
        return {} if found is None else found[0]

    async def alter_partition_reassignments(
        self, request: at.AlterPartitionReassignmentsRequest, session: Session = INTERNAL
    ) -> at.AlterPartitionReassignmentsResponse:
        """Checks each target and writes ``/admin/reassign_partitions`` for the
        controller; answers at once (a move takes as long as copying the data).
        Needs Alter on the cluster (else every partition is
        CLUSTER_AUTHORIZATION_FAILED)."""
        if not self._authorizer.cluster(session, AclOperation.ALTER, audited=True):
            message = cluster_denial(session, AclOperation.ALTER)
            return at.AlterPartitionReassignmentsResponse(
                results=[
                    at.ReassignmentResult(
                        topic=wanted.topic,
                        partition=wanted.partition,
                        error=CLUSTER_AUTHORIZATION_FAILED,
                        error_message=message,
                    )
                    for wanted in request.partitions
                ]
            )
        cache = self._metadata.snapshot()
        results: list[at.ReassignmentResult] = []
        targets: dict[TopicPartition, tuple[int, ...]] = {}
        for wanted in request.partitions:
            refusal = checks.topic_partition(wanted.topic, wanted.partition)
            if refusal is None and cache.topics.get(wanted.topic, {}).get(wanted.partition) is None:
                refusal = Refusal(
                    errors.UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown partition {wanted.topic}-{wanted.partition}",
                )
            refusal = refusal or checks.reassignment(
                wanted.topic, wanted.partition, list(wanted.replicas), list(cache.brokers)
            )
            if refusal is None:
                targets[TopicPartition(wanted.topic, wanted.partition)] = tuple(wanted.replicas)
            results.append(
                at.ReassignmentResult(
                    topic=wanted.topic,
                    partition=wanted.partition,
                    error=refusal.error.number if refusal else NONE,
                    error_message=refusal.message if refusal else "",
                )
            )
        if targets and not await self.blocking(self._zk.request_reassignments, targets):
            for result in results:
                if result.error == NONE:
                    result.error = errors.REASSIGNMENT_IN_PROGRESS.number
                    result.error_message = "another reassignment is still running"
        return at.AlterPartitionReassignmentsResponse(results=results)


def preferred_verdict(
    cache: MetadataSnapshot, topic: str, partition: int, after: bool = False
) -> tuple[int, str] | None:
    """How a preferred election of one partition ends, judged from ``cache``: None
    while it can still happen.  ``after`` the request, the preferred replica leading
    is a success rather than an election not needed."""
    view = cache.topics.get(topic, {}).get(partition)
    if view is None:
        return UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}"
    preferred = view.replicas[0] if view.replicas else -1
    if view.leader == preferred:
        if after:
            return NONE, ""
        return errors.ELECTION_NOT_NEEDED.number, f"the preferred replica {preferred} leads already"
    if preferred not in cache.brokers:
        return PREFERRED_LEADER_NOT_AVAILABLE, f"the preferred replica {preferred} is down"
    if preferred not in view.isr:
        return (
            PREFERRED_LEADER_NOT_AVAILABLE,
            f"the preferred replica {preferred} is not in the ISR {list(view.isr)}",
        )
    return None
