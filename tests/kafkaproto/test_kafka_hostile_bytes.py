"""Hostile and odd bytes on the Kafka listener, over real sockets: null arrays a
version does not allow, truncated and random bodies, array lengths larger than
the frame (each closes its connection with one warning line, no traceback, and
the broker carries on); unknown tagged fields (skipped, as Kafka skips them);
Metadata asking for topics by id; and the request-bytes budget taken from a
frame's size before its body is read."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any

import pytest
from annal.broker.kafka.apis import KafkaApis
from annal.broker.kafka.listener import KafkaListener
from annal.broker.requests.rpc_guard import RequestLimits
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto import legacy_versions
from annal.kafkaproto.wire import (
    MalformedRequest,
    Request,
    decode_request,
    encode_request,
    millis,
    peek_head,
    request_type,
    response_type,
)
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
)

pytestmark = pytest.mark.timeout(300)

legacy_versions.install()  # Produce v0-v2 and Fetch v0-v3, which the broker serves

API_VERSIONS, METADATA, JOIN_GROUP, DESCRIBE_GROUPS = 18, 3, 11, 15
UNKNOWN_TOPIC_ID, INVALID_REQUEST = 100, 42
SEED = 20240611
SAMPLES_PER_VERSION = 6


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory(1, {"group.initial.rebalance.delay.ms": "0"})


# -- talking to the listener ----------------------------------------------------------


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def header(api_key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
    """Request header v1 (v2, with an empty tagged-field section, when ``flexible``)."""
    head = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    return head + (b"\x00" if flexible else b"")


def framed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def read_frame(sock: socket.socket) -> bytes:
    """One response frame; b"" when the broker closed the connection."""
    data = b""
    for wanted in (4, None):
        size = wanted if wanted is not None else struct.unpack(">i", data)[0]
        data = b""
        while len(data) < size:
            try:
                chunk = sock.recv(size - len(data))
            except ConnectionResetError:
                return b""
            if not chunk:
                assert wanted is not None or not data, "closed inside a response"
                return b""
            data += chunk
    return data


def answer(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """The correlation id and body of a response frame."""
    assert frame, "the broker closed the connection instead of answering"
    flexible = response_type(api_key, version).__flexible__ and api_key != API_VERSIONS
    head, size = entity_reader(ResponseHeaderV1 if flexible else ResponseHeaderV0)(frame, 0)
    body, _ = entity_reader(response_type(api_key, version))(frame, size)
    return int(head.correlation_id), body


def api_versions_answered(port: int) -> bool:
    """A new connection's ApiVersions v0 is answered with no error."""
    with connect(port) as sock:
        sock.sendall(framed(header(API_VERSIONS, 0, 77, False)))
        correlation_id, body = answer(read_frame(sock), API_VERSIONS, 0)
    return correlation_id == 77 and body.error_code == 0


def served(port: int) -> list[tuple[int, int]]:
    """Every (api key, version) the broker says it serves."""
    with connect(port) as sock:
        sock.sendall(framed(header(API_VERSIONS, 0, 1, False)))
        _, body = answer(read_frame(sock), API_VERSIONS, 0)
    return [
        (int(k.api_key), v)
        for k in body.api_keys
        for v in range(int(k.min_version), int(k.max_version) + 1)
    ]


def closed_with_one_line(sock: socket.socket, broker: BrokerProcess, reason: str) -> str:
    """The broker closed ``sock`` and logged one warning naming the client and
    ``reason``; that line."""
    assert read_frame(sock) == b"", "the broker should have closed the connection"
    client = f"closing Kafka connection from 127.0.0.1:{sock.getsockname()[1]}: "
    wait_until(lambda: client in broker.log_path.read_text(), 10, "the warning naming the client")
    lines = [x for x in broker.log_path.read_text().splitlines() if client in x]
    assert len(lines) == 1, lines
    assert reason in lines[0], lines[0]
    return lines[0]


def no_traceback(broker: BrokerProcess) -> None:
    text = broker.log_path.read_text()
    assert "Traceback" not in text, text[text.index("Traceback") - 400 :][:3000]


# -- bodies that do not parse: null arrays, huge lengths, truncated and random bytes --


