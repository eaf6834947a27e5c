"""Blocks of idempotent producer ids, reserved in ZooKeeper (Kafka's ZkProducerIdManager).

Every broker hands out producer ids (InitProducerId) from a block of
``PRODUCER_ID_BLOCK_SIZE`` it reserved in ``/latest_producer_id_block``.  A
reservation reads the znode (data and version), computes the block after
the one it names, and writes it back conditioned on the version read; a
broker that lost the race reads again and takes the block after the
winner's.  So no two brokers ever hold overlapping blocks, across restarts
too: a restarted broker reserves a new block and never reuses its old one.

A write that reached the server while the client saw the connection fail
is retried by ``ZkClient`` and then loses on the version (or finds the
znode created): the broker reads again and reserves the next block, so the
block it wrote is skipped, never handed out twice.
"""

from __future__ import annotations

import logging

from .client import StaleVersionError, ZkClient, ZkError
from .layout import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock

logger = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
MAX_ATTEMPTS = 100


def reserve_producer_id_block(
    zk: ZkClient, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE
) -> ProducerIdBlock:
    """Reserve the next block of ``size`` producer ids for ``broker_id``.

    Raises ZkError when ZooKeeper fails, the ids are exhausted, or other
    brokers won ``MAX_ATTEMPTS`` races in a row."""
    for _ in range(MAX_ATTEMPTS):
        found = zk.get_producer_id_block()
        if found is None or not found[0]:
            block = ProducerIdBlock(broker_id, 0, size - 1)
        else:
            current = ProducerIdBlock.decode(found[0])
            if current.last > INT64_MAX - size:
                raise ZkError(f"producer ids are exhausted: the last block ends at {current.last}")
            block = ProducerIdBlock(broker_id, current.last + 1, current.last + size)
        if found is None:
            if zk.create_producer_id_block(block.encode()):
                break
            continue  # another broker created it first
        try:
            zk.set_producer_id_block(block.encode(), found[1])
        except StaleVersionError:
            logger.debug("producer id block %d..%d taken meanwhile; again", block.first, block.last)
            continue
        break
    else:
        raise ZkError(f"could not reserve a producer id block in {MAX_ATTEMPTS} attempts")
    logger.info("broker %d reserved producer ids %d..%d", broker_id, block.first, block.last)
    return block
