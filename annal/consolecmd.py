"""``annal console-producer`` and ``annal console-consumer``, as kafka-console-*.sh.

Both find the cluster through ``--bootstrap-server`` or, as the ZooKeeper-era
tools did, ``--zookeeper HOST:PORT[/CHROOT]`` (the brokers registered there).
Lines become records and records lines as Kafka's line reader and
DefaultMessageFormatter do (``consoleio.py``).  Client settings come from a
properties file (``--producer.config``, ``--consumer.config``), then
``--producer-property``/``--consumer-property``, then the tools' own flags,
each overriding the one before, as in Kafka; a setting annal's clients do not
have is refused by name, as are security settings they do not know.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from annal.clierrors import fail
from annal.consoleio import LineError, LineReader, parse_properties


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` or ``--zookeeper`` (exactly one), as the ZooKeeper-era tools."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--bootstrap-server", "--broker-list", dest="bootstrap_server", metavar="HOST:PORT[,...]",
        help="brokers to bootstrap from (--broker-list: the console producer's older name)",
    )  # fmt: skip
    where.add_argument(
        "--zookeeper",
        type=_zookeeper_connect,
        metavar="HOST:PORT[/CHROOT]",
        help="find the brokers registered in ZooKeeper instead (the brokers' "
        "zookeeper.connect, chroot included)",
    )


def _zookeeper_connect(value: str) -> str:
    """A malformed connect string is a usage error (exit code 2), not a traceback."""
    from annal.client.bootstrap import parse_zookeeper_connect

    try:
        parse_zookeeper_connect(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def quiet_kazoo() -> None:
    """The commands report an unreachable ZooKeeper in one line of their own;
    kazoo's warning for every connection attempt would bury it."""
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def _flag(text: str) -> bool:
    return text.strip().lower() == "true"


def _setting(kind: Callable[[str], Any]) -> Callable[[str, str], Any]:
    """A converter that names the setting when its value does not convert."""

    def convert(name: str, text: str) -> Any:
        try:
            return kind(text.strip())
        except ValueError:
            raise ValueError(f"{name}={text!r} is not a valid value") from None

    return convert


# Kafka's producer settings annal's Producer has → its keyword and converter
PRODUCER_SETTINGS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "acks": ("acks", _setting(str)),
    "batch.size": ("batch_size", _setting(int)),
    "linger.ms": ("linger_ms", _setting(int)),
    "compression.type": ("compression", _setting(str)),
    "retries": ("retries", _setting(int)),
    "retry.backoff.ms": ("retry_backoff_ms", _setting(int)),
    "max.in.flight.requests.per.connection": ("max_in_flight", _setting(int)),
    "request.timeout.ms": ("request_timeout_ms", _setting(int)),
    "max.block.ms": ("max_block_ms", _setting(int)),
    "enable.idempotence": ("enable_idempotence", _setting(_flag)),
}
# Kafka's consumer settings the console consumer applies (the others it reads itself)
CONSUMER_SETTINGS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "fetch.max.wait.ms": ("max_wait_ms", _setting(int)),
    "fetch.min.bytes": ("min_bytes", _setting(int)),
    "group.id": ("group", _setting(str)),
    "auto.offset.reset": ("auto_offset_reset", _setting(str)),
    "isolation.level": ("isolation_level", _setting(str)),
    "enable.auto.commit": ("auto_commit", _setting(_flag)),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _setting(int)),
}
# settings Kafka's console tools override themselves: accepted, and overridden alike
OVERRIDDEN = {
    "bootstrap.servers": "--bootstrap-server names the brokers",
    "client.id": "",
    "key.serializer": "the tool sends bytes",
    "value.serializer": "the tool sends bytes",
    "key.deserializer": "the tool reads bytes",
    "value.deserializer": "the tool reads bytes",
}
SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")


def client_settings(
    config_file: Path | None,
    pairs: list[str],
    known: Mapping[str, tuple[str, Callable[[str, str], Any]]],
    who: str,
) -> dict[str, Any]:
    """The client keywords of a ``--X.config`` file overridden by ``--X-property``
    pairs; security settings become the process's default.  ValueError naming a
    setting annal's client does not have, or a value that does not convert."""
    from annal.client.properties import read_properties
    from annal.client.security import Security, set_default_security

    props: dict[str, str] = {}
    if config_file is not None:
        props.update(read_properties(config_file, f"--{who}.config"))
    props.update(parse_properties(pairs, f"--{who}-property"))
    unknown = sorted(
        k for k in props
        if k not in known and k not in OVERRIDDEN and not k.startswith(SECURITY_PREFIXES)
    )  # fmt: skip
    if unknown:
        raise ValueError(
            f"{who} settings annal's {who} does not have: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))}, and security.protocol, ssl.*, sasl.*)"
        )
    security = {k: v for k, v in props.items() if k.startswith(SECURITY_PREFIXES)}
    if security:
        set_default_security(Security.from_properties(security, f"--{who}.config/-property"))
    return {known[k][0]: known[k][1](k, v) for k, v in props.items() if k in known}


