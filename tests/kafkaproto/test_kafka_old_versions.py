"""Produce v0-v2 and Fetch v0-v3 (message formats 0 and 1) on a real broker, as a
Kafka 2.x broker serves them: every advertised Produce and Fetch version on the
wire, kafka-python pinned to old brokers' versions, and kcat (librdkafka), which
compresses only when the broker serves Produce v2 and Fetch v2; plus the
handlers' answers to storage errors, with the broker's data path stood in for."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kafka
import pytest
from annal.admin.client import AdminClient
from annal.broker.kafka import data as data_apis
from annal.broker.kafka.apis import KafkaApis
from annal.broker.kafka.data import DataApis
from annal.consumer.simple import SimpleConsumer
from annal.deploy.runner import BrokerProcess
from annal.kafkaproto import legacy_versions
from annal.kafkaproto.client import KafkaConnection
from annal.kafkaproto.wire import decode_request, encode_request, peek_head
from annal.storage.batch import BatchHeader, Compression, iter_batches
from annal.storage.legacy import encode_legacy, iter_legacy_records
from annal.storage.records import Record, encode_batch, iter_records
from annal.v1 import annal_pb2 as pb
from environment import require_command

from annal import errors

pytestmark = pytest.mark.timeout(240)

PRODUCE, FETCH, API_VERSIONS = 0, 1, 18
UNSUPPORTED_COMPRESSION_TYPE = 76
LEGACY_CODECS = ["none", "gzip", "snappy", "lz4"]
TS = 1_700_000_000_000
_topics = itertools.count()

# (offset, key, value) as both sides compare them
Row = tuple[int, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory(1)


@pytest.fixture(scope="module")
def connection(broker: BrokerProcess) -> Iterator[KafkaConnection]:
    legacy_versions.install()  # this process encodes the old versions too
    conn = KafkaConnection(broker.kafka_endpoint, 30, "old-versions")
    yield conn
    conn.close()


def new_topic(broker: BrokerProcess, partitions: int = 1, **config: str) -> str:
    name = f"old{next(_topics)}"
    with AdminClient(broker.endpoint) as admin:
        admin.create_topic(name, partitions, 1, config=config or None)
    return name


def stored_batches(broker: BrokerProcess, topic: str, partition: int = 0) -> list[BatchHeader]:
    """The batch headers in the partition's segment files, read by annal's storage."""
    directory = broker.log_dir / f"{topic}-{partition}"
    data = b"".join(path.read_bytes() for path in sorted(Path(directory).glob("*.log")))
    return list(iter_batches(data))


def annal_reads(broker: BrokerProcess, topic: str, partition: int = 0) -> list[Row]:
    with SimpleConsumer(broker.endpoint) as consumer:
        return [(r.offset, r.key, r.value) for r in consumer.iterate(topic, partition, 0)]


def records_of(n: int, first: int = 0, tag: str = "r") -> list[Record]:
    return [
        Record(
            first + i,
            TS + i,
            None if i % 4 == 3 else f"{tag}-k{first + i}".encode(),
            None if i % 5 == 2 else f"{tag}-v{first + i}-".encode() * (1 + i % 3),
        )
        for i in range(n)
    ]


def produce(
    connection: KafkaConnection, version: int, topic: str, records: bytes, acks: int = 1
) -> Any:
    values = {
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return connection.exchange(PRODUCE, version, values)


def fetch(
    connection: KafkaConnection, version: int, topic: str, offset: int, max_bytes: int = 1 << 20
) -> Any:
    values = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}
                ],
            }
        ],
    }
    answer = connection.exchange(FETCH, version, values)
    (topic_answer,) = answer.responses
    (partition,) = topic_answer.partitions
    return partition


def magics(data: bytes) -> set[int]:
    """The magic byte of each top-level entry (batch or legacy message)."""
    found = set()
    position = 0
    while position + 17 <= len(data):
        found.add(data[position + 16])
        position += 12 + int.from_bytes(data[position + 8 : position + 12], "big")
    return found


def legacy_codecs(data: bytes) -> list[int]:
    """The codec of each top-level legacy entry (a wrapper's, or 0)."""
    found = []
    position = 0
    while position < len(data):
        found.append(data[position + 17] & 0x07)
        position += 12 + int.from_bytes(data[position + 8 : position + 12], "big")
    return found


def rows_in(data: bytes) -> list[Row]:
    records = iter_legacy_records(data) if magics(data) <= {0, 1} else iter_records(data)
    return [(r.offset, r.key, r.value) for r in records]


# -- the wire ---------------------------------------------------------------------------


def test_api_versions_advertise_produce_0_9_and_fetch_0_12(connection: KafkaConnection) -> None:
    table = {k.api_key: (k.min_version, k.max_version) for k in connection.exchange(
        API_VERSIONS, 0, {}).api_keys}  # fmt: skip
    assert table[PRODUCE] == (0, 9)
    assert table[FETCH] == (0, 12)


@pytest.mark.parametrize("version", range(10))
def test_every_produce_version_appends(
    broker: BrokerProcess, connection: KafkaConnection, version: int
) -> None:
    """v0-v1 carry magic 0 messages, v2 magic 1 (a gzip wrapper here), v3+ v2
    batches; each is stored as v2 batches and answered in its own layout."""
    topic = new_topic(broker)
    records = records_of(6)
    if version <= 1:
        payload = encode_legacy(records, 0)
    elif version == 2:
        payload = encode_legacy(records, 1, Compression.GZIP)
    else:
        payload = encode_batch(records, compression=Compression.SNAPPY)
    for attempt in range(2):
        answer = produce(connection, version, topic, payload)
        (partition,) = answer.responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (0, 6 * attempt)
        assert hasattr(answer, "throttle_time") == (version >= 1)
        assert hasattr(partition, "log_append_time") == (version >= 2)
    expected = [(r.offset, r.key, r.value) for r in records]
    expected += [(o + 6, k, v) for o, k, v in expected]
    assert annal_reads(broker, topic) == expected
    headers = stored_batches(broker, topic)
    assert {h.magic for h in headers} == {2}
    if version == 2:
        assert {h.compression for h in headers} == {Compression.GZIP}
        assert {h.max_timestamp for h in headers} == {TS + 5}
    if version <= 1:
        assert {h.max_timestamp for h in headers} == {-1}  # magic 0 has no timestamps


def test_produce_v2_answers_the_log_append_time(
    broker: BrokerProcess, connection: KafkaConnection
) -> None:
    topic = new_topic(broker, **{"message.timestamp.type": "LogAppendTime"})
    answer = produce(connection, 2, topic, encode_legacy(records_of(3), 1))
    (partition,) = answer.responses[0].partition_responses
    assert partition.error_code == 0
    assert partition.log_append_time is not None
    appended = int(partition.log_append_time.timestamp() * 1000)
    assert {h.max_timestamp for h in stored_batches(broker, topic)} == {appended}
    fetched = fetch(connection, 2, topic, 0)
    assert {r.timestamp for r in iter_legacy_records(fetched.records)} == {appended}


def test_a_message_whose_crc_is_wrong_is_refused_and_nothing_stored(
    broker: BrokerProcess, connection: KafkaConnection
) -> None:
    topic = new_topic(broker)
    good = encode_legacy(records_of(4), 1)
    bad = bytearray(good)
    bad[-1] ^= 0x01  # the last message's value: its CRC no longer matches
    for version in (0, 1, 2):
        (partition,) = (
            produce(connection, version, topic, bytes(bad)).responses[0].partition_responses
        )
        assert partition.error_code == errors.CORRUPT_MESSAGE.number
        assert partition.base_offset == -1
    assert stored_batches(broker, topic) == []


@pytest.fixture(scope="module")
def every_codec(broker: BrokerProcess, connection: KafkaConnection) -> tuple[str, list[Record]]:
    """A partition of four v2 batches (none, gzip, snappy, lz4) with headers."""
    topic = new_topic(broker)
    records: list[Record] = []
    for i, codec in enumerate(LEGACY_CODECS):
        batch = [r._replace(headers=(("h", b"x"),)) for r in records_of(10, 10 * i, codec)]
        relative = [r._replace(offset=r.offset - 10 * i) for r in batch]
        encoded = encode_batch(relative, compression=Compression[codec.upper()])
        (partition,) = produce(connection, 7, topic, encoded).responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (0, 10 * i)
        records += batch
    return topic, records


@pytest.mark.parametrize("version", range(13))
def test_every_fetch_version_answers_its_message_format(
    connection: KafkaConnection, every_codec: tuple[str, list[Record]], version: int
) -> None:
    """v0-v1 answer magic 0, v2-v3 magic 1 (converted down, codecs kept), v4+ the
    stored v2 batches; offsets, keys and values are the same in all."""
    topic, records = every_codec
    partition = fetch(connection, version, topic, 0)
    assert partition.error_code == 0
    assert partition.high_watermark == 40
    want = 0 if version <= 1 else 1 if version <= 3 else 2
    assert magics(partition.records) == {want}
    assert rows_in(partition.records) == [(r.offset, r.key, r.value) for r in records]
    if want == 1:
        timestamps = [r.timestamp for r in iter_legacy_records(partition.records)]
        assert timestamps == [r.timestamp for r in records]
    if want < 2:  # each batch's codec kept
        assert legacy_codecs(partition.records) == [0] * 10 + [1, 2, 3]
    if version >= 5:
        assert partition.log_start_offset == 0


def test_fetch_from_inside_an_uncompressed_batch_leaves_out_the_earlier_records(
    connection: KafkaConnection, every_codec: tuple[str, list[Record]]
) -> None:
    topic, _ = every_codec
    for version in (0, 3):
        offsets = [o for o, _, _ in rows_in(fetch(connection, version, topic, 4).records)]
        assert offsets == list(range(4, 40))
        offsets = [o for o, _, _ in rows_in(fetch(connection, version, topic, 14).records)]
        assert offsets == list(range(10, 40))  # a gzip wrapper goes whole


def test_an_old_fetch_keeps_to_its_size_but_answers_the_first_batch_whole(
    connection: KafkaConnection, every_codec: tuple[str, list[Record]]
) -> None:
    topic, records = every_codec
    expected = [(r.offset, r.key, r.value) for r in records]
    for version in range(4):
        first = fetch(connection, version, topic, 0, max_bytes=10)
        assert rows_in(first.records) == expected[:10]  # past the limit, but whole
        full = fetch(connection, version, topic, 0)
        assert rows_in(full.records) == expected
        limit = len(full.records) // 2
        limited = fetch(connection, version, topic, 0, max_bytes=limit)
        assert len(limited.records) <= max(limit, len(first.records))
        got = rows_in(limited.records)  # whole messages only
        assert 10 <= len(got) < len(expected)
        assert got == expected[: len(got)]


def test_an_old_fetch_of_zstd_is_answered_unsupported_compression_type(
    broker: BrokerProcess, connection: KafkaConnection
) -> None:
    topic = new_topic(broker)
    produce(connection, 7, topic, encode_batch(records_of(5), compression=Compression.LZ4))
    zstd = encode_batch(records_of(5), compression=Compression.ZSTD)
    produce(connection, 7, topic, zstd)
    for version in range(4):
        assert [o for o, _, _ in rows_in(fetch(connection, version, topic, 0).records)] == list(
            range(5)
        )  # the lz4 batch, without the zstd one after it
        partition = fetch(connection, version, topic, 5)
        assert partition.error_code == UNSUPPORTED_COMPRESSION_TYPE
        assert not partition.records
    assert magics(fetch(connection, 4, topic, 5).records) == {2}


# -- kafka-python pinned to old brokers ---------------------------------------------------


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10), (0, 10, 1)], ids=str)
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_with_old_api_versions_produces_and_consumes(
    broker: BrokerProcess, api_version: tuple[int, ...], codec: str
) -> None:
    """(0, 9): Produce v1 and Fetch v1, magic 0; (0, 10): Produce v2 and Fetch v2,
    magic 1; (0, 10, 1): Fetch v3.  What they store is v2 batches of their codec."""
    topic = new_topic(broker)
    sent = [(f"k{i}".encode() if i % 3 else None, f"{codec}-{i}".encode() * (1 + i % 4))
            for i in range(40)]  # fmt: skip
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.kafka_endpoint, api_version=api_version,
        compression_type=None if codec == "none" else codec, linger_ms=20, acks=1,
    )  # fmt: skip
    try:
        futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in sent]
        producer.flush(30)
        offsets = [f.get(30).offset for f in futures]
    finally:
        producer.close(10)
    assert offsets == list(range(40))
    assert [(k, v) for _, k, v in annal_reads(broker, topic)] == sent
    headers = stored_batches(broker, topic)
    assert {h.compression for h in headers} == {Compression[codec.upper()]}
    if api_version == (0, 9):
        assert {h.max_timestamp for h in headers} == {-1}
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.kafka_endpoint, api_version=api_version,
        consumer_timeout_ms=3000, enable_auto_commit=False,
    )  # fmt: skip
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)  # ListOffsets v0, which a (0, 9) client would send, is not served
        seen = [(m.offset, m.key, m.value) for m in consumer]
    finally:
        consumer.close()
    assert seen == [(i, k, v) for i, (k, v) in enumerate(sent)]


