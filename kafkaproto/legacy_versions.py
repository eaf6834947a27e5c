"""Message layouts of Produce v0-v2 and Fetch v0-v3, for ``kio``.

``kio`` is generated from the message schemas of a Kafka release that no
longer serves these versions (Kafka 4.0 removed them, KIP-896), so it has
no types for them; a Kafka 2.x broker serves them, and so does annal:
clients that predate message format v2 (kafka-python pinned to
``api_version=(0, 10)``, librdkafka built for old brokers), and librdkafka,
which compresses only when the broker serves Produce v2 and Fetch v2
(its "MsgVer1" feature).

The types below are the layouts of Kafka 2.x's ``ProduceRequest.json``,
``ProduceResponse.json``, ``FetchRequest.json`` and ``FetchResponse.json``
for those versions, written the way ``kio`` writes its own (frozen
dataclasses whose fields carry their Kafka types), so that ``kio``'s readers
and writers take them unchanged.  Field names are the newest versions' names,
so the handlers build every version's answer from one mapping
(``wire.build``).  Versions that share a layout share a type:

    Produce request   v0-v2   acks, timeout, topic data (v3 adds transactional_id)
    Produce response  v0      base offset per partition
                      v1      + throttle time
                      v2      + log append time per partition
    Fetch request     v0-v2   replica id, max wait, min bytes, topics
                      v3      + max bytes (KIP-74)
    Fetch response    v0      high watermark and records per partition
                      v1-v3   + throttle time

and WriteTxnMarkers v0 (``txn_markers_v0.py``: v1's fields, not flexible).

``install`` adds them to ``kio``'s index of schemas, which is where
``wire.request_type`` and ``wire.response_type`` look a (key, version) up.
It is idempotent; ``DataApis.register`` calls it before it advertises them.

This module does not use postponed annotations: ``kio`` reads the field
types of these dataclasses at run time.
"""

import datetime
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple

import kio.index
from annal.kafkaproto.txn_markers_v0 import WriteTxnMarkersRequest as WriteTxnMarkersRequestV0
from annal.kafkaproto.txn_markers_v0 import WriteTxnMarkersResponse as WriteTxnMarkersResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import Records, TZAware, i16, i32, i32Timedelta, i64

_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(milliseconds=0))

# -- Produce v0-v2 ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    index: i32 = field(metadata={"kafka_type": "int32"})
    records: Records | None = field(metadata={"kafka_type": "records"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRequest:
    """Produce v0, v1 and v2."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    acks: i16 = field(metadata={"kafka_type": "int16"})
    timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    topic_data: tuple[TopicProduceData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    base_offset: i64 = field(metadata={"kafka_type": "int64"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partition_responses: tuple[PartitionProduceResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    responses: tuple[TopicProduceResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    responses: tuple[TopicProduceResponseV0, ...]
    throttle_time: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"}, default=_NO_THROTTLE
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceResponseV2:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    base_offset: i64 = field(metadata={"kafka_type": "int64"})
    log_append_time: TZAware | None = field(metadata={"kafka_type": "datetime_i64"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceResponseV2:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partition_responses: tuple[PartitionProduceResponseV2, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV2:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    responses: tuple[TopicProduceResponseV2, ...]
    throttle_time: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"}, default=_NO_THROTTLE
    )


# -- Fetch v0-v3 -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition: i32 = field(metadata={"kafka_type": "int32"})
    fetch_offset: i64 = field(metadata={"kafka_type": "int64"})
    partition_max_bytes: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestV0:
    """Fetch v0, v1 and v2."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
    max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    min_bytes: i32 = field(metadata={"kafka_type": "int32"})
    topics: tuple[FetchTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestV3:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
    max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    min_bytes: i32 = field(metadata={"kafka_type": "int32"})
    max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(2147483647))
    topics: tuple[FetchTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    high_watermark: i64 = field(metadata={"kafka_type": "int64"})
    records: Records | None = field(metadata={"kafka_type": "records"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchableTopicResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[PartitionData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    responses: tuple[FetchableTopicResponse, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponseV1:
    """Fetch v1, v2 and v3."""

    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(1)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    responses: tuple[FetchableTopicResponse, ...]


class SchemaVersion(NamedTuple):
    """kio's name of an API's schema, and a version of it."""

    name: str
    version: int

# (kio's schema name, version) -> (request type, response type)
LAYOUTS: dict[SchemaVersion, tuple[type, type]] = {
    SchemaVersion("produce", 0): (ProduceRequest, ProduceResponseV0),
    SchemaVersion("produce", 1): (ProduceRequest, ProduceResponseV1),
    SchemaVersion("produce", 2): (ProduceRequest, ProduceResponseV2),
    SchemaVersion("fetch", 0): (FetchRequestV0, FetchResponseV0),
    SchemaVersion("fetch", 1): (FetchRequestV0, FetchResponseV1),
    SchemaVersion("fetch", 2): (FetchRequestV0, FetchResponseV1),
    SchemaVersion("fetch", 3): (FetchRequestV3, FetchResponseV1),
    SchemaVersion("write_txn_markers", 0): (WriteTxnMarkersRequestV0, WriteTxnMarkersResponseV0),
}

_install_lock = threading.Lock()
_INDEX = "schema_name_map"  # the attribute of ``kio.index`` its loaders look versions up in


def _path(entity: type) -> str:
    return f"{entity.__module__}:{entity.__qualname__}"


def install() -> None:
    """Make ``kio``'s schema index name the types of ``LAYOUTS`` (idempotent).

    ``kio`` keeps its index as read-only mappings, so a new index holding
    every version it had plus these replaces it; versions ``kio`` has are
    never changed.
    """
    with _install_lock:
        current = getattr(kio.index, _INDEX)
        if all(version in current[name] for name, version in LAYOUTS):
            return
        merged = dict(current)
        for (name, version), (request, response) in LAYOUTS.items():
            if version in merged[name]:
                continue
            versions = dict(merged[name])
            versions[version] = MappingProxyType(
                {EntityType.request: _path(request), EntityType.response: _path(response)}
            )
            merged[name] = MappingProxyType(versions)
        setattr(kio.index, _INDEX, MappingProxyType(merged))