@pytest.mark.parametrize(
    ("api_key", "version", "body", "reason"),
    [
        (DESCRIBE_GROUPS, 0, b"\xff\xff\xff\xff",
         "DescribeGroupsRequest v0 does not parse: field groups: null, which "
         "DescribeGroupsRequest v0 does not allow"),
        (DESCRIBE_GROUPS, 5, b"\x00\x00\x00",  # compact null array, then the tags
         "DescribeGroupsRequest v5 does not parse: field groups: null"),
        (METADATA, 1, b"\x7f\xff\xff\xff",
         "MetadataRequest v1 does not parse: field topics: an array of 2147483647 items, "
         "but only 0 bytes are left"),
        (METADATA, 9, b"\xff\xff\xff\xff\x0f\x00\x00\x00\x00",
         "MetadataRequest v9 does not parse: field topics: an array of 4294967294 items"),
        (1, 4, struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0) + b"\x00\x00\x00\x01\x00\x01t"
         + b"\x7f\xff\xff\xff",
         "FetchRequest v4 does not parse: field topics[0].partitions: an array of 2147483647"),
        (METADATA, 4, b"\x00\x00\x00\x01\x00\x05ab",
         "MetadataRequest v4 does not parse: field topics[0].name"),
    ],
    ids=["null-legacy-array", "null-compact-array", "huge-legacy-array", "huge-compact-array",
         "huge-nested-array", "truncated-string"],
)  # fmt: skip
def test_bodies_that_do_not_parse_close_with_one_line_naming_the_field(
    broker: BrokerProcess, api_key: int, version: int, body: bytes, reason: str
) -> None:
    flexible = request_type(api_key, version).__flexible__
    with connect(broker.kafka_port) as sock:
        sock.sendall(framed(header(api_key, version, 5, flexible) + body))
        closed_with_one_line(sock, broker, reason)
    assert api_versions_answered(broker.kafka_port)
    no_traceback(broker)


def sample_values(entity_type: Any, rng: random.Random) -> dict[str, Any]:
    """Small, well-formed values for every field of a request type."""
    simple = {
        "int8": lambda: rng.randint(-1, 3), "int16": lambda: rng.randint(-1, 5),
        "int32": lambda: rng.randint(-1, 100), "int64": lambda: rng.randint(-1, 10**6),
        "bool": lambda: rng.random() < 0.5, "string": lambda: rng.choice(["a", "t", "é", ""]),
        "bytes": lambda: b"xy", "records": lambda: b"", "uuid": lambda: None,
        "timedelta_i32": lambda: rng.randint(0, 100), "timedelta_i64": lambda: rng.randint(0, 100),
        "float64": lambda: 1.5, "error_code": lambda: 0, "uint16": lambda: 3,
    }  # fmt: skip
    values: dict[str, Any] = {}
    for field in fields(entity_type):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = [sample_values(kind.type_, rng) for _ in range(rng.randint(0, 2))]
        elif isinstance(kind, EntityField):
            values[field.name] = sample_values(kind.type_, rng)
        elif isinstance(kind, PrimitiveTupleField):
            make = simple[field.metadata["kafka_type"]]
            values[field.name] = [make() for _ in range(rng.randint(0, 2))]
        else:
            values[field.name] = simple[field.metadata["kafka_type"]]()
    return values


HOSTILE_LENGTHS = (
    b"\xff\xff\xff\xff",  # -1: null, as int32 (and a huge compact length's start)
    b"\x7f\xff\xff\xff",  # the largest int32
    b"\xff\xff\xff\xff\x0f",  # the largest compact length
    b"\x80\x80\x80\x80\x08",  # a compact length past 2**31
    b"\x01\x0b\x05hello",  # one tagged field: tag 11, 5 bytes
)


def encoded_body(api_key: int, version: int, values: dict[str, Any]) -> bytes:
    """The body of a request built from ``values``, without its size and header."""
    frame = encode_request(api_key, version, 0, "", values)
    flexible = request_type(api_key, version).__flexible__
    return frame[4 + len(header(api_key, version, 0, flexible)) - len(b"test") :]