# -- kcat (librdkafka) ---------------------------------------------------------------------


def kcat(broker: BrokerProcess, *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        ["kcat", "-b", broker.kafka_endpoint, *args], input=stdin, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "does not support compression" not in done.stderr
    return done.stdout


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_kcat_compresses_what_it_produces(broker: BrokerProcess, codec: str) -> None:
    """librdkafka compresses only for brokers that serve Produce v2 and Fetch v2."""
    require_command("kcat")
    topic = new_topic(broker)
    lines = [f"k{i}:{codec} value {i} " + "x" * 50 for i in range(30)]
    kcat(broker, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", ":",
         stdin="\n".join(lines) + "\n")  # fmt: skip
    headers = stored_batches(broker, topic)
    assert headers and {h.compression for h in headers} == {Compression[codec.upper()]}
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k:%s\n")
    assert out.splitlines() == lines


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_speaking_to_an_old_broker_uses_magic_0(broker: BrokerProcess, codec: str) -> None:
    """``broker.version.fallback=0.9.0`` without ApiVersions: Produce v1 and Fetch v1,
    magic 0 messages both ways (lz4 with the old frame checksum of KAFKA-3160)."""
    require_command("kcat")
    topic = new_topic(broker)
    old = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0"]
    # Values that compress well: librdkafka sends a message set uncompressed when
    # its codec makes it larger, as it may for a set of one short message.
    lines = [f"k{i}:{codec} message {i} " + "y" * 60 for i in range(25)]
    kcat(broker, *old, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", ":",
         stdin="\n".join(lines) + "\n")  # fmt: skip
    headers = stored_batches(broker, topic)
    assert {h.compression for h in headers} == {Compression[codec.upper()]}
    assert {h.max_timestamp for h in headers} == {-1}
    out = kcat(broker, *old, "-C", "-t", topic, "-p", "0", "-o", "0", "-e", "-f", "%k:%s@%o\n")
    assert out.splitlines() == [f"{line}@{i}" for i, line in enumerate(lines)]


# -- the handlers, with the data path stood in for -----------------------------------------


class StandIn:
    """``DataApi``'s produce and fetch: every partition answered KAFKA_STORAGE_ERROR,
    or with ``stored`` fetches read as a log reads them (whole batches from the one
    holding the offset, the first whole past the limits)."""

    def __init__(self, stored: dict[int, bytes] | None = None) -> None:
        self.stored = stored

    async def produce(self, ask: pb.ProduceRequest, deadline: Any, session: Any) -> Any:
        answer = pb.ProduceResponse()
        for topic in ask.topics:
            out = answer.topics.add(name=topic.name)
            for p in topic.partitions:
                out.partitions.add(
                    partition=p.partition, error=pb.KAFKA_STORAGE_ERROR, base_offset=-1,
                    log_append_time_ms=-1, log_start_offset=-1,
                )  # fmt: skip
        return answer

    async def fetch_in_session(
        self, ask: pb.FetchRequest, session_id: int, epoch: int, *rest: Any
    ) -> tuple[pb.FetchResponse, int]:
        answer = pb.FetchResponse()
        budget = ask.max_bytes
        for topic in ask.topics:
            out = answer.topics.add(name=topic.name)
            for p in topic.partitions:
                if self.stored is None:
                    out.partitions.add(
                        partition=p.partition, error=pb.KAFKA_STORAGE_ERROR, high_watermark=-1,
                        log_start_offset=-1,
                    )  # fmt: skip
                    continue
                stored = self.stored[p.partition]
                start = next(
                    (h.position for h in iter_batches(stored) if h.last_offset >= p.fetch_offset),
                    len(stored),
                )
                limit = min(p.partition_max_bytes, budget)
                end = 0
                for header in iter_batches(stored[start:]):
                    if end and header.position + header.size > limit:
                        break
                    end = header.position + header.size
                read = stored[start : start + end]
                budget = max(budget - len(read), 0)
                out.partitions.add(partition=p.partition, high_watermark=1000, records=read)
        return answer, 0


def handled(
    api_key: int, version: int, values: dict[str, Any], stand_in: StandIn | None = None
) -> Any:
    apis = KafkaApis()
    DataApis(stand_in or StandIn(), None).register(apis)  # type: ignore[arg-type]
    frame = encode_request(api_key, version, 1, "stand-in", values)[4:]
    request = decode_request(frame, peek_head(frame))
    answer = asyncio.run(apis.handle(request))
    assert answer is not None
    return answer


def fetch_values(partitions: dict[int, int], max_bytes: int, offset: int = 0) -> dict[str, Any]:
    """A Fetch of topic "t": partition -> its limit."""
    return {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes,
        "topics": [{"topic": "t", "partitions": [
            {"partition": p, "fetch_offset": offset, "partition_max_bytes": limit}
            for p, limit in partitions.items()]}],
    }  # fmt: skip


@pytest.mark.parametrize("version", range(10))
def test_old_produce_versions_hear_not_leader_for_a_storage_error(version: int) -> None:
    """Clients of Produce v0-v3 do not know KAFKA_STORAGE_ERROR and would give up;
    NOT_LEADER makes them refresh metadata and retry, as Kafka answers them."""
    legacy_versions.install()
    values = {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b""}]}]}  # fmt: skip
    answer = handled(PRODUCE, version, values)
    (partition,) = answer["responses"][0]["partition_responses"]
    expected = errors.NOT_LEADER_OR_FOLLOWER if version <= 3 else errors.KAFKA_STORAGE_ERROR
    assert partition["error_code"] == expected.number


