"""ACL bindings and filters as annal's gRPC messages carry them (``annal.v1``), both
ways: the admin client sends them, the broker answers with them."""

from __future__ import annotations

from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from annal.v1 import annal_pb2 as pb


def binding_to_pb(binding: AclBinding) -> pb.AclBinding:
    pattern, entry = binding.pattern, binding.entry
    return pb.AclBinding(
        resource_type=pattern.resource_type.value,
        resource_name=pattern.name,
        pattern_type=pattern.pattern_type.value,
        principal=entry.principal,
        host=entry.host,
        operation=entry.operation.value,
        permission_type=entry.permission_type.value,
    )


def binding_from_pb(message: pb.AclBinding) -> AclBinding:
    """A binding the broker sent (trusted: codes it does not know become UNKNOWN)."""
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(message.resource_type),
            message.resource_name,
            PatternType.from_code(message.pattern_type),
        ),
        AccessControlEntry(
            message.principal,
            message.host,
            AclOperation.from_code(message.operation),
            AclPermissionType.from_code(message.permission_type),
        ),
    )


def filter_to_pb(binding_filter: AclBindingFilter) -> pb.AclBindingFilter:
    """The message of a filter (what clients send); unset names, principals and
    hosts stay unset (any)."""
    patterns, entries = binding_filter.pattern_filter, binding_filter.entry_filter
    message = pb.AclBindingFilter(
        resource_type=patterns.resource_type.value,
        pattern_type=patterns.pattern_type.value,
        operation=entries.operation.value,
        permission_type=entries.permission_type.value,
    )
    if patterns.name is not None:
        message.resource_name = patterns.name
    if entries.principal is not None:
        message.principal = entries.principal
    if entries.host is not None:
        message.host = entries.host
    return message
