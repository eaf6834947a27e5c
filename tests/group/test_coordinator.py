"""Committed offsets through the group coordinator, on real brokers: stored in
``__consumer_offsets``, kept across a restart, taken over by another broker when
the coordinator dies."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.consumer.simple import ConsumerError
from annal.deploy.runner import BrokerProcess

SMALL = {"offsets.topic.num.partitions": "3", "zookeeper.session.timeout.ms": "4000"}


@pytest.mark.timeout(180)
def test_commit_fetch_and_restart(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(1, SMALL)
    with GroupOffsets(broker.endpoint, "readers") as offsets:
        offsets.commit({("events", 0): 10, ("events", 1): 20})
        offsets.commit({("events", 1): 25}, metadata="after a rebalance")
        assert offsets.committed() == {("events", 0): 10, ("events", 1): 25}
        assert offsets.committed([("events", 2), ("events", 0)]) == {
            ("events", 2): -1,
            ("events", 0): 10,
        }
        with pytest.raises(ConsumerError, match="OFFSET_METADATA_TOO_LARGE"):
            offsets.commit({("events", 0): 11}, metadata="x" * 5000)
        assert offsets.committed([("events", 0)]) == {("events", 0): 10}  # unchanged
    with GroupOffsets(broker.endpoint, "others") as others:
        assert others.committed() == {}
    with AdminClient(broker.endpoint) as admin:
        (internal,) = admin.describe_topics(["__consumer_offsets"])
        assert internal.internal and len(internal.partitions) == 3
    with pytest.raises(ValueError, match="a group id is needed"):
        GroupOffsets(broker.endpoint, "")

    assert broker.stop() == 0
    broker.start()
    with GroupOffsets(broker.endpoint, "readers") as offsets:
        assert offsets.committed() == {("events", 0): 10, ("events", 1): 25}  # loaded


@pytest.mark.timeout(240)
def test_another_broker_takes_over_the_group(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    settings = {**SMALL, "offsets.topic.replication.factor": "2"}
    brokers = {i: broker_factory(i, settings) for i in (1, 2)}
    bootstrap = ",".join(b.endpoint for b in brokers.values())
    with GroupOffsets(bootstrap, "readers") as offsets:
        offsets.commit({("events", 0): 100})
        coordinator = next(b for b in brokers.values() if b.endpoint == offsets.coordinator())
        coordinator.kill()
        other = brokers[3 - coordinator.broker_id]
        # the client finds the new coordinator by itself (within its timeout)
        assert offsets.committed() == {("events", 0): 100}
        assert offsets.coordinator() == other.endpoint
        offsets.commit({("events", 0): 150})
        assert offsets.committed() == {("events", 0): 150}
