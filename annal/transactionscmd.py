"""``annal transactions``: look at producers' transactions and recover from hanging
ones, as kafka-transactions.sh does (KIP-664; docs/transactions.md,
"Operating transactions").

Kafka's spelling, ``annal transactions --bootstrap-server B list``, and the
flag spelling ``--list``, ``--describe``, ``--describe-producers``,
``--find-hanging``, ``--abort`` both work; ``kafka_spelling`` turns the flags
into the action words and puts ``--bootstrap-server``, ``--command-config`` and
``--zookeeper`` before the action wherever they were given.  Tables are
printed as Kafka's tool prints them: each column padded to its widest value,
each value followed by a tab.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from annal import errors
from annal.clierrors import fail
from annal.errors import AnnalError

if TYPE_CHECKING:
    from annal.admin.transactions import (
        OpenTransaction,
        ProducerState,
        TransactionAdmin,
        TransactionDescription,
        TransactionListing,
    )

PROG = "annal transactions"
ACTIONS = ("list", "describe", "describe-producers", "find-hanging", "abort")
FLAGS = {f"--{a}": a for a in ACTIONS}
GLOBAL_OPTIONS = ("--bootstrap-server", "--command-config", "--zookeeper")
HELP_FLAGS = ("-h", "--help")

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
    "TopicPartitions",
)  # fmt: skip
PRODUCERS_HEADERS = (
    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
    "CurrentTransactionStartOffset",
)  # fmt: skip
HANGING_HEADERS = (
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
    "LastTimestamp", "Duration(min)",
)  # fmt: skip

HINTS = {
    errors.TRANSACTIONAL_ID_NOT_FOUND: (
        "its coordinator knows no such transactional id (never used, or expired after "
        "transactional.id.expiration.ms): annal transactions list shows those it knows"
    ),
    errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        "the principal needs Describe on the TransactionalId (kafka-acls.sh "
        "--transactional-id ID --operation Describe)"
    ),
    errors.TOPIC_AUTHORIZATION_FAILED: (
        "describing a partition's producers needs Read on its topic (and Describe to find "
        "its leader)"
    ),
    errors.CLUSTER_AUTHORIZATION_FAILED: (
        "aborting writes a transaction marker as a broker does: the principal needs "
        "ClusterAction on the cluster (kafka-acls.sh --cluster --operation ClusterAction)"
    ),
    errors.INVALID_PRODUCER_EPOCH: (
        "the partition has seen a newer epoch of that producer: describe-producers shows it"
    ),
    errors.TRANSACTION_COORDINATOR_FENCED: (
        "the coordinator epoch is older than the producer's last marker's: describe-producers "
        "shows it (LatestCoordinatorEpoch)"
    ),
}


def kafka_spelling(args: list[str]) -> list[str]:
    """``transactions [options] ACTION|--ACTION [options]`` as ``transactions
    [global options] ACTION [its options]``; anything else unchanged.  Two actions
    are a usage error naming both."""
    if not args or args[0] != "transactions":
        return args
    front: list[str] = []
    actions: list[str] = []
    rest: list[str] = []
    tokens = args[1:]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token.split("=", 1)[0]
        takes_value = token.startswith("-") and token not in HELP_FLAGS and "=" not in token
        if token in FLAGS or (token in ACTIONS and not actions):
            actions.append(FLAGS.get(token, token))
        elif name in GLOBAL_OPTIONS:
            step = 2 if takes_value else 1
            front.extend(tokens[i : i + step])
            i += step
            continue
        elif takes_value:
            rest.extend(tokens[i : i + 2])
            i += 2
            continue
        else:
            rest.append(token)
        i += 1
    if len(actions) > 1:
        print(f"{PROG}: give one action, not {' and '.join(actions)}", file=sys.stderr)
        raise SystemExit(2)
    return ["transactions", *front, *actions, *rest]


def add_parser(commands: Any) -> None:
    txn = commands.add_parser(
        "transactions",
        help="list and describe transactions, find and abort hanging ones",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Analyze producers' transactions and recover from hanging ones, as
kafka-transactions.sh does (docs/transactions.md):

  list                 every transactional id the coordinators know, and its state
  describe             one transactional id at its coordinator: producer id and epoch,
                       state, timeout, how long its transaction has been open, its
                       partitions
  describe-producers   the producers a partition's leader knows, with the start offset
                       of each one's open transaction
  find-hanging         open transactions no coordinator will ever end (their producer
                       id or transactional id unknown to the coordinators, or the
                       partition not in the coordinator's transaction), open longer
                       than --max-transaction-timeout
  abort                end one with an ABORT marker (needs ClusterAction), picked by its
                       --start-offset, or by --producer-id, --producer-epoch and
                       --coordinator-epoch

The flag spelling works too: --list, --describe, --describe-producers,
--find-hanging, --abort (before or after the other options).
'annal transactions ACTION --help' shows an action's options.""",
    )
    txn.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
        help="brokers to contact",
    )  # fmt: skip
    actions = txn.add_subparsers(dest="action", metavar="ACTION", title="actions")
    actions.required = True
    actions.add_parser("list", help="list transactions (their ids, coordinators and states)")
    describe = actions.add_parser(
        "describe", help="describe the state of a transactional id at its coordinator"
    )
    describe.add_argument("--transactional-id", required=True, help="transactional id")
    producers = actions.add_parser(
        "describe-producers", help="describe the producers a partition's leader knows"
    )
    _partition_options(producers)
    hanging = actions.add_parser(
        "find-hanging",
        help="find hanging transactions (of a broker's partitions, or of a topic)",
        description="Open transactions that nobody will end: found in the partitions with a "
        "replica on --broker-id, or of --topic (one --partition of it), described on their "
        "leaders.",
    )
    hanging.add_argument(
        "--broker-id", type=int, metavar="ID", help="search the partitions with a replica here"
    )
    hanging.add_argument(
        "--topic", help="search this topic's partitions (required with --partition)"
    )
    hanging.add_argument("--partition", type=int, help="only this partition of --topic")
    hanging.add_argument(
        "--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
        help="only transactions open (since their producer's last batch) longer than this, "
        "which no coordinator lets run: the brokers' transaction.max.timeout.ms "
        "(default: %(default)s)",
    )  # fmt: skip
    abort = actions.add_parser(
        "abort",
        help="abort a hanging transaction (requires ClusterAction)",
        description="Write an ABORT marker for a hanging transaction on one partition, through "
        "its leader. Give --start-offset (the producer is found with describe-producers), or "
        "--producer-id, --producer-epoch and --coordinator-epoch.",
    )
    _partition_options(abort)
    abort.add_argument(
        "--start-offset", type=int, metavar="OFFSET",
        help="the first offset of the transaction to abort (find-hanging's StartOffset)",
    )  # fmt: skip
    abort.add_argument("--producer-id", type=int, metavar="ID", help="producer id")
    abort.add_argument("--producer-epoch", type=int, metavar="EPOCH", help="producer epoch")
    abort.add_argument(
        "--coordinator-epoch", type=int, metavar="EPOCH",
        help="coordinator epoch (-1, as describe-producers shows a producer that never had a "
        "marker, is sent as 0)",
    )  # fmt: skip
    txn.set_defaults(run=run)


