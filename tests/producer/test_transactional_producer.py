"""annal's transactional producer (KIP-98) on a real broker with real ZooKeeper:
commits and aborts across topics seen exactly by read_committed consumers
(annal's and confluent-kafka's), offsets committed for a group only with the
transaction, a second producer with the same transactional id fencing the
first, an abortable failure, and clear errors for calls out of order."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest
from annal.admin.client import AdminClient
from annal.consumer.group_offsets import GroupOffsets
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess, wait_until
from annal.producer.producer import ProduceError, Producer
from annal.producer.transactions import (
    ProducerFencedError,
    TransactionError,
    TransactionStateError,
)
from annal.storage.batch import iter_batches

from annal import errors
from annal.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(180)

UNREACHABLE = "127.0.0.1:1"  # nothing is sent in the settings tests
PARTITIONS = 3
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory(
        1,
        {
            "transaction.state.log.num.partitions": "4",
            "offsets.topic.num.partitions": "4",
        },
    )


def new_topics(broker: BrokerProcess, count: int = 2) -> list[str]:
    names = [f"txp{next(_names)}" for _ in range(count)]
    with AdminClient(broker.endpoint) as admin:
        for name in names:
            admin.create_topic(name, PARTITIONS)
    return names


def transactional(broker: BrokerProcess, tid: str, **settings: object) -> Producer:
    return Producer(broker.endpoint, transactional_id=tid, **settings)  # type: ignore[arg-type]


def send_all(producer: Producer, topics: list[str], tag: str, n: int) -> list[bytes]:
    """``n`` records spread over every partition of ``topics``; their values."""
    values = []
    for i in range(n):
        value = f"{tag}-{i}".encode()
        producer.send(topics[i % len(topics)], value, partition=i % PARTITIONS)
        values.append(value)
    return values


def where(values: list[bytes], topics: list[str]) -> dict[TopicPartition, list[bytes]]:
    """Where ``send_all`` put each value, in order."""
    found: dict[TopicPartition, list[bytes]] = {}
    for v in values:
        i = int(v.rsplit(b"-", 1)[1])
        found.setdefault(TopicPartition(topics[i % len(topics)], i % PARTITIONS), []).append(v)
    return found


def annal_read(
    broker: BrokerProcess, topics: list[str], isolation: str
) -> dict[TopicPartition, list[bytes]]:
    """Every partition of ``topics`` read to its end with annal's simple consumer."""
    found: dict[TopicPartition, list[bytes]] = {}
    with SimpleConsumer(broker.endpoint, isolation_level=isolation) as consumer:
        for topic in topics:
            for partition in range(PARTITIONS):
                values = [
                    r.value for r in consumer.iterate(topic, partition, 0) if r.value is not None
                ]
                if values:
                    found[TopicPartition(topic, partition)] = values
    return found


