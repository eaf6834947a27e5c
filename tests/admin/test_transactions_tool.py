"""The pure parts of ``annal transactions``: Kafka's table layout, both spellings of
the actions, the argument checks, and how find-hanging decides what hangs."""

from __future__ import annotations

import pytest
from annal.admin.transactions import (
    OpenTransaction,
    ProducerState,
    TransactionDescription,
    TransactionListing,
    hanging_transactions,
    open_transactions,
)

from annal.cli import main
from annal.topic_partition import TopicPartition
from annal.transactionscmd import (
    DESCRIBE_HEADERS,
    PRODUCERS_HEADERS,
    description_row,
    hanging_rows,
    kafka_spelling,
    listing_rows,
    producer_rows,
    table,
)

pytestmark = pytest.mark.timeout(30)

NOW = 1_700_000_000_000
MINUTE = 60_000
TP0, TP1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def producer(
    pid: int, start: int = -1, age_min: int = 30, coordinator_epoch: int = -1
) -> ProducerState:
    return ProducerState(pid, 0, 4, NOW - age_min * MINUTE, coordinator_epoch, start)


def described(state: str, *partitions: TopicPartition) -> TransactionDescription:
    return TransactionDescription(2, "app-1", 7, 3, state, 60_000, NOW - 5000, partitions)


def test_tables_pad_each_column_to_its_widest_and_end_values_with_tabs() -> None:
    rows = listing_rows(
        [
            TransactionListing(1, "a", 7, "Ongoing"),
            TransactionListing(3, "much-longer-id", 12, "Empty"),
        ]
    )
    assert table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), rows) == [
        "TransactionalId\tCoordinator\tProducerId\tTransactionState\t",
        "a              \t1          \t7         \tOngoing         \t",
        "much-longer-id \t3          \t12        \tEmpty           \t",
    ]
    assert table(("A", "B"), []) == ["A\tB\t"]


def test_rows_say_none_where_kafkas_tool_does() -> None:
    open_one = described("Ongoing", TP0, TP1)
    assert description_row(open_one, NOW) == [
        "2", "app-1", "7", "3", "Ongoing", "60000", str(NOW - 5000), "5000", "orders-0,orders-1",
    ]  # fmt: skip
    idle = TransactionDescription(2, "app-1", 7, 3, "CompleteCommit", 60_000, -1, ())
    assert description_row(idle, NOW)[5:] == ["60000", "None", "None", ""]
    assert len(DESCRIBE_HEADERS) == len(description_row(idle, NOW))
    assert producer_rows([producer(7), producer(8, start=40, coordinator_epoch=3)]) == [
        ["7", "0", "-1", "4", str(NOW - 30 * MINUTE), "None"],
        ["8", "0", "3", "4", str(NOW - 30 * MINUTE), "40"],
    ]
    assert len(PRODUCERS_HEADERS) == 6
    txn = OpenTransaction(TP1, producer(8, start=40, age_min=31))
    assert hanging_rows([txn], NOW) == [
        ["orders", "1", "8", "0", "-1", "40", str(NOW - 31 * MINUTE), "31"]
    ]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["transactions", "--bootstrap-server", "b:1", "list"],
         ["transactions", "--bootstrap-server", "b:1", "list"]),
        (["transactions", "--list", "--bootstrap-server", "b:1"],
         ["transactions", "--bootstrap-server", "b:1", "list"]),
        (["transactions", "list", "--bootstrap-server=b:1", "--command-config", "c.properties"],
         ["transactions", "--bootstrap-server=b:1", "--command-config", "c.properties", "list"]),
        (["transactions", "--describe", "--transactional-id", "list", "--bootstrap-server", "b"],
         ["transactions", "--bootstrap-server", "b", "describe", "--transactional-id", "list"]),
        (["transactions", "--bootstrap-server", "b", "--abort", "--topic", "t", "--partition", "0",
          "--producer-epoch", "-1"],
         ["transactions", "--bootstrap-server", "b", "abort", "--topic", "t", "--partition", "0",
          "--producer-epoch", "-1"]),
        (["transactions", "find-hanging", "--help"], ["transactions", "find-hanging", "--help"]),
        (["topics", "--list"], ["topics", "--list"]),
    ],
)  # fmt: skip
def test_both_spellings_become_one(given: list[str], expected: list[str]) -> None:
    assert kafka_spelling(given) == expected


def test_two_actions_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["transactions", "--list", "--bootstrap-server", "b:1", "--describe"])
    assert exited.value.code == 2
    assert "give one action, not list and describe" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["find-hanging"], "give --topic or --broker-id to limit the scope of the search"),
        (["find-hanging", "--broker-id", "1", "--partition", "0"], "--partition needs --topic"),
        (["find-hanging", "--topic", "t", "--max-transaction-timeout", "-1"],
         "--max-transaction-timeout is a number of minutes"),
        (["describe-producers", "--topic", "t", "--partition", "-2"],
         "--partition -2 is not a partition number"),
        (["abort", "--topic", "t", "--partition", "0"], "identify the transaction to abort with"),
        (["abort", "--topic", "t", "--partition", "0", "--start-offset", "4", "--producer-id", "7"],
         "give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "7"],
         "--producer-id needs --producer-epoch"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "7",
          "--producer-epoch", "0"], "--producer-id needs --coordinator-epoch"),
    ],
)  # fmt: skip
def test_argument_checks(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    # checked before any broker is asked: nothing listens at this address
    assert main(["transactions", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    assert message in capsys.readouterr().err


def test_usage_errors_name_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["transactions", "--bootstrap-server", "127.0.0.1:1", "describe"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage: annal transactions describe" in err and "--transactional-id" in err
    with pytest.raises(SystemExit):
        main(["transactions", "--bootstrap-server", "127.0.0.1:1"])
    assert "required: ACTION" in capsys.readouterr().err


def test_open_transactions_are_those_open_longer_than_the_largest_timeout() -> None:
    producers = {
        TP0: [producer(1), producer(2, start=10, age_min=16), producer(3, start=12, age_min=14)],
        TP1: [producer(2, start=3, age_min=16)],
    }
    found = open_transactions(producers, NOW, 15 * MINUTE)
    assert [(t.partition, t.producer.producer_id) for t in found] == [(TP0, 2), (TP1, 2)]
    everything = open_transactions(producers, NOW, 0)
    assert [t.producer.producer_id for t in everything] == [2, 3, 2]


def test_a_transaction_hangs_unless_its_coordinator_holds_it_open_there() -> None:
    candidates = [
        OpenTransaction(TP0, producer(7, start=1)),  # app-1's, and app-1 is Ongoing on it
        OpenTransaction(TP1, producer(7, start=2)),  # app-1's, but not among its partitions
        OpenTransaction(TP0, producer(8, start=3)),  # no transactional id lists producer 8
        OpenTransaction(TP0, producer(9, start=4)),  # its id is unknown to the coordinator
    ]
    ids = {7: "app-1", 9: "gone"}
    found = hanging_transactions(
        candidates, ids, {"app-1": described("Ongoing", TP0), "gone": None}
    )
    assert [(t.partition, t.producer.producer_id) for t in found] == [
        (TP0, 8), (TP0, 9), (TP1, 7),
    ]  # fmt: skip
    preparing = {"app-1": described("PrepareAbort", TP0, TP1), "gone": None}
    assert [t.producer.producer_id for t in hanging_transactions(candidates, ids, preparing)] == [
        8, 9,
    ]  # fmt: skip
    done = {"app-1": described("CompleteCommit", TP0, TP1), "gone": None}
    assert len(hanging_transactions(candidates, ids, done)) == 4
