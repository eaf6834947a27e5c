"""Kafka's wire format, through ``kio``: frames, request headers, response bodies.

A frame on a Kafka connection is a 4-byte big-endian size and that many bytes.
A request's bytes are a request header and a body; which header version (v1,
or v2 with tagged fields) and which body layout follow from the api key and
api version, which open every request header.  Every layout here is one of
``kio``'s data types, generated from Kafka's own message schemas: this module
picks the type for a (key, version) and reads and writes it with ``kio``'s
readers and writers.  Record batches are ``records`` fields: raw bytes,
passed through.

What is read (``decode_request``, ``decode_response``) is walked field by
field following ``kio``'s field information (``_reader``), each primitive
read by ``kio``'s reader, and what Kafka's own parsers refuse is refused
(``MalformedRequest``, naming the api, version and field, e.g.
``DescribeGroupsRequest v0 does not parse: field groups: null, which
DescribeGroupsRequest v0 does not allow``):

* null (length -1) in a field the version does not make nullable (an array;
  ``kio`` refuses a null string itself), so that no handler meets ``None``
  where the schema promises a value;
* an array claiming more items than the frame has bytes left (Kafka's
  generated readers: "Tried to allocate a collection of size N, but there
  are only M bytes remaining"), before anything is allocated for it:
  ``kio``'s native readers reserve room for the claimed length first, and a
  claim of 2**32 items is an allocation no machine makes, which aborts the
  process;
* bytes that end inside a field, a negative length, text that is not UTF-8.

Tagged fields a version does not know (a newer peer's, KIP-482) are skipped
by their size, in headers and bodies alike, as Kafka skips them; ``kio``'s
readers refuse them.  Entities without arrays (most of a request's bulk:
partitions, topics of Metadata) are read by ``kio``'s own entity reader, fast,
and again field by field only when it fails, to skip unknown tags or name
the field at fault.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from annal.security.session import UNAUTHENTICATED, Session
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._parse import get_field_reader
from kio.serial.errors import BufferUnderflow
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_int16,
    read_int32,
    read_legacy_array_length,
    read_unsigned_varint,
)
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
    received: float = 0.0  # time.perf_counter() when its frame was read whole (0: unknown)


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
    received: float = 0.0,
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
    return Request(head, header.client_id, body, len(frame), client_host, who, received)


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
    """A header and the body after it; MalformedRequest naming ``what`` and the
    field otherwise."""
    view = memoryview(frame)
    try:
        header, header_size = _reader(header_type)(view, 0)
    except _Unreadable as exc:
        raise MalformedRequest(f"{what} does not parse: {exc.describe('header')}") from None
    try:
        body, _ = _reader(body_type)(view, header_size)
    except _Unreadable as exc:
        raise MalformedRequest(f"{what} does not parse: {exc.describe('body')}") from None
    return header, body


def read_entity(entity_type: Any, data: bytes | memoryview, offset: int = 0) -> tuple[Any, int]:
    """An instance of the kio type ``entity_type`` read from ``data`` at ``offset``,
    and the bytes it took, as requests are read (see the module docstring);
    MalformedRequest when the bytes are not one."""
    try:
        return _reader(entity_type)(memoryview(data), offset)
    except _Unreadable as exc:
        raise MalformedRequest(
            f"{entity_type.__name__} does not parse: {exc.describe('it')}"
        ) from None


# -- reading ------------------------------------------------------------------------

# A reader as kio's are: (buffer, offset) -> (value, bytes read).  Those below raise
# _Unreadable; kio's own raise their own types, turned into _Unreadable by the
# entity that called them, which names the field.
Reader = Callable[[memoryview, int], tuple[Any, int]]


class _Unreadable(Exception):
    """Why bytes do not parse, and the field where (built up on the way out)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []  # innermost first: "index", "[0]", "partitions", ...

    def describe(self, part: str) -> str:
        """``field topics[2].name: <reason>``, or ``header: <reason>`` outside any field."""
        if not self.path:
            return f"{part}: {self.reason}"
        where = "".join(
            step if step.startswith("[") else f".{step}" for step in reversed(self.path)
        ).lstrip(".")
        return f"field {where}: {self.reason}"


