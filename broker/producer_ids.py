"""InitProducerId: producer ids for idempotent producers (Kafka's ProducerIdManager).

Any broker answers.  It hands out the ids of a block of
``PRODUCER_ID_BLOCK_SIZE`` that it reserved in ZooKeeper
(``zk/producer_ids.py``, ``/latest_producer_id_block``), one after the
other, each with epoch 0; when the block is used up it reserves the next
one.  Reservations are conditional writes on the znode's version, so two
brokers never hand out the same id, and a restarted broker starts a new
block rather than reuse its last one.

A request with a transactional id is the transaction coordinator's
(``broker/transactions/``): it keeps one producer id per transactional id and
bumps its epoch on each InitProducerId.  A reservation that fails (ZooKeeper
unreachable) is answered COORDINATOR_NOT_AVAILABLE, which clients retry.

Authorization (docs/security.md), as Kafka 2.x: an idempotent producer (no
transactional id) needs IdempotentWrite on the cluster or Write on some topic
(else CLUSTER_AUTHORIZATION_FAILED); a transactional id needs Write on it
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

Requests and answers are the broker's own types (``broker/requests/producer_types.py``),
which each protocol's edge adapts to.

Thread safety: ``ProducerIdManager`` is thread-safe.  ``_lock`` guards the
current block and the next id; ``_reserve_lock`` lets one thread at a time
reserve a block.  Handing out an id from the current block runs inline on
the event loop; a reservation (ZooKeeper I/O) runs on the admin pool.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from annal.broker.requests import producer_types as pt
from annal.broker.security.authorization import (
    ALLOW_ALL,
    INTERNAL,
    TOPIC,
    TRANSACTIONAL_ID,
    RequestAuthorizer,
    cluster_denial,
    denial,
)
from annal.security.acl import AclOperation, Resource
from annal.security.session import Session
from annal.zk.client import ZkError
from annal.zk.layout import ProducerIdBlock

from annal import errors
from annal.errors import ErrorCode

if TYPE_CHECKING:
    from annal.broker.transactions.api import TransactionApi


class ProducerIdManager:
    """Producer ids from blocks reserved through ``reserve``; see the module docstring."""

    def __init__(self, reserve: Callable[[], ProducerIdBlock]) -> None:
        self._reserve = reserve
        self._lock = threading.Lock()
        self._reserve_lock = threading.Lock()
        self._block: ProducerIdBlock | None = None
        self._next = 0

    def next_from_block(self) -> int | None:
        """The next id of the current block; None when a new block is needed."""
        with self._lock:
            block = self._block
            if block is None or self._next > block.last:
                return None
            producer_id = self._next
            self._next += 1
            return producer_id

    def generate(self) -> int:
        """The next id, reserving a new block first when needed (blocking: ZooKeeper).
        Raises ZkError when the reservation fails."""
        with self._reserve_lock:
            producer_id = self.next_from_block()
            if producer_id is not None:
                return producer_id
            block = self._reserve()
            with self._lock:
                self._block = block
                self._next = block.first + 1
            return block.first


class InitProducerIdApi:
    """The InitProducerId rpc, on the event loop."""

    def __init__(
        self,
        ids: ProducerIdManager,
        run_admin: Callable[[Callable[[], Any]], Awaitable[Any]],
        authorizer: RequestAuthorizer = ALLOW_ALL,
    ) -> None:
        self._ids = ids
        self._run_admin = run_admin
        self._authorizer = authorizer
        # a transactional id's InitProducerId goes to the transaction coordinator
        self.transactions: TransactionApi | None = None

    async def new_producer_id(self) -> int:
        """A fresh producer id (the transaction coordinator's); raises ZkError when
        no block can be reserved."""
        producer_id = self._ids.next_from_block()
        if producer_id is None:
            producer_id = cast(int, await self._run_admin(self._ids.generate))
        return producer_id

    async def init_producer_id(
        self, request: pt.InitProducerIdRequest, session: Session = INTERNAL
    ) -> pt.InitProducerIdResponse:
        """A new producer id at epoch 0, if the caller may have one (module docstring)."""
        authorizer = self._authorizer
        if request.transactional_id:
            resource = Resource(TRANSACTIONAL_ID, request.transactional_id)
            if not authorizer.allowed(session, AclOperation.WRITE, resource):
                return refused_init(
                    errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    denial(session, AclOperation.WRITE, resource),
                )
            if self.transactions is None:
                return refused_init(
                    errors.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is starting"
                )
            return await self.transactions.init_producer_id(request, session)
        idempotent = AclOperation.IDEMPOTENT_WRITE
        if not authorizer.cluster(
            session, idempotent, log_denied=False
        ) and not authorizer.any_resource(session, AclOperation.WRITE, TOPIC):
            return refused_init(
                errors.CLUSTER_AUTHORIZATION_FAILED,
                f"{cluster_denial(session, idempotent)}, nor Write any topic",
            )
        try:
            producer_id = await self.new_producer_id()
        except ZkError as exc:
            return refused_init(
                errors.COORDINATOR_NOT_AVAILABLE, f"cannot reserve producer ids: {exc}"
            )
        return pt.InitProducerIdResponse(errors.NONE.number, producer_id, 0)


def refused_init(error: ErrorCode, message: str) -> pt.InitProducerIdResponse:
    """An InitProducerId answer refusing with ``error`` (no producer id or epoch)."""
    return pt.InitProducerIdResponse(error.number, pt.NO_PRODUCER_ID, pt.NO_PRODUCER_EPOCH, message)
