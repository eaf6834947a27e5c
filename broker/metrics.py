"""A broker's metrics, served to Prometheus over HTTP (``metrics.port``).

Names are Kafka's JMX names in the form Prometheus' JMX exporter gives them,
with ``annal`` for ``kafka``: ``kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions`` is ``annal_server_replicamanager_
underreplicatedpartitions``.  Rates (Kafka's ``…PerSec`` meters) are counters
here (``…_total``): Prometheus takes the rate.  docs/operations.md has the
table of every name and its meaning.

Two kinds of metric:

* counted as things happen (``BrokerMetrics``): requests by API with their
  errors and latencies (at the gRPC edge, ``rpc_guard.py``), bytes and
  records in and out per topic (the data API);
* read when scraped (``StateCollector``): partition health (under-replicated,
  under min ISR, offline, leaders), ISR shrinks and expands (the replica
  manager counts them), the controller's state, each log's size
  and offsets, purgatory sizes and the ZooKeeper session's state, each read
  from its owner at that moment, so nothing has to keep them up to date.

Thread safety: prometheus-client's metrics are thread-safe; the collector's
sources must be callable from the HTTP server's thread (they read copies).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# Request latency buckets, in milliseconds (Kafka's TotalTimeMs is in ms too).
LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

SESSION_STATES = ("CONNECTED", "SUSPENDED", "LOST")


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """One hosted partition as the replica manager sees it now."""

    tp: TopicPartition
    leader: bool
    replicas: int
    isr: int
    min_isr: int
    log_size: int
    log_start_offset: int
    log_end_offset: int


@dataclass
class BrokerState:
    """Where the collector reads the broker's state from, at each scrape."""

    partitions: Callable[[], list[PartitionHealth]]
    controller: Callable[[], tuple[bool, int, int]]  # (active, epoch, offline partitions)
    purgatories: Callable[[], Mapping[str, int]]
    session_state: Callable[[], str]
    isr_changes: Callable[[], tuple[int, int]]  # (shrinks, expands) since start
    offline_log_dirs: Callable[[], int] = lambda: 0  # log dirs an I/O error took offline
    # each followed partition's lag behind its leader's high watermark (-1: no answer yet)
    fetcher_lags: Callable[[], Mapping[TopicPartition, int]] = lambda: {}