def hostile_body(api_key: int, version: int, rng: random.Random) -> bytes:
    """A body, whole or spoiled: random bytes, a valid body cut short, with bytes
    changed, or with a hostile length put in somewhere."""
    body = encoded_body(api_key, version, sample_values(request_type(api_key, version), rng))
    spoiled = bytearray(body)
    mode = rng.randrange(5)
    if mode == 0:
        return rng.randbytes(rng.randrange(0, 48))
    if mode == 1 and spoiled:
        return bytes(spoiled[: rng.randrange(len(spoiled))])
    if mode == 2 and spoiled:
        for _ in range(rng.randint(1, 4)):
            spoiled[rng.randrange(len(spoiled))] = rng.randrange(256)
        return bytes(spoiled)
    if mode == 3:
        at = rng.randrange(len(spoiled) + 1)
        spoiled[at:at] = rng.choice(HOSTILE_LENGTHS)
        return bytes(spoiled)
    return body


def test_encoded_bodies_follow_the_header() -> None:
    values = {"topics": [{"name": "t"}], "allow_auto_topic_creation": False,
              "include_topic_authorized_operations": False}  # fmt: skip
    for version in (4, 12):
        frame = header(METADATA, version, 1, version >= 9) + encoded_body(METADATA, version, values)
        request = decode_request(frame, peek_head(frame))
        assert (request.client_id, request.body.topics[0].name) == ("test", "t")


def lingers(request: Request) -> bool:
    """A request the broker may rightly hold for long: a Fetch's long poll, a
    JoinGroup's rebalance (Kafka holds them as long as they ask)."""
    body = request.body
    waits = [getattr(body, name, 0) for name in ("max_wait", "rebalance_timeout")]
    if request.head.api_key == JOIN_GROUP:
        waits.append(body.session_timeout)
    return any(millis(w) > 1000 for w in waits)


def test_random_bodies_for_every_served_version_never_leave_a_traceback(
    broker: BrokerProcess,
) -> None:
    """Seeded random bodies of every (api key, version) served, each followed on its
    connection by an ApiVersions request: a body that does not decode closes the
    connection (with one warning), one that does is answered or refused; nothing
    is logged with a traceback, and the broker answers new connections
    afterwards."""
    rng = random.Random(SEED)
    sock = connect(broker.kafka_port)
    outcomes = {"closed": 0, "answered": 0}
    try:
        for api_key, version in served(broker.kafka_port):
            flexible = request_type(api_key, version).__flexible__
            for n in range(SAMPLES_PER_VERSION):
                body = header(api_key, version, 1000 + n, flexible) + hostile_body(
                    api_key, version, rng
                )
                try:
                    request: Request | None = decode_request(body, peek_head(body))
                except MalformedRequest:
                    request = None
                if request is not None and lingers(request):
                    continue
                sock.sendall(framed(body) + framed(header(API_VERSIONS, 0, 9, False)))
                outcome = ""
                while not outcome:
                    try:
                        frame = read_frame(sock)
                    except TimeoutError:
                        pytest.fail(f"no answer to {api_key} v{version}: {body.hex()}")
                    if not frame:
                        outcome = "closed"
                    elif struct.unpack(">i", frame[:4])[0] == 9:
                        outcome = "answered"
                if request is None:
                    assert outcome == "closed", f"{api_key} v{version}: {body.hex()}"
                if outcome == "closed":
                    sock.close()
                    sock = connect(broker.kafka_port)
                outcomes[outcome] += 1
    finally:
        sock.close()
    assert outcomes["closed"] > 100 and outcomes["answered"] > 100, outcomes
    assert api_versions_answered(broker.kafka_port)
    assert broker.alive
    no_traceback(broker)


# -- unknown tagged fields ------------------------------------------------------------

UNKNOWN_TAGS = bytes([2, 40, 3]) + b"abc" + bytes([41, 0])  # tags 40 (3 bytes) and 41 (empty)


