"""Broker configuration under Kafka's names (``server.properties``).

``BrokerConfig.load(path, overrides)`` reads a Java properties file, applies
``--override``-style pairs on top, and checks every value.  An unknown name
or a bad value is a ``ConfigError`` that names the setting (and suggests the
closest known name), so a typo stops the broker at start-up instead of being
ignored.  ``log_config()`` turns the ``log.*`` defaults into the storage
engine's per-topic ``LogConfig``, as Kafka derives topic defaults.
"""

from __future__ import annotations

import difflib
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from annal.broker import listeners
from annal.broker.inter_broker import inter_broker_listener, replica_connection_security
from annal.broker.listeners import (
    GRPC,
    GRPCS,
    PLAINTEXT,
    KafkaListenerConfig,
    Listener,
    ListenerError,
    TlsSettings,
)
from annal.broker.replication.replica_selector import replica_selector
from annal.client import properties
from annal.client.security import SSL, Security, pem_certificates, pem_private_key, read_pem
from annal.kafkaproto.client_security import ConnectionSecurity
from annal.security.acl import KafkaPrincipal
from annal.security.sasl import SUPPORTED_MECHANISMS
from annal.storage.config import COMPRESSION_TYPES, LogConfig
from annal.zk.znode_acls import check_digest


class ConfigError(ValueError):
    """A broker setting that is unknown, missing or invalid."""


def parse_listener(name: str, text: str) -> Listener:
    try:
        return listeners.parse_listener(name, text)
    except ListenerError as exc:
        raise ConfigError(str(exc)) from None


def parse_listeners(name: str, text: str) -> dict[str, Listener]:
    try:
        return listeners.parse_listeners(name, text)
    except ListenerError as exc:
        raise ConfigError(str(exc)) from None


def _int(minimum: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"{name}={text!r}: expected an integer") from None
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name}={text!r}: must be at least {minimum}")
        return value

    return parse


