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
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from annal.clierrors import fail
from annal.consoleio import FORMATTERS, LineError, LineReader, MessageFormatter, parse_properties
from annal.topic_partition import TopicPartition


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


def _quiet_kazoo() -> None:
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
    consumer.add_argument("--topic", required=True)
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
    consumer.add_argument(
        "--isolation-level", choices=["read_uncommitted", "read_committed"],
        help="read_uncommitted (the default: everything up to the high watermark) or "
        "read_committed (only committed transactions' records, docs/transactions.md)",
    )  # fmt: skip
    consumer.set_defaults(run=run_consumer)


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
    _quiet_kazoo()
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


def _consumer_setup(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The consumer's settings and where to start, as kafka-console-consumer.sh
    reads them; ValueError for a bad combination (a usage error)."""
    settings = client_settings(
        args.consumer_config, args.consumer_property, CONSUMER_SETTINGS, "consumer"
    )
    group = settings.pop("group", None)
    if args.group is not None and group is not None and group != args.group:
        raise ValueError(
            "the group ids given in different places (--group, --consumer-property, "
            f"--consumer.config) do not match: '{args.group}', '{group}'"
        )
    args.group = args.group or group
    isolation = args.isolation_level or settings.pop("isolation_level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ValueError(
            f"isolation.level={isolation!r}: read_uncommitted or read_committed"
        )
    settings["isolation_level"] = isolation
    reset = settings.pop("auto_offset_reset", None)
    if reset is not None:
        if reset not in ("earliest", "latest"):
            raise ValueError(f"auto.offset.reset={reset!r}: earliest or latest")
        if args.from_beginning and reset != "earliest":
            raise ValueError(
                f"can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', "
                "please remove one option"
            )
    return settings, reset


def run_consumer(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.client.properties import PropertiesError
    from annal.client.security import SecurityConfigError
    from annal.consumer.simple import EARLIEST, LATEST, SimpleConsumer

    kind = FORMATTERS.get(args.formatter)
    if kind is None:
        print(f"annal console-consumer: --formatter {args.formatter}: not available (known: "
              f"{', '.join(FORMATTERS)})", file=sys.stderr)  # fmt: skip
        return 2
    try:
        formatter = MessageFormatter(parse_properties(args.property, "--property"), kind)
        settings, reset = _consumer_setup(args)
    except (ValueError, PropertiesError, SecurityConfigError) as exc:
        print(f"annal console-consumer: {exc}", file=sys.stderr)
        return 2
    if args.offset is not None and args.partition is None:
        print("annal console-consumer: --offset needs --partition", file=sys.stderr)
        return 2
    if args.group is not None:
        if args.partition is not None or args.offset is not None:
            print("annal console-consumer: --group takes no --partition or --offset",
                  file=sys.stderr)  # fmt: skip
            return 2
        if args.zookeeper is None:
            return _consume_in_kafka_group(args, formatter, settings, reset)
        return _consume_in_group(args, formatter, settings, reset)
    settings.pop("auto_commit", None)  # no group: nothing is committed
    settings.pop("auto_commit_interval_ms", None)
    earliest = args.from_beginning or reset == "earliest"
    printed = 0
    last_data = time.monotonic()
    _quiet_kazoo()
    try:
        with SimpleConsumer(
            args.bootstrap_server,
            zookeeper_connect=args.zookeeper,
            **{"max_wait_ms": 200, **settings},
        ) as consumer:
            partitions = (
                [args.partition]
                if args.partition is not None
                else consumer.partitions_for(args.topic)
            )
            if not partitions:
                print(
                    f"annal console-consumer: topic {args.topic!r} has no available partition",
                    file=sys.stderr,
                )
                return 1
            positions = {}
            for p in partitions:
                if args.offset not in (None, "earliest", "latest"):
                    if not args.offset.isdigit():
                        print(
                            f"annal console-consumer: bad --offset {args.offset!r}", file=sys.stderr
                        )
                        return 2
                    positions[p] = int(args.offset)
                else:
                    first = args.offset == "earliest" or (args.offset is None and earliest)
                    positions[p] = consumer.offsets_before(
                        args.topic, p, EARLIEST if first else LATEST
                    )
            while args.max_messages is None or printed < args.max_messages:
                results = consumer.multi_fetch(
                    {TopicPartition(args.topic, p): o for p, o in positions.items()}
                )
                got_any = False
                for (_, p), result in sorted(results.items()):
                    for record in result.records:
                        got_any = True
                        formatter.write(record, sys.stdout.buffer)
                        printed += 1
                        positions[p] = record.offset + 1
                        if args.max_messages is not None and printed >= args.max_messages:
                            break
                    else:
                        positions[p] = result.next_offset
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                if got_any:
                    last_data = time.monotonic()
                elif (
                    args.timeout_ms is not None
                    and (time.monotonic() - last_data) * 1000 >= args.timeout_ms
                ):
                    break
    except ClientError as exc:  # ConsumerError, or no cluster found through --zookeeper
        return fail("annal console-consumer", exc)
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


AUTO_COMMIT_INTERVAL_MS = 5000


def _consume_in_kafka_group(
    args: argparse.Namespace,
    formatter: MessageFormatter,
    settings: dict[str, Any],
    reset: str | None,
) -> int:
    """As a member of ``--group`` at its coordinator (``kafka_group_member.py``):
    its share of the topic's partitions, from the group's committed offsets
    (``--from-beginning``/auto.offset.reset where it has none), what was printed
    committed every auto.commit.interval.ms, before a rebalance and on exit
    (unless enable.auto.commit=false), as Kafka's console consumer does."""
    from annal.client.cluster import ClientError
    from annal.consumer.simple import EARLIEST, LATEST, SimpleConsumer
    from annal.kafka_group_member import KafkaGroupMember
    from annal.v1 import annal_pb2 as pb

    auto_commit = settings.pop("auto_commit", True)
    interval_s = settings.pop("auto_commit_interval_ms", AUTO_COMMIT_INTERVAL_MS) / 1000
    earliest = args.from_beginning or reset == "earliest"
    printed = 0
    member: KafkaGroupMember | None = None
    positions: dict[TopicPartition, int] = {}
    try:
        with SimpleConsumer(args.bootstrap_server, **{"max_wait_ms": 200, **settings}) as consumer:
            cluster = consumer.cluster

            def counts(topics: list[str]) -> dict[str, int]:
                cluster.refresh(topics)
                return {t: cluster.partition_counts.get(t, 0) for t in topics}

            consumer.partitions_for(args.topic)  # UNKNOWN_TOPIC_OR_PARTITION, as without --group
            brokers = cluster.call_any("Metadata", pb.MetadataRequest(topics=[])).brokers
            member = KafkaGroupMember(brokers, args.group, [args.topic], cluster.security, counts)

            def start(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
                assert member is not None
                found = member.committed(partitions)
                where = EARLIEST if earliest else LATEST
                return {tp: found[tp] if tp in found else
                        consumer.offsets_before(tp.topic, tp.partition, where)
                        for tp in partitions}  # fmt: skip

            positions = start(member.join())
            last_data = last_commit = time.monotonic()
            while args.max_messages is None or printed < args.max_messages:
                if member.rebalance_needed.is_set():
                    if auto_commit:
                        _warn_commit(member.commit(positions))
                    positions = start(member.join())
                if not positions:
                    time.sleep(0.2)
                    results = {}
                else:
                    results = consumer.multi_fetch(positions)
                got_any = False
                for tp, result in sorted(results.items()):
                    if tp not in positions:
                        continue
                    for record in result.records:
                        got_any = True
                        formatter.write(record, sys.stdout.buffer)
                        printed += 1
                        positions[tp] = record.offset + 1
                        if args.max_messages is not None and printed >= args.max_messages:
                            break
                    else:
                        positions[tp] = result.next_offset
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                now = time.monotonic()
                if auto_commit and now - last_commit >= interval_s:
                    _warn_commit(member.commit(positions))
                    last_commit = now
                if got_any:
                    last_data = now
                elif args.timeout_ms is not None and (now - last_data) * 1000 >= args.timeout_ms:
                    break
    except ClientError as exc:
        return fail("annal console-consumer", exc)
    except KeyboardInterrupt:
        pass
    finally:
        if member is not None:
            if auto_commit:
                _warn_commit(member.commit(positions))
            member.leave()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _warn_commit(problem: str | None) -> None:
    if problem is not None:
        print(f"annal console-consumer: offsets not committed: {problem}", file=sys.stderr)


def _consume_in_group(
    args: argparse.Namespace,
    formatter: MessageFormatter,
    settings: dict[str, Any],
    reset: str | None,
) -> int:
    """As a member of ``--group``: the group's share of the topic's partitions,
    from its committed offsets (or the start with --from-beginning, the end
    otherwise, where it committed none); what was printed is committed on exit
    (unless enable.auto.commit=false)."""
    from annal.client.cluster import ClientError
    from annal.consumer.group import ConsumerTimeout, GroupConsumer

    earliest = args.from_beginning or reset == "earliest"
    options = {
        "auto_commit": settings.get("auto_commit", True),
        "auto_commit_interval_ms": settings.get("auto_commit_interval_ms", 5000),
        "fetch_wait_max_ms": settings.get("max_wait_ms", 100),
        "isolation_level": settings.get("isolation_level", "read_uncommitted"),
    }
    printed = 0
    try:
        consumer = GroupConsumer(
            args.zookeeper,
            args.group,
            auto_offset_reset="smallest" if earliest else "largest",
            consumer_timeout_ms=args.timeout_ms if args.timeout_ms is not None else -1,
            **options,
        )
    except (ClientError, ValueError) as exc:
        return fail("annal console-consumer", exc)
    try:
        (stream,) = consumer.create_message_streams({args.topic: 1})[args.topic]
        for record in stream:
            formatter.write(record, sys.stdout.buffer)
            printed += 1
            if args.max_messages is not None and printed >= args.max_messages:
                break
    except ConsumerTimeout:
        pass
    except ClientError as exc:
        return fail("annal console-consumer", exc)
    finally:
        consumer.shutdown()  # commits what was consumed (with auto commit)
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0
