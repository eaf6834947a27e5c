"""The gRPC edge's adapters for security administration keep every field both ways:
annal.proto's requests to the own types, the own answers to annal.proto's, and ACL
bindings and filters (unset optional strings included) pb -> own -> pb."""

from __future__ import annotations

from annal.broker.requests import grpc_security
from annal.broker.requests import security_types as st
from annal.v1 import annal_pb2 as pb
from google.protobuf.message import Message

ACL = st.AclBinding(2, "orders", 4, "User:alice", "10.0.0.1", 3, 2)
ACL_PB = pb.AclBinding(
    resource_type=2,
    resource_name="orders",
    pattern_type=4,
    principal="User:alice",
    host="10.0.0.1",
    operation=3,
    permission_type=2,
)
FILTER = st.AclBindingFilter(3, "billing", 2, "User:bob", "*", 8, 3)
FILTER_PB = pb.AclBindingFilter(
    resource_type=3,
    resource_name="billing",
    pattern_type=2,
    principal="User:bob",
    host="*",
    operation=8,
    permission_type=3,
)


def every_field_set(message: Message) -> bool:
    """Whether each field of the message (and of the messages it holds) has a value
    other than its default, so that a field an adapter drops is noticed."""
    present = {f.name for f, _ in message.ListFields()}
    if present != {f.name for f in message.DESCRIPTOR.fields}:
        return False
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        children = [value] if isinstance(value, Message) else value
        if not all(every_field_set(child) for child in children):
            return False
    return True


def test_bindings_and_filters_round_trip() -> None:
    assert every_field_set(ACL_PB) and every_field_set(FILTER_PB)
    assert grpc_security.binding(ACL_PB) == ACL
    assert grpc_security.binding_message(grpc_security.binding(ACL_PB)) == ACL_PB
    assert grpc_security.binding_filter(FILTER_PB) == FILTER
    assert grpc_security.filter_message(grpc_security.binding_filter(FILTER_PB)) == FILTER_PB


def test_a_filters_unset_strings_stay_unset() -> None:
    open_filter = pb.AclBindingFilter(
        resource_type=1, pattern_type=1, operation=1, permission_type=1
    )
    own = grpc_security.binding_filter(open_filter)
    assert own == st.AclBindingFilter(1, None, 1, None, None, 1, 1)
    back = grpc_security.filter_message(own)
    assert back == open_filter
    assert not any(back.HasField(f) for f in ("resource_name", "principal", "host"))
    empty = pb.AclBindingFilter(resource_name="", principal="", host="")  # set, but empty
    assert grpc_security.filter_message(grpc_security.binding_filter(empty)) == empty
    # A request without a filter is all defaults: refused by the service, as before.
    assert grpc_security.describe_acls_request(pb.DescribeAclsRequest()).filter == (
        st.AclBindingFilter(0, None, 0, None, None, 0, 0)
    )


def test_acl_requests() -> None:
    creations = pb.CreateAclsRequest(creations=[ACL_PB, ACL_PB])
    assert every_field_set(creations)
    assert grpc_security.create_acls_request(creations) == st.CreateAclsRequest([ACL, ACL])
    described = pb.DescribeAclsRequest(filter=FILTER_PB)
    assert every_field_set(described)
    assert grpc_security.describe_acls_request(described) == st.DescribeAclsRequest(FILTER)
    deletions = pb.DeleteAclsRequest(filters=[FILTER_PB, pb.AclBindingFilter(operation=1)])
    assert grpc_security.delete_acls_request(deletions) == st.DeleteAclsRequest(
        [FILTER, st.AclBindingFilter(0, None, 0, None, None, 1, 0)]
    )


