"""Dynamic broker configs (KIP-226) over gRPC, for ``annal configs --entity-type
brokers`` and any program holding an ``AdminClient``.

A broker's settings are described and changed by that broker only (as Kafka's
admin clients send a BROKER resource to the broker it names), so a request for
broker N goes to N's gRPC listener, found in the cluster's metadata; the cluster
default (``broker=""``) goes to any broker.  Refusals are ``AdminError`` with the
broker's code and message (INVALID_REQUEST for a setting that cannot change at run
time, CLUSTER_AUTHORIZATION_FAILED without the cluster's DescribeConfigs or
AlterConfigs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from annal.admin.client import AdminClient, AdminError
from annal.client.cluster import ClientError
from annal.v1 import annal_pb2 as pb

from annal import errors


def describe_broker_configs(
    admin: AdminClient, broker: str, include_synonyms: bool = True
) -> list[pb.BrokerConfigEntry]:
    """The settings of broker ``broker`` (an id), every one with its source; for ""
    the cluster-wide dynamic defaults.  Sorted by name."""
    request = pb.DescribeConfigsRequest(brokers=[broker], include_synonyms=include_synonyms)
    (found,) = _call(admin, broker, "DescribeConfigs", request).brokers
    if found.error != pb.NONE:
        raise AdminError(errors.from_wire(found.error), found.error_message)
    return list(found.entries)


def alter_broker_configs(
    admin: AdminClient,
    broker: str,
    set_: Mapping[str, str] | None = None,
    delete: Sequence[str] = (),
    validate_only: bool = False,
) -> None:
    """Set and delete dynamic settings of broker ``broker`` (an id), or of the
    cluster default (""); kept in ZooKeeper, applied by the brokers at once."""
    change = pb.BrokerConfigChange(name=broker, set=dict(set_ or {}), delete=list(delete))
    request = pb.AlterConfigsRequest(brokers=[change], validate_only=validate_only)
    (result,) = _call(admin, broker, "AlterConfigs", request).brokers
    if result.error != pb.NONE:
        raise AdminError(errors.from_wire(result.error), result.error_message)


def broker_ids(admin: AdminClient) -> list[int]:
    """The ids of the live brokers, sorted."""
    try:
        return sorted(
            b.id for b in admin.cluster.call_any("Metadata", pb.MetadataRequest()).brokers
        )
    except ClientError as exc:
        raise AdminError(exc.code, exc.message) from exc


def _call(admin: AdminClient, broker: str, method: str, request: object) -> Any:
    """``method`` on the broker named (any broker for "")."""
    try:
        if broker == "":
            return admin.cluster.call_any(method, request)
        endpoint = _endpoint(admin, broker)
        try:
            return getattr(admin.cluster.stub(endpoint), method)(request, timeout=admin.timeout_s)
        except grpc.RpcError as exc:
            raise ClientError.from_rpc(exc) from exc
    except ClientError as exc:
        if isinstance(exc, AdminError):
            raise
        raise AdminError(exc.code, exc.message) from exc


def _endpoint(admin: AdminClient, broker: str) -> str:
    """The gRPC listener of broker ``broker``, from the cluster's metadata."""
    if not (broker.isascii() and broker.isdigit()):
        raise AdminError(errors.INVALID_REQUEST, f"a broker id is an integer, not {broker!r}")
    brokers = admin.cluster.call_any("Metadata", pb.MetadataRequest()).brokers
    for found in brokers:
        if found.id == int(broker):
            return f"{found.host}:{found.port}"
    known = sorted(b.id for b in brokers)
    raise AdminError(
        errors.BROKER_NOT_AVAILABLE, f"no broker {broker} in the cluster (brokers: {known})"
    )