def test_unknown_tags_in_the_header_and_body_are_skipped(broker: BrokerProcess) -> None:
    """ApiVersions v3 and Metadata v9/v12 with tags no version knows, in the request
    header, the body and a topic of the body: answered as without them."""
    with connect(broker.kafka_port) as sock:
        head = struct.pack(">hhih", API_VERSIONS, 3, 11, 4) + b"test" + UNKNOWN_TAGS
        body = b"\x02t\x021" + UNKNOWN_TAGS  # client software name "t", version "1"
        sock.sendall(framed(head + body))
        correlation_id, versions = answer(read_frame(sock), API_VERSIONS, 3)
        assert (correlation_id, versions.error_code) == (11, 0)
        assert (METADATA, 0, 12) in {
            (k.api_key, k.min_version, k.max_version) for k in versions.api_keys
        }
        for version, topic in ((9, b"\x02t"), (12, bytes(16) + b"\x02t")):
            head = struct.pack(">hhih", METADATA, version, 12, 4) + b"test" + UNKNOWN_TAGS
            topics = b"\x02" + topic + UNKNOWN_TAGS  # one topic, "t", with tags of its own
            flags = b"\x00" + (b"\x00\x00" if version < 11 else b"\x00")  # no auto-creation
            sock.sendall(framed(head + topics + flags + UNKNOWN_TAGS))
            correlation_id, metadata = answer(read_frame(sock), METADATA, version)
            assert correlation_id == 12
            assert [b.node_id for b in metadata.brokers] == [1]
            assert [(t.name, t.error_code) for t in metadata.topics] == [("t", 3)]
    no_traceback(broker)


def test_a_tag_longer_than_the_frame_closes_the_connection(broker: BrokerProcess) -> None:
    with connect(broker.kafka_port) as sock:
        head = struct.pack(">hhih", API_VERSIONS, 3, 11, 4) + b"test" + bytes([1, 40, 100])
        sock.sendall(framed(head + b"\x02t\x021\x00"))
        closed_with_one_line(
            sock, broker, "ApiVersionsRequest v3 does not parse: header: tagged field 40 has 100"
        )
    no_traceback(broker)


# -- Metadata by topic id -------------------------------------------------------------


def metadata_by_id(port: int, version: int, topics: list[tuple[uuid.UUID, str | None]]) -> Any:
    """Metadata ``version`` (10+) asking for ``topics`` as (id, name) pairs."""
    values = {
        "topics": [{"topic_id": i, "name": n} for i, n in topics],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    with connect(port) as sock:
        sock.sendall(encode_request(METADATA, version, 21, "test", values))
        correlation_id, body = answer(read_frame(sock), METADATA, version)
        assert correlation_id == 21
        assert api_versions_after(sock)  # the connection stays open
    return body


def api_versions_after(sock: socket.socket) -> bool:
    sock.sendall(framed(header(API_VERSIONS, 0, 22, False)))
    correlation_id, body = answer(read_frame(sock), API_VERSIONS, 0)
    return correlation_id == 22 and body.error_code == 0


def test_metadata_v12_by_an_unknown_id_answers_unknown_topic_id(broker: BrokerProcess) -> None:
    wanted, other = uuid.uuid4(), uuid.uuid4()
    body = metadata_by_id(broker.kafka_port, 12, [(wanted, None), (other, None), (wanted, None)])
    assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in body.topics] == [
        (UNKNOWN_TOPIC_ID, None, wanted, 0),
        (UNKNOWN_TOPIC_ID, None, other, 0),
    ]
    assert [b.node_id for b in body.brokers] == [1]
    # As in Kafka, a request naming any id looks up the ids only.
    mixed = metadata_by_id(broker.kafka_port, 12, [(wanted, None), (uuid.UUID(int=0), "t")])
    assert [(t.error_code, t.name) for t in mixed.topics] == [(UNKNOWN_TOPIC_ID, None)]
    # Neither a name nor an id: the zero id is not known either; names are looked up.
    nameless = metadata_by_id(broker.kafka_port, 12, [(uuid.UUID(int=0), None),
                                                      (uuid.UUID(int=0), "t")])  # fmt: skip
    assert sorted((t.error_code, t.name or "") for t in nameless.topics) == [
        (3, "t"),  # UNKNOWN_TOPIC_OR_PARTITION: no auto-creation asked for
        (UNKNOWN_TOPIC_ID, ""),
    ]
    no_traceback(broker)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_and_v11_refuse_a_null_name_as_kafka_does(
    broker: BrokerProcess, version: int
) -> None:
    """Kafka's broker throws InvalidRequestException ("Topic name can not be null
    for version 10"): every topic asked for is answered INVALID_REQUEST."""
    wanted = uuid.uuid4()
    body = metadata_by_id(broker.kafka_port, version, [(wanted, None), (uuid.UUID(int=0), "t")])
    assert [(t.error_code, t.name, t.topic_id) for t in body.topics] == [
        (INVALID_REQUEST, "", wanted),
        (INVALID_REQUEST, "t", None),  # kio reads the zero id as None
    ]
    no_traceback(broker)


# -- request bytes are held before a frame's body is read --------------------------

