"""Fetches of one partition over a broker's Kafka listener: the bulk readers' transport.

A reader that moves megabytes per fetch and wants the raw batches (the Spark
reader) pays per byte in the transport.  Over gRPC, serving and receiving a
megabyte costs about a millisecond of CPU at each end; a Kafka-protocol
Fetch carries the same batches as one length-prefixed frame on a plain TCP
connection, for about half of that.  Every broker whose Metadata names a
PLAINTEXT Kafka listener (``kafka_host``/``kafka_port``) serves Fetch v4 to v12
there, and on the listeners of every other security protocol it serves;
``SimpleConsumer.fetch_raw`` uses the listener of the client's own security
protocol (``PLAINTEXT``, ``SSL``: TLS with the client's certificate, or
``SASL_SSL``: TLS and a SASL login as the client's user, see
``kafkaproto/client_security.py``) where the leader has one, and gRPC
otherwise.

``KafkaFetchConnection`` is one blocking connection to one listener
(``kafkaproto/client.py``), one request at a time.  Any failure of the
connection itself (reset, closed, timed out, an answer that does not parse)
closes it and raises ``FetchConnectionError``: the caller treats it as the
broker being unavailable, refreshes metadata and tries again.  A listener
that cannot be connected to at all raises ``ListenerUnreachable`` (within
``CONNECT_TIMEOUT_S``): the caller goes over gRPC to that broker instead,
which is the right thing when a firewall lets only the gRPC port through,
and costs nothing more when the broker is down (the gRPC call fails too).

Thread safety: ``fetch`` and ``close`` may be called from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from annal.client.security import Security
from annal.consumer.transactions import AbortedTransaction
from annal.kafkaproto.client import (
    CONNECT_TIMEOUT_S,
    FETCH_KEY,
    FETCH_VERSION,
    FetchPartition,
    KafkaConnection,
    ListenerUnreachable,
    fetch_request,
)
from annal.kafkaproto.client import (
    ConnectionFailed as FetchConnectionError,
)
from annal.kafkaproto.client_security import ConnectionSecurity, SaslLogin

__all__ = [
    "CONNECT_TIMEOUT_S",
    "FetchConnectionError",
    "KafkaFetchConnection",
    "ListenerUnreachable",
    "PartitionAnswer",
]


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """One partition's part of a Fetch answer: Kafka's error number, the high
    watermark and log start offset, the batches, what went wrong in words, and
    (KIP-98) the aborted transactions a read_committed fetch is answered and
    the last stable offset."""

    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    message: str = ""
    aborted_transactions: tuple[AbortedTransaction, ...] = ()
    last_stable_offset: int = -1


def connection_security(security: Security) -> ConnectionSecurity:
    """A client's security settings as its Kafka connections take them."""
    login = None
    if security.sasl_username is not None:
        login = SaslLogin(security.sasl_mechanism, security.sasl_username,
                          security.sasl_password or "")  # fmt: skip
    return ConnectionSecurity(
        security.protocol, security.cafile, security.certfile, security.keyfile, login
    )


class KafkaFetchConnection:
    """See the module docstring; ``endpoint`` is the listener's ``host:port``."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float,
        client_id: str = "annal",
        security: Security | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._connection = KafkaConnection(
            endpoint, timeout_s, client_id, connection_security(security or Security())
        )

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        isolation_level: int = 0,
    ) -> PartitionAnswer:
        """One Fetch of ``topic``-``partition`` from ``offset``, as a consumer
        (replica id -1) of ``isolation_level`` (0 read_uncommitted, 1
        read_committed)."""
        values = fetch_request(
            -1,
            max_wait_ms,
            min_bytes,
            max_bytes,
            {topic: [FetchPartition(partition, offset, max_bytes)]},
        )
        values["isolation_level"] = isolation_level
        body = self._connection.exchange(FETCH_KEY, FETCH_VERSION, values)
        if body.error_code.value != 0:
            # a session error; this client never opens sessions
            return PartitionAnswer(body.error_code.value, -1, -1, b"")
        for t in body.responses:
            for p in t.partitions:
                if t.topic == topic and p.partition_index == partition:
                    return PartitionAnswer(
                        p.error_code.value,
                        p.high_watermark,
                        p.log_start_offset,
                        p.records or b"",
                        aborted_transactions=tuple(
                            AbortedTransaction(a.producer_id, a.first_offset)
                            for a in p.aborted_transactions or ()
                        ),
                        last_stable_offset=p.last_stable_offset,
                    )
        self._connection.close()
        raise FetchConnectionError(
            f"the Fetch answer from {self.endpoint} does not name {topic}-{partition}"
        )

    def close(self) -> None:
        self._connection.close()
