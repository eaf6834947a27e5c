"""The group consumer on a real broker and ZooKeeper: members share a topic's
partitions, a joining and a leaving member move them, no partition is ever
owned twice, and nothing consumed is delivered again."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.consumer.assignment import Whitelist
from annal.consumer.group import ConsumerTimeout, GroupConsumer, Stream
from annal.consumer.simple import ConsumerRecord
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import Producer
from annal.zk.client import ZkClient
from runcli import annal

QUICK = {"offsets.topic.num.partitions": "3"}


class Reader:
    """Drains a stream on its own thread into ``records``."""

    def __init__(self, stream: Stream) -> None:
        self.records: list[ConsumerRecord] = []
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: Stream) -> None:
        while True:
            try:
                for record in stream:
                    self.records.append(record)
                return  # the stream ended: shutdown
            except ConsumerTimeout:
                continue

    def join(self) -> None:
        self._thread.join(30)


def consumer(zk_connect: str, name: str) -> GroupConsumer:
    return GroupConsumer(
        zk_connect,
        "readers",
        consumer_id=name,
        auto_offset_reset="smallest",
        auto_commit_interval_ms=200,
        rebalance_backoff_ms=200,
        rebalance_max_retries=20,
        consumer_timeout_ms=200,
    )


def produce(endpoint: str, tag: bytes, count: int) -> list[bytes]:
    values = [tag + b"-%04d" % i for i in range(count)]
    with Producer(endpoint) as producer:
        for i, value in enumerate(values):
            producer.send("events", value=value, partition=i % 4)
        producer.flush(30)
    return values


@pytest.mark.timeout(240)
def test_members_share_partitions_and_hand_them_over(
    zk_connect: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker = broker_factory(1, QUICK)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("events", partitions=4)
    first = produce(broker.endpoint, b"first", 400)

    a = consumer(zk_connect, "a")
    reader_a = Reader(a.create_message_streams({"events": 1})["events"][0])
    wait_until(lambda: len(reader_a.records) == 400, 60, "a read everything")
    assert sorted(r.value for r in reader_a.records) == sorted(first)
    assert len(a.owned()) == 4
    a.commit_offsets()
    described = annal("consumer-groups", "--zookeeper", zk_connect, "--describe",
                      "--group", "readers", "--json")  # fmt: skip
    assert described.returncode == 0, described.stderr
    rows = [json.loads(line) for line in described.stdout.splitlines()]
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["owner"])
            for r in rows] == [(p, 100, 100, 0, "a-0") for p in range(4)]  # fmt: skip
    listed = annal("consumer-groups", "--zookeeper", zk_connect, "--list")
    assert listed.stdout.split() == ["readers"]
    table = annal("consumer-groups", "--zookeeper", zk_connect, "--describe", "--group", "readers")
    assert table.stdout.splitlines()[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"
    ]  # fmt: skip
    assert annal("consumer-groups", "--zookeeper", zk_connect, "--describe").returncode == 2

    b = consumer(zk_connect, "b")
    reader_b = Reader(b.create_message_streams({"events": 1})["events"][0])
    wait_until(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, 60, "two partitions each")
    # a member takes its partitions in memory and then claims them in ZooKeeper:
    # wait for the claims too, rather than catch the moment between
    with ZkClient(zk_connect) as zk:
        wait_until(
            lambda: sorted(zk.partition_owners("readers")) == [("events", p) for p in range(4)],
            30,
            "every partition claimed in ZooKeeper",
        )
        owners = zk.partition_owners("readers")
    assert sorted(set(owners.values())) == ["a-0", "b-0"]

    second = produce(broker.endpoint, b"second", 400)

    def seen() -> list[bytes | None]:
        return [r.value for r in reader_a.records + reader_b.records]

    wait_until(lambda: len(seen()) >= 800, 60, "the second batch read")
    assert sorted(v for v in seen() if v is not None) == sorted(first + second)  # once each

    b.shutdown()
    reader_b.join()
    wait_until(lambda: len(a.owned()) == 4, 60, "a owning everything again")
    third = produce(broker.endpoint, b"third", 100)
    wait_until(lambda: len(seen()) >= 900, 60, "the third batch read by a")
    assert sorted(v for v in seen() if v is not None) == sorted(first + second + third)
    a.shutdown()
    reader_a.join()

    # a new member of the group starts where the group left off
    c = consumer(zk_connect, "c")
    try:
        readers = [Reader(s) for s in c.create_message_streams({"events": 2})["events"]]
        fourth = produce(broker.endpoint, b"fourth", 40)
        wait_until(lambda: len(c.owned()) == 4, 60, "c owning everything")
        assert sorted(set(c.owned().values())) == ["c-0", "c-1"]  # two streams, two threads

        def read_by_c() -> list[bytes]:
            return sorted(r.value for x in readers for r in x.records if r.value is not None)

        wait_until(lambda: len(read_by_c()) >= 40, 60, "c reading")
        assert read_by_c() == sorted(fourth)
    finally:
        c.shutdown()
    with ZkClient(zk_connect) as zk:
        assert zk.partition_owners("readers") == {}  # all released


def test_bad_settings(zk_connect: str) -> None:
    with pytest.raises(ValueError, match="a group id is needed"):
        GroupConsumer(zk_connect, "")
    with pytest.raises(ValueError, match="auto_offset_reset must be smallest or largest"):
        GroupConsumer(zk_connect, "g", auto_offset_reset="earliest")


@pytest.mark.timeout(180)
def test_filter_streams_follow_new_topics(
    zk_connect: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    """A whitelist stream carries every matching topic, including one created
    after the consumer started; other topics stay out."""
    broker = broker_factory(1, QUICK)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("logs-a", partitions=2)
        admin.create_topic("metrics", partitions=1)
    consumer = GroupConsumer(
        zk_connect, "filtered", auto_offset_reset="smallest", consumer_timeout_ms=200,
        rebalance_backoff_ms=200,
    )  # fmt: skip
    try:
        (stream,) = consumer.create_message_streams_by_filter(Whitelist("logs-.*"))
        reader = Reader(stream)
        with Producer(broker.endpoint) as producer:
            for topic in ("logs-a", "metrics"):
                producer.send(topic, value=topic.encode())
            producer.flush(30)
        wait_until(lambda: [r.topic for r in reader.records] == ["logs-a"], 60, "logs-a read")
        with AdminClient(broker.endpoint) as admin:
            admin.create_topic("logs-b", partitions=1)
        wait_until(lambda: ("logs-b", 0) in consumer.owned(), 60, "logs-b picked up")
        with Producer(broker.endpoint) as producer:
            producer.send("logs-b", value=b"logs-b").result(30)
        wait_until(lambda: len(reader.records) == 2, 60, "logs-b read")
        assert sorted(r.topic for r in reader.records) == ["logs-a", "logs-b"]
        with pytest.raises(ValueError, match="has its streams already"):
            consumer.create_message_streams({"metrics": 1})
    finally:
        consumer.shutdown()


@pytest.mark.timeout(180)
def test_a_member_that_lost_its_session_rejoins(
    zk_connect: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    """When ZooKeeper expires the consumer's session (its registration and owner
    znodes go), it registers again and takes its partitions back."""
    from kazoo.client import KazooClient

    broker = broker_factory(1, QUICK)
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic("events", partitions=4)
    member = consumer(zk_connect, "m")
    try:
        reader = Reader(member.create_message_streams({"events": 1})["events"][0])
        wait_until(lambda: len(member.owned()) == 4, 60, "m owning every partition")
        # Expire m's session: a second client with the same session id closes it.
        hosts = zk_connect.partition("/")[0]
        session_id, password = member.zk.kazoo.client_id
        twin = KazooClient(hosts=hosts, client_id=(session_id, password))
        twin.start(timeout=10)
        twin.stop()
        twin.close()
        with ZkClient(zk_connect) as zk:
            wait_until(lambda: zk.consumer_registrations("readers") == {}, 60, "m's znodes gone")
            wait_until(
                lambda: (
                    list(zk.consumer_registrations("readers")) == ["m"]
                    and list(zk.partition_owners("readers").values()) == ["m-0"] * 4
                ),
                60,
                "m back, owning every partition",
            )
        values = produce(broker.endpoint, b"after", 20)
        wait_until(lambda: len(reader.records) >= 20, 60, "m reading again")
        assert sorted(r.value for r in reader.records) == sorted(values)
    finally:
        member.shutdown()
