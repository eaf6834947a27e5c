"""The broker process: start-up, ZooKeeper registration, the gRPC server, shutdown.

Start-up, in order (docs/architecture.md):

1. connect to ZooKeeper (creating the chroot and the persistent paths);
2. get or create ``/cluster/id``;
3. open the log dirs: ``meta.properties`` must name this broker and cluster
   (written on first start), then recover every log;
4. register the ephemeral ``/brokers/ids/<id>`` (a live holder of the same id
   is a start-up error naming it);
5. serve gRPC on the listener from the broker's event loop
   (``network.py``) and, when configured, Kafka's protocol on the
   ``PLAINTEXT://`` listener (``annal.kafkaproto``) from the same loop, and report
   SERVING on ``grpc.health.v1``.

A lost ZooKeeper session removes the registration; the session thread
re-registers as soon as a new session is connected.  The ZooKeeper client
fans session changes out to their owners: the session thread (registration),
the controller, and the ISR-change writer (no ISR write while suspended).  ``shutdown`` (SIGTERM)
reverses the steps: NOT_SERVING, stop the gRPC server, close the session (so
the registration goes at once), flush and checkpoint every log and leave the
clean-shutdown marker.

Thread safety: ``BrokerServer`` methods are called from the main thread; the
session thread only re-registers.  Each loop has ``initiate_shutdown`` /
``await_shutdown`` semantics through ``_stopping``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import grpc
import tenacity
from annal.broker.admin_manager import AdminManager
from annal.broker.config import BrokerConfig
from annal.broker.config_changes import ConfigChangeListener
from annal.broker.control import ControlService, StaleBrokerEpoch
from annal.broker.data_api import DataApi
from annal.broker.dynamic_config import DynamicBrokerConfig, apply_log_defaults
from annal.broker.groups.coordinator import OFFSETS_TOPIC, OffsetsCoordinator
from annal.broker.groups.group_api import GroupApi
from annal.broker.groups.group_membership import GroupMembership
from annal.broker.kafka.admin import AdminApis
from annal.broker.kafka.apis import KafkaApis
from annal.broker.kafka.authentication import listener_security, register_sasl_apis
from annal.broker.kafka.cluster import ClusterApis
from annal.broker.kafka.data import DataApis
from annal.broker.kafka.groups import GroupApis
from annal.broker.kafka.listener import KafkaListener
from annal.broker.kafka.producers import ProducersApis
from annal.broker.kafka.security_admin import SecurityAdminApis
from annal.broker.kafka.transactions import TransactionApis
from annal.broker.kafka.txn_markers import TxnMarkerApis
from annal.broker.listeners import PLAINTEXT, KafkaListenerConfig
from annal.broker.metadata_cache import MetadataCache
from annal.broker.metrics import BrokerMetrics, BrokerState
from annal.broker.network import NetworkLayer
from annal.broker.producer_ids import InitProducerIdApi, ProducerIdManager
from annal.broker.producers_api import ProducersApi
from annal.broker.replication.isr_changes import IsrChangeWriter
from annal.broker.replication.leadership_fence import LeadershipFence
from annal.broker.replication.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from annal.broker.replication.replica_manager import ReplicaManager
from annal.broker.replication.replica_selector import replica_selector
from annal.broker.requests.delayed import Purgatories
from annal.broker.requests.fetch_sessions import FetchSessionCache
from annal.broker.requests.grpc_auth import PasswordCheck, PasswordGuard
from annal.broker.requests.rpc_guard import RequestLimits
from annal.broker.requests.service import AnnalService
from annal.broker.security.authorization import RequestAuthorizer
from annal.broker.security.security_admin import SecurityAdmin
from annal.broker.security.security_store import SecurityStore
from annal.broker.transactions.api import TransactionApi, settings_of
from annal.broker.transactions.coordinator import TransactionCoordinator, spawn_on
from annal.broker.transactions.log_schema import TRANSACTION_STATE_TOPIC
from annal.broker.transactions.markers import MarkerWriter
from annal.client.retry import Backoff, retrying
from annal.client.security import SecurityConfigError
from annal.controller.channel import ControllerChannel
from annal.controller.controller import Controller
from annal.controller.events import RebalanceSettings
from annal.security.scram import ScramCredential
from annal.storage.control import AppendOrigin
from annal.storage.errors import LogDirError
from annal.storage.files import TopicPartition
from annal.storage.log import Log
from annal.storage.manager import LogManager, LogManagerConfig
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.batched import BatchedZk
from annal.zk.client import BrokerIdTakenError, SessionEvent, ZkClient, ZkError
from annal.zk.layout import BrokerRegistration, Endpoint, PartitionState
from annal.zk.producer_ids import reserve_producer_id_block

from annal import errors
from annal.errors import ErrorCode

logger = logging.getLogger(__name__)

SERVICE_NAME = "annal.v1.Annal"


class BrokerStartupError(Exception):
    """The broker cannot start; the message says why and what to do."""


class BrokerServer:
    """One broker; ``start`` then ``shutdown`` (or use it as a context manager)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        digest, set_acl = config.zookeeper_auth
        self.zk = ZkClient(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            timeout_s=config.zookeeper_connection_timeout_ms / 1000,
            digest=digest,
            set_acl=set_acl,
        )
        self.cluster_id: str | None = None
        self.logs: LogManager | None = None
        self.port: int | None = None
        self.kafka_port: int | None = None  # the first PLAINTEXT Kafka listener's
        self.kafka_ports: dict[str, int] = {}  # every Kafka listener's, by name
        self.kafka_listeners: dict[str, KafkaListener] = {}
        self.broker_epoch = -1  # the zxid of this broker's registration (KIP-380)
        self.network: NetworkLayer | None = None
        self.replicas: ReplicaManager
        self.transactions: TransactionCoordinator  # broker/transactions/
        self._txn_timers: concurrent.futures.Future[None] | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self._config_changes: ConfigChangeListener | None = None
        # dynamic broker configs (KIP-226): server.properties under ZooKeeper's levels
        self.dynamic = DynamicBrokerConfig(config)
        self.security = SecurityStore(self.zk, follow_users=False)  # see _config_changes
        self.authorizer = RequestAuthorizer.from_settings(
            config.authorizer,
            self.security.acls,
            config.super_users,
            config.allow_everyone_if_no_acl_found,
        )
        self.controller: Controller | None = None
        self.metadata = MetadataCache()
        self._channel: ControllerChannel | None = None
        self._stopping = threading.Event()
        # set when the broker can serve nothing more (every log dir offline): its
        # process shuts it down cleanly and exits 1 (annal/brokercmd.py)
        self.must_stop = threading.Event()
        self._shutdown_begun = False
        self._session_thread: threading.Thread | None = None
        # session changes for the session thread; None wakes it to stop
        self._session_events: queue.Queue[SessionEvent | None] = queue.Queue()
        self.started = threading.Event()
        self.metrics = BrokerMetrics()
        self.metrics_port: int | None = None
        self._session_state = "CONNECTED"

    @property
    def registration(self) -> BrokerRegistration:
        listener = self.config.advertised_listener
        port = listener.port or (self.port or 0)
        endpoints = tuple(
            Endpoint(
                k.name,
                k.advertised.host,
                k.advertised.port or self.kafka_ports.get(k.name, 0),
                k.security_protocol,
            )
            for k in self.config.kafka_listeners
        )
        return BrokerRegistration(
            self.config.broker_id,
            listener.host,
            port,
            self.config.rack,
            tls=self.config.tls is not None,
            kafka_endpoints=endpoints,
        )

    def start(self) -> None:
        config = self.config
        try:
            self.zk.start()
            self.zk.ensure_persistent_paths()
            self.cluster_id = self.zk.get_or_create_cluster_id()
            self.security.start()
            self.dynamic.load(self.zk.get_broker_config_versioned)
        except ZkError as exc:
            raise BrokerStartupError(str(exc)) from exc
        logs = LogManager(
            list(config.log_dirs),
            self.dynamic.current().log_config(),  # with the dynamic topic defaults
            broker_id=config.broker_id,
            cluster_id=self.cluster_id,
            settings=LogManagerConfig(
                retention_check_interval_ms=config.log_retention_check_interval_ms,
                flush_scheduler_interval_ms=config.log_flush_scheduler_interval_ms,
                cleaner_enable=config.log_cleaner_enable,
                cleaner_backoff_ms=config.log_cleaner_backoff_ms,
                producer_id_expiration_ms=config.producer_id_expiration_ms,
                producer_id_expiration_check_interval_ms=(
                    config.producer_id_expiration_check_interval_ms
                ),
                recovery_threads_per_data_dir=config.num_recovery_threads_per_data_dir,
            ),
        )
        try:
            logs.startup()
        except LogDirError as exc:
            self.zk.stop()
            raise BrokerStartupError(str(exc)) from exc
        self.logs = logs
        logs.failures.add_listener(self._log_dir_failed)
        limits = RequestLimits(config.queued_max_requests, config.queued_max_request_bytes)
        network = NetworkLayer(limits, config.socket_request_max_bytes, self.metrics)
        network.start()
        self.network = network
        purgatories = Purgatories(network.loop, network.thread_id, limits)
        self.purgatories = purgatories
        self.metadata.on_update = purgatories.metadata_changed
        self.fetchers = ReplicaFetcherManager(
            config.broker_id,
            FetcherSettings(
                max_bytes=config.replica_fetch_max_bytes,
                response_max_bytes=config.replica_fetch_response_max_bytes,
                wait_max_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes,
                backoff_ms=config.replica_fetch_backoff_ms,
                fetchers_per_leader=config.num_replica_fetchers,
                security=config.inter_broker_security(),
                kafka_security=config.replica_kafka_security,
            ),
        )
        self.coordinator = OffsetsCoordinator(
            config.offsets_topic_num_partitions,
            self._append_offsets,
            lambda appended, timeout_ms: data.await_replication(appended, timeout_ms),
        )
        batched = BatchedZk(self.zk)
        self._isr_writer = IsrChangeWriter(
            self._write_partition_state,
            self._notify_isr_change,
            lambda change, version: self.replicas.on_isr_written(change, version),
            write_states=batched.write_partition_states,
        )
        self.fence = LeadershipFence(
            config.broker_id, lambda fenced: self.replicas.wake_led()
        )  # broker/replication/leadership_fence.py
        self.replicas = ReplicaManager(
            config.broker_id,
            logs,
            self.zk.get_topic_config,
            self._partition_exists,
            self.fetchers,
            self._isr_writer,
            config.replica_lag_time_max_ms,
            self._leadership_changed,
            purgatories.touch,
            topic_configs=batched.topic_configs,
            fence=self.fence,
            # KIP-392: where consumers read from (checked by BrokerConfig already)
            replica_selector=replica_selector(config.replica_selector_class),
            metadata=self.metadata.snapshot,
        )
        # dynamic broker configs changed from now on reach the logs (and the controller)
        self.dynamic.add_listener(self._dynamic_config_changed)
        self.zk.add_session_listener(self._isr_writer.session_changed)
        self._isr_writer.start()
        data = DataApi(
            self.replicas, purgatories, network.run_storage, self.metrics, self.authorizer,
            fetch_sessions=FetchSessionCache(
                config.max_incremental_fetch_session_cache_slots,
                config.min_incremental_fetch_session_eviction_ms,
            ),
        )  # fmt: skip
        admin = AdminManager(
            config,
            self.zk,
            self.metadata,
            purgatories,
            network.run_admin,
            lambda: self.cluster_id,
            self.authorizer,
            self.fence,
            dynamic=self.dynamic,
        )
        producer_ids = ProducerIdManager(
            lambda: reserve_producer_id_block(self.zk, config.broker_id)
        )
        membership = GroupMembership(self.coordinator, config.group_initial_rebalance_delay_ms)
        groups = GroupApi(self.coordinator, self.metadata, admin, membership, self.authorizer)
        init_producer_id = InitProducerIdApi(producer_ids, network.run_admin, self.authorizer)
        self.transactions = TransactionCoordinator(
            settings_of(config),
            self._append_offsets,
            lambda appended, timeout_ms: data.await_replication(appended, timeout_ms),
            init_producer_id.new_producer_id,
            MarkerWriter(self.metadata.snapshot, config.inter_broker_security()),
            spawn_on(network.loop),
        )
        transactions = TransactionApi(
            self.transactions,
            self.metadata,
            lambda live: admin.blocking(admin.create_transaction_state_topic_now, live),
            self.authorizer,
        )
        init_producer_id.transactions = groups.transactions = transactions
        security_admin = SecurityAdmin(
            self.zk,
            self.security,
            network.run_admin,
            acls_enabled=self.authorizer.enabled,
            authorizer=self.authorizer,
        )
        producers = ProducersApi(self.replicas, self.authorizer, self.metadata.snapshot)
        service = AnnalService(
            data, admin, groups, init_producer_id, security_admin, transactions,
            producers=producers,
        )  # fmt: skip
        control = ControlService(
            self.replicas,
            self.metadata,
            self._controlled_shutdown_request,
            network.run_control,
            network.run_admin,
            self.authorizer,
            lambda: self.broker_epoch,
            config.inter_broker_listener_name,
            await_replication=data.await_replication,
            # the group coordinator's transactional offset commits (KIP-98)
            txn_marker_written=lambda index, pid, commit: self.coordinator.complete_txn(
                index, pid, commit
            ),
        )

        def add_services(server: grpc.aio.Server) -> None:
            annal_pb2_grpc.add_AnnalServicer_to_server(service, server)
            annal_pb2_grpc.add_BrokerControlServicer_to_server(control, server)

        address = f"{config.listener.host or '0.0.0.0'}:{config.listener.port}"
        # Serve before registering: the controller talks to a broker as soon as
        # it appears in /brokers/ids, and a LeaderAndIsr or UpdateMetadata sent
        # to a port not yet listening would be lost.
        try:
            password_guard = PasswordGuard(
                PasswordCheck(self.security.credentials), tls=config.tls is not None
            )
            self.port = network.serve(
                address, add_services, config.server_credentials(), [password_guard]
            )
        except SecurityConfigError as exc:
            self._abort()
            raise BrokerStartupError(str(exc)) from exc
        except RuntimeError as exc:
            self._abort()
            raise BrokerStartupError(f"cannot listen on {address}: {exc}") from exc
        if config.kafka_listeners:
            kafka_apis = KafkaApis(self.metrics)
            DataApis(data, init_producer_id).register(kafka_apis)
            ClusterApis(admin, self.metadata, lambda: self.cluster_id).register(kafka_apis)
            AdminApis(admin, data, self.metadata, config.broker_id).register(kafka_apis)
            GroupApis(groups, membership, self.coordinator, self.metadata).register(kafka_apis)
            SecurityAdminApis(security_admin).register(kafka_apis)
            TransactionApis(transactions).register(kafka_apis)
            TxnMarkerApis(control).register(kafka_apis)
            ProducersApis(producers).register(kafka_apis)
            register_sasl_apis(kafka_apis)
            for kafka_config in config.kafka_listeners:
                self._start_kafka_listener(kafka_config, kafka_apis, limits)
        if config.metrics_port >= 0:
            self._serve_metrics()
        try:
            self._register()
        except ZkError as exc:
            self._abort()
            raise BrokerStartupError(str(exc)) from exc
        self._channel = ControllerChannel(config.broker_id, security=config.inter_broker_security())
        self.controller = Controller(
            config.broker_id,
            self.zk,
            self._channel.send_leader_and_isr,
            self._channel.send_stop_replica,
            self._channel.send_update_metadata,
            self.dynamic.current().unclean_leader_election_enable,
            RebalanceSettings(
                config.auto_leader_rebalance_enable,
                config.leader_imbalance_check_interval_seconds,
                config.leader_imbalance_per_broker_percentage,
            ),
            gate=self._channel,
        )
        # a dynamic change applied while the controller was being made (KIP-226)
        self.controller.set_unclean_leader_election(
            self.dynamic.current().unclean_leader_election_enable
        )
        self.controller.start()
        self._txn_timers = asyncio.run_coroutine_threadsafe(
            self.transactions.run_timers(), network.loop
        )
        self.replicas.start_isr_expiration()
        # one follower of /config/changes: topic configs, users for the security store,
        # and the dynamic broker configs (this broker's and the cluster default)
        self._config_changes = ConfigChangeListener(
            self.zk,
            self.replicas.update_topic_config,
            self.security.user_changed,
            broker_changed=lambda entity: self.dynamic.reload(
                entity, self.zk.get_broker_config_versioned
            ),
        )
        self._config_changes.start(load=self._load_dynamic_entities)
        network.set_serving(["", SERVICE_NAME])
        self.zk.add_session_listener(self._session_events.put)
        self.zk.add_session_listener(self._session_changed)
        self._session_thread = threading.Thread(
            target=self._watch_session, name="zk-session", daemon=True
        )
        self._session_thread.start()
        self.started.set()
        registration = self.registration
        kafka = [f"{e.listener}://{e.address}" for e in registration.kafka_endpoints]
        grpc_listener = f"{config.listener.protocol}://{registration.endpoint}"
        self.dynamic.served["advertised.listeners"] = ",".join([grpc_listener, *kafka])
        kafka_endpoints = ", ".join(kafka)
        logger.info(
            "broker %d serving on %s%s (cluster %s, ZooKeeper %s)",
            config.broker_id,
            registration.endpoint,
            f" and Kafka's protocol on {kafka_endpoints}" if kafka_endpoints else "",
            self.cluster_id,
            config.zookeeper_connect,
        )

    def bound_ports(self) -> dict[str, object]:
        """Where this broker listens, as bound (a port of 0 resolved): the gRPC
        listener's name and port, each Kafka listener's port by name, and the
        metrics port (None when off); what ``annal broker start --ports-file``
        writes once the broker serves."""
        return {
            "broker.id": self.config.broker_id,
            "grpc": {"listener": self.config.listener.protocol, "port": self.port},
            "kafka": dict(self.kafka_ports),
            "metrics": self.metrics_port,
        }

    def _load_dynamic_entities(self) -> None:
        """What the config-change listener loads whole before following: the users'
        credentials and the dynamic broker configs (changed since start-up: applied)."""
        self.security.load_users()
        self.dynamic.load(self.zk.get_broker_config_versioned)

    def _dynamic_config_changed(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """The effective settings changed (broker/dynamic_config.py): new topic defaults
        for every log, reconfigured as a topic config change reconfigures them, and
        unclean.leader.election.enable for this broker's controller."""
        defaults = new.log_config()
        if self.logs is not None and defaults != self.logs.default_config:
            apply_log_defaults(
                self.logs,
                defaults,
                BatchedZk(self.zk).topic_configs,
                self.replicas.update_topic_config,
            )
        unclean = new.unclean_leader_election_enable
        if unclean != old.unclean_leader_election_enable and self.controller is not None:
            self.controller.set_unclean_leader_election(unclean)

    def _start_kafka_listener(
        self, kafka_config: KafkaListenerConfig, apis: KafkaApis, limits: RequestLimits
    ) -> None:
        """Serve Kafka's protocol on one listener, secured as its protocol says."""
        bind = kafka_config.bind
        assert self.network is not None
        try:
            security = listener_security(
                kafka_config, self._credentials, self.config.connections_max_reauth_ms
            )
            listener = KafkaListener(apis, limits, self.config.socket_request_max_bytes, security)
            port = self.network.call(listener.start(bind.host, bind.port))
        except (OSError, ValueError) as exc:
            self._abort()
            raise BrokerStartupError(f"cannot listen on {bind}: {exc}") from exc
        self.kafka_listeners[kafka_config.name] = listener
        self.kafka_ports[kafka_config.name] = port
        if self.kafka_port is None and kafka_config.security_protocol == PLAINTEXT:
            self.kafka_port = port

    def _credentials(self, user: str) -> Mapping[str, ScramCredential]:
        """A user's SCRAM credentials, for SASL on the Kafka listeners: as ZooKeeper
        has them now (a removed user is refused at once), or, while ZooKeeper
        cannot answer, as the security store last saw them (logins go on)."""
        if self.zk.session_state is SessionEvent.CONNECTED:
            try:
                return self.zk.get_user_scram_credentials(user)
            except ZkError:
                pass  # the connection went meanwhile
        return self.security.credentials(user)

    def _log_dir_failed(self, log_dir: Path, reason: str) -> None:
        """A log dir went offline (storage/dir_failure.py): tell the controller, which
        moves the leaderships and ISR places of its replicas to the other brokers
        (Kafka's log dir event notification), from a thread of its own, since the
        write that failed may be on the event loop."""

        def notify() -> None:
            while not self._stopping.is_set():
                try:
                    self.zk.notify_log_dir_event(self.config.broker_id)
                    return
                except ZkError as exc:
                    logger.warning("cannot report offline log dir %s yet: %s", log_dir, exc)
                    self._stopping.wait(1.0)

        threading.Thread(target=notify, name="log-dir-event", daemon=True).start()
        logs = self.logs
        if logs is not None and len(logs.failures.offline_dirs()) == len(logs.log_dirs):
            logger.error("every log dir of broker %d is offline: shutting down",
                         self.config.broker_id)  # fmt: skip
            self.must_stop.set()

    def _controller_state(self) -> tuple[bool, int, int]:
        controller = self.controller
        if controller is None:
            return False, 0, 0
        # a suspended controller reports itself inactive: another may act by now
        return controller.acting, controller.epoch, controller.offline_partition_count()

    def _serve_metrics(self) -> None:
        """Serve ``/metrics`` (``metrics.port``), before registering: a broker that
        appears in ZooKeeper can be scraped."""
        replicas = self.replicas
        assert self.purgatories is not None
        purgatories = self.purgatories
        self.metrics.add_state(
            BrokerState(
                partitions=replicas.health,
                controller=self._controller_state,
                purgatories=purgatories.waiting,
                session_state=lambda: self._session_state,
                isr_changes=lambda: (replicas.isr_shrinks, replicas.isr_expands),
                offline_log_dirs=lambda: len(replicas.logs.failures.offline_dirs()),
                fetcher_lags=lambda: {} if self.fetchers is None else self.fetchers.lags(),
            )
        )
        self.metrics.add_transactions(self.transactions)
        host = self.config.metrics_host or self.config.listener.host
        try:
            self.metrics_port = self.metrics.serve(host, self.config.metrics_port)
        except OSError as exc:
            self._abort()
            raise BrokerStartupError(
                f"cannot serve metrics on {host or '0.0.0.0'}:{self.config.metrics_port}: {exc}"
            ) from exc
        logger.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", self.metrics_port)

    def _register(self) -> None:
        """Register; a registration left by this broker's own previous process (same
        id and endpoint, a session not yet expired after a crash) is waited out,
        with annal's retry policy, for up to the session timeout and 5 s more."""

        def register() -> int:
            try:
                return self.zk.register_broker(self.registration)
            except BrokerIdTakenError as exc:
                holder = self.zk.get_broker(self.config.broker_id)
                if holder is None or holder.endpoint == self.registration.endpoint:
                    raise _PreviousProcessRegistered(str(exc)) from exc  # expired, or will
                raise

        def waiting(state: tenacity.RetryCallState) -> None:
            if state.attempt_number == 1:
                logger.info("waiting for the session of this broker's previous process to expire")

        self.broker_epoch = retrying(
            self.config.zookeeper_session_timeout_ms / 1000 + 5,
            retry_on=lambda exc: isinstance(exc, _PreviousProcessRegistered),
            before_sleep=waiting,
        )(register)

    def _leadership_changed(self, tp: TopicPartition, log: Log | None) -> None:
        if tp.topic == OFFSETS_TOPIC:
            if log is None:
                self.coordinator.on_follower(tp.partition)
            else:
                self.coordinator.on_leader(tp.partition, log)
        elif tp.topic == TRANSACTION_STATE_TOPIC:
            partition = self.replicas.partition(tp)
            if log is None or partition is None:
                self.transactions.on_follower(tp.partition)
            else:  # the coordinator's epoch is the partition's leader epoch
                self.transactions.on_leader(tp.partition, log, partition.leader_epoch)

    def _append_offsets(self, tp: TopicPartition, records: bytes) -> tuple[ErrorCode, int]:
        # the group coordinator's appends, as Kafka's (transactional offset commits
        # carry a producer id without a sequence of the client's)
        result = self.replicas.append(tp, records, acks=-1, origin=AppendOrigin.COORDINATOR)
        return result.error, result.last_offset

    def _write_partition_state(
        self, tp: TopicPartition, state: PartitionState, version: int
    ) -> int:
        return self.zk.update_partition_state(tp.topic, tp.partition, state, version)

    def _notify_isr_change(self, written: list[TopicPartition]) -> None:
        """Tell the controller, which tells every broker's metadata cache."""
        self.zk.notify_isr_change([TopicPartition(tp.topic, tp.partition) for tp in written])

    def _partition_exists(self, tp: TopicPartition) -> bool:
        found = self.zk.get_topic_assignment(tp.topic)
        return found is not None and tp.partition in found[0].partitions

    def _stop_kafka(self) -> None:
        for name, listener in list(self.kafka_listeners.items()):
            if self.network is not None:
                try:
                    self.network.call(listener.stop(), 10)
                except Exception:  # stopping goes on whatever the listener says
                    logger.exception("stopping the Kafka listener %s", name)
            del self.kafka_listeners[name]

    def _abort(self) -> None:
        self.metrics.stop()
        self._stop_kafka()
        if self.network is not None:
            self.network.stop(0)
            self.network = None
        if self.fetchers is not None:
            self.fetchers.shutdown()
        if self.logs is not None:
            self.logs.shutdown()
            self.logs = None
        self.security.stop()
        self.zk.stop()

    def _session_changed(self, event: SessionEvent) -> None:
        self._session_state = event.name

    def _watch_session(self) -> None:
        """Re-register after a session loss; the kazoo listener only queued the event.

        A failed re-registration (the new session expiring too, retries running
        out) is tried again with a growing backoff while connected, so a
        broker never stays unregistered because of one unlucky attempt."""
        lost = False
        connected = True
        retry_at = 0.0
        backoff = Backoff(longest_s=5.0)
        # SUSPENDED this long (a third of the session timeout past kazoo's two
        # thirds) and ZooKeeper has expired the session: stop leading then
        fence_after_s = self.config.zookeeper_session_timeout_ms / 3000
        suspended_at: float | None = None
        while not self._stopping.is_set():
            # asleep until an event, a re-registration due again, or the fence due
            dues = [retry_at] if lost and connected else []
            if suspended_at is not None and not self.fence.fenced:
                dues.append(suspended_at + fence_after_s)
            timeout = max(min(dues) - time.monotonic(), 0.0) if dues else None
            try:
                event = self._session_events.get(timeout=timeout)
            except queue.Empty:
                event = None
            if event is SessionEvent.LOST:
                lost, connected, suspended_at = True, False, None
                logger.warning("ZooKeeper session lost: registration gone until reconnected")
                self.fence.session_lost()
            elif event is SessionEvent.SUSPENDED:
                connected = False
                suspended_at = time.monotonic() if suspended_at is None else suspended_at
            elif event is SessionEvent.CONNECTED:
                connected, suspended_at = True, None
                if not lost:
                    self.fence.session_back()
            if suspended_at is not None and time.monotonic() >= suspended_at + fence_after_s:
                self.fence.session_suspended_too_long(
                    time.monotonic() - suspended_at + 2 * fence_after_s
                )
            if not (lost and connected) or time.monotonic() < retry_at:
                continue
            try:
                self.broker_epoch = self.zk.register_broker(self.registration)
            except ZkError as exc:
                backoff_s = backoff.next()
                retry_at = time.monotonic() + backoff_s
                logger.error(
                    "cannot re-register broker %d (again in %.1f s): %s",
                    self.config.broker_id,
                    backoff_s,
                    exc,
                )
                continue
            lost = False
            backoff.reset()
            self.fence.registered_again()
            logger.info("re-registered broker %d", self.config.broker_id)

    def _controlled_shutdown_request(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition] | None:
        """ControlledShutdown arriving here: None unless this broker is the controller;
        StaleBrokerEpoch when it comes from an older registration of the broker."""
        if self.controller is None:
            return None
        if broker_epoch > 0:
            current = self.zk.get_broker(broker_id)
            if current is not None and broker_epoch < current.epoch:
                raise StaleBrokerEpoch(
                    f"ControlledShutdown of broker {broker_id} at epoch {broker_epoch}; its "
                    f"registration is at {current.epoch}"
                )
        return self.controller.controlled_shutdown(broker_id)

    def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away (Kafka's
        controlled.shutdown.*): retried, ``controlled.shutdown.retry.backoff.ms``
        apart, while it reports partitions this broker still leads, then the stop
        goes on regardless."""
        config = self.config
        attempts = config.controlled_shutdown_max_retries + 1

        def tried(state: tenacity.RetryCallState) -> None:
            assert state.outcome is not None
            logger.warning(
                "controlled shutdown attempt %d of %d: %s",
                state.attempt_number,
                attempts,
                state.outcome.result(),
            )

        def gave_up(state: tenacity.RetryCallState) -> bool:
            tried(state)  # the last attempt sleeps no more, so before_sleep never saw it
            logger.warning("stopping without a complete controlled shutdown")
            return False

        tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_fixed(config.controlled_shutdown_retry_backoff_ms / 1000),
            retry=tenacity.retry_if_result(lambda refusal: refusal is not None),
            before_sleep=tried,
            retry_error_callback=gave_up,
            sleep=time.sleep,
        )(self._ask_for_controlled_shutdown)

    def _ask_for_controlled_shutdown(self) -> str | None:
        """One ControlledShutdown request: None once it is complete, else why not."""
        request = pb.ControlledShutdownRequest(
            broker_id=self.config.broker_id, broker_epoch=self.broker_epoch
        )
        try:
            controller_id = self.zk.get_controller()
            controller = None if controller_id is None else self.zk.get_broker(controller_id)
            if controller is None:
                return "no controller is registered"
            with self.config.inter_broker_security().channel(controller.endpoint) as channel:
                response = annal_pb2_grpc.BrokerControlStub(channel).ControlledShutdown(
                    request, timeout=10
                )
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        except ZkError as exc:
            return str(exc)
        if response.error != pb.NONE:
            return str(errors.from_wire(response.error))
        if response.remaining_partitions:
            return "still leading " + ", ".join(
                f"{p.topic}-{p.partition}" for p in response.remaining_partitions
            )
        logger.info("controlled shutdown of broker %d complete", self.config.broker_id)
        return None

    def shutdown(self, grace_s: float = 5.0) -> None:
        """Clean stop: the reverse of ``start``, after a controlled shutdown."""
        if self._stopping.is_set() or self._shutdown_begun:
            return
        self._shutdown_begun = True
        if self.config.controlled_shutdown_enable and self.network is not None:
            self._controlled_shutdown()
        self._stopping.set()
        self._session_events.put(None)  # the session thread wakes and stops
        step = _Steps()
        if self.controller is not None:
            self.controller.initiate_shutdown()
            self.controller.await_shutdown()
        step.done("the controller")
        if self._channel is not None:
            self._channel.close()  # what the controller queued goes out while we serve
        step.done("the controller's channel")
        if self.fetchers is not None:
            self.fetchers.shutdown()
        step.done("the replica fetchers")
        if self._config_changes is not None:
            self._config_changes.stop()
        self.security.stop()
        if self.logs is not None:  # replicas exist once the logs do
            self.replicas.shutdown()
            self._isr_writer.initiate_shutdown()
            self._isr_writer.await_shutdown()
        step.done("the replica manager")
        self._stop_kafka()
        step.done("the Kafka listeners")
        if self._txn_timers is not None:
            self._txn_timers.cancel()
        if self.network is not None:
            self.network.stop(grace_s)
        step.done("the gRPC server")
        self.metrics.stop()
        if self._session_thread is not None:
            self._session_thread.join(5)
        self.zk.stop()
        step.done("the ZooKeeper session")
        if self.logs is not None:
            self.logs.shutdown()
        step.done("the logs")
        logger.info("broker %d stopped cleanly", self.config.broker_id)

    def wait(self) -> None:
        while not self._stopping.wait(0.5):
            pass

    def __enter__(self) -> BrokerServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class _Steps:
    """Logs each step of a clean stop that took a second or more."""

    def __init__(self) -> None:
        self._at = time.monotonic()

    def done(self, what: str) -> None:
        now = time.monotonic()
        if now - self._at >= 1.0:
            logger.info("stopping: %s took %.1f s", what, now - self._at)
        self._at = now


class _PreviousProcessRegistered(BrokerIdTakenError):
    """The broker's id is held by this broker's own previous process, whose
    session ZooKeeper has not expired yet (or just has)."""