def _unreadable(exc: Exception, buffer: memoryview, offset: int, step: str) -> _Unreadable:
    """``exc``, raised reading at ``offset``, as an ``_Unreadable`` one step further out."""
    if not isinstance(exc, _Unreadable):
        if isinstance(exc, BufferUnderflow):
            where = "before" if offset >= len(buffer) else "inside"
            exc = _Unreadable(f"the frame ends {where} it")
        else:
            exc = _Unreadable(str(exc) or type(exc).__name__)
    exc.path.append(step)
    return exc


def _nullable(field: Field[Any]) -> bool:
    """The field may be null in this version (``X | None``; for an array, the array
    itself, not its items).  kio reads the all-zero uuid as None whatever the
    field's type says, so a uuid may always be."""
    if field.metadata.get("kafka_type") == "uuid":
        return True
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


def _array_length(flexible: bool) -> Reader:
    """An array's length (None: null), refused when the frame has fewer bytes left
    than the array claims items, as Kafka's readers refuse it, before anything
    is allocated for them."""
    read_length = read_compact_array_length if flexible else read_legacy_array_length

    def read(buffer: memoryview, offset: int) -> tuple[Any, int]:
        length, size = read_length(buffer, offset)
        if length is None or length == -1:
            return None, size
        if length < 0:
            raise _Unreadable(f"an array of length {length}")
        left = len(buffer) - offset - size
        if length > left:
            raise _Unreadable(f"an array of {length} items, but only {left} bytes are left")
        return length, size

    return read


def _primitive_array(flexible: bool, items: Reader) -> Reader:
    """kio's reader of a whole array of primitives, once the length is known to fit."""
    read_length = _array_length(flexible)

    def read(buffer: memoryview, offset: int) -> tuple[Any, int]:
        length, size = read_length(buffer, offset)
        if length is None:
            return None, size
        return items(buffer, offset)

    return read


def _entity_array(flexible: bool, item: Reader, whole: Reader | None) -> Reader:
    """An array of entities: read by kio's reader ``whole`` at once when there is
    one (items without arrays, see ``_reader``), else, or when that fails (an
    unknown tag, bad bytes), item by item with ``item``."""
    read_length = _array_length(flexible)

    def read(buffer: memoryview, offset: int) -> tuple[Any, int]:
        length, size = read_length(buffer, offset)
        if length is None:
            return None, size
        if whole is not None:
            try:
                return whole(buffer, offset)
            except Exception:  # read again item by item, which skips or names what failed
                pass
        end = offset + size
        values = []
        for index in range(length):
            try:
                value, size = item(buffer, end)
            except _Unreadable as exc:
                exc.path.append(f"[{index}]")
                raise
            end += size
            values.append(value)
        return tuple(values), end - offset

    return read


def _field_reader(entity_type: Any, field: Field[Any], header: bool, tagged: bool) -> Reader:
    kind = classify_field(field)
    flexible = bool(entity_type.__flexible__)
    if isinstance(kind, EntityTupleField):
        whole = get_field_reader(entity_type, field, header, tagged)
        return _entity_array(flexible, _reader(kind.type_), whole if _flat(kind.type_) else None)
    if isinstance(kind, EntityField):
        return _reader(kind.type_, is_optional(field))
    native: Reader = get_field_reader(entity_type, field, header, tagged)
    if isinstance(kind, PrimitiveTupleField):
        return _primitive_array(flexible, native)
    return native


@dataclass(frozen=True, slots=True)
class _Part:
    """How one field of an entity is read and set."""

    name: str
    read: Reader
    nullable: bool
    put: Callable[[Any, Any], None]  # (instance, value): the field's slot


@functools.cache
def _flat(entity_type: Any) -> bool:
    """``entity_type`` has no array, nor has any entity in it: kio's own reader
    reads it as this module would (no array to bound, no field it leaves null
    that may not be), unless a tag is unknown."""
    for field in fields(entity_type):
        kind = classify_field(field)
        if kind.is_array or (isinstance(kind, EntityField) and not _flat(kind.type_)):
            return False
    return True