def _partition_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="topic name")
    parser.add_argument("--partition", required=True, type=int, help="partition number")


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options of ``args.action``, if anything."""
    if args.action == "find-hanging":
        if args.topic is None and args.broker_id is None:
            return "give --topic or --broker-id to limit the scope of the search"
        if args.partition is not None and args.topic is None:
            return "--partition needs --topic"
        if args.max_transaction_timeout < 0:
            return "--max-transaction-timeout is a number of minutes, 0 or more"
    if getattr(args, "partition", None) is not None and args.partition < 0:
        return f"--partition {args.partition} is not a partition number"
    if args.action == "abort":
        by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
        if args.start_offset is None and args.producer_id is None:
            return (
                "identify the transaction to abort with --start-offset, or with --producer-id, "
                "--producer-epoch and --coordinator-epoch"
            )
        if args.start_offset is not None and any(v is not None for v in by_producer):
            return "give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch"
        if args.start_offset is None and args.producer_epoch is None:
            return "--producer-id needs --producer-epoch"
        if args.start_offset is None and args.coordinator_epoch is None:
            return "--producer-id needs --coordinator-epoch"
    return None


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Kafka's tools' table: each value padded to its column's widest, then a tab."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]
    return ["".join(v.ljust(w) + "\t" for v, w in zip(row, widths, strict=True))
            for row in (headers, *rows)]  # fmt: skip


def listing_rows(found: Sequence[TransactionListing]) -> list[list[str]]:
    return [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state] for t in found]


def description_row(d: TransactionDescription, now_ms: int) -> list[str]:
    started = d.start_time_ms >= 0
    return [
        str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch),
        d.state, str(d.timeout_ms), str(d.start_time_ms) if started else "None",
        str(now_ms - d.start_time_ms) if started else "None",
        ",".join(str(tp) for tp in d.partitions),
    ]  # fmt: skip


def producer_rows(found: Sequence[ProducerState]) -> list[list[str]]:
    return [
        [str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
         str(p.last_sequence), str(p.last_timestamp_ms),
         str(p.current_txn_start_offset) if p.in_transaction else "None"]
        for p in found
    ]  # fmt: skip


def hanging_rows(found: Sequence[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [
        [t.partition.topic, str(t.partition.partition), str(t.producer.producer_id),
         str(t.producer.producer_epoch), str(t.producer.coordinator_epoch),
         str(t.producer.current_txn_start_offset), str(t.producer.last_timestamp_ms),
         str((now_ms - t.producer.last_timestamp_ms) // 60_000)]
        for t in found
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from annal.admin.client import AdminClient
    from annal.admin.transactions import TransactionAdmin

    if (problem := usage_problem(args)) is not None:
        print(f"{PROG} {args.action}: {problem}", file=sys.stderr)
        return 2
    try:
        client = AdminClient(args.bootstrap_server)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            return RUNS[args.action](TransactionAdmin(client), args)
        except AnnalError as exc:
            return _failed(f"{PROG} {args.action}", exc)


def _print(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    for line in table(headers, rows):
        print(line)
    return 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _list(admin: TransactionAdmin, args: argparse.Namespace) -> int:
    return _print(LIST_HEADERS, listing_rows(admin.list_transactions()))


def _describe(admin: TransactionAdmin, args: argparse.Namespace) -> int:
    found = admin.describe_transaction(args.transactional_id)
    return _print(DESCRIBE_HEADERS, [description_row(found, _now_ms())])


def _describe_producers(admin: TransactionAdmin, args: argparse.Namespace) -> int:
    from annal.topic_partition import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    return _print(PRODUCERS_HEADERS, producer_rows(admin.describe_producers([tp])[tp]))


def _find_hanging(admin: TransactionAdmin, args: argparse.Namespace) -> int:
    found = admin.find_hanging(
        args.broker_id, args.topic, args.partition, args.max_transaction_timeout * 60_000
    )
    return _print(HANGING_HEADERS, hanging_rows(found, _now_ms()))


def _abort(admin: TransactionAdmin, args: argparse.Namespace) -> int:
    from annal.admin.transactions import AbortSpec
    from annal.topic_partition import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None:
        spec = AbortSpec(tp, args.producer_id, args.producer_epoch, args.coordinator_epoch)
    else:
        found = admin.abort_spec_at(tp, args.start_offset)
        if found is None:
            print(f"{PROG} abort: no open transaction starts at offset {args.start_offset} of "
                  f"{tp}", file=sys.stderr)  # fmt: skip
            print(f"{PROG} abort: hint: annal transactions describe-producers --topic "
                  f"{tp.topic} --partition {tp.partition} shows where the open ones start "
                  "(CurrentTransactionStartOffset)", file=sys.stderr)  # fmt: skip
            return 1
        spec = found
    admin.abort_transaction(spec)
    print(f"Aborted the transaction of producer {spec.producer_id} (epoch "
          f"{spec.producer_epoch}) on {tp}.")  # fmt: skip
    return 0


RUNS: dict[str, Callable[[TransactionAdmin, argparse.Namespace], int]] = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "find-hanging": _find_hanging,
    "abort": _abort,
}


def _failed(prog: str, exc: AnnalError) -> int:
    """``fail``'s report, with this command's hints for the codes it knows better."""
    hint = HINTS.get(exc.code)
    if hint is None:
        return fail(prog, exc)
    print(f"{prog}: {exc}", file=sys.stderr)
    print(f"{prog}: hint: {hint}", file=sys.stderr)
    return 1
