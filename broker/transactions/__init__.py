"""Transactions (KIP-98): the transaction coordinator and its log, ``__transaction_state``.

``log_schema``: the log's records; ``metadata``: one transactional id's state
and its moves; ``coordinator``: the coordinator; ``markers``: COMMIT/ABORT
markers to partition leaders; ``api``: the rpcs' authorization and answers.
See docs/transactions.md.
"""
