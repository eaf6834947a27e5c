"""Kafka's wire format, through ``kio``: frames, request headers, response bodies.

A frame on a Kafka connection is a 4-byte big-endian size and that many bytes.
A request's bytes are a request header and a body; which header version (v1,
or v2 with tagged fields) and which body layout follow from the api key and
api version, which open every request header.  Every layout here is one of
``kio``'s data types, generated from Kafka's own message schemas: this module
only picks the type for a (key, version) and calls ``kio``'s readers and
writers.  Record batches are ``records`` fields: raw bytes, passed through.

Responses are built from plain mappings (``build``) named by the newest
field names: a field the negotiated version lacks is left out, one it has but
the mapping does not name takes its schema default (a list without one is
empty, a nullable one null).  So a handler is written
once for every version it serves.

Thread safety: pure functions, except the caches of ``kio``'s types.
"""

from __future__ import annotations

import datetime
import functools
import io
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

from annal.security.session import UNAUTHENTICATED, Session
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.readers import read_int16, read_int32
from kio.serial.writers import write_int32
from kio.static.primitive import i16, i32

API_VERSIONS_KEY = 18


class MalformedRequest(Exception):
    """A request whose bytes do not parse; the connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What opens every request: enough to answer or refuse it."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class Request:
    head: RequestHead
    client_id: str | None
    body: Any  # the kio request type of (api_key, api_version)
    size: int  # bytes of the frame
    client_host: str = ""  # the peer's address, as Kafka shows it ("/127.0.0.1")
    session: Session = UNAUTHENTICATED  # who sent it (security/session.py)


def peek_head(frame: bytes | memoryview) -> RequestHead:
    """The api key, version and correlation id, read before the header's layout is known."""
    if len(frame) < 8:
        raise MalformedRequest(f"a {len(frame)}-byte request is too short for a request header")
    api_key, _ = read_int16(frame, 0)
    api_version, _ = read_int16(frame, 2)
    correlation_id, _ = read_int32(frame, 4)
    return RequestHead(api_key, api_version, correlation_id)


