"""Raw fetches over the brokers' Kafka listeners (consumer/kafka_fetch.py) against
a real broker: the same answers as over gRPC, errors, and a broken connection."""

from __future__ import annotations

import socket

import pytest
from annal.admin.client import AdminClient
from annal.consumer.kafka_fetch import (
    FETCH_KEY,
    FETCH_VERSION,
    KafkaFetchConnection,
    ListenerUnreachable,
)
from annal.consumer.simple import OffsetOutOfRangeError, SimpleConsumer
from annal.deploy.runner import BrokerProcess
from annal.kafkaproto.wire import (
    MalformedRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    peek_head,
    response,
)
from annal.producer.producer import Producer
from annal.storage.batch import last_header


def fill(endpoint: str, topic: str, records: int) -> None:
    with AdminClient(endpoint) as admin:
        admin.create_topic(topic, partitions=1)
    with Producer(endpoint, batch_size=16 * 1024, linger_ms=5) as producer:
        for i in range(records):
            producer.send(topic, value=b"value-%d" % i, partition=0)


@pytest.mark.timeout(120)
def test_raw_fetches_over_the_kafka_listener_match_grpc(broker: BrokerProcess) -> None:
    fill(broker.endpoint, "raw", 3000)
    with (
        SimpleConsumer(broker.endpoint, max_wait_ms=10, kafka_listener_fetch=True) as kafka,
        SimpleConsumer(broker.endpoint, max_wait_ms=10) as grpc_consumer,
    ):
        offset = 0
        while offset < 3000:
            over_kafka = kafka.fetch_raw("raw", 0, offset, max_bytes=20_000)
            over_grpc = grpc_consumer.fetch_raw("raw", 0, offset, max_bytes=20_000)
            assert over_kafka == over_grpc
            assert over_kafka.high_watermark == 3000 and over_kafka.log_start_offset == 0
            ahead = kafka.fetch_raw_ahead("raw", 0, offset, max_bytes=20_000)
            assert ahead.result() == over_grpc
            last = last_header(over_kafka.records)
            assert last is not None
            offset = last.next_offset
        assert list(kafka._kafka) == [broker.kafka_endpoint]  # it went over the listener
        assert grpc_consumer._kafka == {}
        assert kafka.fetch_raw("raw", 0, 3000).records == b""  # at the end: nothing yet
        with pytest.raises(
            OffsetOutOfRangeError, match=r"offset 3001 of raw-0 is outside \[0, 3000\]"
        ):
            kafka.fetch_raw("raw", 0, 3001)


@pytest.mark.timeout(120)
def test_a_broken_connection_is_made_again(broker: BrokerProcess) -> None:
    fill(broker.endpoint, "broken", 100)
    with SimpleConsumer(broker.endpoint, max_wait_ms=10, kafka_listener_fetch=True) as consumer:
        first = consumer.fetch_raw("broken", 0, 0)
        connection = consumer._kafka[broker.kafka_endpoint]._connection
        assert connection._socket is not None
        connection._socket.shutdown(socket.SHUT_RDWR)  # as a reset or a restarted broker does
        assert consumer.fetch_raw("broken", 0, 0) == first
        assert connection._socket is not None


@pytest.mark.timeout(120)
def test_a_listener_that_cannot_be_reached_is_passed_over_for_grpc(broker: BrokerProcess) -> None:
    fill(broker.endpoint, "walled", 100)
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        walled = f"127.0.0.1:{idle.getsockname()[1]}"  # bound, not listening: refused
        connection = KafkaFetchConnection(walled, timeout_s=5)
        with pytest.raises(ListenerUnreachable, match=f"Kafka listener {walled}"):
            connection.fetch("walled", 0, 0, 1 << 20, 0, 1)
        with (
            SimpleConsumer(broker.endpoint, max_wait_ms=10, kafka_listener_fetch=True) as consumer,
            SimpleConsumer(broker.endpoint, max_wait_ms=10) as grpc_consumer,
        ):
            leader = consumer.leader("walled", 0)
            consumer.cluster.kafka_listeners[leader] = walled  # as a firewall would have it
            assert consumer.fetch_raw("walled", 0, 0) == grpc_consumer.fetch_raw("walled", 0, 0)
            assert consumer._unreachable == {walled}


@pytest.mark.timeout(30)
def test_the_client_side_codec_round_trips_through_the_brokers() -> None:
    values = {
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": 2,
                        "current_leader_epoch": -1,
                        "fetch_offset": 10,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    frame = encode_request(FETCH_KEY, FETCH_VERSION, 7, "reader", values)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    head = peek_head(frame[4:])
    request = decode_request(frame[4:], head)
    assert (head.api_key, head.api_version, head.correlation_id) == (1, 11, 7)
    assert request.client_id == "reader"
    wanted = request.body.topics[0].partitions[0]
    assert (wanted.partition, wanted.fetch_offset) == (2, 10)
    answer = encode_response(
        head,
        response(
            head,
            {
                "throttle_time": 0,
                "error_code": 0,
                "session_id": 0,
                "responses": [
                    {
                        "topic": "t",
                        "partitions": [
                            {
                                "partition_index": 2,
                                "error_code": 1,
                                "high_watermark": 5,
                                "log_start_offset": 3,
                                "records": b"batches",
                            }
                        ],
                    }
                ],
            },
        ),
    )
    correlation, body = decode_response(answer[4:], FETCH_KEY, FETCH_VERSION)
    assert correlation == 7
    p = body.responses[0].partitions[0]
    assert (p.error_code.value, p.high_watermark, p.log_start_offset, p.records) == (
        1,
        5,
        3,
        b"batches",
    )
    with pytest.raises(MalformedRequest, match="FetchResponse v11 answer does not parse"):
        decode_response(answer[4:20], FETCH_KEY, FETCH_VERSION)