@functools.cache
def _reader(entity_type: Any, nullable: bool = False) -> Reader:
    """The reader of ``entity_type`` (after a null marker when ``nullable``), as the
    module docstring says.  A flat type (``_flat``) is read by kio's reader, and
    again by this module's when that fails, to skip unknown tags or name the
    field that does not parse."""
    fields_read = _fields_reader(entity_type, nullable)
    if not _flat(entity_type):
        return fields_read
    native: Reader = entity_reader(entity_type, True) if nullable else entity_reader(entity_type)

    def read(buffer: memoryview, offset: int) -> tuple[Any, int]:
        try:
            return native(buffer, offset)
        except Exception:
            return fields_read(buffer, offset)

    return read


@functools.cache
def _fields_reader(entity_type: Any, nullable: bool) -> Reader:
    """``entity_type`` read field by field.  Instances are made as kio's own reader
    makes them: allocated, then each field's slot set (kio's types are slotted
    dataclasses without ``__post_init__``)."""
    flexible = bool(entity_type.__flexible__)
    header = entity_type.__name__ == "RequestHeader"  # its client_id is never compact
    plain: list[_Part] = []
    tagged: dict[int, _Part] = {}
    defaults: list[tuple[_Part, Any]] = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        part = _Part(
            field.name,
            _field_reader(entity_type, field, header, tag is not None),
            _nullable(field),
            entity_type.__dict__[field.name].__set__,
        )
        if tag is None:
            plain.append(part)
        else:
            tagged[int(tag)] = part
            defaults.append((part, get_tagged_field_default(field)))
    allocate = entity_type.__new__

    def read_entity(buffer: memoryview, offset: int) -> tuple[Any, int]:
        end = offset
        if nullable:
            try:
                marker, size = read_int8(buffer, end)
            except Exception as exc:
                raise _unreadable(exc, buffer, end, "(null marker)") from None
            end += size
            if marker == -1:
                return None, end - offset
        entity = allocate(entity_type)
        for part in plain:
            try:
                value, size = part.read(buffer, end)
            except Exception as exc:
                raise _unreadable(exc, buffer, end, part.name) from None
            if value is None and not part.nullable:
                raise _not_null(entity_type, part.name)
            part.put(entity, value)
            end += size
        if flexible:
            found: dict[str, Any] = {}
            end += _read_tagged(entity_type, buffer, end, tagged, found)
            for part, default in defaults:
                part.put(entity, found.get(part.name, default))
        return entity, end - offset

    return read_entity


def _not_null(entity_type: Any, name: str) -> _Unreadable:
    error = _Unreadable(
        f"null, which {entity_type.__name__} v{entity_type.__version__} does not allow"
    )
    error.path.append(name)
    return error


def _read_tagged(
    entity_type: Any,
    buffer: memoryview,
    offset: int,
    known: Mapping[int, _Part],
    found: dict[str, Any],
) -> int:
    """Read the tagged-field section at ``offset`` into ``found`` and say how many
    bytes it took; a tag not in ``known`` is skipped by its size (KIP-482: a
    newer peer's field), as Kafka skips it."""
    end = offset
    try:
        count, size = read_unsigned_varint(buffer, end)
        end += size
        for _ in range(count):
            tag, size = read_unsigned_varint(buffer, end)
            end += size
            length, size = read_unsigned_varint(buffer, end)
            end += size
            if end + length > len(buffer):
                raise _Unreadable(
                    f"tagged field {tag} has {length} bytes, but only {len(buffer) - end} are left"
                )
            part = known.get(tag)
            if part is not None:
                try:
                    value, _ = part.read(buffer[: end + length], end)
                except Exception as exc:
                    raise _unreadable(exc, buffer, end, part.name) from None
                if value is None and not part.nullable:
                    raise _not_null(entity_type, part.name)
                found[part.name] = value
            end += length
    except _Unreadable:
        raise
    except Exception as exc:
        raise _unreadable(exc, buffer, end, "(tagged fields)") from None
    return end - offset


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
