"""``annal console-producer`` and ``annal console-consumer``, as kafka-console-*.sh.

Both find the cluster through ``--bootstrap-server`` or, as the ZooKeeper-era
tools did, ``--zookeeper HOST:PORT[/CHROOT]`` (the brokers registered there).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from annal.clierrors import fail
from annal.topic_partition import TopicPartition


def _properties(pairs: list[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--property expects KEY=VALUE, got {pair!r}")
        props[key] = value
    return props


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


def add_parsers(commands: Any) -> None:
    producer = commands.add_parser(
        "console-producer",
        help="send lines from standard input as records",
        description="Read lines from standard input and send each as a record.",
    )
    _add_cluster_options(producer)
    producer.add_argument("--topic", required=True)
    producer.add_argument(
        "--acks",
        choices=["all", "-1", "0", "1"],
        help="all (-1): the whole ISR has each record, and the producer is idempotent; "
        "1: the leader; 0: no answer (default all, as Kafka 3.x)",
    )
    producer.add_argument(
        "--compression-codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    producer.add_argument(
        "--max-block-ms",
        type=int,
        default=60_000,
        help="how long to wait for the topic to show in the metadata (default 60000)",
    )
    producer.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="parse.key=true with key.separator=SEP (default tab) splits key and value",
    )
    producer.set_defaults(run=run_producer)

    consumer = commands.add_parser(
        "console-consumer",
        help="print records of a topic",
        description="Print the records of a topic (all partitions, or one with --partition).",
    )
    _add_cluster_options(consumer)
    consumer.add_argument("--topic", required=True)
    consumer.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset"
    )
    consumer.add_argument("--partition", type=int, help="only this partition")
    consumer.add_argument(
        "--group", metavar="GROUP",
        help="consume as a member of GROUP (annal's group consumer: needs --zookeeper), "
        "sharing the partitions with its other members and committing what it printed",
    )  # fmt: skip
    consumer.add_argument("--offset", help="earliest, latest or a number (needs --partition)")
    consumer.add_argument("--max-messages", type=int, help="exit after this many records")
    consumer.add_argument(
        "--timeout-ms", type=int, help="exit when no record arrives for this long"
    )
    consumer.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="print.key, print.offset, print.timestamp, print.partition (true/false), "
        "key.separator",
    )
    consumer.set_defaults(run=run_consumer)


def run_producer(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.producer.producer import Producer

    props = _properties(args.property)
    parse_key = props.get("parse.key", "false") == "true"
    separator = props.get("key.separator", "\t")
    failures = 0
    _quiet_kazoo()
    try:
        with Producer(
            args.bootstrap_server,
            zookeeper_connect=args.zookeeper,
            acks=args.acks,
            compression=args.compression_codec,
            linger_ms=5,
            max_block_ms=args.max_block_ms,
        ) as producer:
            futures = []
            for number, line in enumerate(sys.stdin, start=1):
                text = line.rstrip("\n")
                key = None
                if parse_key:
                    key, sep, text = text.partition(separator)
                    if not sep:
                        print(f"line {number}: no key separator {separator!r}", file=sys.stderr)
                        failures += 1
                        continue
                futures.append(producer.send(args.topic, value=text, key=key))
            producer.flush()
            for future in futures:
                if future.exception() is not None:
                    failures += 1
                    print(f"annal console-producer: {future.exception()}", file=sys.stderr)
    except ClientError as exc:  # ProduceError, or no cluster found through --zookeeper
        return fail("annal console-producer", exc)
    return 1 if failures else 0


def run_consumer(args: argparse.Namespace) -> int:
    from annal.client.cluster import ClientError
    from annal.consumer.simple import EARLIEST, LATEST, SimpleConsumer

    props = _properties(args.property)
    show = {
        name: props.get(f"print.{name}", "false") == "true"
        for name in ("key", "offset", "timestamp", "partition")
    }
    separator = props.get("key.separator", "\t")
    if args.offset is not None and args.partition is None:
        print("annal console-consumer: --offset needs --partition", file=sys.stderr)
        return 2
    if args.group is not None:
        if args.zookeeper is None:
            print(
                "annal console-consumer: --group needs --zookeeper (annal's group consumer "
                "balances a group's partitions through ZooKeeper)",
                file=sys.stderr,
            )
            return 2
        if args.partition is not None or args.offset is not None:
            print("annal console-consumer: --group takes no --partition or --offset",
                  file=sys.stderr)  # fmt: skip
            return 2
        return _consume_in_group(args, show, separator)
    printed = 0
    last_data = time.monotonic()
    _quiet_kazoo()
    try:
        with SimpleConsumer(
            args.bootstrap_server, max_wait_ms=200, zookeeper_connect=args.zookeeper
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
                    earliest = args.from_beginning or args.offset == "earliest"
                    positions[p] = consumer.offsets_before(
                        args.topic, p, EARLIEST if earliest else LATEST
                    )
            while True:
                results = consumer.multi_fetch(
                    {TopicPartition(args.topic, p): o for p, o in positions.items()}
                )
                got_any = False
                for (_, p), result in sorted(results.items()):
                    positions[p] = result.next_offset
                    for record in result.records:
                        got_any = True
                        _print(record, show, separator)
                        printed += 1
                        if args.max_messages is not None and printed >= args.max_messages:
                            return 0
                if got_any:
                    last_data = time.monotonic()
                elif (
                    args.timeout_ms is not None
                    and (time.monotonic() - last_data) * 1000 >= args.timeout_ms
                ):
                    print(f"Processed a total of {printed} messages", file=sys.stderr)
                    return 0
    except ClientError as exc:  # ConsumerError, or no cluster found through --zookeeper
        return fail("annal console-consumer", exc)


def _print(record: Any, show: dict[str, bool], separator: str) -> None:
    fields = []
    if show["partition"]:
        fields.append(f"Partition:{record.partition}")
    if show["offset"]:
        fields.append(f"Offset:{record.offset}")
    if show["timestamp"]:
        fields.append(f"CreateTime:{record.timestamp}")
    if show["key"]:
        fields.append(_text(record.key))
    fields.append(_text(record.value))
    print(separator.join(fields), flush=True)


def _consume_in_group(args: argparse.Namespace, show: dict[str, bool], separator: str) -> int:
    """As a member of ``--group``: the group's share of the topic's partitions,
    from its committed offsets (or the start with --from-beginning, the end
    otherwise, where it committed none); what was printed is committed on exit."""
    from annal.client.cluster import ClientError
    from annal.consumer.group import ConsumerTimeout, GroupConsumer

    printed = 0
    try:
        consumer = GroupConsumer(
            args.zookeeper,
            args.group,
            auto_offset_reset="smallest" if args.from_beginning else "largest",
            consumer_timeout_ms=args.timeout_ms if args.timeout_ms is not None else -1,
        )
    except (ClientError, ValueError) as exc:
        return fail("annal console-consumer", exc)
    try:
        (stream,) = consumer.create_message_streams({args.topic: 1})[args.topic]
        for record in stream:
            _print(record, show, separator)
            printed += 1
            if args.max_messages is not None and printed >= args.max_messages:
                break
    except ConsumerTimeout:
        print(f"Processed a total of {printed} messages", file=sys.stderr)
    except ClientError as exc:
        return fail("annal console-consumer", exc)
    finally:
        consumer.shutdown()  # commits what was consumed
    return 0


def _text(raw: bytes | None) -> str:
    return "null" if raw is None else raw.decode("utf-8", "backslashreplace")