@pytest.mark.parametrize("version", range(13))
def test_old_fetch_versions_hear_not_leader_for_a_storage_error(version: int) -> None:
    legacy_versions.install()
    answer = handled(FETCH, version, fetch_values({0: 100}, 1000))
    (partition,) = answer["responses"][0]["partitions"]
    expected = errors.NOT_LEADER_OR_FOLLOWER if version <= 5 else errors.KAFKA_STORAGE_ERROR
    assert partition["error_code"] == expected.number


def small_records(partition: int, batches: int = 8, per_batch: int = 20) -> bytes:
    """Uncompressed batches of short records: they grow by half and more in magic 1."""
    parts = []
    for b in range(batches):
        values = [b"p%d-%d" % (partition, i) for i in range(per_batch)]
        records = [Record(b * per_batch + i, TS, None, v) for i, v in enumerate(values)]
        parts.append(encode_batch(records, base_offset=b * per_batch))
    return b"".join(parts)


def test_a_converted_fetch_v3_keeps_to_the_response_limit() -> None:
    """Old messages are larger: a partition may grow past what was read, up to its
    own limit, while the whole answer stays within the request's max_bytes."""
    legacy_versions.install()
    stored = {0: small_records(0), 1: small_records(1)}
    size = len(stored[0])
    roomy = handled(FETCH, 3, fetch_values({0: 1 << 20, 1: 1 << 20}, 1 << 20), StandIn(stored))
    partitions = roomy["responses"][0]["partitions"]
    for partition in partitions:  # all of it: more bytes than were read
        assert len(rows_in(partition["records"])) == 160
        assert len(partition["records"]) > size
    tight = handled(FETCH, 3, fetch_values({0: 1 << 20, 1: 1 << 20}, 2 * size), StandIn(stored))
    partitions = tight["responses"][0]["partitions"]
    assert sum(len(p["records"]) for p in partitions) <= 2 * size
    assert all(20 <= len(rows_in(p["records"])) < 160 for p in partitions)
    for version in (1, 2):  # no response limit before v3: the partition's own
        (partition,) = handled(FETCH, version, fetch_values({0: size + 200}, 0), StandIn(stored))[
            "responses"
        ][0]["partitions"]
        assert size < len(partition["records"]) <= size + 200


def test_large_answers_are_converted_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large conversion runs on a worker thread, so the broker's loop goes on
    serving other requests meanwhile; a small one inline."""
    legacy_versions.install()
    threads: list[int] = []
    convert = data_apis.down_convert

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return convert(*args, **kwargs)

    monkeypatch.setattr(data_apis, "down_convert", recording)
    big = small_records(0, batches=500, per_batch=50)
    assert len(big) > data_apis.OFF_LOOP_CONVERSION_BYTES
    answer = handled(FETCH, 1, fetch_values({0: 1 << 30}, 0), StandIn({0: big}))
    (partition,) = answer["responses"][0]["partitions"]
    assert len(rows_in(partition["records"])) > 10_000
    small = handled(FETCH, 1, fetch_values({0: 1 << 30}, 0), StandIn({0: small_records(0)}))
    assert len(rows_in(small["responses"][0]["partitions"][0]["records"])) == 160
    assert threads[0] != threading.get_ident()
    assert threads[1] == threading.get_ident()
