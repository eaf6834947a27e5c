"""The error catalogue matches the wire contract and translates transport failures."""

from __future__ import annotations

import grpc
from annal.v1 import annal_pb2 as pb

from annal import errors


def test_every_wire_code_is_in_the_catalogue_with_its_number() -> None:
    for name, number in pb.ErrorCode.items():
        assert errors.lookup(name).number == number, name
    wire = set(pb.ErrorCode.keys())
    assert set(errors.CODES) - wire == {"BROKER_BUSY", "NETWORK_EXCEPTION"}  # clients only


def test_kafkas_flags() -> None:
    assert errors.NOT_LEADER_OR_FOLLOWER.retriable
    assert errors.NOT_LEADER_OR_FOLLOWER.invalid_metadata
    assert errors.NOT_ENOUGH_REPLICAS.retriable
    assert not errors.NOT_ENOUGH_REPLICAS.invalid_metadata
    assert errors.COORDINATOR_LOAD_IN_PROGRESS.retriable
    for final in ("OFFSET_OUT_OF_RANGE", "INVALID_RECORD", "CORRUPT_MESSAGE", "INVALID_TIMESTAMP"):
        assert not errors.lookup(final).retriable, final
    assert errors.lookup("NO_SUCH_CODE") == errors.ErrorCode("NO_SUCH_CODE", -1)


def test_answers_are_read_by_number_into_the_one_code() -> None:
    for name, number in pb.ErrorCode.items():
        assert errors.from_wire(number) is errors.lookup(name), name
    assert errors.from_wire(9999) == errors.ErrorCode("UNKNOWN_ERROR_9999", 9999)


def test_every_error_annal_raises_carries_its_code() -> None:
    from annal.broker.replication.partition import PartitionStateError
    from annal.client.cluster import ClientError
    from annal.consumer.simple import ConsumerError
    from annal.producer.producer import ProduceError
    from annal.storage.errors import CorruptRecordError, StorageError

    raised = [
        CorruptRecordError("bad CRC", 0),
        PartitionStateError(errors.NOT_LEADER_OR_FOLLOWER, "elsewhere"),
        ConsumerError("OFFSET_OUT_OF_RANGE", "past the end"),
        ProduceError(errors.BROKER_BUSY),
    ]
    assert all(isinstance(e, errors.AnnalError) for e in raised)
    assert [e.code.name for e in raised] == [
        "CORRUPT_MESSAGE",
        "NOT_LEADER_OR_FOLLOWER",
        "OFFSET_OUT_OF_RANGE",
        "BROKER_BUSY",
    ]
    assert [e.retriable for e in raised] == [False, True, False, True]
    assert issubclass(StorageError, errors.AnnalError) and issubclass(
        ClientError, errors.AnnalError
    )
    assert str(raised[2]) == "OFFSET_OUT_OF_RANGE: past the end" and raised[2].error == (
        "OFFSET_OUT_OF_RANGE"
    )


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_transport_failures() -> None:
    def name(code: grpc.StatusCode, details: str = "") -> str:
        return errors.transport_error(Failed(code, details)).name

    assert name(grpc.StatusCode.UNAVAILABLE) == "BROKER_NOT_AVAILABLE"
    assert name(grpc.StatusCode.DEADLINE_EXCEEDED) == "REQUEST_TIMED_OUT"
    assert name(grpc.StatusCode.RESOURCE_EXHAUSTED, "queued.max.requests=500") == "BROKER_BUSY"
    assert errors.transport_error(Failed(grpc.StatusCode.RESOURCE_EXHAUSTED)).retriable
    too_big = "Received message larger than max (2000000 vs. 1048576)"
    assert name(grpc.StatusCode.RESOURCE_EXHAUSTED, too_big) == "MESSAGE_TOO_LARGE"
    assert name(grpc.StatusCode.INVALID_ARGUMENT) == "INVALID_REQUEST"
    assert name(grpc.StatusCode.INTERNAL) == "UNKNOWN_SERVER_ERROR"


def test_a_failed_call_becomes_a_client_error_with_its_code() -> None:
    from annal.client.cluster import ClientError

    failed = ClientError.from_rpc(Failed(grpc.StatusCode.UNAVAILABLE, "connection refused"), "b1")
    assert failed.code is errors.BROKER_NOT_AVAILABLE and failed.retriable
    assert failed.message == "b1; connection refused"
