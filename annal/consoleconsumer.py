"""``annal console-consumer``, as kafka-console-consumer.sh (the parser is in
``consolecmd.py``, with the producer's).

Without ``--group`` it reads every partition of ``--topic`` (or one, with
``--partition``), or of every topic ``--whitelist`` matches, itself; with
``--group`` it is a member of a group of Kafka's protocol (``--bootstrap-server``)
or of annal's ZooKeeper-era group consumer (``--zookeeper``).  Records are
printed by the formatter (``consoleio.py``) with the deserializers asked for
(``deserializers.py``); a record one cannot read ends the consumer, or with
``--skip-message-on-error`` is skipped with a line on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from annal.clierrors import fail
from annal.consolecmd import CONSUMER_SETTINGS, client_settings, quiet_kazoo
from annal.consoleio import FORMATTERS, MessageFormatter, parse_properties
from annal.deserializers import DeserializationError
from annal.topic_partition import TopicPartition


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
        props = parse_properties(args.property, "--property")
        for part in ("key", "value"):
            chosen = getattr(args, f"{part}_deserializer", None)
            if chosen is not None:
                props[f"{part}.deserializer"] = chosen
        formatter = MessageFormatter(props, kind)
        settings, reset = _consumer_setup(args)
    except (ValueError, PropertiesError, SecurityConfigError) as exc:
        print(f"annal console-consumer: {exc}", file=sys.stderr)
        return 2
    if args.offset is not None and args.partition is None:
        print("annal console-consumer: --offset needs --partition", file=sys.stderr)
        return 2
    if args.whitelist is not None:
        try:
            re.compile(args.whitelist)
        except re.error as exc:
            print(f"annal console-consumer: --whitelist {args.whitelist!r}: not a regular "
                  f"expression: {exc}", file=sys.stderr)  # fmt: skip
            return 2
        if args.partition is not None:
            print("annal console-consumer: --partition needs --topic, not --whitelist",
                  file=sys.stderr)  # fmt: skip
            return 2
        if args.group is not None and args.zookeeper is not None:
            print("annal console-consumer: --whitelist with --zookeeper and --group is not "
                  "served (annal's ZooKeeper-era group consumer takes named topics): use "
                  "--topic, or --bootstrap-server for a group of Kafka's protocol",
                  file=sys.stderr)  # fmt: skip
            return 2
    printer = _Printer(formatter, args.skip_message_on_error)
    if args.group is not None:
        if args.partition is not None or args.offset is not None:
            print("annal console-consumer: --group takes no --partition or --offset",
                  file=sys.stderr)  # fmt: skip
            return 2
        if args.zookeeper is None:
            return _consume_in_kafka_group(args, printer, settings, reset)
        return _consume_in_group(args, printer, settings, reset)
    settings.pop("auto_commit", None)  # no group: nothing is committed
    settings.pop("auto_commit_interval_ms", None)
    earliest = args.from_beginning or reset == "earliest"
    last_data = time.monotonic()
    quiet_kazoo()
    try:
        with SimpleConsumer(
            args.bootstrap_server,
            zookeeper_connect=args.zookeeper,
            **{"max_wait_ms": 200, **settings},
        ) as consumer:
            topics = _topics(args, consumer.cluster)
            if args.partition is not None:
                partitions = [TopicPartition(args.topic, args.partition)]
            else:
                partitions = [
                    TopicPartition(topic, p)
                    for topic in topics
                    for p in consumer.partitions_for(topic)
                ]
            if not partitions:
                named = (f"topic {args.topic!r} has" if args.topic is not None else
                         f"the topics --whitelist {args.whitelist!r} matches ({len(topics)}) "
                         "have")  # fmt: skip
                print(f"annal console-consumer: {named} no available partition",
                      file=sys.stderr)  # fmt: skip
                return 1
            positions: dict[TopicPartition, int] = {}
            for tp in partitions:
                if args.offset not in (None, "earliest", "latest"):
                    if not args.offset.isdigit():
                        print(
                            f"annal console-consumer: bad --offset {args.offset!r}", file=sys.stderr
                        )
                        return 2
                    positions[tp] = int(args.offset)
                else:
                    first = args.offset == "earliest" or (args.offset is None and earliest)
                    positions[tp] = consumer.offsets_before(
                        tp.topic, tp.partition, EARLIEST if first else LATEST
                    )
            while args.max_messages is None or printer.printed < args.max_messages:
                results = consumer.multi_fetch(positions)
                got_any = printer.print_fetched(results, positions, args.max_messages)
                if got_any:
                    last_data = time.monotonic()
                elif (
                    args.timeout_ms is not None
                    and (time.monotonic() - last_data) * 1000 >= args.timeout_ms
                ):
                    break
    except ClientError as exc:  # ConsumerError, or no cluster found through --zookeeper
        return fail("annal console-consumer", exc)
    except DeserializationError as exc:
        return printer.failed(exc)
    print(f"Processed a total of {printer.printed} messages", file=sys.stderr)
    return 0


AUTO_COMMIT_INTERVAL_MS = 5000


def _consume_in_kafka_group(
    args: argparse.Namespace,
    printer: _Printer,
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
    member: KafkaGroupMember | None = None
    positions: dict[TopicPartition, int] = {}
    try:
        with SimpleConsumer(args.bootstrap_server, **{"max_wait_ms": 200, **settings}) as consumer:
            cluster = consumer.cluster

            def counts(topics: list[str]) -> dict[str, int]:
                cluster.refresh(topics)
                return {t: cluster.partition_counts.get(t, 0) for t in topics}

            topics = _topics(args, cluster)
            if args.topic is not None:  # UNKNOWN_TOPIC_OR_PARTITION, as without --group
                consumer.partitions_for(args.topic)
            brokers = cluster.call_any("Metadata", pb.MetadataRequest(topics=[])).brokers
            member = KafkaGroupMember(brokers, args.group, topics, cluster.security, counts)

            def start(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
                assert member is not None
                found = member.committed(partitions)
                where = EARLIEST if earliest else LATEST
                return {tp: found[tp] if tp in found else
                        consumer.offsets_before(tp.topic, tp.partition, where)
                        for tp in partitions}  # fmt: skip

            positions = start(member.join())
            last_data = last_commit = time.monotonic()
            while args.max_messages is None or printer.printed < args.max_messages:
                if member.rebalance_needed.is_set():
                    if auto_commit:
                        _warn_commit(member.commit(positions))
                    positions = start(member.join())
                if not positions:
                    time.sleep(0.2)
                    results = {}
                else:
                    results = consumer.multi_fetch(positions)
                got_any = printer.print_fetched(results, positions, args.max_messages)
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
    except DeserializationError as exc:
        return printer.failed(exc)
    except KeyboardInterrupt:
        pass
    finally:
        if member is not None:
            if auto_commit:
                _warn_commit(member.commit(positions))
            member.leave()
    print(f"Processed a total of {printer.printed} messages", file=sys.stderr)
    return 0


def _warn_commit(problem: str | None) -> None:
    if problem is not None:
        print(f"annal console-consumer: offsets not committed: {problem}", file=sys.stderr)


def _consume_in_group(
    args: argparse.Namespace,
    printer: _Printer,
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
            printer.print(record, TopicPartition(args.topic, record.partition))
            if args.max_messages is not None and printer.printed >= args.max_messages:
                break
    except ConsumerTimeout:
        pass
    except ClientError as exc:
        return fail("annal console-consumer", exc)
    except DeserializationError as exc:
        return printer.failed(exc)
    finally:
        consumer.shutdown()  # commits what was consumed (with auto commit)
    print(f"Processed a total of {printer.printed} messages", file=sys.stderr)
    return 0


class _Printer:
    """The formatter, with what happens to a record it cannot print."""

    def __init__(self, formatter: MessageFormatter, skip_on_error: bool) -> None:
        self._formatter = formatter
        self._skip = skip_on_error
        self.printed = 0  # records printed so far

    def print(self, record: Any, tp: TopicPartition) -> None:
        """Print ``record`` (counted in ``printed``), or skip it with a line on stderr;
        DeserializationError (naming the record) when it cannot be printed and is
        not to be skipped."""
        try:
            self._formatter.write(record, sys.stdout.buffer)
        except DeserializationError as exc:
            where = f"{tp.topic}-{tp.partition} at offset {record.offset}"
            if not self._skip:
                raise DeserializationError(f"the record of {where}: {exc}") from None
            print(f"annal console-consumer: skipped the record of {where}: {exc}",
                  file=sys.stderr)  # fmt: skip
            return
        self.printed += 1

    def print_fetched(
        self,
        results: Mapping[TopicPartition, Any],
        positions: dict[TopicPartition, int],
        max_messages: int | None,
    ) -> bool:
        """Print what a fetch of ``positions`` returned (partitions no longer in
        ``positions`` left out), moving each position past what it printed, up to
        ``max_messages`` in all; whether any record came."""
        got_any = False
        for tp, result in sorted(results.items()):
            if tp not in positions:
                continue
            for record in result.records:
                got_any = True
                self.print(record, tp)
                positions[tp] = record.offset + 1
                if max_messages is not None and self.printed >= max_messages:
                    return got_any
            positions[tp] = result.next_offset
        return got_any

    def failed(self, exc: DeserializationError) -> int:
        print(f"annal console-consumer: {exc} (--skip-message-on-error skips such records)",
              file=sys.stderr)  # fmt: skip
        print(f"Processed a total of {self.printed} messages", file=sys.stderr)
        return 1


def _topics(args: argparse.Namespace, cluster: Any) -> list[str]:
    """``--topic``, or the topics whose whole names ``--whitelist`` matches, internal
    ones left out (Kafka's exclude.internal.topics=true)."""
    if args.topic is not None:
        return [args.topic]
    from annal.v1 import annal_pb2 as pb

    pattern = re.compile(args.whitelist)
    metadata = cluster.call_any("Metadata", pb.MetadataRequest(topics=[]))
    return sorted(
        t.name for t in metadata.topics if not t.is_internal and pattern.fullmatch(t.name)
    )
