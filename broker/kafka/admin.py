"""Kafka's admin APIs on annal's admin path: topics, partitions, configs, records,
log dirs, elections and reassignments.

Each handler builds the broker's own request of the same name
(``broker/requests/admin_types.py``) from the Kafka request and hands it to
``AdminManager`` (or ``DataApi`` for DeleteRecords and DescribeLogDirs), the
code the gRPC service runs; the answers go back per topic and partition.  Where
Kafka's API and annal's differ:

* AlterConfigs (the legacy one) replaces a topic's overrides as a whole:
  annal's AlterConfigs sets and deletes, so the overrides missing from the
  request are deleted (read, then written; a concurrent change in between
  may be lost, as with two legacy AlterConfigs in Kafka);
* IncrementalAlterConfigs SET and DELETE map onto annal's set and delete
  (deleting an override that is not set is a no-op, as in Kafka); APPEND and
  SUBTRACT edit the current value as a comma-separated list;
* configs of brokers (KIP-226, broker/dynamic_config.py): DescribeConfigs of a
  BROKER resource (its id, or "" for the cluster default) lists the settings with
  their sources and synonyms; AlterConfigs and IncrementalAlterConfigs change the
  dynamic ones (broker/dynamic_config_admin.py); a broker answers for its own id
  only, as Kafka's (clients send a broker's resource to that broker); other
  resource types are refused;
* ElectLeaders elects preferred leaders; unclean elections are refused;
  AlterPartitionReassignments cannot cancel a reassignment (null replicas);
* DeleteTopics before v3 has no TOPIC_DELETION_DISABLED: a broker with
  ``delete.topic.enable=false`` answers those INVALID_REQUEST, as Kafka does.

Authorization is the broker code's (``AdminManager``, ``DataApi``): each
handler passes the connection's session, and only maps the answer back.  A
broker's configs are the exception in where they are read, not in who decides:
``AdminManager.broker_configs_refusal`` says whether the caller may see or
change them.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from typing import Any

from annal.broker.admin_manager import AdminManager
from annal.broker.data_api import DataApi
from annal.broker.dynamic_config_admin import SET as SET_OPERATION
from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.kafka.cluster import NO_TOPIC_ID
from annal.broker.kafka.data import NO_DEADLINE
from annal.broker.metadata_cache import MetadataCache
from annal.broker.requests import admin_types as at
from annal.broker.requests.request_checks import Refusal
from annal.kafkaproto.wire import Request, millis

from annal import errors
from annal.topic_partition import TopicPartition

TOPIC, BROKER = 2, 4  # resource types
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
DYNAMIC_TOPIC_CONFIG = 1  # config source of a topic's override
PREFERRED = 0

INVALID_REQUEST = errors.INVALID_REQUEST.number
INVALID_CONFIG = errors.INVALID_CONFIG.number
TOPIC_DELETION_DISABLED = errors.TOPIC_DELETION_DISABLED.number
CLUSTER_AUTHORIZATION_FAILED = errors.CLUSTER_AUTHORIZATION_FAILED.number
ONLY_TOPICS_AND_BROKERS = "AlterConfigs is only supported for topics and brokers"


class AdminApis:
    """See the module docstring."""

    def __init__(
        self,
        admin: AdminManager,
        data: DataApi,
        metadata: MetadataCache,
        broker_id: int,
    ) -> None:
        self._admin = admin
        self._data = data
        self._metadata = metadata
        self._broker_id = broker_id

    def register(self, apis: KafkaApis) -> None:
        apis.add(19, "CreateTopics", (2, 7), self.create_topics)
        apis.add(20, "DeleteTopics", (1, 5), self.delete_topics)
        apis.add(21, "DeleteRecords", (0, 2), self.delete_records)
        apis.add(32, "DescribeConfigs", (1, 4), self.describe_configs)
        apis.add(33, "AlterConfigs", (0, 2), self.alter_configs)
        apis.add(35, "DescribeLogDirs", (1, 4), self.describe_log_dirs)
        apis.add(37, "CreatePartitions", (0, 3), self.create_partitions)
        apis.add(43, "ElectLeaders", (0, 2), self.elect_leaders)
        apis.add(44, "IncrementalAlterConfigs", (0, 1), self.incremental_alter_configs)
        apis.add(45, "AlterPartitionReassignments", (0, 0), self.alter_reassignments)
        apis.add(46, "ListPartitionReassignments", (0, 0), self.list_reassignments)

    # -- topics and partitions ---------------------------------------------------------

    async def create_topics(self, request: Request) -> Values:
        body = request.body
        ask = at.CreateTopicsRequest(
            timeout_ms=millis(body.timeout), validate_only=body.validate_only
        )
        for topic in body.topics:
            wanted = at.CreatableTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                configs={c.name: c.value for c in topic.configs if c.value is not None},
            )
            ask.topics.append(wanted)
            for a in topic.assignments:
                wanted.assignment.setdefault(a.partition_index, []).extend(a.broker_ids)
        answer = await self._admin.create_topics(ask, NO_DEADLINE, request.session)
        cache = self._metadata.snapshot()
        results = []
        for t in answer.topics:
            partitions = cache.topics.get(t.name, {})
            replicas = len(next(iter(partitions.values())).replicas) if partitions else -1
            results.append({
                "name": t.name, "topic_id": NO_TOPIC_ID, "error_code": t.error,
                "error_message": t.error_message or None,
                "num_partitions": len(partitions) or -1, "replication_factor": replicas,
            })  # fmt: skip
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, request: Request) -> Values:
        body = request.body
        answer = await self._admin.delete_topics(
            at.DeleteTopicsRequest(topics=list(body.topic_names), timeout_ms=millis(body.timeout)),
            NO_DEADLINE,
            request.session,
        )
        results = _topic_results(answer.topics)
        if request.head.api_version < 3:  # TOPIC_DELETION_DISABLED came with v3
            for result in results:
                if result["error_code"] == TOPIC_DELETION_DISABLED:
                    result["error_code"] = INVALID_REQUEST
        return {"throttle_time": 0, "responses": results}

    async def create_partitions(self, request: Request) -> Values:
        body = request.body
        ask = at.CreatePartitionsRequest(
            [
                at.CreatePartitionsTopic(
                    topic.name, topic.count, [list(a.broker_ids) for a in topic.assignments or ()]
                )
                for topic in body.topics
            ],
            timeout_ms=millis(body.timeout),
            validate_only=body.validate_only,
        )
        answer = await self._admin.create_partitions(ask, NO_DEADLINE, request.session)
        return {"throttle_time": 0, "results": _topic_results(answer.topics)}

    async def delete_records(self, request: Request) -> Values:
        body = request.body
        ask = at.DeleteRecordsRequest(
            [
                at.DeleteRecordsPartition(topic.name, p.partition_index, p.offset)
                for topic in body.topics
                for p in topic.partitions
            ],
            timeout_ms=millis(body.timeout),
        )
        answer = await self._data.delete_records(ask, NO_DEADLINE, request.session)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in answer.results:
            by_topic.setdefault(r.topic, []).append(
                {"partition_index": r.partition, "low_watermark": r.low_watermark,
                 "error_code": r.error}
            )  # fmt: skip
        return {
            "throttle_time": 0,
            "topics": [{"name": name, "partitions": ps} for name, ps in by_topic.items()],
        }

    # -- log dirs ------------------------------------------------------------------------

    async def describe_log_dirs(self, request: Request) -> Values:
        """The log dirs of this broker and the partitions in each (Describe on the
        cluster; a caller without it gets no dirs, and from v3 the error, as
        Kafka answers); ``topics`` null asks for every partition."""
        wanted = request.body.topics
        topics = sorted({t.topic for t in wanted}) if wanted is not None else []
        if wanted is not None and not wanted:
            return {"throttle_time": 0, "error_code": errors.NONE.number, "results": []}
        answer = self._data.describe_log_dirs(
            at.DescribeLogDirsRequest(topics=topics), request.session
        )
        if not answer.log_dirs:  # every broker has a log dir: none means refused
            error = CLUSTER_AUTHORIZATION_FAILED
            return {"throttle_time": 0, "error_code": error, "results": []}
        chosen = None if wanted is None else {(t.topic, p) for t in wanted for p in t.partitions}
        results = []
        for entry in answer.log_dirs:
            by_topic: dict[str, list[Values]] = {}
            for part in entry.partitions:
                if chosen is None or (part.topic, part.partition) in chosen:
                    by_topic.setdefault(part.topic, []).append({
                        "partition_index": part.partition, "partition_size": part.size,
                        "offset_lag": part.offset_lag, "is_future_key": part.is_future,
                    })  # fmt: skip
            results.append({
                "error_code": entry.error, "log_dir": entry.path,
                "topics": [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
                "total_bytes": entry.total_bytes, "usable_bytes": entry.usable_bytes,
            })  # fmt: skip
        return {"throttle_time": 0, "error_code": errors.NONE.number, "results": results}

    # -- configs -------------------------------------------------------------------------

    async def describe_configs(self, request: Request) -> Values:
        results = []
        for resource in request.body.resources:
            keys = resource.configuration_keys
            if resource.resource_type == BROKER:
                synonyms = bool(getattr(request.body, "include_synonyms", False))
                results.append(await self._broker_configs(request, resource, synonyms))
                continue
            if resource.resource_type != TOPIC:
                results.append(_resource_refused(resource, INVALID_REQUEST, "unknown resource"))
                continue
            answer = await self._admin.describe_configs(
                at.DescribeConfigsRequest(topics=[resource.resource_name], include_defaults=True),
                request.session,
            )
            found = answer.topics[0]
            results.append({
                "error_code": found.error, "error_message": found.error_message or None,
                "resource_type": TOPIC, "resource_name": resource.resource_name,
                "configs": [
                    {"name": e.name, "value": e.value, "read_only": False,
                     "is_default": e.is_default,
                     "config_source": self._topic_source(e),
                     "is_sensitive": False}
                    for e in found.entries if keys is None or e.name in keys
                ],
            })  # fmt: skip
        return {"throttle_time": 0, "results": results}

    def _topic_source(self, entry: at.ConfigEntry) -> int:
        """A topic config's source: its override, else where the broker default it
        takes comes from (Kafka's topic describe names the broker synonym's level)."""
        if not entry.is_default:
            return DYNAMIC_TOPIC_CONFIG
        return int(self._admin.broker_configs.dynamic.topic_default_source(entry.name))

    async def _broker_configs(self, request: Request, resource: Any, synonyms: bool) -> Values:
        """A BROKER resource's settings, through the broker code (which checks
        DescribeConfigs on the cluster and answers for this broker's id only)."""
        keys = resource.configuration_keys
        answer = await self._admin.describe_configs(
            at.DescribeConfigsRequest(brokers=[resource.resource_name], include_synonyms=synonyms),
            request.session,
        )
        found = answer.brokers[0]
        if found.error != errors.NONE.number:
            return _resource_refused(resource, found.error, found.error_message)
        return {
            "error_code": errors.NONE.number, "error_message": None,
            "resource_type": BROKER, "resource_name": resource.resource_name,
            "configs": [
                {"name": e.name, "value": e.value,
                 "read_only": e.read_only, "is_default": False, "config_source": e.source,
                 "is_sensitive": e.sensitive,
                 "synonyms": [
                     {"name": s.name, "value": None if e.sensitive else s.value or "",
                      "source": s.source}
                     for s in e.synonyms
                 ]}
                for e in found.entries if not keys or e.name in keys  # none or []: all
            ],
        }  # fmt: skip

    async def alter_configs(self, request: Request) -> Values:
        body = request.body
        responses: list[dict[str, Any]] = []
        for resource in body.resources:
            if resource.resource_type == BROKER:  # the level replaced as a whole
                operations = [(c.name, SET_OPERATION, c.value) for c in resource.configs]
                only = body.validate_only
                responses.append(
                    await self._alter_broker(request, resource, operations, only, True)
                )
                continue
            if resource.resource_type != TOPIC:
                responses.append(_altered(resource, INVALID_REQUEST, ONLY_TOPICS_AND_BROKERS))
                continue
            wanted = {c.name: c.value for c in resource.configs if c.value is not None}
            current = await self._overrides(resource.resource_name)
            change = at.ConfigChange(
                name=resource.resource_name,
                set=wanted,
                delete=sorted(set(current or {}) - set(wanted)),
            )
            responses.append(await self._alter(request, resource, change, body.validate_only))
        return {"throttle_time": 0, "responses": responses}

    async def _alter_broker(
        self, request: Request, resource: Any, operations: Any, only: bool, replace: bool
    ) -> dict[str, Any]:
        """A BROKER resource's change, through the broker code (AlterConfigs on the
        cluster first, as Kafka checks it before it looks further)."""
        refusal = await self._admin.incremental_alter_broker_configs(
            resource.resource_name, list(operations), only, request.session, replace
        )
        if refusal is None:
            return _altered(resource, errors.NONE.number, "")
        return _altered(resource, refusal.error.number, refusal.message)

    async def incremental_alter_configs(self, request: Request) -> Values:
        body = request.body
        responses: list[dict[str, Any]] = []
        for resource in body.resources:
            if resource.resource_type == BROKER:
                operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
                only = body.validate_only
                responses.append(
                    await self._alter_broker(request, resource, operations, only, False)
                )
                continue
            if resource.resource_type != TOPIC:
                responses.append(_altered(resource, INVALID_REQUEST, ONLY_TOPICS_AND_BROKERS))
                continue
            current = await self._effective(resource.resource_name)
            overrides = await self._overrides(resource.resource_name) or {}
            change = at.ConfigChange(name=resource.resource_name)
            for c in resource.configs:
                if c.config_operation == SET and c.value is not None:
                    change.set[c.name] = c.value
                elif c.config_operation == DELETE:
                    if c.name in overrides:
                        change.delete.append(c.name)
                elif c.config_operation in (APPEND, SUBTRACT) and c.value is not None:
                    items = [v for v in (current.get(c.name) or "").split(",") if v]
                    given = [v for v in c.value.split(",") if v]
                    if c.config_operation == APPEND:
                        items += [v for v in given if v not in items]
                    else:
                        items = [v for v in items if v not in given]
                    change.set[c.name] = ",".join(items)
                else:
                    change = at.ConfigChange(name="")
                    responses.append(_altered(
                        resource, INVALID_CONFIG, f"operation {c.config_operation} on {c.name}"
                    ))  # fmt: skip
                    break
            if change.name:
                responses.append(await self._alter(request, resource, change, body.validate_only))
        return {"throttle_time": 0, "responses": responses}

    async def _overrides(self, topic: str) -> dict[str, str] | None:
        """The topic's overrides, read by the broker itself (the alteration that
        follows is what the caller's session is checked for)."""
        return await self._admin.topic_configs(topic, include_defaults=False)

    async def _effective(self, topic: str) -> dict[str, str]:
        return await self._admin.topic_configs(topic, include_defaults=True) or {}

    async def _alter(
        self, request: Request, resource: Any, change: at.ConfigChange, only: bool
    ) -> dict[str, Any]:
        answer = await self._admin.alter_configs(
            at.AlterConfigsRequest(topics=[change], validate_only=only), request.session
        )
        result = answer.topics[0]
        return _altered(resource, result.error, result.error_message)

    # -- elections and reassignments ---------------------------------------------------

    async def elect_leaders(self, request: Request) -> Values:
        body = request.body
        if getattr(body, "election_type", PREFERRED) != PREFERRED:
            return {"throttle_time": 0, "error_code": INVALID_REQUEST,
                    "replica_election_results": []}  # fmt: skip
        ask = at.ElectLeadersRequest(
            [
                at.TopicPartitions(entry.topic, list(entry.partitions))
                for entry in body.topic_partitions or ()
            ],
            timeout_ms=millis(body.timeout),
        )
        answer = await self._admin.elect_leaders(ask, NO_DEADLINE, request.session)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in answer.results:
            by_topic.setdefault(r.topic, []).append(
                {"partition_id": r.partition, "error_code": r.error,
                 "error_message": r.error_message or None}
            )  # fmt: skip
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "replica_election_results": [
                {"topic": t, "partition_result": ps} for t, ps in by_topic.items()
            ],
        }

    async def alter_reassignments(self, request: Request) -> Values:
        ask = at.AlterPartitionReassignmentsRequest()
        cancels: list[TopicPartition] = []
        for topic in request.body.topics:
            for p in topic.partitions:
                if p.replicas is None:
                    cancels.append(TopicPartition(topic.name, p.partition_index))
                else:
                    ask.partitions.append(
                        at.ReassignablePartition(topic.name, p.partition_index, list(p.replicas))
                    )
        results = (await self._admin.alter_partition_reassignments(ask, request.session)).results
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in results:
            by_topic.setdefault(r.topic, []).append(
                {"partition_index": r.partition, "error_code": r.error,
                 "error_message": r.error_message or None}
            )  # fmt: skip
        # Alter on the cluster is asked of the whole request: a refusal is the answer's
        refused = next((r for r in results if r.error == CLUSTER_AUTHORIZATION_FAILED), None)
        for topic, partition in cancels:
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": INVALID_REQUEST,
                 "error_message": "annal cannot cancel a running reassignment"}
                if refused is None else
                {"partition_index": partition, "error_code": refused.error,
                 "error_message": refused.error_message}
            )  # fmt: skip
        return {
            "throttle_time": 0,
            "error_code": errors.NONE.number if refused is None else refused.error,
            "error_message": None if refused is None else refused.error_message,
            "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }

    async def list_reassignments(self, request: Request) -> Values:
        running = await self._admin.list_reassignments(request.session)
        if isinstance(running, Refusal):
            return {"throttle_time": 0, "error_code": running.error.number,
                    "error_message": running.message, "topics": []}  # fmt: skip
        cache = self._metadata.snapshot()
        wanted = {
            (t.name, p) for t in request.body.topics or () for p in t.partition_indexes
        }  # fmt: skip
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), target in sorted(running.items()):
            if request.body.topics is not None and (topic, partition) not in wanted:
                continue
            view = cache.topics.get(topic, {}).get(partition)
            current = list(view.replicas) if view is not None else []
            by_topic.setdefault(topic, []).append({
                "partition_index": partition,
                "replicas": current + [r for r in target if r not in current],
                "adding_replicas": [r for r in target if r not in current],
                "removing_replicas": [r for r in current if r not in target],
            })  # fmt: skip
        return {
            "throttle_time": 0,
            "error_code": errors.NONE.number,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }


def _topic_results(topics: Any) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "error_code": t.error, "error_message": t.error_message or None}
        for t in topics
    ]


def _altered(resource: Any, error: int, message: str) -> dict[str, Any]:
    return {
        "error_code": error,
        "error_message": message or None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }


def _resource_refused(resource: Any, error: int, message: str) -> dict[str, Any]:
    return {**_altered(resource, error, message), "configs": []}