def test_acl_answers() -> None:
    created = grpc_security.create_acls_response(
        st.CreateAclsResponse([st.AclResult(), st.AclResult(42, "bad pattern")])
    )
    assert created == pb.CreateAclsResponse(
        results=[
            pb.AclResult(),
            pb.AclResult(error=pb.INVALID_REQUEST, error_message="bad pattern"),
        ]
    )
    described = grpc_security.describe_acls_response(st.DescribeAclsResponse(31, "denied", [ACL]))
    assert every_field_set(described)
    assert described == pb.DescribeAclsResponse(
        error=pb.CLUSTER_AUTHORIZATION_FAILED, error_message="denied", acls=[ACL_PB]
    )
    deleted = grpc_security.delete_acls_response(
        st.DeleteAclsResponse(
            [
                st.DeleteAclsResult(
                    -1, "ZooKeeper: lost", [st.DeletedAcl(ACL, -1, "ZooKeeper: lost")]
                ),
                st.DeleteAclsResult(deleted=[st.DeletedAcl(ACL)]),
            ]
        )
    )
    assert every_field_set(deleted.results[0])
    assert deleted == pb.DeleteAclsResponse(
        results=[
            pb.DeleteAclsResult(
                error=pb.UNKNOWN_SERVER_ERROR,
                error_message="ZooKeeper: lost",
                deleted=[
                    pb.DeletedAcl(
                        error=pb.UNKNOWN_SERVER_ERROR, error_message="ZooKeeper: lost", acl=ACL_PB
                    )
                ],
            ),
            pb.DeleteAclsResult(deleted=[pb.DeletedAcl(acl=ACL_PB)]),
        ]
    )


def test_scram_requests() -> None:
    described = pb.DescribeUserScramCredentialsRequest(users=["alice", "bob", "alice"])
    assert grpc_security.describe_scram_request(described) == (
        st.DescribeUserScramCredentialsRequest(["alice", "bob", "alice"])
    )
    assert grpc_security.describe_scram_request(pb.DescribeUserScramCredentialsRequest()) == (
        st.DescribeUserScramCredentialsRequest([])
    )
    altered = pb.AlterUserScramCredentialsRequest(
        deletions=[pb.ScramCredentialDeletion(user="bob", mechanism="SCRAM-SHA-256")],
        upsertions=[
            pb.ScramCredentialUpsertion(
                user="alice",
                mechanism="SCRAM-SHA-512",
                iterations=8192,
                salt=b"salt" * 6,
                salted_password=b"p" * 64,
            )
        ],
    )
    assert every_field_set(altered)
    assert grpc_security.alter_scram_request(altered) == st.AlterUserScramCredentialsRequest(
        [st.ScramCredentialDeletion("bob", "SCRAM-SHA-256")],
        [st.ScramCredentialUpsertion("alice", "SCRAM-SHA-512", 8192, b"salt" * 6, b"p" * 64)],
    )


def test_scram_answers() -> None:
    described = grpc_security.describe_scram_response(
        st.DescribeUserScramCredentialsResponse(
            -1,
            "ZooKeeper: lost",
            [
                st.UserScramCredentials(
                    "alice",
                    92,
                    "asked twice",
                    [
                        st.ScramCredentialInfo("SCRAM-SHA-256", 4096),
                        st.ScramCredentialInfo("SCRAM-SHA-512", 8192),
                    ],
                ),
                st.UserScramCredentials("bob"),
            ],
        )
    )
    assert every_field_set(described.results[0])
    assert described == pb.DescribeUserScramCredentialsResponse(
        error=pb.UNKNOWN_SERVER_ERROR,
        error_message="ZooKeeper: lost",
        results=[
            pb.UserScramCredentials(
                user="alice",
                error=pb.DUPLICATE_RESOURCE,
                error_message="asked twice",
                credentials=[
                    pb.ScramCredentialInfo(mechanism="SCRAM-SHA-256", iterations=4096),
                    pb.ScramCredentialInfo(mechanism="SCRAM-SHA-512", iterations=8192),
                ],
            ),
            pb.UserScramCredentials(user="bob"),
        ],
    )
    altered = grpc_security.alter_scram_response(
        st.AlterUserScramCredentialsResponse(
            [st.AlterUserScramResult("alice"), st.AlterUserScramResult("bob", 91, "no such")]
        )
    )
    assert every_field_set(altered.results[1])
    assert altered == pb.AlterUserScramCredentialsResponse(
        results=[
            pb.AlterUserScramResult(user="alice"),
            pb.AlterUserScramResult(
                user="bob", error=pb.RESOURCE_NOT_FOUND, error_message="no such"
            ),
        ]
    )
