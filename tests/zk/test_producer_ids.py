"""Producer id blocks in ZooKeeper: disjoint under contention, Kafka's JSON."""

from __future__ import annotations

import json
import threading

import pytest
from annal.zk import layout
from annal.zk.client import ZkClient
from annal.zk.layout import ProducerIdBlock
from annal.zk.producer_ids import reserve_producer_id_block

pytestmark = pytest.mark.timeout(120)


def test_blocks_follow_each_other_in_kafkas_json(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        first = reserve_producer_id_block(zk, 1)
        second = reserve_producer_id_block(zk, 2)
        found = zk.get(layout.LATEST_PRODUCER_ID_BLOCK)
    assert first == ProducerIdBlock(1, 0, 999)
    assert second == ProducerIdBlock(2, 1000, 1999)
    assert found is not None
    assert json.loads(found[0]) == {
        "version": 1,
        "broker": 2,
        "block_start": "1000",
        "block_end": "1999",
    }


def test_an_empty_znode_as_kafka_creates_it_starts_at_zero(zk_connect: str) -> None:
    with ZkClient(zk_connect) as zk:
        zk.create_producer_id_block(b"")
        assert reserve_producer_id_block(zk, 3) == ProducerIdBlock(3, 0, 999)


def test_brokers_racing_for_blocks_never_share_an_id(zk_connect: str) -> None:
    clients = [ZkClient(zk_connect).start() for _ in range(4)]
    blocks: list[ProducerIdBlock] = []
    lock = threading.Lock()

    def reserve(zk: ZkClient, broker_id: int) -> None:
        for _ in range(10):
            block = reserve_producer_id_block(zk, broker_id)
            with lock:
                blocks.append(block)

    threads = [threading.Thread(target=reserve, args=(zk, i)) for i, zk in enumerate(clients)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for zk in clients:
            zk.stop()
    assert len(blocks) == 40
    ordered = sorted(blocks, key=lambda b: b.first)
    assert [b.first for b in ordered] == [1000 * i for i in range(40)]
    assert all(b.last == b.first + 999 for b in ordered)