@functools.cache
def request_type(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


@functools.cache
def response_type(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


def decode_request(
    frame: bytes | memoryview,
    head: RequestHead,
    client_host: str = "",
    session: Session | None = None,
) -> Request:
    """The header and body of a supported (key, version); MalformedRequest otherwise."""
    body_type = request_type(head.api_key, head.api_version)
    header_type = RequestHeaderV2 if body_type.__flexible__ else RequestHeaderV1
    header, body = _read_framed(
        frame, header_type, body_type, f"{body_type.__name__} v{head.api_version}"
    )
    # Bytes after the body are ignored, as Kafka's broker ignores them: some
    # clients write fields a version no longer has (librdkafka's Metadata v12
    # carries v8-v10's include_cluster_authorized_operations).
    who = session or UNAUTHENTICATED
    return Request(head, header.client_id, body, len(frame), client_host, who)


def encode_response(head: RequestHead, body: Any) -> bytes:
    """A whole response frame: size, header (v0, or v1 for flexible versions; always
    v0 for ApiVersions, as Kafka's clients expect) and body."""
    flexible = body.__flexible__ and head.api_key != API_VERSIONS_KEY
    buffer = io.BytesIO()
    write_int32(buffer, i32(0))  # the size, filled in below
    if flexible:
        header: Any = ResponseHeaderV1(correlation_id=i32(head.correlation_id))
        entity_writer(ResponseHeaderV1)(buffer, header)
    else:
        header = ResponseHeaderV0(correlation_id=i32(head.correlation_id))
        entity_writer(ResponseHeaderV0)(buffer, header)
    entity_writer(type(body))(buffer, body)
    frame = buffer.getbuffer()
    size = io.BytesIO()
    write_int32(size, i32(len(frame) - 4))
    frame[:4] = size.getvalue()
    return bytes(frame)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str, values: Mapping[str, Any]
) -> bytes:
    """A whole request frame as a client sends it: size, header (v1, or v2 for
    flexible versions) and the body built from ``values`` (see ``build``)."""
    body = build(request_type(api_key, api_version), values)
    header_type = RequestHeaderV2 if body.__flexible__ else RequestHeaderV1
    header = header_type(
        request_api_key=i16(api_key),
        request_api_version=i16(api_version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    write_int32(buffer, i32(0))  # the size, filled in below
    entity_writer(header_type)(buffer, header)
    entity_writer(type(body))(buffer, body)
    frame = buffer.getbuffer()
    frame[:4] = (len(frame) - 4).to_bytes(4, "big")
    return bytes(frame)


def decode_response(frame: bytes | memoryview, api_key: int, api_version: int) -> tuple[int, Any]:
    """The correlation id and body of a response frame (without its size), as
    ``encode_response`` wrote it; MalformedRequest when it does not parse."""
    body_type = response_type(api_key, api_version)
    flexible = body_type.__flexible__ and api_key != API_VERSIONS_KEY
    header_type = ResponseHeaderV1 if flexible else ResponseHeaderV0
    header, body = _read_framed(
        frame, header_type, body_type, f"{body_type.__name__} v{api_version} answer"
    )
    return int(header.correlation_id), body


def _read_framed(
    frame: bytes | memoryview, header_type: Any, body_type: Any, what: str
) -> tuple[Any, Any]:
    """A header and the body after it; MalformedRequest naming ``what`` otherwise."""
    try:
        header, header_size = entity_reader(header_type)(frame, 0)
        body, _ = entity_reader(body_type)(frame, header_size)
    except Exception as exc:  # kio's readers raise several types on bad bytes
        raise MalformedRequest(f"{what} does not parse: {exc}") from exc
    return header, body


def build(entity_type: Any, values: Mapping[str, Any]) -> Any:
    """An instance of the kio type ``entity_type`` from ``values`` (see the module docstring)."""
    kwargs: dict[str, Any] = {}
    for plan in _plan(entity_type):
        name = plan.name
        if name in values:
            value = values[name]
            if value is None:
                kwargs[name] = None
            elif plan.entity is not None:
                entity = plan.entity
                kwargs[name] = (
                    tuple(build(entity, v) for v in value) if plan.many else build(entity, value)
                )
            elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
                kwargs[name] = tuple(_primitive(plan.kafka_type, v) for v in value)
            else:
                kwargs[name] = _primitive(plan.kafka_type, value)
        elif plan.absent is not _LEAVE_OUT:
            kwargs[name] = plan.absent
    return entity_type(**kwargs)


_LEAVE_OUT = object()  # a field not given that takes its schema default


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    """How ``build`` fills one field of a kio type, worked out once per type."""

    name: str
    entity: Any  # the kio type of a nested entity (or of each of a list's), else None
    many: bool  # a list of entities
    kafka_type: str  # the schema type of a primitive field ("" for entities)
    absent: Any  # the value when not given: () for a list, None if nullable, else _LEAVE_OUT


@functools.cache
def _plan(entity_type: Any) -> tuple[_FieldPlan, ...]:
    plans = []
    for field in fields(entity_type):
        kind = classify_field(field)
        entity = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        absent: Any = _LEAVE_OUT
        if field.default is MISSING and kind.is_array:
            absent = ()  # a list with no schema default: empty
        elif field.default is MISSING and is_optional(field):
            absent = None  # a nullable field with no schema default: null
        plans.append(
            _FieldPlan(
                field.name,
                entity,
                isinstance(kind, EntityTupleField),
                "" if entity is not None else get_schema_field_type(field),
                absent,
            )
        )
    return tuple(plans)


_CONVERTED = frozenset(("error_code", "timedelta_i32", "timedelta_i64", "datetime_i64"))


def _primitive(kafka_type: str, value: Any) -> Any:
    if kafka_type not in _CONVERTED:
        return value
    if kafka_type == "error_code":
        return KioErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        if value < 0:
            return None  # -1: no time (the nullable writer puts -1 back)
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


def millis(value: datetime.timedelta | int) -> int:
    """A kio duration field (``timeout``, ``max_wait``) in milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def response(head: RequestHead, values: Mapping[str, Any]) -> Any:
    """The response body of ``head``'s (key, version) built from ``values``."""
    return build(response_type(head.api_key, head.api_version), values)
