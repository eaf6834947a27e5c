"""Followers copy their leaders' logs: real brokers, byte for byte, across a restart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.storage.files import partition_dir_name


def segment_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """Every ``.log`` of the partition on ``broker``, concatenated in offset order."""
    directory: Path = broker.log_dir / partition_dir_name(topic, partition)
    if not directory.is_dir():
        return b""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def produce(endpoint: str, topic: str, partitions: int, count: int, tag: bytes) -> None:
    with Producer(endpoint, linger_ms=5) as producer:
        for i in range(count):
            producer.send(topic, value=tag + b"-%06d" % i, partition=i % partitions)
        producer.flush(60)


@pytest.mark.timeout(240)
def test_followers_copy_the_leaders_log_byte_for_byte(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    brokers = {b.broker_id: b for b in (broker_factory(1), broker_factory(2))}
    with AdminClient(brokers[1].endpoint) as admin:
        admin.create_topic(
            "copied", partitions=2, replication_factor=2, config={"segment.bytes": "16384"}
        )
        partitions = admin.describe_topics(["copied"])[0].partitions
    leaders = {p.partition: p.leader for p in partitions}
    assert set(leaders.values()) == {1, 2}  # each broker leads one and follows the other

    def copied() -> bool:
        return all(
            segment_bytes(brokers[3 - leader], "copied", partition)
            == segment_bytes(brokers[leader], "copied", partition)
            for partition, leader in leaders.items()
        )

    produce(brokers[1].endpoint, "copied", 2, 4000, b"first")
    wait_until(copied, 60, "followers holding the leaders' bytes")
    assert len(list((brokers[1].log_dir / "copied-0").glob("*.log"))) > 1  # several segments

    # A follower that was down catches up from where it stopped.
    follower_of_0 = brokers[3 - leaders[0]]
    follower_of_0.kill()
    with Producer(brokers[leaders[0]].endpoint) as producer:
        for i in range(1000):
            producer.send("copied", value=b"while-down-%04d" % i, partition=0)
        producer.flush(60)
    follower_of_0.start()
    leader_of_0 = brokers[leaders[0]]

    def caught_up() -> bool:
        return segment_bytes(follower_of_0, "copied", 0) == segment_bytes(leader_of_0, "copied", 0)

    wait_until(caught_up, 60, "the follower caught up")