MiB = 1024 * 1024
BUDGET = 4 * MiB
FRAME = 3 * MiB


class CountingLimits(RequestLimits):
    """Request limits that remember the most bytes they ever held."""

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        super().__init__(max_requests, max_bytes)
        self.most_bytes = 0

    def reserve(self, size: int) -> bool:
        taken = super().reserve(size)
        self.most_bytes = max(self.most_bytes, self.bytes)
        return taken


@dataclass
class Running:
    """A listener on a loop of its own thread, as the broker runs it."""

    listener: KafkaListener
    limits: CountingLimits
    port: int
    loop: asyncio.AbstractEventLoop


FAILING = 3  # an api key whose handler, in the listener below, fails


@pytest.fixture
def running() -> Iterator[Running]:
    """A real KafkaListener (ApiVersions, and key 3 v0 failing) under request limits
    of ``BUDGET`` bytes, taking frames up to 16 MiB."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    apis = KafkaApis()

    async def fail(request: Request) -> None:
        raise RuntimeError(f"failing on purpose for request {request.head.correlation_id}")

    apis.add(FAILING, "Failing", (0, 0), fail)
    limits = CountingLimits(max_requests=100, max_bytes=BUDGET)
    listener = KafkaListener(apis, limits, max_request_bytes=16 * MiB)
    port = asyncio.run_coroutine_threadsafe(listener.start("127.0.0.1", 0), loop).result(10)
    yield Running(listener, limits, port, loop)
    asyncio.run_coroutine_threadsafe(listener.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def padded_api_versions(size: int, correlation_id: int) -> bytes:
    """An ApiVersions v0 request in a frame of ``size`` bytes (bytes after a body are
    ignored, as Kafka's broker ignores them)."""
    request = header(API_VERSIONS, 0, correlation_id, False)
    return framed(request + bytes(size - len(request)))


def settled(running: Running) -> bool:
    limits = running.limits
    return (limits.bytes, limits.active, running.listener.frames_waiting) == (0, 0, 0)


def test_concurrent_large_frames_wait_for_request_bytes_before_being_read(
    running: Running,
) -> None:
    """Four 3 MiB frames on four connections under a 4 MiB budget: the budget is
    taken from each frame's size before its body comes, so one frame is read
    while the other three wait unread; every frame is answered in turn and the
    budget is never exceeded."""
    frames = [padded_api_versions(FRAME, 100 + i) for i in range(4)]
    socks = [connect(running.port) for _ in frames]
    try:
        for sock, frame in zip(socks, frames, strict=True):
            sock.sendall(frame[: 4 + 1024])  # the size and the first KiB of the body
        wait_until(
            lambda: running.limits.bytes == FRAME and running.listener.frames_waiting == 3,
            20,
            "one frame holding the budget and three waiting, before any body is whole",
        )
        senders = [
            threading.Thread(target=sock.sendall, args=(frame[4 + 1024 :],))
            for sock, frame in zip(socks, frames, strict=True)
        ]
        for sender in senders:
            sender.start()
        for i, sock in enumerate(socks):
            correlation_id, body = answer(read_frame(sock), API_VERSIONS, 0)
            assert (correlation_id, body.error_code) == (100 + i, 0)
        for sender in senders:
            sender.join(30)
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: settled(running), 20, "the budget given back")
    assert running.limits.most_bytes == FRAME  # one frame at a time
    assert running.limits.refused == 0  # the gRPC-style refusals are not used here


def test_a_frame_larger_than_the_budget_is_read_alone(running: Running) -> None:
    with connect(running.port) as sock:
        sock.sendall(padded_api_versions(BUDGET + MiB, 7))
        assert answer(read_frame(sock), API_VERSIONS, 0)[0] == 7
    wait_until(lambda: settled(running), 20, "the budget given back")
    assert running.limits.most_bytes == BUDGET + MiB


