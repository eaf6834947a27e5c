"""The data path's handlers on an event loop, with the replica manager stubbed:
what runs on the loop and what leaves it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
from annal.broker.data_api import DataApi
from annal.broker.replication.replica_manager import AppendResult, ReplicaManager
from annal.broker.requests import data_types as dt
from annal.broker.requests.delayed import Purgatories
from annal.storage.files import TopicPartition

from annal import errors

ROLLS = b"these records roll the log"


class StubReplicas:
    """Appends that record where they ran; the rolling one waits for ``release``."""

    def __init__(self) -> None:
        self.appended: list[tuple[str, int, bytes, str]] = []
        self.release = threading.Event()
        self.rolling = threading.Event()

    def roll_due(self, tp: TopicPartition, size: int) -> bool:
        return size == len(ROLLS)  # other records are shorter

    def append(self, tp: TopicPartition, records: bytes, acks: int = 1) -> AppendResult:
        if records == ROLLS:
            self.rolling.set()
            assert self.release.wait(10)
        self.appended.append((tp.topic, tp.partition, records, threading.current_thread().name))
        return AppendResult(errors.NONE, len(self.appended) - 1, len(self.appended) - 1)


def produce(topic: str, partition: int, records: bytes) -> dt.ProduceRequest:
    data = dt.PartitionProduceData(partition, records)
    return dt.ProduceRequest(1, 0, [dt.TopicProduceData(topic, [data])])


@pytest.mark.timeout(30)
def test_an_append_that_rolls_leaves_the_loop_and_keeps_its_partitions_order() -> None:
    replicas = StubReplicas()
    storage = ThreadPoolExecutor(1, thread_name_prefix="storage")

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def run_storage(fn: Any) -> Any:
            return await loop.run_in_executor(storage, fn)

        purgatories = Purgatories(loop, threading.get_ident())
        api = DataApi(cast(ReplicaManager, replicas), purgatories, run_storage)
        context: Any = None
        rolling = asyncio.ensure_future(api.produce(produce("t", 0, ROLLS), context))
        await loop.run_in_executor(None, replicas.rolling.wait, 10)
        # The loop serves other partitions while the roll is under way ...
        other = await asyncio.wait_for(api.produce(produce("t", 1, b"other"), context), 5)
        assert other.topics[0].partitions[0].error == errors.NONE.number
        # ... and a later append to the rolling partition waits its turn.
        behind = asyncio.ensure_future(api.produce(produce("t", 0, b"behind"), context))
        await asyncio.sleep(0)
        assert not behind.done()
        replicas.release.set()
        await asyncio.wait_for(asyncio.gather(rolling, behind), 10)
        assert not api._off_loop  # nothing left behind

    try:
        asyncio.run(scenario())
    finally:
        storage.shutdown()
    main = threading.current_thread().name
    assert replicas.appended == [
        ("t", 1, b"other", main),
        ("t", 0, ROLLS, "storage_0"),
        ("t", 0, b"behind", "storage_0"),
    ]
