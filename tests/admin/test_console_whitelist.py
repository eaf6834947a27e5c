"""kafka-console-consumer.sh's --whitelist, --key-deserializer/--value-deserializer
and --skip-message-on-error, against a real broker (the Kafka group too)."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess
from annal.producer.producer import Producer
from runcli import annal

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    process = broker_factory()
    with AdminClient(process.endpoint) as admin:
        for topic in ("orders-eu", "orders-us", "payments", "numbers"):
            admin.create_topic(topic, partitions=2)
    with Producer(process.endpoint) as producer:
        for topic in ("orders-eu", "orders-us", "payments"):
            producer.send(topic, value=f"in {topic}".encode(), partition=1).result(30)
        producer.send("numbers", key=struct.pack(">q", -7), value=struct.pack(">d", 1e10),
                      partition=0).result(30)  # fmt: skip
        producer.send("numbers", key=b"short", value=struct.pack(">d", 0.5),
                      partition=0).result(30)  # fmt: skip
    return process


def test_whitelist_reads_every_matching_topic(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.endpoint, "--from-beginning", "--timeout-ms", "1500"]
    run = annal("console-consumer", *bs, "--whitelist", "orders-.*")
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == ["in orders-eu", "in orders-us"]
    assert "Processed a total of 2 messages" in run.stderr
    # the whole name must match, as Java's Pattern.matches; internal topics left out
    either = annal("console-consumer", *bs, "--whitelist", "orders-eu|pay.*")
    assert sorted(either.stdout.splitlines()) == ["in orders-eu", "in payments"]
    assert annal("console-consumer", *bs, "--whitelist", "orders").stdout == ""
    # a Kafka-protocol group subscribed to the matching topics
    grouped = annal("console-consumer", *bs, "--whitelist", "orders-.*|payments",
                    "--group", "watchers")  # fmt: skip
    assert grouped.returncode == 0, grouped.stderr
    assert len(grouped.stdout.splitlines()) == 3
    for argv, named in (
        (["--whitelist", "orders-(", ], "not a regular expression"),
        (["--whitelist", "o.*", "--topic", "payments"], "not allowed with argument"),
        (["--whitelist", "o.*", "--partition", "0"], "--partition needs --topic"),
    ):  # fmt: skip
        refused = annal("console-consumer", *bs, *argv)
        assert refused.returncode == 2 and named in refused.stderr, (argv, refused.stderr)
    # refused before it looks for the cluster
    zk = annal("console-consumer", "--zookeeper", "127.0.0.1:2181/annal",
               "--whitelist", "o.*", "--group", "g")  # fmt: skip
    assert zk.returncode == 2 and "--whitelist with --zookeeper and --group" in zk.stderr


def test_deserializers_print_what_the_bytes_mean(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "numbers", "--partition",
          "0", "--offset", "earliest", "--timeout-ms", "1500", "--property",
          "print.key=true"]  # fmt: skip
    longs = "org.apache.kafka.common.serialization.LongDeserializer"
    # the second record's key is not 8 bytes: the consumer ends, naming the record
    ended = annal("console-consumer", *bs, "--key-deserializer", longs,
                  "--value-deserializer", "DoubleDeserializer")  # fmt: skip
    assert ended.returncode == 1
    assert ended.stdout.splitlines() == ["-7\t1.0E10"]
    assert "the record of numbers-0 at offset 1: LongDeserializer: size of data received " \
           "is 5 bytes, not 8" in ended.stderr  # fmt: skip
    assert "Processed a total of 1 messages" in ended.stderr
    skipped = annal("console-consumer", *bs, "--key-deserializer", longs,
                    "--value-deserializer", "DoubleDeserializer",
                    "--skip-message-on-error")  # fmt: skip
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.splitlines() == ["-7\t1.0E10"]
    assert "skipped the record of numbers-0 at offset 1" in skipped.stderr
    # the formatter's properties name them too; the flags win over them
    by_property = annal("console-consumer", *bs, "--property", "value.deserializer=" +
                        "org.apache.kafka.common.serialization.DoubleDeserializer",
                        "--property", "key.deserializer=StringDeserializer")  # fmt: skip
    assert by_property.stdout.splitlines()[1] == "short\t0.5"
    unknown = annal("console-consumer", *bs, "--value-deserializer", "AvroDeserializer")
    assert unknown.returncode == 2
    assert "deserializer 'AvroDeserializer' is not available (known: StringDeserializer" \
           in unknown.stderr  # fmt: skip