class BrokerMetrics:
    """The metrics a broker counts as it works, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        # the process (CPU, memory, open files) and Python's runtime (its version,
        # the garbage collector): prometheus-client's own collectors
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        self.requests = Counter(
            "annal_network_requestmetrics_requests",
            "Requests answered, by API",
            ["request"],
            registry=registry,
        )
        self.errors = Counter(
            "annal_network_requestmetrics_errors",
            "Errors answered, by API and error (Kafka's error names; gRPC status names "
            "for requests refused as a whole)",
            ["request", "error"],
            registry=registry,
        )
        self.total_time = Histogram(
            "annal_network_requestmetrics_totaltimems",
            "Time from a request's arrival to its answer, in milliseconds, by API",
            ["request"],
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        self.queue_time = Histogram(
            "annal_network_requestmetrics_requestqueuetimems",
            "Time a Kafka request waited between its frame's arrival and its handler's "
            "start (queued.max.requests, the event loop), in milliseconds, by API",
            ["request"],
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        topic_counter = [
            ("bytesin", "Bytes of record batches appended by producers"),
            ("messagesin", "Records appended by producers"),
            ("bytesout", "Bytes of record batches sent to consumers"),
            ("messagesout", "Records sent to consumers"),
            ("replicationbytesout", "Bytes of record batches sent to followers"),
            # fetch from follower (KIP-392, docs/kafka-protocol.md)
            ("followerbytesout", "Bytes of record batches sent to consumers from this "
             "broker's copy of partitions it follows (counted in bytesout too)"),
            ("preferredreadreplica", "Partitions of consumers' fetches this leader "
             "answered with a preferred read replica instead of records"),
        ]  # fmt: skip
        self._topic = {
            name: Counter(
                f"annal_server_brokertopicmetrics_{name}", text, ["topic"], registry=registry
            )
            for name, text in topic_counter
        }
        self._children: dict[tuple[str, str], Any] = {}
        self._request_children: dict[str, tuple[Any, Any]] = {}
        self._queue_children: dict[str, Any] = {}
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- counting -----------------------------------------------------------------

    def request_done(self, api: str, elapsed_ms: float) -> None:
        children = self._request_children.get(api)
        if children is None:
            children = (self.requests.labels(api), self.total_time.labels(api))
            self._request_children[api] = children
        children[0].inc()
        children[1].observe(elapsed_ms)

    def request_queued(self, api: str, waited_ms: float) -> None:
        child = self._queue_children.get(api)
        if child is None:
            child = self._queue_children[api] = self.queue_time.labels(api)
        child.observe(waited_ms)

    def request_error(self, api: str, error: str) -> None:
        self.errors.labels(api, error).inc()

    def topic(self, name: str, topic: str, amount: int) -> None:
        """Add ``amount`` to the per-topic counter ``name`` (``bytesin``, ...)."""
        key = (name, topic)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._topic[name].labels(topic)
        child.inc(amount)

    # -- serving ------------------------------------------------------------------

    def add_state(self, state: BrokerState) -> None:
        self.registry.register(StateCollector(state))

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (0: a free port); the port taken."""
        server, thread = start_http_server(port, host or "0.0.0.0", registry=self.registry)
        self._server, self._thread = server, thread
        return int(server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def add_transactions(self, coordinator: TransactionStats) -> None:
        """Serve the transaction coordinator's gauges (docs/transactions.md)."""
        self.registry.register(TransactionCollector(coordinator))

    def add_fetch_sessions(self, sessions: FetchSessionStats) -> None:
        """Serve the fetch session cache's gauges (Kafka's FetchSessionCache metrics)."""
        self.registry.register(FetchSessionCollector(sessions))


class StateCollector(Collector):
    """Gauges read from the broker at each scrape; see the module docstring."""

    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []  # the names depend on what is hosted; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        try:
            yield from self._collect()
        except Exception:  # a scrape must never take the broker down
            logger.exception("collecting broker metrics failed")

    def _collect(self) -> Iterator[Metric]:
        state = self._state
        partitions = state.partitions()
        led = [p for p in partitions if p.leader]

        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, value=value)

        yield gauge(
            "annal_server_replicamanager_partitioncount",
            "Partitions this broker hosts (leader or follower)",
            len(partitions),
        )
        yield gauge(
            "annal_server_replicamanager_leadercount", "Partitions this broker leads", len(led)
        )
        yield gauge(
            "annal_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set",
            sum(1 for p in led if p.isr < p.replicas),
        )
        yield gauge(
            "annal_server_replicamanager_underminisrpartitioncount",
            "Partitions this broker leads whose ISR is smaller than min.insync.replicas",
            sum(1 for p in led if p.isr < p.min_isr),
        )
        yield gauge(
            "annal_server_replicamanager_atminisrpartitioncount",
            "Partitions this broker leads whose ISR is exactly min.insync.replicas",
            sum(1 for p in led if p.isr == p.min_isr),
        )
        shrinks, expands = state.isr_changes()
        counted = CounterMetricFamily(
            "annal_server_replicamanager_isrshrinks",
            "Times a partition this broker leads shrank its ISR",
            value=shrinks,
        )
        yield counted
        yield CounterMetricFamily(
            "annal_server_replicamanager_isrexpands",
            "Times a partition this broker leads grew its ISR",
            value=expands,
        )
        yield gauge(
            "annal_log_logmanager_offlinelogdirectorycount",
            "Log dirs of this broker that an I/O error (a full disk) took offline",
            state.offline_log_dirs(),
        )
        active, epoch, offline = state.controller()
        yield gauge(
            "annal_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that is the controller, 0 on the others",
            1 if active else 0,
        )
        yield gauge(
            "annal_controller_kafkacontroller_offlinepartitionscount",
            "Partitions with no live leader (counted by the controller; 0 elsewhere)",
            offline if active else 0,
        )
        yield gauge(
            "annal_controller_kafkacontroller_controllerepoch",
            "The controller epoch this broker last saw from its own term (0 if never controller)",
            epoch,
        )
        size = GaugeMetricFamily(
            "annal_log_log_size", "Bytes in the partition's log", labels=["topic", "partition"]
        )
        end = GaugeMetricFamily(
            "annal_log_log_logendoffset",
            "The offset the partition's next record will get",
            labels=["topic", "partition"],
        )
        start = GaugeMetricFamily(
            "annal_log_log_logstartoffset",
            "The first offset still in the partition's log",
            labels=["topic", "partition"],
        )
        for p in partitions:
            labels = [p.tp.topic, str(p.tp.partition)]
            size.add_metric(labels, p.log_size)
            end.add_metric(labels, p.log_end_offset)
            start.add_metric(labels, p.log_start_offset)
        yield from (size, end, start)
        lag = GaugeMetricFamily(
            "annal_server_fetcherlagmetrics_consumerlag",
            "Records a followed partition's copy here is behind its leader's high watermark, "
            "at the leader's last answer",
            labels=["topic", "partition"],
        )
        for tp, behind in sorted(state.fetcher_lags().items()):
            if behind >= 0:
                lag.add_metric([tp.topic, str(tp.partition)], behind)
        yield lag
        purgatory = GaugeMetricFamily(
            "annal_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in each purgatory",
            labels=["delayedoperation"],
        )
        for name, waiting in sorted(state.purgatories().items()):
            purgatory.add_metric([name], waiting)
        yield purgatory
        session = GaugeMetricFamily(
            "annal_server_sessionexpirelistener_sessionstate",
            "1 for the ZooKeeper session's current state",
            labels=["state"],
        )
        current = state.session_state()
        for name in SESSION_STATES:
            session.add_metric([name], 1 if name == current else 0)
        yield session