def confluent_read(broker: BrokerProcess, topics: list[str], expected: int) -> list[bytes]:
    """What confluent-kafka's read_committed consumer reads of ``topics``: ``expected``
    records, and then nothing more for a while."""
    consumer = ck.Consumer(
        {"bootstrap.servers": broker.kafka_endpoint, "group.id": f"g{next(_names)}",
         "enable.auto.commit": False, "isolation.level": "read_committed",
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.assign(
        [ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in topics for p in range(PARTITIONS)]
    )
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < expected:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        end = time.monotonic() + 2  # nothing more arrives: what was read is all there is
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    return seen


# -- settings (no broker) ---------------------------------------------------------


def test_a_transactional_id_implies_idempotence_and_acks_all() -> None:
    with Producer(UNREACHABLE, transactional_id="t") as producer:
        assert producer.idempotent and producer.acks == -1
        assert producer.transactional_id == "t"
    with pytest.raises(ValueError, match="transactional_id .*cannot go with acks=1"):
        Producer(UNREACHABLE, transactional_id="t", acks=1)
    with pytest.raises(ValueError, match="transactional_id needs idempotence"):
        Producer(UNREACHABLE, transactional_id="t", enable_idempotence=False)
    with pytest.raises(ValueError, match="must not be empty"):
        Producer(UNREACHABLE, transactional_id="")
    with pytest.raises(ValueError, match="transaction_timeout_ms must be positive"):
        Producer(UNREACHABLE, transactional_id="t", transaction_timeout_ms=0)


def test_no_coordinator_within_the_timeout_is_retriable() -> None:
    with Producer(UNREACHABLE, transactional_id="t") as producer:
        with pytest.raises(TransactionError, match="no broker answered") as failed:
            producer.init_transactions(timeout_s=1)
        assert failed.value.retriable and not failed.value.fatal
        assert failed.value.code is errors.BROKER_NOT_AVAILABLE
        with pytest.raises(TransactionError, match=r"call init_transactions\(\) first"):
            producer.begin_transaction()  # nothing changed: init may be called again


def test_transactional_methods_need_a_transactional_id() -> None:
    with Producer(UNREACHABLE) as producer:
        assert producer.transactional_id is None
        with pytest.raises(TransactionStateError, match="give it a transactional_id"):
            producer.init_transactions()
        with pytest.raises(TransactionStateError, match=r"begin_transaction\(\) needs"):
            producer.begin_transaction()


# -- on a broker --------------------------------------------------------------------


def test_calls_out_of_order_are_clear_errors(broker: BrokerProcess) -> None:
    topic = new_topics(broker, 1)[0]
    with transactional(broker, f"order-{next(_names)}") as producer:
        with pytest.raises(TransactionStateError, match=r"call init_transactions\(\) first"):
            producer.send(topic, b"x", partition=0)
        with pytest.raises(TransactionStateError, match=r"call init_transactions\(\) first"):
            producer.begin_transaction()
        producer.init_transactions(30)
        with pytest.raises(TransactionStateError, match=r"init_transactions\(\)"):
            producer.init_transactions(30)
        with pytest.raises(TransactionStateError, match=r"call begin_transaction\(\) first"):
            producer.send(topic, b"x", partition=0)
        with pytest.raises(TransactionStateError, match=r"call begin_transaction\(\) first"):
            producer.send_many(topic, [b"x"], partition=0)
        with pytest.raises(TransactionStateError, match=r"commit_transaction\(\) with .*begin"):
            producer.commit_transaction()
        with pytest.raises(TransactionStateError, match=r"abort_transaction\(\) with .*begin"):
            producer.abort_transaction()
        with pytest.raises(TransactionStateError, match=r"send_offsets_to_transaction\(\)"):
            producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g")
        producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="a transaction is open already"):
            producer.begin_transaction()
        producer.commit_transaction(30)  # empty: nothing to tell the coordinator
        producer.begin_transaction()
        producer.send(topic, b"fine", partition=0).result(30)
        producer.commit_transaction(30)
    assert annal_read(broker, [topic], "read_committed") == {TopicPartition(topic, 0): [b"fine"]}


def test_a_timeout_above_the_brokers_maximum_is_fatal(broker: BrokerProcess) -> None:
    with transactional(broker, f"timeout-{next(_names)}", transaction_timeout_ms=10**9) as producer:
        with pytest.raises(TransactionError, match="transaction.max.timeout.ms") as failed:
            producer.init_transactions(30)
        assert failed.value.fatal and failed.value.code is errors.INVALID_TRANSACTION_TIMEOUT
        with pytest.raises(TransactionError, match="fatal error .*INVALID_TRANSACTION_TIMEOUT"):
            producer.begin_transaction()


def test_commits_and_aborts_across_topics(broker: BrokerProcess) -> None:
    topics = new_topics(broker)
    with transactional(broker, f"across-{next(_names)}", linger_ms=5000) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        committed = send_all(producer, topics, "c1", 60)
        producer.commit_transaction(30)

        producer.begin_transaction()
        aborted = send_all(producer, topics, "a1", 30)
        producer.flush(30)  # in the log, to be aborted there
        unsent = producer.send(topics[0], b"never", partition=0)  # lingers: dropped
        producer.abort_transaction(30)
        error = unsent.exception(10)
        assert isinstance(error, ProduceError)
        assert error.code is errors.OPERATION_NOT_ATTEMPTED and "aborted" in error.message

        producer.begin_transaction()
        committed += send_all(producer, topics, "c2", 30)
        producer.commit_transaction(30)

    assert annal_read(broker, topics, "read_committed") == where(committed, topics)
    everything = annal_read(broker, topics, "read_uncommitted")
    assert sorted(v for vs in everything.values() for v in vs) == sorted(committed + aborted)
    read = confluent_read(broker, topics, len(committed))
    assert sorted(read) == sorted(committed)


def test_offsets_are_committed_for_the_group_only_with_the_transaction(
    broker: BrokerProcess,
) -> None:
    topic = new_topics(broker, 1)[0]
    group = f"eos-{next(_names)}"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with GroupOffsets(broker.endpoint, group) as offsets:
        assert offsets.committed([tp0, tp1]) == {tp0: -1, tp1: -1}
        with transactional(broker, f"offsets-{next(_names)}") as producer:
            producer.init_transactions(30)
            producer.begin_transaction()
            producer.send(topic, b"aborted", partition=0)
            producer.send_offsets_to_transaction({tp0: 5, (topic, 1): 6}, group)  # type: ignore[dict-item]
            producer.abort_transaction(30)
            assert offsets.committed([tp0, tp1]) == {tp0: -1, tp1: -1}

            producer.begin_transaction()
            producer.send(topic, b"committed", partition=0)
            producer.send_offsets_to_transaction({tp0: 7, tp1: 8}, group)
            assert offsets.committed([tp0, tp1]) == {tp0: -1, tp1: -1}  # pending
            producer.commit_transaction(30)
        wait_until(
            lambda: offsets.committed([tp0, tp1]) == {tp0: 7, tp1: 8},
            30,
            "the transaction's offsets committed for the group",
        )
    assert annal_read(broker, [topic], "read_committed") == {tp0: [b"committed"]}


def test_a_second_producer_with_the_same_id_fences_the_first(broker: BrokerProcess) -> None:
    topics = new_topics(broker)
    tid = f"fenced-{next(_names)}"
    old = transactional(broker, tid)
    try:
        old.init_transactions(30)
        old.begin_transaction()
        send_all(old, topics, "zombie", 12)
        old.flush(30)
        with transactional(broker, tid) as new:
            new.init_transactions(30)  # aborts the old producer's transaction
            new.begin_transaction()
            committed = send_all(new, topics, "new", 12)
            new.commit_transaction(30)
        with pytest.raises(ProducerFencedError, match="fenced") as fenced:
            old.commit_transaction(30)
        assert fenced.value.fatal and fenced.value.code in (
            errors.PRODUCER_FENCED,
            errors.INVALID_PRODUCER_EPOCH,
        )
        # fatal: everything is refused from now on, naming the error
        for call in (
            lambda: old.send(topics[0], b"late", partition=0),
            old.begin_transaction,
            old.abort_transaction,
            old.commit_transaction,
        ):
            with pytest.raises(ProducerFencedError, match="fatal error .*close it"):
                call()
    finally:
        old.close(10)
    assert annal_read(broker, topics, "read_committed") == where(committed, topics)
    assert sorted(confluent_read(broker, topics, len(committed))) == sorted(committed)


def test_a_record_refused_makes_the_transaction_abortable(broker: BrokerProcess) -> None:
    topic = f"txp{next(_names)}"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, PARTITIONS, config={"max.message.bytes": "2000"})
    with transactional(broker, f"abortable-{next(_names)}") as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send(topic, b"kept back", partition=0).result(30)
        too_large = producer.send(topic, b"x" * 10_000, partition=1)
        assert isinstance(too_large.exception(30), ProduceError)
        with pytest.raises(TransactionError, match=r"abort_transaction\(\)") as failed:
            producer.commit_transaction(30)
        assert failed.value.abortable and not failed.value.fatal
        assert failed.value.code is errors.MESSAGE_TOO_LARGE
        with pytest.raises(TransactionError, match="the transaction failed"):
            producer.send(topic, b"more", partition=0)
        with pytest.raises(TransactionError, match=r"call abort_transaction\(\)"):
            producer.begin_transaction()
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.commit_transaction(30)
    assert annal_read(broker, [topic], "read_committed") == {TopicPartition(topic, 0): [b"after"]}


