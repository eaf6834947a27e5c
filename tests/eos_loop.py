"""A consume-transform-produce loop with Kafka's exactly-once recipe, as a process
the tests can SIGKILL: a read_committed group consumer of INPUT, a
transactional producer writing ``<value>:out`` to OUTPUT, and the consumer's
positions committed inside each transaction (``send_offsets_to_transaction``).

    python tests/eos_loop.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [PAUSE_S]

At most ``BATCH`` records per transaction, and ``PAUSE_S`` (default 0) of rest
after each commit, so that a test's crashes land in the middle of the work.

Runs until the test kills it; prints ``committed N`` after each transaction.
Exits with status 3 on a fatal producer error, for its supervisor to start
it again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import confluent_kafka as ck

FATAL = 3


BATCH = 50


def main(
    bootstrap: str, source: str, sink: str, group: str, transactional_id: str, pause_s: str = "0"
) -> None:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 10_000,
            "linger.ms": 5,
            "debug": "eos",
        }
    )
    producer.init_transactions(60)
    consumer.subscribe([source])
    done = 0
    while True:
        messages = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
        if not messages:
            continue
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(
                    sink, key=m.key(), value=m.value() + b":out", partition=m.partition()
                )
            positions = consumer.position(consumer.assignment())
            metadata = consumer.consumer_group_metadata()
            retrying(lambda p=positions, m=metadata: producer.send_offsets_to_transaction(p, m, 60))
            retrying(lambda: producer.commit_transaction(60))
        except ck.KafkaException as exc:
            if exc.args[0].fatal():
                raise
            # Kafka's recipe for any other failure: abort, go back to the committed
            # positions, and do the work again
            print(f"aborting: {exc.args[0]}", flush=True)
            retrying(lambda: producer.abort_transaction(60))
            rewind(consumer)
            continue
        done += len(messages)
        print(f"committed {done}", flush=True)
        time.sleep(float(pause_s))


def retrying(call: Callable[[], object]) -> None:
    """``call`` again while librdkafka says its failure is retriable."""
    while True:
        try:
            call()
            return
        except ck.KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            time.sleep(0.1)


def rewind(consumer: ck.Consumer) -> None:
    """After an abort: back to the committed positions."""
    committed = consumer.committed(consumer.assignment(), 30)
    for tp in committed:
        consumer.seek(
            ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0)
        )

if __name__ == "__main__":
    try:
        main(*sys.argv[1:7])
    except ck.KafkaException as exc:
        if not exc.args[0].fatal():
            raise
        # Kafka's recipe for a fatal error (fenced, or a state the coordinator
        # refuses, even while aborting): give the producer up; the supervisor
        # starts a new loop, whose init_transactions fences this one
        print(f"fatal: {exc.args[0]}", flush=True)
        sys.exit(FATAL)
