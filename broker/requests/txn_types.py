"""The transaction APIs' own request and answer types (KIP-98, KIP-664): what
``broker/transactions/api.py`` and ``broker/transactions/leader_markers.py`` take
and give.

Both protocol edges adapt to these, each once: the gRPC services from and to
annal.proto's messages (``grpc_txn.py``), the Kafka listener from and to Kafka's
(``broker/kafka/transactions.py``, ``broker/kafka/txn_markers.py``).

The field names are those of Kafka's AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, DescribeTransactions, ListTransactions and WriteTxnMarkers; errors are
Kafka's error numbers.  The per-partition answers of AddPartitionsToTxn and of
each marker of WriteTxnMarkers are one result per partition asked for, in the
order asked (annal.proto's layout); the Kafka listener groups them by topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class PartitionResult:
    """One partition's answer: NONE (0) or why not."""

    topic: str
    partition: int
    error: int


# -- AddPartitionsToTxn --------------------------------------------------------------


@dataclass(slots=True)
class AddPartitionsToTxnTopic:
    name: str
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class AddPartitionsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: list[AddPartitionsToTxnTopic] = field(default_factory=list)


@dataclass(slots=True)
class AddPartitionsToTxnResponse:
    results: list[PartitionResult] = field(default_factory=list)
    error_message: str = ""


# -- AddOffsetsToTxn and EndTxn ------------------------------------------------------


@dataclass(slots=True)
class AddOffsetsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool  # true: commit; false: abort


@dataclass(slots=True)
class TxnResponse:
    """The answer to AddOffsetsToTxn and to EndTxn."""

    error: int
    error_message: str = ""


# -- DescribeTransactions ------------------------------------------------------------


@dataclass(slots=True)
class DescribeTransactionsRequest:
    transactional_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class TransactionTopic:
    topic: str
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TransactionState:
    """One transactional id's transaction; a refused or unknown id has only its
    error (and no state)."""

    error: int
    transactional_id: str
    transaction_state: str = ""  # Kafka's names: Empty, Ongoing, PrepareCommit, ...
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1  # -1: no transaction
    producer_id: int = -1
    producer_epoch: int = -1
    topics: list[TransactionTopic] = field(default_factory=list)


@dataclass(slots=True)
class DescribeTransactionsResponse:
    transaction_states: list[TransactionState] = field(default_factory=list)


# -- ListTransactions ----------------------------------------------------------------


@dataclass(slots=True)
class ListTransactionsRequest:
    state_filters: list[str] = field(default_factory=list)  # none: every state
    producer_id_filters: list[int] = field(default_factory=list)  # none: every producer


@dataclass(slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    transaction_state: str


@dataclass(slots=True)
class ListTransactionsResponse:
    error: int
    unknown_state_filters: list[str] = field(default_factory=list)
    transaction_states: list[TransactionListing] = field(default_factory=list)


# -- WriteTxnMarkers -----------------------------------------------------------------


@dataclass(slots=True)
class WritableTxnMarkerTopic:
    name: str
    partition_indexes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class WritableTxnMarker:
    """One producer's marker: COMMIT (``transaction_result`` true) or ABORT."""

    producer_id: int
    producer_epoch: int
    transaction_result: bool
    topics: list[WritableTxnMarkerTopic] = field(default_factory=list)
    coordinator_epoch: int = 0


@dataclass(slots=True)
class WriteTxnMarkersRequest:
    markers: list[WritableTxnMarker] = field(default_factory=list)


@dataclass(slots=True)
class WritableTxnMarkerResult:
    producer_id: int
    partitions: list[PartitionResult] = field(default_factory=list)


@dataclass(slots=True)
class WriteTxnMarkersResponse:
    """One result per marker, in request order."""

    markers: list[WritableTxnMarkerResult] = field(default_factory=list)
