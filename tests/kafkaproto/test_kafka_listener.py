"""The Kafka-protocol listener on a real broker: ApiVersions, registration of both
endpoints, and what bad frames do (the connection closes with a log line naming
the client; other clients carry on; nothing stored changes)."""

from __future__ import annotations

import io
import json
import socket
import struct
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from annal.admin.client import AdminClient
from annal.deploy.runner import BrokerProcess, wait_until
from annal.kafkaproto.wire import response_type
from annal.v1 import annal_pb2 as pb
from annal.v1 import annal_pb2_grpc
from annal.zk.client import ZkClient
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.metadata.v9.request import MetadataRequest as MetadataV9
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

pytestmark = pytest.mark.timeout(120)

# What the listener serves: (api key, lowest, highest version).
SERVED = {
    (0, 0, 9), (1, 0, 12), (2, 1, 6), (3, 0, 12), (18, 0, 3), (22, 0, 4), (23, 2, 4),
    (60, 0, 1), (17, 0, 1), (36, 0, 2),
    (29, 1, 3), (30, 1, 3), (31, 1, 3), (50, 0, 0), (51, 0, 0),
    (19, 2, 7), (20, 1, 5), (21, 0, 2), (32, 1, 4), (33, 0, 2), (35, 1, 4), (37, 0, 3), (43, 0, 2),
    (44, 0, 1), (45, 0, 0), (46, 0, 0),
    (8, 2, 8), (9, 1, 7), (10, 0, 4), (11, 0, 7), (12, 0, 4), (13, 0, 4), (14, 0, 5),
    (15, 0, 5), (16, 0, 4), (42, 0, 2), (47, 0, 0),
    (24, 0, 3), (25, 0, 3), (26, 0, 3), (27, 0, 1), (28, 0, 3), (65, 0, 0), (66, 0, 0),
    (61, 0, 0),
}  # fmt: skip


@pytest.fixture(scope="module")
def broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory(1, {"socket.request.max.bytes": "65536"})


def frame(header: Any, body: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(header))(buffer, header)
    entity_writer(type(body))(buffer, body)
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def read_frame(sock: socket.socket) -> bytes:
    """One response frame; b"" when the broker closed the connection."""
    prefix = b""
    while len(prefix) < 4:
        chunk = sock.recv(4 - len(prefix))
        if not chunk:
            return b""
        prefix += chunk
    (size,) = struct.unpack(">i", prefix)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "closed inside a response"
        data += chunk
    return data


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=30)


def api_versions(sock: socket.socket, version: int, correlation_id: int = 7) -> Any:
    body: Any = ApiVersionsV3(client_software_name="t", client_software_version="1")
    header: Any = HeaderV2(
        request_api_key=18, request_api_version=version, correlation_id=correlation_id,
        client_id="test",
    )  # fmt: skip
    if version == 0:
        body, header = ApiVersionsV0(), HeaderV1(
            request_api_key=18, request_api_version=0, correlation_id=correlation_id,
            client_id="test",
        )  # fmt: skip
    sock.sendall(frame(header, body))
    data = read_frame(sock)
    head, size = entity_reader(ResponseHeaderV0)(data, 0)  # ApiVersions: header v0 always
    assert head.correlation_id == correlation_id
    answered_version = 0 if version > 3 else version
    answer, _ = entity_reader(response_type(18, answered_version))(data, size)
    return answer


def latest_offset(broker: BrokerProcess, topic: str) -> int:
    wanted = pb.TopicListOffsets(
        name=topic, partitions=[pb.PartitionListOffsets(partition=0, timestamp=-1)]
    )
    with grpc.insecure_channel(broker.endpoint) as channel:
        answer = annal_pb2_grpc.AnnalStub(channel).ListOffsets(
            pb.ListOffsetsRequest(replica_id=-1, topics=[wanted]), timeout=10
        )
    return answer.topics[0].partitions[0].offset


