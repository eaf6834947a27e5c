"""``annal dump-log --offsets-decoder``: ``__consumer_offsets`` records as text.

Each record's key and value are printed as kafka-dump-log.sh prints them with
its offsets decoder (Kafka 2.x's formats):

* a committed offset: key ``offset_commit::group=G,partition=T-P``, payload
  ``offset=N`` (``,metadata=M`` when there is some);
* a group's metadata: key ``group_metadata::group=G``, payload a JSON object
  with ``protocolType``, ``protocol``, ``generationId`` and ``assignment``
  (``{member=[t-0, t-1]}``, each member's partitions when the group uses the
  consumer protocol, else its assignment in hex);
* a tombstone's payload is ``<DELETE>``.

A record these schemas do not describe is printed with the reason in place of
its key and payload, and the dump goes on.
"""

from __future__ import annotations

import json

from annal.broker.groups.group_api import consumer_assignment
from annal.broker.groups.offsets_schema import (
    OffsetsSchemaError,
    decode_group_key,
    decode_group_value,
    decode_key,
    decode_value,
)
from annal.storage.records import Record

_CONSUMER = "consumer"


def offsets_key_value(record: Record) -> tuple[str, str]:
    """(key, payload) of an offsets-topic record, as Kafka's decoder prints them."""
    if record.key is None:
        return "<no key: not an offsets-topic record>", "-"
    try:
        offset_key = decode_key(record.key)
        if offset_key is not None:
            key = (
                f"offset_commit::group={offset_key.group},"
                f"partition={offset_key.topic}-{offset_key.partition}"
            )
            if record.value is None:
                return key, "<DELETE>"
            value = decode_value(record.value)
            metadata = f",metadata={value.metadata}" if value.metadata else ""
            return key, f"offset={value.offset}{metadata}"
        group = decode_group_key(record.key)
        if group is None:
            return "<a key of neither kind: not an offsets-topic record>", "-"
        key = f"group_metadata::group={group}"
        if record.value is None:
            return key, "<DELETE>"
        return key, _group_payload(record.value)
    except OffsetsSchemaError as exc:
        return f"<undecodable: {exc}>", "-"


def _group_payload(raw: bytes) -> str:
    group = decode_group_value(raw)
    members = []
    for member in group.members:
        if group.protocol_type == _CONSUMER:
            owned = consumer_assignment(member.assignment)
            partitions = [f"{topic}-{p}" for topic, numbers in owned for p in numbers]
            members.append(f"{member.member_id}=[{', '.join(partitions)}]")
        else:
            members.append(f"{member.member_id}={member.assignment.hex()}")
    return json.dumps(
        {
            "protocolType": group.protocol_type,
            "protocol": group.protocol,
            "generationId": group.generation,
            "assignment": "{" + ",".join(members) + "}",
        },
        separators=(",", ":"),
    )