@pytest.mark.parametrize(
    "how",
    ["reset-mid-body", "closed-mid-body", "malformed", "unsupported", "handler-fails",
     "refused-api-versions"],
)  # fmt: skip
def test_the_budget_is_given_back_however_a_frame_ends(running: Running, how: str) -> None:
    """A frame holding the budget gives it back whether the client goes away inside
    it, it does not parse, it is not served, its handler fails, or it is answered
    without a handler; a frame waiting behind it is then read and answered."""
    holder = connect(running.port)
    body = {
        "malformed": header(DESCRIBE_GROUPS, 0, 1, False) + b"\xff\xff\xff\xff",
        "unsupported": header(999, 0, 1, False),
        "handler-fails": header(FAILING, 0, 1, False),
        "refused-api-versions": header(API_VERSIONS, 99, 1, False),
    }.get(how, header(API_VERSIONS, 0, 1, False))
    frame = framed(body + bytes(FRAME - len(body)))
    holder.sendall(frame[: 4 + len(body)])
    wait_until(lambda: running.limits.bytes == FRAME, 20, "the first frame holding the budget")
    with connect(running.port) as waiting:
        sender = threading.Thread(target=waiting.sendall, args=(padded_api_versions(FRAME, 55),))
        sender.start()  # its body is not read until the first frame gives the budget back
        wait_until(lambda: running.listener.frames_waiting == 1, 20, "the second frame waiting")
        if how == "reset-mid-body":
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            holder.close()  # an RST
        elif how == "closed-mid-body":
            holder.shutdown(socket.SHUT_WR)
        else:
            holder.sendall(frame[4 + len(body) :])
        if how == "refused-api-versions":
            assert answer(read_frame(holder), API_VERSIONS, 0)[1].error_code == 35
        elif how != "reset-mid-body":
            assert read_frame(holder) == b""  # closed by the listener
        assert answer(read_frame(waiting), API_VERSIONS, 0)[0] == 55
        sender.join(30)
    holder.close()
    wait_until(lambda: settled(running), 20, "the budget given back")
    assert running.limits.most_bytes == FRAME


def test_real_broker_gives_the_budget_back_on_every_path(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A broker with a 1 MiB request-bytes budget: after 900 KiB frames that do not
    parse, are not served, or end mid-body, four 900 KiB requests on four
    connections are all answered (a leaked reservation would hold them forever),
    and so is one larger than the whole budget."""
    broker = broker_factory(
        1, {"queued.max.request.bytes": str(MiB), "socket.request.max.bytes": str(2 * MiB)}
    )
    size = 900 * 1024
    spoilt = [
        header(DESCRIBE_GROUPS, 0, 1, False) + b"\xff\xff\xff\xff",
        header(999, 0, 1, False),
        header(METADATA, 9, 1, True) + b"\xff\xff\xff\xff\x0f",
    ]
    for body in spoilt:
        with connect(broker.kafka_port) as sock:
            sock.sendall(framed(body + bytes(size - len(body))))
            assert read_frame(sock) == b""
    for _ in range(3):
        with connect(broker.kafka_port) as sock:
            sock.sendall(struct.pack(">i", size) + bytes(1000))
    socks = [connect(broker.kafka_port) for _ in range(4)]
    try:
        for i, sock in enumerate(socks):
            sock.sendall(padded_api_versions(size, 60 + i))
        for i, sock in enumerate(socks):
            assert answer(read_frame(sock), API_VERSIONS, 0)[0] == 60 + i
    finally:
        for sock in socks:
            sock.close()
    with connect(broker.kafka_port) as sock:
        sock.sendall(padded_api_versions(MiB + 1000, 70))
        assert answer(read_frame(sock), API_VERSIONS, 0)[0] == 70
    no_traceback(broker)


def test_malformed_request_is_what_decoding_raises() -> None:
    """The decoding boundary raises MalformedRequest, never kio's own errors."""
    frame = header(DESCRIBE_GROUPS, 0, 1, False) + b"\xff\xff\xff\xff"
    with pytest.raises(MalformedRequest, match="field groups: null"):
        decode_request(frame, peek_head(frame))


@pytest.mark.parametrize("version", [0, 1, 3])
def test_an_assignment_claiming_a_huge_array_reads_as_none(version: int) -> None:
    """A member's assignment bytes come from a client: a claimed length past the
    bytes there is refused before anything is reserved (kio's own reader would
    reserve it first and can abort the broker)."""
    from annal.broker.groups.group_api import consumer_assignment

    for claimed in (2**31 - 1, 2**30):
        data = struct.pack(">hi", version, claimed) + b"\x00" * 8
        assert consumer_assignment(data) == []
    good = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">ii", 1, 4)
    assert consumer_assignment(good + struct.pack(">i", -1)) == [("t", [4])]
