"""What the data path (``data_api.py``) does for transactions (KIP-98).

* Isolation levels, Kafka's numbers: a Fetch or ListOffsets asks for
  ``READ_UNCOMMITTED`` (0: up to the high watermark) or ``READ_COMMITTED``
  (1: up to the last stable offset, with the aborted transactions of what it
  reads); anything else is a malformed request (``check_isolation_level``).
* A Produce whose batches are transactional needs a transactional id and Write
  on it (``TransactionalId`` resource), else every partition is answered
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka's handleProduceRequest
  answers.  Like Kafka (``RequestUtils.hasTransactionalRecords``) the first
  batch of each partition decides (``has_transactional_batches``); a request
  naming a transactional id is held to the same check whatever its batches.

Thread safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from annal.broker.requests import request_checks as checks
from annal.broker.requests.data_types import AbortedTransaction
from annal.broker.security.authorization import TRANSACTIONAL_ID, RequestAuthorizer, denial
from annal.security.acl import AclOperation, Resource
from annal.security.session import Session
from annal.storage.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
)
from annal.storage.txn_index import AbortedTxn

from annal import errors

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def check_isolation_level(value: int) -> None:
    """InvalidRequest unless ``value`` is one of Kafka's isolation levels."""
    if value not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise checks.InvalidRequest(
            "isolation_level", value, "0 (read_uncommitted) or 1 (read_committed)"
        )


def has_transactional_batches(payloads: Iterable[bytes]) -> bool:
    """Whether the first batch of any partition's records is a transactional v2
    batch (its attributes' bit 4).  Bytes that are no whole v2 batch are not:
    the log refuses them as corrupt."""
    return any(_first_is_transactional(records) for records in payloads)


def _first_is_transactional(records: bytes) -> bool:
    if len(records) < RECORD_BATCH_OVERHEAD or records[MAGIC_OFFSET] != CURRENT_MAGIC:
        return False
    length = int.from_bytes(records[BATCH_LENGTH_OFFSET:LOG_OVERHEAD], signed=True)
    if not RECORD_BATCH_OVERHEAD <= length + LOG_OVERHEAD <= len(records):
        return False
    return bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG)


def transactional_refusal(
    authorizer: RequestAuthorizer, session: Session, transactional_id: str
) -> checks.Refusal | None:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED for transactional batches without a
    transactional id, or from a caller that may not Write on it; None to go on."""
    if not transactional_id:
        return checks.Refusal(
            errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional records need the producer's transactional id",
        )
    resource = Resource(TRANSACTIONAL_ID, transactional_id)
    if not authorizer.allowed(session, AclOperation.WRITE, resource):
        return checks.Refusal(
            errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            denial(session, AclOperation.WRITE, resource),
        )
    return None


def aborted_transactions(aborted: Sequence[AbortedTxn] | None) -> list[AbortedTransaction]:
    """The answer's aborted transactions (producer id, first offset)."""
    if not aborted:
        return []
    return [AbortedTransaction(a.producer_id, a.first_offset) for a in aborted]