def _bool(name: str, text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ConfigError(f"{name}={text!r}: expected true or false")
    return text.strip().lower() == "true"


def _str(name: str, text: str) -> str:
    return text.strip()


def _ratio(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r}: expected a number") from None
    if not 0 <= value <= 1:
        raise ConfigError(f"{name}={text!r}: expected a ratio between 0 and 1")
    return value


def _dirs(name: str, text: str) -> tuple[str, ...]:
    dirs = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dirs:
        raise ConfigError(f"{name}={text!r}: expected one or more directories")
    return dirs


def _policy(name: str, text: str) -> str:
    policies = {p.strip() for p in text.split(",") if p.strip()}
    if not policies or not policies <= {"delete", "compact"}:
        raise ConfigError(f"{name}={text!r}: expected delete, compact or compact,delete")
    return text.strip()


def _timestamp_type(name: str, text: str) -> str:
    if text.strip() not in ("CreateTime", "LogAppendTime"):
        raise ConfigError(f"{name}={text!r}: expected CreateTime or LogAppendTime")
    return text.strip()


def _compression_type(name: str, text: str) -> str:
    if text.strip() not in COMPRESSION_TYPES:
        raise ConfigError(f"{name}={text!r}: expected one of {', '.join(COMPRESSION_TYPES)}")
    return text.strip()


def _log_format(name: str, text: str) -> str:
    if text.strip() not in ("text", "json"):
        raise ConfigError(f"{name}={text!r}: expected text or json")
    return text.strip()


def _ssl_client_auth(name: str, text: str) -> str:
    if text.strip() not in ("none", "requested", "required"):
        raise ConfigError(f"{name}={text!r}: expected none, requested or required")
    return text.strip()


def _listener_name(name: str, text: str) -> str:
    found = text.strip().upper()
    if not found.replace("_", "").isalnum():
        raise ConfigError(f"{name}={text!r}: expected a listener's name (e.g. PLAINTEXT or GRPC)")
    return found


def _mechanisms(name: str, text: str) -> tuple[str, ...]:
    found = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unknown = [m for m in found if m not in SUPPORTED_MECHANISMS]
    if unknown:
        raise ConfigError(
            f"{name}={text!r}: {', '.join(unknown)} not supported "
            f"(annal offers {', '.join(SUPPORTED_MECHANISMS)})"
        )
    return found


def _mechanism(name: str, text: str) -> str:
    found = _mechanisms(name, text)
    if len(found) > 1:
        raise ConfigError(f"{name}={text!r}: one mechanism, not a list")
    return found[0] if found else ""


def _zk_digest(name: str, text: str) -> str:
    if not text:
        return ""
    try:
        return check_digest(text.strip())
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _principals(name: str, text: str) -> str:
    for item in (p.strip() for p in text.split(";")):
        if item:
            try:
                KafkaPrincipal.parse(item)
            except ValueError as exc:
                raise ConfigError(f"{name}={text!r}: {exc}") from None
    return text.strip()


AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")


def _authorizer(name: str, text: str) -> str:
    found = text.strip()
    if found and found not in AUTHORIZERS:
        raise ConfigError(
            f"{name}={text!r}: annal's authorizer is Kafka's ACL authorizer; name it "
            f"{AUTHORIZERS[0]} (or {AUTHORIZERS[1]}), or leave it empty for none"
        )
    return found


def _replica_selector(name: str, text: str) -> str:
    try:
        replica_selector(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return text.strip()


def _pem_type(name: str, text: str) -> str:
    if text.strip().upper() != "PEM":
        raise ConfigError(f"{name}={text!r}: annal reads PEM files only (set it to PEM)")
    return "PEM"


HOUR_MS = 3600 * 1000

# name: (parser, default).  None as default means "required" or "derived".
SETTINGS: dict[str, tuple[Callable[[str, str], Any], str | None]] = {
    "broker.id": (_int(0), None),
    "zookeeper.connect": (_str, None),
    "zookeeper.session.timeout.ms": (_int(1000), "18000"),
    "zookeeper.connection.timeout.ms": (_int(100), "18000"),
    # znodes created with ACLs, the broker authenticated by ZooKeeper's digest
    # scheme as user:password (zk/znode_acls.py)
    "zookeeper.set.acl": (_bool, "false"),
    "zookeeper.auth.digest": (_zk_digest, ""),
    "listeners": (_str, "GRPC://:9092"),
    "advertised.listeners": (_str, None),
    # listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (broker/listeners.py)
    "listener.security.protocol.map": (_str, listeners.DEFAULT_PROTOCOL_MAP),
    "sasl.enabled.mechanisms": (_mechanisms, "SCRAM-SHA-256,SCRAM-SHA-512"),
    # a SASL session's lifetime; clients re-authenticate before it ends (KIP-368); 0 never
    "connections.max.reauth.ms": (_int(0), "0"),
    # authorization (docs/security.md): Kafka's ACL authorizer, or none
    "authorizer.class.name": (_authorizer, ""),
    "super.users": (_principals, ""),
    "allow.everyone.if.no.acl.found": (_bool, "false"),
    "broker.rack": (_str, ""),
    # how a leader picks the replica a consumer reads from (KIP-392): empty for the
    # leader only; Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector
    # for a replica in the consumer's client.rack (broker/replication/replica_selector.py)
    "replica.selector.class": (_replica_selector, ""),
    "log.dirs": (_dirs, None),
    "log.dir": (_dirs, "/tmp/annal-logs"),
    "num.partitions": (_int(1), "1"),
    "default.replication.factor": (_int(1), "1"),
    "auto.create.topics.enable": (_bool, "true"),
    "delete.topic.enable": (_bool, "true"),
    "message.max.bytes": (_int(0), "1048588"),
    "log.segment.bytes": (_int(14), "1073741824"),
    "log.roll.ms": (_int(1), None),
    "log.roll.hours": (_int(1), "168"),
    "log.index.size.max.bytes": (_int(12), "10485760"),
    "log.index.interval.bytes": (_int(0), "4096"),
    "log.retention.ms": (_int(-1), None),
    "log.retention.minutes": (_int(-1), None),
    "log.retention.hours": (_int(-1), "168"),
    "log.retention.bytes": (_int(-1), "-1"),
    "log.retention.check.interval.ms": (_int(1), "300000"),
    "log.segment.delete.delay.ms": (_int(0), "60000"),
    "log.flush.interval.messages": (_int(1), str(2**63 - 1)),
    "log.flush.interval.ms": (_int(0), None),
    "log.flush.scheduler.interval.ms": (_int(1), "1000"),
    "log.cleanup.policy": (_policy, "delete"),
    # threads per log dir that load (and after a crash recover) the logs at start-up
    "num.recovery.threads.per.data.dir": (_int(1), "1"),
    "log.cleaner.enable": (_bool, "true"),
    "log.cleaner.backoff.ms": (_int(1), "15000"),
    "log.cleaner.min.cleanable.ratio": (_ratio, "0.5"),
    "log.cleaner.min.compaction.lag.ms": (_int(0), "0"),
    "log.cleaner.delete.retention.ms": (_int(0), str(24 * HOUR_MS)),
    "log.message.timestamp.type": (_timestamp_type, "CreateTime"),
    # the codec stored batches are kept in; "producer": the producer's own
    "compression.type": (_compression_type, "producer"),
    "log.message.timestamp.difference.max.ms": (_int(0), str(2**63 - 1)),
    "min.insync.replicas": (_int(1), "1"),
    "unclean.leader.election.enable": (_bool, "false"),
    "auto.leader.rebalance.enable": (_bool, "true"),
    "leader.imbalance.check.interval.seconds": (_int(1), "300"),
    "leader.imbalance.per.broker.percentage": (_int(0), "10"),
    "replica.lag.time.max.ms": (_int(1), "30000"),
    "replica.fetch.max.bytes": (_int(1), "1048576"),
    "replica.fetch.wait.max.ms": (_int(0), "500"),
    "replica.fetch.min.bytes": (_int(1), "1"),
    "num.replica.fetchers": (_int(1), "1"),
    "replica.fetch.backoff.ms": (_int(0), "1000"),
    "replica.fetch.response.max.bytes": (_int(1), "10485760"),
    # Kafka's fetch sessions (KIP-227, broker/requests/fetch_sessions.py): how many the broker
    # keeps, and how long a session is safe from eviction by a newer one
    "max.incremental.fetch.session.cache.slots": (_int(0), "1000"),
    "min.incremental.fetch.session.eviction.ms": (_int(0), "120000"),
    # which listener followers fetch over: a PLAINTEXT Kafka listener's name (the
    # leaders' listener of that name, gRPC for a leader without one) or the gRPC
    # listener's; by default PLAINTEXT unless gRPC is served over TLS (then GRPCS)
    "inter.broker.listener.name": (_listener_name, None),
    # followers on a SASL listener: the mechanism ("" the listener's first) and the
    # JAAS line (user, password) they log in with (broker/inter_broker.py)
    "sasl.mechanism.inter.broker.protocol": (_mechanism, ""),
    "sasl.jaas.config": (_str, ""),
    "ssl.endpoint.identification.algorithm": (_str, "https"),
    "controlled.shutdown.enable": (_bool, "true"),
    "controlled.shutdown.max.retries": (_int(0), "3"),
    "controlled.shutdown.retry.backoff.ms": (_int(0), "5000"),
    "offsets.topic.num.partitions": (_int(1), "50"),
    "offsets.topic.replication.factor": (_int(1), "3"),
    "offsets.retention.minutes": (_int(1), "10080"),
    "group.initial.rebalance.delay.ms": (_int(0), "3000"),
    # the transaction coordinator (broker/transactions/, docs/transactions.md)
    "transaction.state.log.num.partitions": (_int(1), "50"),
    "transaction.state.log.replication.factor": (_int(1), "3"),
    "transaction.state.log.min.isr": (_int(1), "2"),
    "transaction.state.log.segment.bytes": (_int(1), "104857600"),
    "transaction.max.timeout.ms": (_int(1), "900000"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_int(1), "10000"),
    "transactional.id.expiration.ms": (_int(1), "604800000"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (_int(1), "3600000"),
    # idempotent producers' state in each partition (storage/producer_state.py)
    "producer.id.expiration.ms": (_int(1), "86400000"),
    "producer.id.expiration.check.interval.ms": (_int(1), "600000"),
    # the request layer (docs/architecture.md): Kafka's names; queued.max.request.bytes
    # is bounded by default here, where Kafka's default (-1) is not
    "queued.max.requests": (_int(1), "500"),
    "queued.max.request.bytes": (_int(-1), str(256 * 1024 * 1024)),
    "socket.request.max.bytes": (_int(1024), str(100 * 1024 * 1024)),
    # Prometheus metrics over HTTP (broker/metrics.py): -1 off, 0 any free port
    "metrics.port": (_int(-1), "-1"),
    "metrics.host": (_str, ""),
    # gRPC over TLS, for a GRPCS:// listener (Kafka's names; PEM files only)
    "ssl.keystore.location": (_str, ""),
    "ssl.keystore.type": (_pem_type, "PEM"),
    "ssl.truststore.location": (_str, ""),
    "ssl.truststore.type": (_pem_type, "PEM"),
    "ssl.client.auth": (_ssl_client_auth, "none"),
    # the broker's own log lines (annal/logsetup.py): one line of text, or a JSON object
    "log.format": (_log_format, "text"),
}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Checked broker settings; build with ``load`` or ``from_properties``."""

    broker_id: int
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    listener: Listener  # the gRPC one
    advertised_listener: Listener
    kafka_listener: Listener | None  # the first Kafka listener with no security, if any
    tls: TlsSettings | None  # with a GRPCS:// listener
    kafka_advertised_listener: Listener | None
    kafka_listeners: tuple[KafkaListenerConfig, ...]  # every listener of Kafka's protocol
    inter_broker_listener_name: str  # what followers fetch over
    authorizer: str  # authorizer.class.name; "" for none
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool
    rack: str | None
    log_dirs: tuple[str, ...]
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    num_replica_fetchers: int
    replica_fetch_backoff_ms: int
    replica_fetch_response_max_bytes: int
    replica_fetch_over_kafka: bool  # inter.broker.listener.name names a Kafka listener
    # how followers connect to that listener (broker/inter_broker.py); None: over gRPC
    replica_kafka_security: ConnectionSecurity | None
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_retention_minutes: int
    group_initial_rebalance_delay_ms: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_max_timeout_ms: int
    transaction_abort_interval_ms: int
    transactional_id_expiration_ms: int
    transaction_expiration_interval_ms: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_cleaner_enable: bool
    log_cleaner_backoff_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    queued_max_requests: int
    queued_max_request_bytes: int
    socket_request_max_bytes: int
    metrics_port: int
    metrics_host: str
    log_format: str
    raw: Mapping[str, str]
    ignored: tuple[str, ...] = ()  # Kafka settings given that annal does not use

    @classmethod
    def load(
        cls, path: Path | None = None, overrides: Mapping[str, str] | None = None
    ) -> BrokerConfig:
        """Read ``path`` (a properties file), then apply ``overrides``."""
        props: dict[str, str] = {}
        if path is not None:
            try:
                props.update(parse_properties(Path(path).read_text("utf-8"), str(path)))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        props.update(overrides or {})
        return cls.from_properties(props)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        unknown = [
            n
            for n in props
            if n not in SETTINGS
            and n not in KAFKA_SETTINGS_UNUSED
            and not n.startswith(listeners.LISTENER_PREFIX)
        ]
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, SETTINGS, n=1)
                hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(f"unknown broker config {', '.join(hints)}")
        values: dict[str, Any] = {}
        for name, (parse, default) in SETTINGS.items():
            if name in props:
                values[name] = parse(name, str(props[name]))
            elif default is not None:
                values[name] = parse(name, default)
        for required in ("broker.id", "zookeeper.connect"):
            if required not in values or values[required] == "":
                raise ConfigError(f"{required} is required")
        bound = parse_listeners("listeners", values["listeners"])
        if GRPC not in bound:
            raise ConfigError(
                f"listeners={values['listeners']!r}: a GRPC:// or GRPCS:// listener is required "
                "(brokers and annal's clients speak gRPC); add one, e.g. GRPC://:9092,PLAINTEXT://:9093"
            )
        advertised_listeners = {
            **bound,
            **parse_listeners("advertised.listeners", values.get("advertised.listeners", "")),
        }
        extra = sorted(set(advertised_listeners) - set(bound))
        if extra:
            raise ConfigError(
                f"advertised.listeners names {', '.join(extra)}, which listeners "
                f"({values['listeners']!r}) does not"
            )
        for protocol, found in list(advertised_listeners.items()):
            if found.host in ("", "0.0.0.0"):
                advertised_listeners[protocol] = Listener(
                    socket.gethostname(), found.port, protocol
                )
        listener, advertised = bound[GRPC], advertised_listeners[GRPC]
        try:
            kafka_listeners = _kafka_listeners(values, props, bound, advertised_listeners)
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        plain = next((k for k in kafka_listeners if k.security_protocol == PLAINTEXT), None)
        try:
            inter_broker = inter_broker_listener(
                values.get("inter.broker.listener.name"), listener, kafka_listeners
            )
            replica_security = replica_connection_security(
                inter_broker, kafka_listeners, values, props
            )
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        config = cls(
            broker_id=values["broker.id"],
            zookeeper_connect=values["zookeeper.connect"],
            zookeeper_session_timeout_ms=values["zookeeper.session.timeout.ms"],
            zookeeper_connection_timeout_ms=values["zookeeper.connection.timeout.ms"],
            listener=listener,
            advertised_listener=advertised,
            kafka_listener=None if plain is None else plain.bind,
            tls=_tls(values, listener),
            kafka_advertised_listener=None if plain is None else plain.advertised,
            kafka_listeners=kafka_listeners,
            inter_broker_listener_name=inter_broker,
            authorizer=values["authorizer.class.name"],
            super_users=frozenset(
                u.strip() for u in values["super.users"].split(";") if u.strip()
            ),
            allow_everyone_if_no_acl_found=values["allow.everyone.if.no.acl.found"],
            rack=values["broker.rack"] or None,
            log_dirs=values.get("log.dirs") or values["log.dir"],
            num_partitions=values["num.partitions"],
            default_replication_factor=values["default.replication.factor"],
            auto_create_topics_enable=values["auto.create.topics.enable"],
            delete_topic_enable=values["delete.topic.enable"],
            min_insync_replicas=values["min.insync.replicas"],
            unclean_leader_election_enable=values["unclean.leader.election.enable"],
            auto_leader_rebalance_enable=values["auto.leader.rebalance.enable"],
            leader_imbalance_check_interval_seconds=values[
                "leader.imbalance.check.interval.seconds"
            ],
            leader_imbalance_per_broker_percentage=values["leader.imbalance.per.broker.percentage"],
            replica_lag_time_max_ms=values["replica.lag.time.max.ms"],
            replica_fetch_max_bytes=values["replica.fetch.max.bytes"],
            replica_fetch_wait_max_ms=values["replica.fetch.wait.max.ms"],
            replica_fetch_min_bytes=values["replica.fetch.min.bytes"],
            num_replica_fetchers=values["num.replica.fetchers"],
            replica_fetch_backoff_ms=values["replica.fetch.backoff.ms"],
            replica_fetch_response_max_bytes=values["replica.fetch.response.max.bytes"],
            replica_fetch_over_kafka=replica_security is not None,
            replica_kafka_security=replica_security,
            controlled_shutdown_enable=values["controlled.shutdown.enable"],
            controlled_shutdown_max_retries=values["controlled.shutdown.max.retries"],
            controlled_shutdown_retry_backoff_ms=values["controlled.shutdown.retry.backoff.ms"],
            offsets_topic_num_partitions=values["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=values["offsets.topic.replication.factor"],
            offsets_retention_minutes=values["offsets.retention.minutes"],
            group_initial_rebalance_delay_ms=values["group.initial.rebalance.delay.ms"],
            transaction_state_log_num_partitions=values["transaction.state.log.num.partitions"],
            transaction_state_log_replication_factor=values[
                "transaction.state.log.replication.factor"
            ],
            transaction_state_log_min_isr=values["transaction.state.log.min.isr"],
            transaction_state_log_segment_bytes=values["transaction.state.log.segment.bytes"],
            transaction_max_timeout_ms=values["transaction.max.timeout.ms"],
            transaction_abort_interval_ms=values[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"
            ],
            transactional_id_expiration_ms=values["transactional.id.expiration.ms"],
            transaction_expiration_interval_ms=values[
                "transaction.remove.expired.transaction.cleanup.interval.ms"
            ],
            log_retention_check_interval_ms=values["log.retention.check.interval.ms"],
            log_flush_scheduler_interval_ms=values["log.flush.scheduler.interval.ms"],
            log_cleaner_enable=values["log.cleaner.enable"],
            log_cleaner_backoff_ms=values["log.cleaner.backoff.ms"],
            producer_id_expiration_ms=values["producer.id.expiration.ms"],
            producer_id_expiration_check_interval_ms=values[
                "producer.id.expiration.check.interval.ms"
            ],
            queued_max_requests=values["queued.max.requests"],
            queued_max_request_bytes=values["queued.max.request.bytes"],
            socket_request_max_bytes=values["socket.request.max.bytes"],
            metrics_port=values["metrics.port"],
            metrics_host=values["metrics.host"],
            log_format=values["log.format"],
            raw={k: str(v) for k, v in props.items()},
            ignored=tuple(sorted(n for n in props if n in KAFKA_SETTINGS_UNUSED)),
        )
        config.log_config()  # the log.* settings must form a valid topic config too
        digest, set_acl = config.zookeeper_auth
        if set_acl and digest is None:
            raise ConfigError(
                "zookeeper.set.acl=true needs zookeeper.auth.digest=user:password: the "
                "identity the brokers share, which the ACLs of their znodes name"
            )
        return config

    @property
    def zookeeper_auth(self) -> tuple[str | None, bool]:
        """(the digest credential, or None; whether znodes get ACLs): ``zookeeper.auth.digest``
        and ``zookeeper.set.acl``."""
        return self._value("zookeeper.auth.digest") or None, self._value("zookeeper.set.acl")

    @property
    def connections_max_reauth_ms(self) -> int:
        """A SASL session's lifetime on the Kafka listeners (KIP-368); 0: none."""
        return int(self._value("connections.max.reauth.ms"))

    @property
    def max_incremental_fetch_session_cache_slots(self) -> int:
        """How many fetch sessions (KIP-227) the broker keeps; 0: none."""
        return int(self._value("max.incremental.fetch.session.cache.slots"))

    @property
    def min_incremental_fetch_session_eviction_ms(self) -> int:
        """How long a fetch session is safe from eviction by a newer one."""
        return int(self._value("min.incremental.fetch.session.eviction.ms"))

    @property
    def replica_selector_class(self) -> str:
        """``replica.selector.class``: the selector a leader asks where consumers
        should read (KIP-392); "" for the leader only."""
        return str(self._value("replica.selector.class"))

    @property
    def num_recovery_threads_per_data_dir(self) -> int:
        """Threads per log dir that load the logs at start-up (storage/loading.py)."""
        return int(self._value("num.recovery.threads.per.data.dir"))

    def _value(self, name: str) -> Any:
        parse, default = SETTINGS[name]
        if name in self.raw:
            return parse(name, self.raw[name])
        return None if default is None else parse(name, default)

    def inter_broker_security(self) -> Security:
        """How this broker reaches the others: as it is reached itself (TLS with
        its own certificate when its listener is GRPCS://, plaintext otherwise)."""
        if self.tls is None:
            return Security()
        return Security(SSL, self.tls.truststore, self.tls.keystore, self.tls.keystore)

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """The GRPCS:// listener's credentials, the files read now; None for GRPC://."""
        tls = self.tls
        if tls is None:
            return None
        keystore = read_pem(tls.keystore, "ssl.keystore.location")
        trusted = read_pem(tls.truststore, "ssl.truststore.location") if tls.truststore else None
        return grpc.ssl_server_credentials(
            [
                (
                    pem_private_key(keystore, tls.keystore),
                    pem_certificates(keystore, tls.keystore),
                )
            ],
            root_certificates=trusted,
            require_client_auth=tls.client_auth == "required",
        )

    def log_config(self) -> LogConfig:
        """Topic defaults derived from the ``log.*`` settings, as Kafka does."""
        retention_ms = self._value("log.retention.ms")
        if retention_ms is None:
            minutes = self._value("log.retention.minutes")
            retention_ms = (
                minutes * 60_000
                if minutes is not None
                else self._value("log.retention.hours") * HOUR_MS
            )
        roll_ms = self._value("log.roll.ms")
        if roll_ms is None:
            roll_ms = self._value("log.roll.hours") * HOUR_MS
        flush_ms = self._value("log.flush.interval.ms")
        props = {
            "segment.bytes": self._value("log.segment.bytes"),
            "segment.ms": roll_ms,
            "segment.index.bytes": self._value("log.index.size.max.bytes"),
            "index.interval.bytes": self._value("log.index.interval.bytes"),
            "max.message.bytes": self._value("message.max.bytes"),
            "retention.ms": retention_ms,
            "retention.bytes": self._value("log.retention.bytes"),
            "file.delete.delay.ms": self._value("log.segment.delete.delay.ms"),
            "cleanup.policy": self._value("log.cleanup.policy"),
            "min.cleanable.dirty.ratio": self._value("log.cleaner.min.cleanable.ratio"),
            "min.compaction.lag.ms": self._value("log.cleaner.min.compaction.lag.ms"),
            "delete.retention.ms": self._value("log.cleaner.delete.retention.ms"),
            "flush.messages": self._value("log.flush.interval.messages"),
            "flush.ms": flush_ms if flush_ms is not None else 2**63 - 1,
            "message.timestamp.type": self._value("log.message.timestamp.type"),
            "message.timestamp.difference.max.ms": self._value(
                "log.message.timestamp.difference.max.ms"
            ),
            "min.insync.replicas": self.min_insync_replicas,
            "unclean.leader.election.enable": str(self.unclean_leader_election_enable).lower(),
            "compression.type": self._value("compression.type"),
        }
        try:
            return LogConfig.from_properties({k: str(v) for k, v in props.items()})
        except ValueError as exc:
            raise ConfigError(f"invalid log settings: {exc}") from None


# Kafka broker settings (of the 2.x ZooKeeper-mode broker) that annal has no use
# for: threads and buffers of Kafka's own network layer, the transaction log's load buffer,
# listeners' security mapping, and the like.  A stock server.properties names
# several; they are accepted with one warning rather than refused as unknown.
_KAFKA_ONLY = (
    "background.threads", "compression.type", "connections.max.idle.ms",
    "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
    "controller.socket.timeout.ms", "delete.topic.enable", "fetch.max.bytes",
    "group.max.session.timeout.ms", "group.min.session.timeout.ms",
    "inter.broker.listener.name", "inter.broker.protocol.version",
    "listener.security.protocol.map", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.threads",
    "log.message.format.version", "max.connections", "max.connections.per.ip",
    "num.io.threads", "num.network.threads", "num.recovery.threads.per.data.dir",
    "num.replica.alter.log.dirs.threads", "replica.socket.receive.buffer.bytes",
    "replica.socket.timeout.ms", "request.timeout.ms", "security.inter.broker.protocol",
    "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
    "transaction.state.log.load.buffer.size",
    *(  # Kerberos (SASL/GSSAPI) and SASL login refresh, which annal does not offer
        "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
        "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
        "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    ),
)  # fmt: skip
KAFKA_SETTINGS_UNUSED = frozenset(name for name in _KAFKA_ONLY if name not in SETTINGS)
# Those of them Kafka changes at run time (KIP-226): a dynamic change of one is kept
# in ZooKeeper and shown, and changes nothing here, as in server.properties.
KAFKA_DYNAMIC_UNUSED = frozenset(
    name for name in KAFKA_SETTINGS_UNUSED if name.startswith(("sasl.kerberos.", "sasl.login."))
)


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java's properties format (``client/properties.py``); a malformed file is a
    ConfigError naming it."""
    try:
        return properties.parse_properties(text, source)
    except properties.PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def _tls(values: Mapping[str, Any], listener: Listener) -> TlsSettings | None:
    if listener.protocol != GRPCS:
        return None
    try:
        return listeners.tls_settings(
            f"listeners has {listener}",
            values["ssl.keystore.location"],
            values["ssl.truststore.location"],
            values["ssl.client.auth"],
        )
    except ListenerError as exc:
        raise ConfigError(str(exc).replace("a TLS listener", "a GRPCS:// listener")) from None


def _kafka_listeners(
    values: Mapping[str, Any],
    raw: Mapping[str, str],
    bound: Mapping[str, Listener],
    advertised: Mapping[str, Listener],
) -> tuple[KafkaListenerConfig, ...]:
    """The listeners of Kafka's protocol, each with its security (broker/listeners.py)."""
    protocols = listeners.parse_protocol_map(
        "listener.security.protocol.map", values["listener.security.protocol.map"]
    )
    listeners.check_per_listener_keys(raw, set(bound))
    found = []
    for name, bind in bound.items():
        if name == GRPC:
            continue
        protocol = protocols.get(name)
        if protocol is None:
            raise ListenerError(
                f"listeners names {name}://, which listener.security.protocol.map "
                f"({values['listener.security.protocol.map']!r}) does not map to a security "
                "protocol"
            )

        def setting(key: str, parse: Any, name: str = name) -> Any:
            return listeners.listener_setting(values, raw, name, key, parse)

        tls = None
        if protocol in (listeners.SSL, listeners.SASL_SSL):
            tls = listeners.tls_settings(
                f"listeners has {bind}",
                setting("ssl.keystore.location", _str),
                setting("ssl.truststore.location", _str),
                setting("ssl.client.auth", _ssl_client_auth),
            )
        mechanisms: tuple[str, ...] = ()
        if protocol in (listeners.SASL_PLAINTEXT, listeners.SASL_SSL):
            mechanisms = setting("sasl.enabled.mechanisms", _mechanisms)
            if not mechanisms:
                raise ListenerError(f"listeners has {bind}: sasl.enabled.mechanisms is empty")
        found.append(KafkaListenerConfig(name, bind, advertised[name], protocol, tls, mechanisms))
    return tuple(found)
