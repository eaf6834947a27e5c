"""Message layouts of WriteTxnMarkers v0 (API 27), for ``kio``.

``kio`` is generated from a Kafka release that no longer serves v0 (Kafka 4.0
removed it, KIP-896); a Kafka 2.x broker serves v0 and v1, and so does
annal.  v0 holds the fields of v1 without its flexible encoding (no tagged
fields, a v1 request header and a v0 response header), in Kafka 2.x's
``WriteTxnMarkersRequest.json`` and ``WriteTxnMarkersResponse.json``.
``legacy_versions.install`` adds them to ``kio``'s index, with the other
layouts ``kio`` lacks.

This module does not use postponed annotations: ``kio`` reads the field
types of these dataclasses at run time.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import ProducerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

_KEY = i16(27)


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partition_indexes: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarker:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    transaction_result: bool = field(metadata={"kafka_type": "bool"})
    topics: tuple[WritableTxnMarkerTopic, ...]
    coordinator_epoch: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkersRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    markers: tuple[WritableTxnMarker, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerPartitionResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerTopicResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[WritableTxnMarkerPartitionResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    topics: tuple[WritableTxnMarkerTopicResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkersResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    markers: tuple[WritableTxnMarkerResult, ...]
