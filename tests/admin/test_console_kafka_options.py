"""kafka-console-producer.sh's and kafka-console-consumer.sh's options: the line
reader's headers, keys and null marker, client settings from properties, the
DefaultMessageFormatter's columns, against a real broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from annal.admin.client import AdminClient
from annal.consumer.simple import ConsumerRecord, SimpleConsumer
from annal.deploy.runner import BrokerProcess
from annal.producer.producer import Producer
from annal.storage.records import Header
from runcli import annal

from annal.consoleio import LineError, LineReader, MessageFormatter
from annal.deserializers import DeserializationError

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    process = broker_factory()
    with AdminClient(process.endpoint) as admin:
        for topic in ("parsed", "printed", "plain"):
            admin.create_topic(topic, partitions=1)
    return process


def records(endpoint: str, topic: str) -> list[tuple[bytes | None, bytes | None, list[Header]]]:
    with SimpleConsumer(endpoint) as consumer:
        return [(r.key, r.value, list(r.headers)) for r in consumer.fetch(topic, 0, 0).records]


def test_console_producer_reads_headers_keys_and_settings_as_kafka(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    bs = ["--bootstrap-server", broker.endpoint]
    headed = annal(
        "console-producer", *bs, "--topic", "parsed", "--property", "parse.headers=true",
        "--property", "parse.key=true", "--property", "null.marker=NULL", "--sync",
        "--request-required-acks", "1", "--producer-property", "linger.ms=0",
        stdin="h1:v1,h2:v2\tk1\tone\nh3:NULL\tNULL\tNULL\nNULL\tk3\tthree\n",
    )  # fmt: skip
    assert headed.returncode == 0, headed.stderr
    custom = annal(
        "console-producer", *bs, "--topic", "parsed", "--property", "parse.headers=true",
        "--property", "headers.delimiter=|", "--property", "headers.separator=;",
        "--property", "headers.key.separator==", "--property", "ignore.error=true",
        stdin="a=1;b=2|four\nnoheaders\n",
    )  # fmt: skip
    assert custom.returncode == 0, custom.stderr
    assert records(broker.endpoint, "parsed") == [
        (b"k1", b"one", [Header("h1", b"v1"), Header("h2", b"v2")]),
        (None, None, [Header("h3", None)]),
        (b"k3", b"three", []),
        (None, b"four", [Header("a", b"1"), Header("b", b"2")]),
        (None, b"noheaders", []),
    ]
    # a line without its separator stops the producer, as Kafka's reader does
    stops = annal("console-producer", *bs, "--topic", "plain", "--property", "parse.key=true",
                  "--property", "key.separator=:", stdin="a:1\nbad\nc:3\n")  # fmt: skip
    assert stops.returncode == 1 and "line 2: no key separator ':' found: 'bad'" in stops.stderr
    assert records(broker.endpoint, "plain") == [(b"a", b"1", [])]

    for argv, named in (
        (["--property", "parse.keys=true"], "unknown --property parse.keys"),
        (["--producer-property", "buffer.memory=1"], "does not have: buffer.memory"),
        (["--producer-property", "linger.ms=soon"], "linger.ms='soon' is not a valid value"),
        (["--property", "parse.headers=true", "--property", "headers.separator=\t"],
         "headers.delimiter and headers.separator may not be equal"),
        (["--line-reader", "my.Reader"], "--line-reader my.Reader"),
    ):  # fmt: skip
        refused = annal("console-producer", *bs, "--topic", "plain", *argv, stdin="x\n")
        assert refused.returncode == 2 and named in refused.stderr, (argv, refused.stderr)

    # --producer.config, overridden by --producer-property: a short max.block.ms
    config = tmp_path / "producer.properties"
    config.write_text("max.block.ms=60000\nacks=all\nclient.id=console\n")
    quick = annal("console-producer", *bs, "--topic", "nope", "--producer.config", str(config),
                  "--producer-property", "max.block.ms=500", stdin="x\n", timeout_s=40)  # fmt: skip
    assert quick.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in quick.stderr
    config.write_text("max.block.ms=500\ncompresion.type=gzip\n")
    typo = annal("console-producer", *bs, "--topic", "plain", "--producer.config", str(config),
                 stdin="x\n")  # fmt: skip
    assert typo.returncode == 2 and "does not have: compresion.type" in typo.stderr


def test_console_consumer_prints_as_the_default_message_formatter(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with Producer(broker.endpoint) as producer:
        first = producer.send("printed", value=b"v0", key=b"k0",
                              headers=[("h1", b"a"), ("h2", None)]).result(30)  # fmt: skip
        producer.send("printed", value=None, key=None).result(30)
    bs = ["--bootstrap-server", broker.endpoint, "--topic", "printed", "--timeout-ms", "1000"]

    def consume(*argv: str) -> str:
        run = annal("console-consumer", *bs, *argv)
        assert run.returncode == 0, run.stderr
        assert "Processed a total of 2 messages" in run.stderr
        return run.stdout

    everything = consume(
        "--from-beginning", "--property", "print.timestamp=true", "--property",
        "print.partition=true", "--property", "print.offset=true", "--property",
        "print.headers=true", "--property", "print.key=true",
    )  # fmt: skip
    with SimpleConsumer(broker.endpoint) as reader:
        stamps = [r.timestamp for r in reader.fetch("printed", 0, 0).records]
    assert everything.splitlines() == [
        f"CreateTime:{stamps[0]}\tPartition:0\tOffset:{first.offset}\th1:a,h2:null\tk0\tv0",
        f"CreateTime:{stamps[1]}\tPartition:0\tOffset:1\tNO_HEADERS\tnull\tnull",
    ]
    keys_only = consume("--from-beginning", "--property", "print.key=true", "--property",
                        "print.value=false", "--property", "null.literal=<nil>")  # fmt: skip
    assert keys_only == "k0\n<nil>\n"
    separated = consume("--partition", "0", "--offset", "earliest", "--property",
                        "print.key=true", "--property", "print.headers=true", "--property",
                        "key.separator=|", "--property", "line.separator=;", "--property",
                        "headers.separator=&")  # fmt: skip
    assert separated == "h1:a&h2:null|k0|v0;NO_HEADERS|null|null;"
    assert consume("--from-beginning", "--formatter", "kafka.tools.NoOpMessageFormatter") == ""
    assert consume("--from-beginning", "--formatter",
                   "kafka.tools.LoggingMessageFormatter") == "v0\nnull\n"  # fmt: skip
    # auto.offset.reset=earliest from a --consumer.config file: as --from-beginning
    config = tmp_path / "consumer.properties"
    config.write_text("auto.offset.reset=earliest\nfetch.max.wait.ms=100\n")
    assert consume("--consumer.config", str(config), "--isolation-level",
                   "read_uncommitted") == "v0\nnull\n"  # fmt: skip
    assert consume("--consumer.config", str(config), "--consumer-property",
                   "isolation.level=read_committed") == "v0\nnull\n"  # fmt: skip

    for argv, named in (
        (["--formatter", "kafka.tools.ChecksumMessageFormatter"],
         "--formatter kafka.tools.ChecksumMessageFormatter: not available"),
        (["--property", "print.keys=true"], "unknown --property print.keys"),
        (["--consumer-property", "isolation.level=read_all"],
         "isolation.level='read_all': read_uncommitted or read_committed"),
        (["--consumer-property", "max.poll.records=5"], "does not have: max.poll.records"),
        (["--from-beginning", "--consumer-property", "auto.offset.reset=latest"],
         "can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'"),
        (["--group", "a", "--consumer-property", "group.id=b"], "do not match: 'a', 'b'"),
    ):  # fmt: skip
        refused = annal("console-consumer", *bs, *argv)
        assert refused.returncode == 2 and named in refused.stderr, (argv, refused.stderr)


def test_line_reader_and_formatter_edge_cases() -> None:
    reader = LineReader({"parse.key": "true", "ignore.error": "true"})
    assert reader.read("no separator", 1).key is None
    assert reader.read("k\t", 1).value == b""
    raw = b"\xff\xfe".decode("utf-8", "surrogateescape")  # input that is not UTF-8
    assert LineReader({}).read(raw, 1).value == b"\xff\xfe"
    strict = LineReader({"parse.headers": "true"})
    with pytest.raises(LineError, match="no header key separator ':' in 'bare'"):
        strict.read("bare\tvalue", 3)
    with pytest.raises(LineError, match="no headers delimiter"):
        strict.read("value only", 4)
    assert strict.read("a:1,\tv", 1).headers == [("a", b"1")]  # Java's split drops the last ""
    with pytest.raises(ValueError, match="null.marker and key.separator may not be equal"):
        LineReader({"null.marker": "\t"})
    record = ConsumerRecord("t", 3, 7, -1, None, b"v", ())
    assert MessageFormatter({"print.timestamp": "true"}).format(record) == b"NO_TIMESTAMP\tv\n"
    assert MessageFormatter({"print.value": "false"}).format(record) == b""
    assert MessageFormatter({"print.partition": "TRUE", "print.value": "false"}).format(
        record
    ) == b"Partition:3\n"


def test_the_formatter_reads_only_the_parts_it_prints() -> None:
    """As Kafka's DefaultMessageFormatter: a key that its deserializer cannot read
    stops nothing while print.key is false; printed, it is an error."""
    record = ConsumerRecord("t", 0, 5, -1, b"abc", b"\x00\x00\x00\x07", ())
    ints = "org.apache.kafka.common.serialization.IntegerDeserializer"
    hidden = MessageFormatter({"key.deserializer": ints, "value.deserializer": ints})
    assert hidden.format(record) == b"7\n"
    shown = MessageFormatter(
        {"key.deserializer": ints, "value.deserializer": ints, "print.key": "true"}
    )
    with pytest.raises(DeserializationError):
        shown.format(record)
    no_value = MessageFormatter({"value.deserializer": ints, "print.value": "false"})
    assert no_value.format(record._replace(value=b"xy")) == b""