LINE_READERS = ("kafka.tools.ConsoleProducer$LineMessageReader",
                "org.apache.kafka.tools.LineMessageReader")  # fmt: skip


def add_parsers(commands: Any) -> None:
    producer = commands.add_parser(
        "console-producer",
        help="send lines from standard input as records",
        description="Read lines from standard input and send each as a record, as "
        "kafka-console-producer.sh does (its options; those of Kafka's producer that "
        "annal's has no use for are accepted and have no effect, as noted).",
    )
    _add_cluster_options(producer)
    producer.add_argument("--topic", required=True)
    producer.add_argument(
        "--request-required-acks", "--acks", dest="acks", choices=["all", "-1", "0", "1"],
        help="acks: all (-1): the whole ISR has each record, and the producer is "
        "idempotent; 1: the leader; 0: no answer (default all, as Kafka 3.x)",
    )  # fmt: skip
    producer.add_argument(
        "--compression-codec", nargs="?", const="gzip",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type (default none; the flag alone: gzip)",
    )  # fmt: skip
    producer.add_argument(
        "--sync", action="store_true",
        help="send each record and wait for its answer before reading the next line",
    )  # fmt: skip
    for flag, setting in (
        ("--timeout", "linger.ms: how long a record waits for others to share its batch"),
        ("--request-timeout-ms", "request.timeout.ms"),
        ("--message-send-max-retries", "retries"),
        ("--retry-backoff-ms", "retry.backoff.ms"),
        ("--max-partition-memory-bytes", "batch.size: a batch's bytes"),
        ("--max-block-ms", "max.block.ms: how long to wait for the topic's metadata"),
    ):
        producer.add_argument(flag, type=int, metavar="N", help=setting)
    for flag, what in (
        ("--batch-size", "records per batch (no effect, as in Kafka's tool: see "
         "--max-partition-memory-bytes)"),
        ("--max-memory-bytes", "buffer.memory (no effect: annal's producer has no fixed buffer)"),
        ("--socket-buffer-size", "send.buffer.bytes (no effect: gRPC sizes its own)"),
        ("--metadata-expiry-ms", "metadata.max.age.ms (no effect: metadata is refreshed "
         "when a leader moves)"),
    ):  # fmt: skip
        producer.add_argument(flag, type=int, metavar="N", help=what)
    producer.add_argument(
        "--line-reader", default=LINE_READERS[0], metavar="CLASS",
        help="only Kafka's LineMessageReader (the default)",
    )  # fmt: skip
    producer.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE",
        help="the line reader's: parse.key, key.separator (default tab), parse.headers, "
        "headers.delimiter (tab), headers.separator (','), headers.key.separator (':'), "
        "null.marker, ignore.error",
    )  # fmt: skip
    producer.add_argument(
        "--producer-property", action="append", default=[], metavar="KEY=VALUE",
        help=f"a producer setting: {', '.join(PRODUCER_SETTINGS)}, security.protocol, ssl.*, "
        "sasl.*",
    )  # fmt: skip
    producer.add_argument(
        "--producer.config", dest="producer_config", type=Path, metavar="FILE",
        help="producer settings (a properties file); --producer-property overrides them",
    )  # fmt: skip
    producer.set_defaults(run=run_producer)

    consumer = commands.add_parser(
        "console-consumer",
        help="print records of a topic",
        description="Print the records of a topic (all partitions, or one with --partition), "
        "as kafka-console-consumer.sh does.",
    )
    _add_cluster_options(consumer)
    which = consumer.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic to consume")
    which.add_argument(
        "--whitelist", metavar="REGEX",
        help="consume every topic whose whole name matches this regular expression "
        "(Java's syntax for the common cases; internal topics left out), e.g. "
        "'orders-.*|payments'; with --zookeeper it needs no --group",
    )  # fmt: skip
    consumer.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset"
    )
    consumer.add_argument("--partition", type=int, help="only this partition")
    consumer.add_argument(
        "--group", metavar="GROUP",
        help="consume as a member of GROUP, sharing the partitions with its other members "
        "and committing what it printed: with --bootstrap-server a group of Kafka's "
        "protocol (Kafka's clients may be members too), with --zookeeper annal's "
        "ZooKeeper-era group consumer",
    )  # fmt: skip
    consumer.add_argument("--offset", help="earliest, latest or a number (needs --partition)")
    consumer.add_argument("--max-messages", type=int, help="exit after this many records")
    consumer.add_argument(
        "--timeout-ms", type=int, help="exit when no record arrives for this long"
    )
    consumer.add_argument(
        "--formatter", default="kafka.tools.DefaultMessageFormatter", metavar="CLASS",
        help="kafka.tools.DefaultMessageFormatter (the default), LoggingMessageFormatter "
        "(also logs each record at INFO) or NoOpMessageFormatter (prints nothing)",
    )  # fmt: skip
    consumer.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE",
        help="the formatter's: print.timestamp, print.partition, print.offset, "
        "print.headers, print.key, print.value (true/false), key.separator, "
        "line.separator, headers.separator, null.literal",
    )  # fmt: skip
    consumer.add_argument(
        "--consumer-property", action="append", default=[], metavar="KEY=VALUE",
        help=f"a consumer setting: {', '.join(CONSUMER_SETTINGS)}, security.protocol, ssl.*, "
        "sasl.*",
    )  # fmt: skip
    consumer.add_argument(
        "--consumer.config", dest="consumer_config", type=Path, metavar="FILE",
        help="consumer settings (a properties file); --consumer-property overrides them",
    )  # fmt: skip
    for part in ("key", "value"):
        consumer.add_argument(
            f"--{part}-deserializer", metavar="CLASS",
            help=f"how to read each record's {part} for printing: a deserializer of "
            "org.apache.kafka.common.serialization (String, ByteArray, Short, Integer, Long, "
            "Float, Double, UUID, Void + Deserializer); default: the bytes as stored",
        )  # fmt: skip
    consumer.add_argument(
        "--skip-message-on-error", action="store_true",
        help="a record that cannot be printed (its deserializer cannot read it) is "
        "skipped with a line on stderr, instead of ending the consumer",
    )  # fmt: skip
    consumer.add_argument(
        "--isolation-level", choices=["read_uncommitted", "read_committed"],
        help="read_uncommitted (the default: everything up to the high watermark) or "
        "read_committed (only committed transactions' records, docs/transactions.md)",
    )  # fmt: skip
    consumer.set_defaults(run=_run_consumer)