def test_an_abort_after_a_batch_in_doubt_bumps_the_epoch(broker: BrokerProcess) -> None:
    """A batch whose outcome is unknown (here: marked so) gets the producer a new
    epoch after the abort (KIP-360's InitProducerId with the current id and
    epoch); sequences start again at 0 under it."""
    topic = new_topics(broker, 1)[0]
    with transactional(broker, f"bump-{next(_names)}") as producer:
        producer.init_transactions(30)
        producer_id, epoch = producer.producer_id, producer.producer_epoch
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"a-%d" % i, partition=0).result(30)
        assert producer._txn is not None
        producer._txn._bump_needed = True  # as a batch that ran out of retries leaves it
        producer.abort_transaction(30)
        assert (producer.producer_id, producer.producer_epoch) == (producer_id, epoch + 1)
        producer.begin_transaction()
        producer.send(topic, b"c", partition=0)
        producer.commit_transaction(30)
    with SimpleConsumer(broker.endpoint) as consumer:
        data = consumer.fetch_raw(topic, 0, 0).records
    batches = [
        (h.producer_epoch, h.base_sequence, h.is_transactional)
        for h in iter_batches(data)
        if not h.is_control
    ]
    assert batches == [
        (epoch, 0, True), (epoch, 1, True), (epoch, 2, True), (epoch + 1, 0, True)
    ]  # fmt: skip
    assert annal_read(broker, [topic], "read_committed") == {TopicPartition(topic, 0): [b"c"]}


def test_close_aborts_an_open_transaction(broker: BrokerProcess) -> None:
    topic = new_topics(broker, 1)[0]
    tid = f"closing-{next(_names)}"
    with transactional(broker, tid) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send(topic, b"open", partition=0).result(30)
    # the abort's marker makes the partition stable again at once: a new
    # producer with the same id needs no waiting for the old transaction
    with transactional(broker, tid) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send(topic, b"next", partition=0)
        producer.commit_transaction(30)
    assert annal_read(broker, [topic], "read_committed") == {TopicPartition(topic, 0): [b"next"]}
