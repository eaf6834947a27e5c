"""``annal dump-log --transaction-log-decoder``: ``__transaction_state`` records as text.

Each record's key and payload are printed as kafka-dump-log.sh prints them
with its transaction log decoder: key
``transaction_metadata::transactionalId=ID``, payload
``producerId:P,producerEpoch:E,state=S,partitions=[t-0,...],txnLastUpdateTimestamp=T,txnTimeoutMs=M``
(``<DELETE>`` for a tombstone).  A record the schema does not describe is
printed with the reason in place of its key and payload, and the dump goes on
(docs/transactions.md).
"""

from __future__ import annotations

from annal.broker.transactions.log_schema import TxnLogSchemaError, describe_record
from annal.storage.records import Record


def transaction_key_value(record: Record) -> tuple[str, str]:
    """(key, payload) of a ``__transaction_state`` record, as Kafka's decoder prints them."""
    if record.key is None:
        return "<no key: not a transaction log record>", "-"
    try:
        return describe_record(record.key, record.value)
    except TxnLogSchemaError as exc:
        return f"<undecodable: {exc}>", "-"
