"""The error catalogue matches the wire contract and translates transport failures."""

from __future__ import annotations

import grpc
from annal.v1 import annal_pb2 as pb

from annal import errors


def test_every_wire_code_is_in_the_catalogue_with_its_number() -> None:
    for name, number in pb.ErrorCode.items():
        assert errors.lookup(name).number == number, name
    wire = set(pb.ErrorCode.keys())
    assert set(errors.CODES) - wire == {"BROKER_BUSY"}  # not on the wire


def test_kafkas_flags() -> None:
    assert errors.is_retriable("NOT_LEADER_OR_FOLLOWER")
    assert errors.needs_metadata_refresh("NOT_LEADER_OR_FOLLOWER")
    assert errors.is_retriable("NOT_ENOUGH_REPLICAS")
    assert not errors.needs_metadata_refresh("NOT_ENOUGH_REPLICAS")
    assert errors.is_retriable("COORDINATOR_LOAD_IN_PROGRESS")
    for final in ("OFFSET_OUT_OF_RANGE", "INVALID_RECORD", "CORRUPT_MESSAGE", "INVALID_TIMESTAMP"):
        assert not errors.is_retriable(final), final
    assert errors.lookup("NO_SUCH_CODE") == errors.ErrorCode("NO_SUCH_CODE", -1)


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