class FetchSessionStats(Protocol):
    """What the fetch session cache (``broker/requests/fetch_sessions.py``) tells of itself."""

    partitions_cached: int
    evictions: int

    def __len__(self) -> int: ...


class FetchSessionCollector(Collector):
    """Kafka's ``kafka.server:type=FetchSessionCache`` metrics, read at each scrape."""

    def __init__(self, sessions: FetchSessionStats) -> None:
        self._sessions = sessions

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        sessions = self._sessions
        yield GaugeMetricFamily(
            "annal_server_fetchsessioncache_numincrementalfetchsessions",
            "Fetch sessions (KIP-227) this broker keeps",
            value=len(sessions),
        )
        yield GaugeMetricFamily(
            "annal_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions held by this broker's fetch sessions, all sessions together",
            value=sessions.partitions_cached,
        )
        yield CounterMetricFamily(
            "annal_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Fetch sessions evicted to make room for new ones",
            value=sessions.evictions,
        )


class TransactionStats(Protocol):
    """What the transaction coordinator (``broker/transactions/``) tells of itself."""

    timed_out: int

    def open_transactions(self) -> int: ...

    def known_ids(self) -> int: ...

    def led_partitions(self) -> int: ...


class TransactionCollector(Collector):
    """The transaction coordinator's metrics, read at each scrape."""

    def __init__(self, coordinator: TransactionStats) -> None:
        self._coordinator = coordinator

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        c = self._coordinator
        yield GaugeMetricFamily(
            "annal_coordinator_transaction_open",
            "Transactions this broker coordinates that are not decided and complete "
            "(Ongoing, PrepareCommit, PrepareAbort)",
            value=c.open_transactions(),
        )
        yield GaugeMetricFamily(
            "annal_coordinator_transaction_ids",
            "Transactional ids this broker coordinates",
            value=c.known_ids(),
        )
        yield GaugeMetricFamily(
            "annal_coordinator_transaction_partitions",
            "Partitions of __transaction_state this broker leads",
            value=c.led_partitions(),
        )
        yield CounterMetricFamily(
            "annal_coordinator_transaction_timed_out",
            "Transactions aborted by the coordinator because they outlived their timeout",
            value=c.timed_out,
        )