def _lines() -> Any:
    """Standard input's lines as text, their bytes kept whatever they are (UTF-8
    when they are), each without its line end, as Java's readLine gives them."""
    for raw in sys.stdin.buffer:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        yield raw.decode("utf-8", "surrogateescape")


def run_producer(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.client.properties import PropertiesError
    from annal.client.security import SecurityConfigError
    from annal.producer.producer import Producer

    if args.line_reader not in LINE_READERS:
        print(f"annal console-producer: --line-reader {args.line_reader}: only Kafka's "
              f"LineMessageReader ({LINE_READERS[0]}) is available", file=sys.stderr)  # fmt: skip
        return 2
    try:
        reader = LineReader(parse_properties(args.property, "--property"))
        options = client_settings(
            args.producer_config, args.producer_property, PRODUCER_SETTINGS, "producer"
        )
    except (ValueError, PropertiesError, SecurityConfigError) as exc:
        print(f"annal console-producer: {exc}", file=sys.stderr)
        return 2
    for flag, keyword in (
        ("acks", "acks"), ("timeout", "linger_ms"), ("request_timeout_ms", "request_timeout_ms"),
        ("message_send_max_retries", "retries"), ("retry_backoff_ms", "retry_backoff_ms"),
        ("max_partition_memory_bytes", "batch_size"), ("max_block_ms", "max_block_ms"),
    ):  # fmt: skip
        if getattr(args, flag) is not None:
            options[keyword] = getattr(args, flag)
    if args.compression_codec is not None:
        options["compression"] = args.compression_codec
    options.setdefault("linger_ms", 5)
    failures = 0
    quiet_kazoo()
    try:
        with Producer(
            args.bootstrap_server, zookeeper_connect=args.zookeeper, **options
        ) as producer:
            futures = []
            try:
                for number, line in enumerate(_lines(), start=1):
                    record = reader.read(line, number)
                    future = producer.send(
                        args.topic, value=record.value, key=record.key, headers=record.headers
                    )
                    if args.sync:
                        future.result()
                    else:
                        futures.append(future)
            except LineError as exc:  # Kafka's reader stops there too
                print(f"annal console-producer: {exc}", file=sys.stderr)
                failures += 1
            producer.flush()
            for future in futures:
                if future.exception() is not None:
                    failures += 1
                    print(f"annal console-producer: {future.exception()}", file=sys.stderr)
    except ClientError as exc:  # ProduceError, or no cluster found through --zookeeper
        return fail("annal console-producer", exc)
    except ValueError as exc:  # a setting the producer refused (acks=0 with idempotence, ...)
        print(f"annal console-producer: {exc}", file=sys.stderr)
        return 2
    return 1 if failures else 0


def _run_consumer(args: argparse.Namespace) -> int:
    from annal.consoleconsumer import run_consumer

    return run_consumer(args)
