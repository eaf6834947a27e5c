"""JoinGroup v4+ (KIP-394) on a real broker, in raw Kafka requests: a new dynamic
member is answered MEMBER_ID_REQUIRED with a member id, and only a join that
comes back with that id is admitted; older versions and static members are
admitted at once; a pending id that never comes back expires after its
session timeout, and no rebalance waits for it.  aiokafka's group members (JoinGroup
v5) go through the two steps on their own."""

from __future__ import annotations

import asyncio
import io
import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import aiokafka
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.wire import build, request_type, response_type
from kio.serial import entity_reader, entity_writer

pytestmark = pytest.mark.timeout(240)

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE = 10, 11, 12, 13, 14, 15
NONE, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 0, 25, 27, 79
SESSION_MS = 30_000
_names = itertools.count()
_correlation = itertools.count(1)


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One broker, the coordinator of every group once its offsets topic is there
    (FindCoordinator creates it, as for a client)."""
    broker = module_broker_factory(
        1, {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
    )
    wait_until(
        lambda: call(broker, FIND_COORDINATOR, 2, key="probe").error_code.value == NONE,
        60, "a group coordinator",
    )  # fmt: skip
    wait_until(
        lambda: join(broker, f"probe-{next(_names)}", version=3).error_code.value == NONE,
        60, "the coordinator loaded",
    )  # fmt: skip
    return broker


def call(broker: BrokerProcess, api_key: int, version: int, **values: Any) -> Any:
    """One request on a connection of its own (a JoinGroup waits for its rebalance,
    and a connection answers in order); the response body."""
    body = build(request_type(api_key, version), values)
    header = type(body).__header_schema__(
        request_api_key=api_key, request_api_version=version,
        correlation_id=next(_correlation), client_id="raw-join",
    )  # fmt: skip
    buffer = io.BytesIO()
    entity_writer(type(header))(buffer, header)
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=150) as sock:
        sock.sendall(struct.pack(">i", len(data)) + data)
        answer = _read_frame(sock)
    answer_type = response_type(api_key, version)
    head, offset = entity_reader(answer_type.__header_schema__)(answer, 0)
    assert head.correlation_id == header.correlation_id
    response, _ = entity_reader(answer_type)(answer, offset)
    return response


def _read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        assert chunk, "the broker closed the connection"
        data += chunk
    return data[4:]


def join(
    broker: BrokerProcess,
    group: str,
    member_id: str = "",
    version: int = 5,
    session_ms: int = SESSION_MS,
    instance_id: str | None = None,
) -> Any:
    values: dict[str, Any] = {
        "group_id": group, "session_timeout": session_ms, "rebalance_timeout": 90_000,
        "member_id": member_id, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"subscription"}],
    }  # fmt: skip
    if instance_id is not None:
        values["group_instance_id"] = instance_id
    return call(broker, JOIN, version, **values)


def joined_two_steps(broker: BrokerProcess, group: str, session_ms: int = SESSION_MS) -> Any:
    first = join(broker, group, session_ms=session_ms)
    assert first.error_code.value == MEMBER_ID_REQUIRED
    return join(broker, group, first.member_id, session_ms=session_ms)


def in_background(action: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``action`` (a JoinGroup waiting for its rebalance) in a thread; its answer
    lands in the list."""
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(action()), daemon=True)
    thread.start()
    return thread, answer


def described_members(broker: BrokerProcess, group: str) -> list[str]:
    answer = call(broker, DESCRIBE, 4, groups=[group], include_authorized_operations=False)
    return [m.member_id for m in answer.groups[0].members]


def heartbeat(broker: BrokerProcess, group: str, generation: int, member_id: str) -> int:
    answer = call(
        broker, HEARTBEAT, 3, group_id=group, generation_id=generation, member_id=member_id
    )
    return int(answer.error_code.value)


def test_a_v5_join_asks_a_dynamic_member_for_its_id_first(broker: BrokerProcess) -> None:
    group = f"two-steps-{next(_names)}"
    first = join(broker, group)
    assert first.error_code.value == MEMBER_ID_REQUIRED
    assert first.member_id.startswith("raw-join-")
    assert first.generation_id == -1 and first.leader == "" and first.members == ()

    made_up = join(broker, group, "raw-join-made-up")
    assert made_up.error_code.value == UNKNOWN_MEMBER_ID

    second = join(broker, group, first.member_id)
    assert second.error_code.value == NONE
    assert second.member_id == first.member_id
    assert second.generation_id == 1 and second.leader == first.member_id
    assert [m.member_id for m in second.members] == [first.member_id]

    # a pending member may leave before it joins; its id is gone then
    pending = join(broker, group)
    assert pending.error_code.value == MEMBER_ID_REQUIRED
    left = call(broker, LEAVE, 3, group_id=group, members=[{"member_id": pending.member_id}])
    assert [m.error_code.value for m in left.members] == [NONE]
    assert join(broker, group, pending.member_id).error_code.value == UNKNOWN_MEMBER_ID

    # JoinGroup v0-v3 and static members (group.instance.id) are admitted at once
    old = join(broker, f"v3-{next(_names)}", version=3)
    assert old.error_code.value == NONE
    assert old.member_id.startswith("raw-join-") and old.generation_id == 1

    static = join(broker, f"static-{next(_names)}", instance_id="static-1")
    assert static.error_code.value == NONE
    assert static.member_id and static.generation_id == 1


