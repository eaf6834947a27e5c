"""The group consumer: Kafka's high-level consumer of the ZooKeeper era, balancing
partitions over a group's members through ZooKeeper, with offsets committed
through the group coordinator::

    consumer = GroupConsumer("127.0.0.1:2181/annal", "readers")
    streams = consumer.create_message_streams({"events": 2})   # topic -> stream count
    for record in streams["events"][0]:                          # an iterator per stream
        ...
    consumer.shutdown()                                           # commits, releases

Membership and balance (Kafka 0.8's ZooKeeper-based consumer: "Consumer registration" and "Consumer
rebalancing algorithm"):

* The consumer registers ``/consumers/<group>/ids/<consumer id>`` (ephemeral)
  with its subscription: topic → stream count, or a whitelist / blacklist
  regex → stream count (``create_message_streams_by_filter``).
* It watches the group's members, the brokers and the topics; any change
  triggers a rebalance, on every member at about the same time.
* A rebalance pauses fetching, commits the consumed offsets, releases this
  consumer's owner znodes, computes the range assignment (``assignment.py``)
  from the registrations, and claims each assigned partition with an
  ephemeral ``/consumers/<group>/owners/<topic>/<partition>`` holding the
  consumer thread id.  A partition still owned by another member (which has
  not released it yet) fails the attempt: what was claimed is released and
  the rebalance is tried again after ``rebalance_backoff_ms``, up to
  ``rebalance_max_retries`` times.  An owner znode exists once, so no
  partition is ever owned by two consumer threads.
* Fetching resumes at the committed offsets (``auto_offset_reset``:
  "smallest" or "largest" when the group committed none).

A stream yields records in offset order per partition.  Offsets count as
consumed once the stream has returned the record; they are committed every
``auto_commit_interval_ms`` (``auto_commit``), on ``commit_offsets()``, before
each rebalance and at shutdown.  ``consumer_timeout_ms`` >= 0 makes a stream
raise ``ConsumerTimeout`` when no record arrives for that long; after
``shutdown`` streams end.

The ZooKeeper session (``zookeeper_session_timeout_ms``, Kafka's
``zookeeper.session.timeout.ms``) decides how long a member cut off from
ZooKeeper keeps its partitions.  Its client notices a dead connection within
two thirds of that time (SUSPENDED), well before ZooKeeper expires the
session and hands the owner znodes to another member; from that moment the
consumer fetches nothing, its streams deliver nothing (what they hold is
dropped, to be fetched again) and it commits nothing.  Connected again with
the same session, it rejoins through a rebalance; a lost session (the
registration and owner znodes gone with it) first registers anew.  So no
partition is delivered by two members at once.

Brokers are reached as the simple consumer reaches them, with the same
keyword arguments (kafka-python's names): ``security_protocol`` (PLAINTEXT,
SSL or SASL_SSL), ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
``sasl_mechanism``, ``sasl_plain_username`` and ``sasl_plain_password``.
They apply to every broker call: fetches, offset lookups, and the offset
commits and fetches at the group coordinator.  None given means the
process's default (a tool's ``--command-config``).  A SASL_SSL user needs
Read on the topics and on the group.  ZooKeeper is reached without
authentication.  ``isolation_level`` is the simple consumer's too:
``read_committed`` hands out no record of an aborted transaction and reads
up to the last stable offset (KIP-98).

Threads: a ``group-fetcher`` fills the streams' queues; a ``group-rebalance``
thread handles watch and session events; an auto-commit thread.
``self._lock`` guards the assignment, positions and consumed offsets;
``self._session_lock`` orders the session listener's "suspended" against
the rebalance that clears it.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from annal.client.bootstrap import resolve_bootstrap
from annal.client.security import client_security
from annal.consumer.assignment import TopicFilter, range_assign, subscribed_topics, thread_ids
from annal.consumer.group_offsets import GroupOffsets
from annal.consumer.simple import (
    EARLIEST,
    LATEST,
    ConsumerError,
    ConsumerRecord,
    OffsetOutOfRangeError,
    SimpleConsumer,
)
from annal.consumer.transactions import READ_UNCOMMITTED, isolation_number
from annal.zk import layout
from annal.zk.client import SessionEvent, ZkClient, ZkError

from annal.topic_partition import TopicPartition

logger = logging.getLogger(__name__)


class ConsumerTimeout(Exception):
    """No record arrived within ``consumer_timeout_ms``."""


class RebalanceFailed(ConsumerError):
    """The group did not settle within ``rebalance_max_retries`` attempts."""


@dataclass(frozen=True, slots=True)
class _Chunk:
    tp: TopicPartition
    generation: int
    records: list[ConsumerRecord]


_END = object()  # a stream's end (shutdown)


class Stream:
    """One consumer thread's records: an iterator (see the module docstring)."""

    def __init__(self, owner: GroupConsumer, thread_id: str, queued_chunks: int) -> None:
        self.thread_id = thread_id
        self._owner = owner
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queued_chunks)
        self._chunk: _Chunk | None = None
        self._index = 0
        self._ended = False

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        while True:
            chunk = self._chunk
            if chunk is not None and self._index < len(chunk.records):
                record = chunk.records[self._index]
                self._index += 1
                if self._owner._consumed(chunk.tp, record.offset + 1, chunk.generation):
                    return record
                self._chunk = None  # the partition moved away meanwhile
                continue
            if self._ended:
                raise StopIteration
            timeout_ms = self._owner.consumer_timeout_ms
            try:
                item = self._queue.get(timeout=None if timeout_ms < 0 else timeout_ms / 1000)
            except queue.Empty:
                raise ConsumerTimeout(f"no record within {timeout_ms} ms") from None
            if item is _END:
                self._ended = True
                raise StopIteration
            assert isinstance(item, _Chunk)
            self._chunk, self._index = item, 0

    def _put(self, item: object, stop: threading.Event) -> bool:
        """Queue ``item`` unless ``stop`` is set while the queue is full."""
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _drain(self) -> None:
        """Drop what is queued (a rebalance starts the partitions over from their
        consumed offsets)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is _END:
                self._queue.put_nowait(item)
                return


class GroupConsumer:
    """See the module docstring."""

    def __init__(
        self,
        zookeeper_connect: str,
        group: str,
        *,
        consumer_id: str | None = None,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: str = "largest",
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 2000,
        fetch_max_bytes: int = 1 << 20,
        fetch_wait_max_ms: int = 100,
        queued_max_chunks: int = 2,
        consumer_timeout_ms: int = -1,
        timeout_s: float = 30.0,
        zookeeper_session_timeout_ms: int = 18_000,
        security_protocol: str | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        isolation_level: str = READ_UNCOMMITTED,
    ) -> None:
        if not group:
            raise ValueError("a group id is needed")
        isolation_number(isolation_level)  # checked before anything connects
        if auto_offset_reset not in ("smallest", "largest"):
            raise ValueError(
                f"auto_offset_reset must be smallest or largest, not {auto_offset_reset!r}"
            )
        # checked before anything connects; every broker client below uses it
        security = client_security(
            security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
            sasl_plain_username, sasl_plain_password, sasl_mechanism,
        )  # fmt: skip
        self.group = group
        self.consumer_id = consumer_id or f"{group}_{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.auto_offset_reset = auto_offset_reset
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff_ms = rebalance_backoff_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.queued_max_chunks = queued_max_chunks
        self.consumer_timeout_ms = consumer_timeout_ms
        self.zookeeper_session_timeout_ms = zookeeper_session_timeout_ms
        self._session_lock = threading.Lock()
        self._suspended = threading.Event()  # set from SUSPENDED until a rebalance
        self._session_events: queue.Queue[SessionEvent] = queue.Queue()
        self.zk = ZkClient(
            zookeeper_connect, session_timeout_ms=zookeeper_session_timeout_ms, timeout_s=timeout_s
        ).start()
        self.zk.add_session_listener(self._on_session)
        bootstrap = resolve_bootstrap(None, zookeeper_connect, timeout_s)
        self._fetch = SimpleConsumer(
            bootstrap,
            max_wait_ms=fetch_wait_max_ms,
            timeout_s=timeout_s,
            isolation_level=isolation_level,
            **security.client_args(),
        )
        self._offsets = GroupOffsets(bootstrap, group, timeout_s, security)
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        # (topic, thread id) -> stream; the topic is "" for filter streams, which
        # carry every matching topic
        self._streams: dict[tuple[str, str], Stream] = {}
        self._thread_ids: list[str] = []
        self._subscription: dict[str, int] = {}
        self._pattern = "static"
        self._owned: dict[TopicPartition, str] = {}  # partition -> thread id
        self._positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self._consumed_at: dict[TopicPartition, int] = {}  # next offset not yet returned
        self._committed: dict[TopicPartition, int] = {}
        self._generation = 0
        self._fetching = threading.Event()
        self._stopped = threading.Event()
        self._rebalance_needed = threading.Event()
        self._watches: list[object] = []
        self._threads: list[threading.Thread] = []

    # -- subscribing -----------------------------------------------------------------

    def create_message_streams(self, topic_counts: Mapping[str, int]) -> dict[str, list[Stream]]:
        """``topic → stream count``; the streams of each topic, by consumer thread."""
        if not topic_counts or any(n < 1 for n in topic_counts.values()):
            raise ValueError(f"every topic needs at least one stream: {dict(topic_counts)}")
        self._start(dict(topic_counts), "static")
        return {
            topic: [self._streams[(topic, t)] for t in thread_ids(self.consumer_id, n)]
            for topic, n in topic_counts.items()
        }

    def create_message_streams_by_filter(
        self, topic_filter: TopicFilter, num_streams: int = 1
    ) -> list[Stream]:
        """Streams over every topic the whitelist / blacklist regex matches, now or later."""
        if num_streams < 1:
            raise ValueError("num_streams must be at least 1")
        self._start({topic_filter.regex: num_streams}, topic_filter.pattern)
        return [self._streams[("", t)] for t in thread_ids(self.consumer_id, num_streams)]

    def _start(self, subscription: dict[str, int], pattern: str) -> None:
        if self._subscription:
            raise ValueError("this consumer has its streams already")
        self._subscription, self._pattern = subscription, pattern
        self._thread_ids = thread_ids(self.consumer_id, max(subscription.values()))
        for key, count in subscription.items():
            topic = key if pattern == "static" else ""
            for thread_id in thread_ids(self.consumer_id, count):
                self._streams[(topic, thread_id)] = Stream(self, thread_id, self.queued_max_chunks)
        self.zk.register_consumer(self.group, self.consumer_id, subscription, pattern)
        for target, name in (
            (self._fetch_loop, "group-fetcher"),
            (self._rebalance_loop, "group-rebalance"),
            (self._commit_loop, "group-commit"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        # Every change of members, brokers or topics asks for a rebalance.
        for path in (layout.consumer_ids_path(self.group), layout.BROKER_IDS, layout.BROKER_TOPICS):
            self._watches.append(self.zk.watch_children(path, self._on_change))
        self._rebalance_needed.set()

    def _on_change(self, children: list[str]) -> bool:
        self._rebalance_needed.set()
        return not self._stopped.is_set()

    # -- balancing -------------------------------------------------------------------

    def _on_session(self, event: SessionEvent) -> None:
        """On kazoo's thread: stop fetching, delivering and committing at once
        when the session is suspended or lost; the rebalance thread does the rest."""
        if event is not SessionEvent.CONNECTED:
            with self._session_lock:
                self._suspended.set()
            self._fetching.clear()
        self._session_events.put(event)

    @property
    def suspended(self) -> bool:
        """True from a session suspension until the rejoin that follows it."""
        return self._suspended.is_set()

    def _rebalance_loop(self) -> None:
        lost = False
        while not self._stopped.is_set():
            lost |= self._session_lost()
            if lost and self.zk.connected:
                # A new session: our ephemeral registration and owner znodes are
                # gone; register again and rebalance (Kafka's session-expiry path).
                try:
                    self.zk.register_consumer(
                        self.group, self.consumer_id, self._subscription, self._pattern
                    )
                    lost = False
                    self._rebalance_needed.set()
                except ZkError as exc:
                    logger.warning("re-registering %s: %s", self.consumer_id, exc)
            if not self._rebalance_needed.wait(0.5):
                continue
            self._rebalance_needed.clear()
            try:
                self._rebalance()
            except (ZkError, ConsumerError) as exc:
                logger.warning("rebalance of %s failed: %s; trying again", self.consumer_id, exc)
                self._stopped.wait(self.rebalance_backoff_ms / 1000)
                self._rebalance_needed.set()

    def _session_lost(self) -> bool:
        lost = False
        while True:
            try:
                event = self._session_events.get_nowait()
            except queue.Empty:
                return lost
            if event is SessionEvent.SUSPENDED:
                logger.warning("%s: ZooKeeper connection lost; not consuming", self.consumer_id)
            elif event is SessionEvent.CONNECTED:
                self._rebalance_needed.set()  # rejoin (a lost session registers first)
            elif event is SessionEvent.LOST:
                logger.warning("%s lost its ZooKeeper session; it will rejoin", self.consumer_id)
                with self._lock:
                    self._owned.clear()  # the owner znodes went with the session
                self._fetching.clear()
                lost = True

    def _rebalance(self) -> None:
        for attempt in range(1, self.rebalance_max_retries + 1):
            if self._stopped.is_set():
                return
            self._fetching.clear()
            with self._session_lock:  # the listener sets it after the state changed
                if self.zk.session_state is SessionEvent.CONNECTED:
                    self._suspended.clear()
            if self._suspended.is_set():
                return  # the CONNECTED to come asks for the rebalance again
            self._release_all()
            assignment = self._assignment()
            if self._claim(assignment):
                self._resume(assignment)
                logger.info(
                    "%s owns %s after rebalance attempt %d",
                    self.consumer_id,
                    sorted(tp for tps in assignment.values() for tp in tps),
                    attempt,
                )
                return
            self._stopped.wait(self.rebalance_backoff_ms / 1000)
        raise RebalanceFailed(
            "REBALANCE_FAILED",
            f"{self.consumer_id} could not claim its partitions in "
            f"{self.rebalance_max_retries} attempts",
        )

    def _assignment(self) -> dict[str, list[TopicPartition]]:
        """My threads' partitions, from the group's registrations (range assignment)."""
        topics = self.zk.get_topics()
        threads: dict[str, list[str]] = {}
        for consumer_id, (subscription, pattern) in self.zk.consumer_registrations(
            self.group
        ).items():
            for topic, count in subscribed_topics(subscription, pattern, topics).items():
                threads.setdefault(topic, []).extend(thread_ids(consumer_id, count))
        partitions: dict[str, list[int]] = {}
        for topic in threads:
            found = self.zk.get_topic_assignment(topic)
            if found is not None:
                partitions[topic] = sorted(found[0].partitions)
        everyone = range_assign(partitions, threads)
        return {t: everyone.get(t, []) for t in self._thread_ids}

    def _claim(self, assignment: Mapping[str, list[TopicPartition]]) -> bool:
        claimed: list[tuple[TopicPartition, str]] = []
        for thread, tps in assignment.items():
            for topic, partition in tps:
                if not self.zk.claim_partition(self.group, topic, partition, thread):
                    logger.info(
                        "%s-%d is still owned by another member; releasing and retrying",
                        topic,
                        partition,
                    )
                    for (t, p), owner in claimed:
                        self.zk.release_partition(self.group, t, p, owner)
                    return False
                claimed.append((TopicPartition(topic, partition), thread))
        return True

    def _release_all(self) -> None:
        """Commit what was consumed, then give up every owned partition."""
        with self._lock:
            # Chunks in flight are now stale, and no fetch can start from the old
            # positions under the new generation.
            self._generation += 1
            self._positions.clear()
            owned = dict(self._owned)
        for stream in self._streams.values():
            stream._drain()
        if self.auto_commit:
            self._commit()
        for (topic, partition), thread in owned.items():
            self.zk.release_partition(self.group, topic, partition, thread)
        with self._lock:
            self._owned.clear()

    def _resume(self, assignment: Mapping[str, list[TopicPartition]]) -> None:
        owned = {tp: thread for thread, tps in assignment.items() for tp in tps}
        committed = self._offsets.committed(sorted(owned)) if owned else {}
        positions = {}
        for tp in owned:
            offset = committed.get(tp, -1)
            if offset < 0:
                reset = EARLIEST if self.auto_offset_reset == "smallest" else LATEST
                offset = self._fetch.offsets_before(tp[0], tp[1], reset)
            positions[tp] = offset
        with self._lock:
            self._generation += 1  # a fetch begun during the rebalance is stale
            self._owned = owned
            self._positions = dict(positions)
            self._consumed_at = dict(positions)
            self._committed = {tp: o for tp, o in committed.items() if o >= 0}
        if positions and not self._suspended.is_set():
            self._fetching.set()

    # -- fetching ----------------------------------------------------------------------

    def _fetch_loop(self) -> None:
        while not self._stopped.is_set():
            if not self._fetching.wait(0.2):
                continue
            with self._lock:
                generation = self._generation
                positions = dict(self._positions)
                owners = dict(self._owned)
            if not positions:  # a rebalance is under way
                self._stopped.wait(0.05)
                continue
            try:
                results = self._fetch.multi_fetch(positions, self.fetch_max_bytes)
            except OffsetOutOfRangeError as exc:
                logger.warning("%s; resetting to the %s offset", exc, self.auto_offset_reset)
                self._reset_out_of_range(positions, generation)
                continue
            except ConsumerError as exc:
                logger.warning("fetch for group %s failed: %s", self.group, exc)
                self._stopped.wait(0.5)
                continue
            for tp, result in results.items():
                with self._lock:
                    if self._generation != generation:
                        break
                    self._positions[tp] = result.next_offset
                if result.records:
                    chunk = _Chunk(tp, generation, result.records)
                    if not self._stream_for(tp[0], owners[tp])._put(chunk, self._stopped):
                        return

    def _reset_out_of_range(self, positions: Mapping[TopicPartition, int], generation: int) -> None:
        reset = EARLIEST if self.auto_offset_reset == "smallest" else LATEST
        for (topic, partition), offset in positions.items():
            try:
                self._fetch.fetch(topic, partition, offset, 1)
            except OffsetOutOfRangeError:
                fresh = self._fetch.offsets_before(topic, partition, reset)
                with self._lock:
                    if self._generation == generation:
                        self._positions[TopicPartition(topic, partition)] = fresh
                        self._consumed_at[TopicPartition(topic, partition)] = fresh

    def _stream_for(self, topic: str, thread_id: str) -> Stream:
        key = (topic if self._pattern == "static" else "", thread_id)
        return self._streams[key]

    def _consumed(self, tp: TopicPartition, next_offset: int, generation: int) -> bool:
        """A stream returns a record; False when its partition moved away since."""
        with self._lock:
            if generation != self._generation or self._suspended.is_set():
                return False
            self._consumed_at[tp] = next_offset
            return True

    # -- committing --------------------------------------------------------------------

    def commit_offsets(self) -> None:
        """Commit the offsets consumed so far (after what each stream has returned)."""
        self._commit()

    def _commit(self) -> None:
        if self._suspended.is_set():  # another member may own the partitions by now
            logger.info("%s: not committing while cut off from ZooKeeper", self.consumer_id)
            return
        # One commit at a time: two racing could store an older position last.
        with self._commit_lock:
            with self._lock:
                pending = {  # consumed_at was set under the current generation
                    tp: offset
                    for tp, offset in self._consumed_at.items()
                    if tp in self._owned and self._committed.get(tp) != offset
                }
            if not pending:
                return
            self._offsets.commit(pending)
            with self._lock:
                self._committed.update(pending)

    def _commit_loop(self) -> None:
        while not self._stopped.wait(self.auto_commit_interval_ms / 1000):
            if self.auto_commit and self._fetching.is_set():
                try:
                    self._commit()
                except ConsumerError as exc:
                    logger.warning("auto-commit of group %s failed: %s", self.group, exc)

    def owned(self) -> dict[TopicPartition, str]:
        """The partitions this consumer owns now, with the owning thread id."""
        with self._lock:
            return dict(self._owned)

    def committed(self) -> dict[TopicPartition, int]:
        """What this consumer last committed."""
        with self._lock:
            return dict(self._committed)

    # -- stopping ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop fetching, commit (with ``auto_commit``), release the partitions,
        leave the group; the streams end after what they hold."""
        if self._stopped.is_set():
            return
        self._fetching.clear()
        self._stopped.set()
        for thread in self._threads:
            thread.join(30)
        try:
            if self.auto_commit:
                self._commit()
            with self._lock:
                owned = dict(self._owned)
                self._owned.clear()
            for (topic, partition), thread_id in owned.items():
                self.zk.release_partition(self.group, topic, partition, thread_id)
            self.zk.delete_recursive(layout.consumer_id_path(self.group, self.consumer_id))
        except (ZkError, ConsumerError) as exc:
            logger.warning("shutdown of %s: %s", self.consumer_id, exc)
        finally:
            for stream in self._streams.values():  # the fetcher has stopped: no race
                stream._drain()
                stream._queue.put_nowait(_END)
            self.zk.stop()
            self._fetch.close()
            self._offsets.close()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
