"""The ZooKeeper layout: every znode path and its JSON, as Kafka (ZooKeeper mode) has them.

::

    /cluster/id                                   {"version":"1","id":"<22 chars, url-safe base64>"}
    /brokers/ids/<id>                 ephemeral   {"version":5,"host":..,"port":..,
                                                   "endpoints":["GRPC://host:port"],"rack":..,
                                                   "timestamp":".."}
    /brokers/topics/<topic>                       {"version":2,"partitions":{"0":[1,2,3]},
                                                   "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<topic>/partitions/<p>/state  {"controller_epoch":N,"leader":B,"version":1,
                                                   "leader_epoch":E,"isr":[..]}
    /controller                       ephemeral   {"version":1,"brokerid":B,"timestamp":".."}
    /controller_epoch                             N
    /admin/delete_topics/<topic>
    /admin/reassign_partitions, /admin/preferred_replica_election
    /isr_change_notification/isr_change_<seq>     sequential
    /config/topics/<topic>                        {"version":1,"config":{..}}
    /config/users/<sanitized user>                {"version":1,"config":{"SCRAM-SHA-512":
                                                   "salt=..,stored_key=..,server_key=..,
                                                   iterations=4096",..}}      (users.py)
    /config/brokers/<id>, /config/brokers/<default>  {"version":1,"config":{..}}
                                                   (broker_configs.py, KIP-226)
    /config/changes/config_change_<seq>           sequential {"version":2,
                                                   "entity_path":"topics/<t>" | "users/<u>"
                                                   | "brokers/<id>" | "brokers/<default>"}
    /kafka-acl/<ResourceType>/<name>              {"version":1,"acls":[{"principal":"User:a",
                                                   "permissionType":"Allow","operation":"Read",
                                                   "host":"*"}]}              (acls.py)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   the same, for PREFIXED patterns
    /kafka-acl-changes/acl_changes_<seq>          sequential  Topic:orders
    /kafka-acl-extended-changes/acl_changes_<seq> sequential  {"version":1,"resourceType":..,
                                                   "name":..,"patternType":"PREFIXED"}
    /consumers/<group>/ids/<consumer_id> ephemeral {"version":1,"subscription":{"topic":n},
                                                    "pattern":"static","timestamp":".."}
    /consumers/<group>/owners/<topic>/<p> ephemeral consumer thread id
    /consumers/<group>/offsets/<topic>/<p>        offset
    /latest_producer_id_block                     {"version":1,"broker":B,"block_start":"S",
                                                   "block_end":"E"}

Everything here is pure: names and encodings, no connection.  Nothing outside
``zk/`` builds a znode path; the ACL znodes' encodings are in ``acls.py``, the users'
in ``users.py``.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from annal.topic_partition import TopicPartition

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = ISR_CHANGE_NOTIFICATION + "/isr_change_"
# a broker whose log dir went offline tells the controller here (KIP-112)
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = LOG_DIR_EVENT_NOTIFICATION + "/log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = CONFIG_CHANGES + "/config_change_"
CONSUMERS = "/consumers"

# Created by the first broker, like Kafka's persistent top-level paths.
PERSISTENT_PATHS = (
    BROKER_IDS,
    BROKER_TOPICS,
    "/admin",
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    CONSUMERS,
    "/cluster",
)

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LayoutError(ValueError):
    """A znode whose content is not what the layout says, or a bad name."""


def check_topic_name(topic: str) -> str:
    """Kafka's rule: 1-249 of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if not LEGAL_TOPIC.match(topic) or topic in (".", ".."):
        raise LayoutError(
            f"illegal topic name {topic!r}: use 1-249 characters of a-z, A-Z, 0-9, '.', '_', '-'"
        )
    return topic


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{check_topic_name(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{check_topic_name(topic)}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{check_topic_name(topic)}"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_id_path(group: str, consumer_id: str) -> str:
    return f"{consumer_ids_path(group)}/{consumer_id}"


def consumer_owner_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition}"


def consumer_offset_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dump(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _load(path: str, raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(f"znode {path} does not hold JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise LayoutError(f"znode {path} holds {type(obj).__name__}, not a JSON object")
    return obj


def _field(path: str, obj: Mapping[str, Any], name: str) -> Any:
    try:
        return obj[name]
    except KeyError:
        raise LayoutError(f"znode {path} has no {name!r} field: {dict(obj)}") from None


# -- /cluster/id ------------------------------------------------------------


def new_cluster_id() -> str:
    """22 characters of url-safe base64: a random UUID, as Kafka makes them."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(raw: bytes) -> str:
    return str(_field(CLUSTER_ID, _load(CLUSTER_ID, raw), "id"))


# -- /brokers/ids/<id> ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of Kafka's protocol: its name (PLAINTEXT, SASL_SSL,
    or a name of listener.security.protocol.map), address and security protocol."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker, as registered in its ephemeral znode: its gRPC endpoint
    (``host``/``port``, the top-level fields) and its listeners of Kafka's
    protocol (``endpoints``, with ``listener_security_protocol_map``).
    ``kafka_host``/``kafka_port`` name the first of them without security
    (PLAINTEXT), which followers and Spark's executors fetch over."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0
    kafka_host: str | None = None
    kafka_port: int = 0
    tls: bool = False  # its gRPC listener is GRPCS:// (TLS)
    kafka_endpoints: tuple[Endpoint, ...] = ()
    # the zxid that created the znode: the broker epoch of KIP-380 (-1: not read
    # from ZooKeeper); not part of the JSON
    epoch: int = -1

    def __post_init__(self) -> None:
        if self.kafka_host is not None and not self.kafka_endpoints:
            named = Endpoint("PLAINTEXT", self.kafka_host, self.kafka_port)
            object.__setattr__(self, "kafka_endpoints", (named,))
        elif self.kafka_host is None:
            plain = next((e for e in self.kafka_endpoints if e.security_protocol == "PLAINTEXT"),
                         None)  # fmt: skip
            if plain is not None:
                object.__setattr__(self, "kafka_host", plain.host)
                object.__setattr__(self, "kafka_port", plain.port)

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_endpoint(self) -> str | None:
        return None if self.kafka_host is None else f"{self.kafka_host}:{self.kafka_port}"

    def encode(self) -> bytes:
        grpc_listener = "GRPCS" if self.tls else "GRPC"
        endpoints = [f"{grpc_listener}://{self.host}:{self.port}"]
        # listener name → security protocol, as Kafka's
        protocols = {grpc_listener: "SSL" if self.tls else "PLAINTEXT"}
        for e in self.kafka_endpoints:
            endpoints.append(f"{e.listener}://{e.host}:{e.port}")
            protocols[e.listener] = e.security_protocol
        return _dump(
            {
                "version": 5,
                "host": self.host,
                "port": self.port,
                "endpoints": endpoints,
                "listener_security_protocol_map": protocols,
                "rack": self.rack,
                "timestamp": str(self.timestamp_ms or _now_ms()),
            }
        )

    @classmethod
    def decode(cls, broker_id: int, raw: bytes) -> BrokerRegistration:
        path = broker_path(broker_id)
        obj = _load(path, raw)
        protocols = obj.get("listener_security_protocol_map") or {}
        kafka: list[Endpoint] = []
        tls = False
        for endpoint in obj.get("endpoints") or []:
            name, sep, address = str(endpoint).partition("://")
            host, colon, port = address.rpartition(":")
            tls = tls or name == "GRPCS"
            if sep and colon and port.isdigit() and name not in ("GRPC", "GRPCS"):
                protocol = str(protocols.get(name, name))
                kafka.append(Endpoint(name, host, int(port), protocol))
        return cls(
            broker_id,
            str(_field(path, obj, "host")),
            int(_field(path, obj, "port")),
            obj.get("rack"),
            int(obj.get("timestamp") or 0),
            tls=tls,
            kafka_endpoints=tuple(kafka),
        )


# -- /brokers/topics/<topic> --------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """Replica assignment of a topic: partition → broker ids, preferred leader first."""

    partitions: Mapping[int, Sequence[int]]
    adding_replicas: Mapping[int, Sequence[int]] = field(default_factory=dict)
    removing_replicas: Mapping[int, Sequence[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def keyed(m: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(m.items())}

        return _dump(
            {
                "version": 2,
                "partitions": keyed(self.partitions),
                "adding_replicas": keyed(self.adding_replicas),
                "removing_replicas": keyed(self.removing_replicas),
            }
        )

    @classmethod
    def decode(cls, topic: str, raw: bytes) -> TopicAssignment:
        path = topic_path(topic)
        obj = _load(path, raw)

        def ints(m: Mapping[str, Sequence[int]]) -> dict[int, tuple[int, ...]]:
            return {int(p): tuple(int(b) for b in r) for p, r in m.items()}

        return cls(
            ints(_field(path, obj, "partitions")),
            ints(obj.get("adding_replicas") or {}),
            ints(obj.get("removing_replicas") or {}),
        )


# -- /brokers/topics/<topic>/partitions/<p>/state --------------------------------


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leader and ISR of a partition, written by the controller."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return _dump(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def decode(cls, topic: str, partition: int, raw: bytes) -> PartitionState:
        path = partition_state_path(topic, partition)
        obj = _load(path, raw)
        return cls(
            int(_field(path, obj, "leader")),
            int(_field(path, obj, "leader_epoch")),
            tuple(int(b) for b in _field(path, obj, "isr")),
            int(_field(path, obj, "controller_epoch")),
        )


# -- /controller, /controller_epoch ------------------------------------------


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(raw: bytes) -> int:
    return int(_field(CONTROLLER, _load(CONTROLLER, raw), "brokerid"))


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(raw: bytes) -> int:
    try:
        return int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise LayoutError(f"znode {CONTROLLER_EPOCH} holds {raw!r}, not a number") from None


# -- partition lists: /admin/preferred_replica_election, isr_change_<seq> ---------


def encode_log_dir_event(broker_id: int) -> bytes:
    """Kafka's log dir event notification: ``{"version":1,"broker":1,"event":1}``."""
    return _dump({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(path: str, raw: bytes) -> int:
    """The broker a log dir event notification names."""
    found = _load(path, raw)
    try:
        return int(_field(path, found, "broker"))
    except (TypeError, ValueError):
        raise LayoutError(f"znode {path} names no broker id") from None


def encode_partition_list(partitions: Sequence[TopicPartition]) -> bytes:
    return _dump(
        {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    )


def decode_partition_list(path: str, raw: bytes) -> list[TopicPartition]:
    listed = _field(path, _load(path, raw), "partitions")
    try:
        return [TopicPartition(str(p["topic"]), int(p["partition"])) for p in listed]
    except (KeyError, TypeError, ValueError):
        raise LayoutError(f"znode {path} lists partitions without topic and partition") from None


# -- /admin/reassign_partitions --------------------------------------------------


def encode_reassignments(targets: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    return _dump(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in sorted(targets.items())
            ],
        }
    )


def decode_reassignments(raw: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    path = REASSIGN_PARTITIONS
    listed = _field(path, _load(path, raw), "partitions")
    try:
        return {
            TopicPartition(str(p["topic"]), int(p["partition"])): tuple(
                int(b) for b in p["replicas"]
            )
            for p in listed
        }
    except (KeyError, TypeError, ValueError):
        raise LayoutError(
            f"znode {path} lists partitions without topic, partition and replicas"
        ) from None


# -- /config/topics/<topic> ---------------------------------------------------


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(config)})


def decode_topic_config(topic: str, raw: bytes) -> dict[str, str]:
    path = topic_config_path(topic)
    return {str(k): str(v) for k, v in _field(path, _load(path, raw), "config").items()}


# -- /config/changes/config_change_<seq> ------------------------------------------


def encode_config_change(entity_path: str) -> bytes:
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(name: str, raw: bytes) -> str:
    path = f"{CONFIG_CHANGES}/{name}"
    return str(_field(path, _load(path, raw), "entity_path"))


def config_change_number(name: str) -> int | None:
    """The sequence number of a ``config_change_<seq>`` child, None for another name."""
    prefix = CONFIG_CHANGE_PREFIX.rsplit("/", 1)[1]
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        return None
    return int(name[len(prefix) :])


# -- /consumers/<group>/ids/<id> ------------------------------------------------


def encode_consumer_registration(subscription: Mapping[str, int], pattern: str = "static") -> bytes:
    if pattern not in ("static", "white_list", "black_list"):
        raise LayoutError(f"unknown subscription pattern {pattern!r}")
    return _dump(
        {
            "version": 1,
            "subscription": dict(subscription),
            "pattern": pattern,
            "timestamp": _now_ms(),
        }
    )


def decode_consumer_registration(path: str, raw: bytes) -> tuple[dict[str, int], str]:
    """(subscription: topic or filter regex → stream count, pattern) of a consumer."""
    obj = _load(path, raw)
    pattern = str(obj.get("pattern", "static"))
    try:
        subscription = {str(k): int(v) for k, v in _field(path, obj, "subscription").items()}
    except (AttributeError, TypeError, ValueError):
        raise LayoutError(f"znode {path} has a malformed subscription") from None
    return subscription, pattern


def consumer_owners_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}"


# -- /latest_producer_id_block ------------------------------------------------
#
#   /latest_producer_id_block   {"version":1,"broker":B,"block_start":"S","block_end":"E"}
#
# The last block of idempotent producer ids handed to a broker (Kafka's
# ProducerIdBlockZNode; Kafka writes the ids as strings, and so do we).

LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``first``..``last`` (inclusive), reserved for ``broker``."""

    broker: int
    first: int
    last: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "broker": self.broker,
                "block_start": str(self.first),
                "block_end": str(self.last),
            }
        ).encode("utf-8")

    @classmethod
    def decode(cls, raw: bytes) -> ProducerIdBlock:
        path = LATEST_PRODUCER_ID_BLOCK
        obj = _load(path, raw)
        try:
            block = cls(
                int(_field(path, obj, "broker")),
                int(_field(path, obj, "block_start")),
                int(_field(path, obj, "block_end")),
            )
        except (TypeError, ValueError):
            raise LayoutError(f"znode {path} has a malformed block: {obj}") from None
        if block.first < 0 or block.last < block.first:
            raise LayoutError(f"znode {path} holds an empty or negative block: {obj}")
        return block