def test_a_pending_id_holds_up_no_rebalance_and_expires(broker: BrokerProcess) -> None:
    group = f"pending-{next(_names)}"
    a = joined_two_steps(broker, group)
    assert a.generation_id == 1
    synced = call(
        broker, SYNC, 3, group_id=group, generation_id=1, member_id=a.member_id,
        assignments=[{"member_id": a.member_id, "assignment": b"all"}],
    )  # fmt: skip
    assert synced.error_code.value == NONE  # the group is stable

    # a member id handed out that never comes back, pending for a minute
    absent = join(broker, group, session_ms=60_000)
    assert absent.error_code.value == MEMBER_ID_REQUIRED

    # b comes back with its id while the group is stable: a rebalance starts
    b_first = join(broker, group)
    assert b_first.error_code.value == MEMBER_ID_REQUIRED
    b_join, b_answer = in_background(lambda: join(broker, group, b_first.member_id))
    wait_until(
        lambda: heartbeat(broker, group, 1, a.member_id) == REBALANCE_IN_PROGRESS,
        30, "the rebalance b's join starts",
    )  # fmt: skip

    # c gets its id and comes back with it during the rebalance: it is let in too
    c_first = join(broker, group)
    assert c_first.error_code.value == MEMBER_ID_REQUIRED
    c_join, c_answer = in_background(lambda: join(broker, group, c_first.member_id))
    joined = sorted([a.member_id, b_first.member_id, c_first.member_id])
    wait_until(lambda: sorted(described_members(broker, group)) == joined, 30, "b and c members")

    # every member is in: the rebalance completes at once, without the pending id
    # (waiting for it would take its minute, or the 90 s rebalance timeout)
    started = time.monotonic()
    a_again = join(broker, group, a.member_id)
    assert time.monotonic() - started < 30
    b_join.join(30)
    c_join.join(30)
    assert a_again.error_code.value == NONE and a_again.generation_id == 2
    for answer in b_answer + c_answer:
        assert answer.error_code.value == NONE and answer.generation_id == 2
    assert len(b_answer + c_answer) == 2
    assert sorted(m.member_id for m in a_again.members) == joined

    # an id pending for a member's session (6 s) and no longer
    expiring = join(broker, group, session_ms=6_000)
    assert expiring.error_code.value == MEMBER_ID_REQUIRED
    wait_until(
        lambda: f"pending member {expiring.member_id} did not join again"
        in broker.log_path.read_text(),
        60, "the pending member id forgotten",
    )  # fmt: skip
    assert join(broker, group, expiring.member_id).error_code.value == UNKNOWN_MEMBER_ID


def test_aiokafka_members_join_in_two_steps(broker: BrokerProcess) -> None:
    topic, group = f"two-steps-{next(_names)}", f"aiokafka-{next(_names)}"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(topic, 2, 1)
    servers = f"127.0.0.1:{broker.kafka_port}"

    async def run() -> tuple[list[set[int]], set[bytes], list[str]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=servers)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, b"%d" % i, partition=i % 2)
        finally:
            await producer.stop()
        members = [
            aiokafka.AIOKafkaConsumer(
                topic,
                bootstrap_servers=servers,
                group_id=group,
                auto_offset_reset="earliest",
                session_timeout_ms=10_000,
                heartbeat_interval_ms=500,
            )
            for _ in range(2)
        ]
        seen: set[bytes] = set()
        for member in members:
            await member.start()
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not (
                len(seen) == 20 and all(len(m.assignment()) == 1 for m in members)
            ):
                for member in members:
                    batches = await member.getmany(timeout_ms=200)
                    seen.update(r.value for rs in batches.values() for r in rs if r.value)
            owned = [{tp.partition for tp in m.assignment()} for m in members]
            return owned, seen, described_members(broker, group)
        finally:
            for member in members:
                await member.stop()

    owned, seen, ids = asyncio.run(run())
    assert sorted(owned, key=min) == [{0}, {1}]
    assert seen == {b"%d" % i for i in range(20)}
    assert len(ids) == 2
    log = broker.log_path.read_text()
    for member_id in ids:  # each had its id handed out by a MEMBER_ID_REQUIRED answer first
        assert f"member id {member_id} handed out" in log, member_id