def closed_with_log(sock: socket.socket, broker: BrokerProcess, reason: str) -> None:
    assert read_frame(sock) == b"", "the broker should have closed the connection"
    client = f"127.0.0.1:{sock.getsockname()[1]}"
    wait_until(
        lambda: f"closing Kafka connection from {client}: " in broker.log_path.read_text(),
        10,
        "the log line naming the client",
    )
    line = next(
        x for x in broker.log_path.read_text().splitlines() if f"connection from {client}" in x
    )
    assert reason in line, line


def test_api_versions_lists_exactly_what_is_served(broker: BrokerProcess) -> None:
    with connect(broker) as sock:
        for version in (0, 3):
            answer = api_versions(sock, version)
            assert answer.error_code == 0
            assert {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys} == SERVED


def test_an_unknown_api_versions_version_is_answered_in_v0(broker: BrokerProcess) -> None:
    with connect(broker) as sock:
        answer = api_versions(sock, 9)
        assert answer.error_code == 35  # UNSUPPORTED_VERSION
        assert (18, 0, 3) in {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys}
        assert api_versions(sock, 3).error_code == 0  # the connection stays usable


def test_metadata_answers_with_the_kafka_endpoint(broker: BrokerProcess) -> None:
    with connect(broker) as sock:
        header = HeaderV2(request_api_key=3, request_api_version=9, correlation_id=3,
                          client_id=None)  # fmt: skip
        request = MetadataV9(topics=None, allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False)  # fmt: skip
        sock.sendall(frame(header, request))
        data = read_frame(sock)
        head, size = entity_reader(ResponseHeaderV1)(data, 0)
        answer, _ = entity_reader(response_type(3, 9))(data, size)
    assert head.correlation_id == 3
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
        (1, "127.0.0.1", broker.kafka_port)
    ]
    assert answer.controller_id == 1


def test_both_endpoints_are_registered_as_kafka_does(broker: BrokerProcess) -> None:
    with ZkClient(broker.zookeeper_connect) as zk:
        found = zk.get("/brokers/ids/1")
    assert found is not None
    registration = json.loads(found[0])
    assert registration["endpoints"] == [
        f"GRPC://127.0.0.1:{broker.port}",
        f"PLAINTEXT://127.0.0.1:{broker.kafka_port}",
    ]
    assert registration["listener_security_protocol_map"] == {
        "GRPC": "PLAINTEXT",
        "PLAINTEXT": "PLAINTEXT",
    }
    assert (registration["host"], registration["port"]) == ("127.0.0.1", broker.port)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xde\xad\xbe\xef" * 4, "outside 0..socket.request.max.bytes=65536"),
        (struct.pack(">i", 70_000) + b"x" * 100, "a frame of 70000 bytes is outside"),
        (struct.pack(">i", 40) + b"\x00\x12\x00\x03", "ended inside a 40-byte frame"),
        (struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\x00\x00",
         "api key 999 is not served"),
        (struct.pack(">i", 10) + struct.pack(">hhi", 1, 13, 1) + b"\x00\x00",
         "Fetch v13 is not served (versions 0-12 are)"),
        (struct.pack(">i", 12) + struct.pack(">hhi", 3, 9, 1) + b"\xff\xff\xff\xff",
         "MetadataRequest v9 does not parse"),
    ],
    ids=["garbage", "too-large", "truncated", "unknown-api-key", "old-version", "bad-body"],
)
def test_bad_frames_close_the_connection_and_others_carry_on(
    broker: BrokerProcess, payload: bytes, reason: str
) -> None:
    admin = AdminClient(broker.endpoint)
    topic = "kept-" + reason.split()[0].lower().strip("()")
    admin.create_topic(topic, 1, 1)
    with connect(broker) as healthy, connect(broker) as bad:
        assert api_versions(healthy, 3).error_code == 0
        bad.sendall(payload)
        if "ended inside" in reason:
            bad.shutdown(socket.SHUT_WR)
        closed_with_log(bad, broker, reason)
        assert api_versions(healthy, 3, correlation_id=8).error_code == 0
    assert latest_offset(broker, topic) == 0  # nothing stored
    assert "Traceback" not in broker.log_path.read_text()
    admin.close()
