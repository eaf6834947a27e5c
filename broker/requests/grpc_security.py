"""The gRPC edge's adapters for security administration: annal.proto's ACL and SCRAM
credential messages to and from ``SecurityAdmin``'s own types (``security_types.py``).

A filter's unset optional strings are ``None`` in the own type and stay unset in the
message; every other field is copied as it is."""

from __future__ import annotations

from annal.broker.requests import security_types as st
from annal.broker.requests.grpc_data import wire_code
from annal.v1 import annal_pb2 as pb

# -- ACLs ------------------------------------------------------------------------------


def binding(message: pb.AclBinding) -> st.AclBinding:
    return st.AclBinding(
        message.resource_type,
        message.resource_name,
        message.pattern_type,
        message.principal,
        message.host,
        message.operation,
        message.permission_type,
    )


def binding_message(acl: st.AclBinding) -> pb.AclBinding:
    return pb.AclBinding(
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission_type,
    )


def binding_filter(message: pb.AclBindingFilter) -> st.AclBindingFilter:
    return st.AclBindingFilter(
        message.resource_type,
        message.resource_name if message.HasField("resource_name") else None,
        message.pattern_type,
        message.principal if message.HasField("principal") else None,
        message.host if message.HasField("host") else None,
        message.operation,
        message.permission_type,
    )


def filter_message(binding_filter: st.AclBindingFilter) -> pb.AclBindingFilter:
    message = pb.AclBindingFilter(
        resource_type=binding_filter.resource_type,
        pattern_type=binding_filter.pattern_type,
        operation=binding_filter.operation,
        permission_type=binding_filter.permission_type,
    )
    if binding_filter.resource_name is not None:
        message.resource_name = binding_filter.resource_name
    if binding_filter.principal is not None:
        message.principal = binding_filter.principal
    if binding_filter.host is not None:
        message.host = binding_filter.host
    return message


def create_acls_request(request: pb.CreateAclsRequest) -> st.CreateAclsRequest:
    return st.CreateAclsRequest([binding(c) for c in request.creations])


def create_acls_response(answer: st.CreateAclsResponse) -> pb.CreateAclsResponse:
    return pb.CreateAclsResponse(
        results=[
            pb.AclResult(error=wire_code(r.error), error_message=r.error_message)
            for r in answer.results
        ]
    )


def describe_acls_request(request: pb.DescribeAclsRequest) -> st.DescribeAclsRequest:
    return st.DescribeAclsRequest(binding_filter(request.filter))


def describe_acls_response(answer: st.DescribeAclsResponse) -> pb.DescribeAclsResponse:
    return pb.DescribeAclsResponse(
        error=wire_code(answer.error),
        error_message=answer.error_message,
        acls=[binding_message(a) for a in answer.acls],
    )


def delete_acls_request(request: pb.DeleteAclsRequest) -> st.DeleteAclsRequest:
    return st.DeleteAclsRequest([binding_filter(f) for f in request.filters])


def delete_acls_response(answer: st.DeleteAclsResponse) -> pb.DeleteAclsResponse:
    response = pb.DeleteAclsResponse()
    for r in answer.results:
        result = response.results.add(error=wire_code(r.error), error_message=r.error_message)
        for d in r.deleted:
            result.deleted.add(
                error=wire_code(d.error), error_message=d.error_message, acl=binding_message(d.acl)
            )
    return response


# -- SCRAM credentials (KIP-554) -----------------------------------------------------------


def describe_scram_request(
    request: pb.DescribeUserScramCredentialsRequest,
) -> st.DescribeUserScramCredentialsRequest:
    return st.DescribeUserScramCredentialsRequest(list(request.users))


def describe_scram_response(
    answer: st.DescribeUserScramCredentialsResponse,
) -> pb.DescribeUserScramCredentialsResponse:
    response = pb.DescribeUserScramCredentialsResponse(
        error=wire_code(answer.error), error_message=answer.error_message
    )
    for r in answer.results:
        response.results.add(
            user=r.user,
            error=wire_code(r.error),
            error_message=r.error_message,
            credentials=[
                pb.ScramCredentialInfo(mechanism=c.mechanism, iterations=c.iterations)
                for c in r.credentials
            ],
        )
    return response


def alter_scram_request(
    request: pb.AlterUserScramCredentialsRequest,
) -> st.AlterUserScramCredentialsRequest:
    return st.AlterUserScramCredentialsRequest(
        [st.ScramCredentialDeletion(d.user, d.mechanism) for d in request.deletions],
        [
            st.ScramCredentialUpsertion(
                u.user, u.mechanism, u.iterations, u.salt, u.salted_password
            )
            for u in request.upsertions
        ],
    )


def alter_scram_response(
    answer: st.AlterUserScramCredentialsResponse,
) -> pb.AlterUserScramCredentialsResponse:
    return pb.AlterUserScramCredentialsResponse(
        results=[
            pb.AlterUserScramResult(
                user=r.user, error=wire_code(r.error), error_message=r.error_message
            )
            for r in answer.results
        ]
    )

