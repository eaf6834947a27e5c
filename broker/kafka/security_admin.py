"""Kafka's ACL and SCRAM credential APIs on annal's ``SecurityAdmin``.

Each handler builds ``SecurityAdmin``'s own request of the same name
(``broker/requests/security_types.py``) from the decoded Kafka request, hands it to
``broker/security/security_admin.py`` (which the gRPC service shares) and builds Kafka's
answer from the own answer.  Served versions are those kio has schemas for: CreateAcls,
DescribeAcls and DeleteAcls 1-3 (v0, without pattern types, is gone from Kafka's own
schemas), and DescribeUserScramCredentials and AlterUserScramCredentials 0 (KIP-554).
Where the Kafka messages and the own types differ:

* SCRAM mechanisms travel as Kafka's one-byte types (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)
  and as names in the own types; an unknown type is answered
  UNSUPPORTED_SASL_MECHANISM, naming it;
* DescribeAcls answers ACLs grouped by resource pattern, as Kafka does.

What a caller needs is in ``REQUIRED_ACCESS`` and beside each handler; ``SecurityAdmin``
checks it for the connection's session, which each handler passes along.

Thread safety: runs on the broker's event loop only.
"""

from __future__ import annotations

from typing import Any

from annal.broker.kafka.apis import KafkaApis, Values
from annal.broker.requests import security_types as st
from annal.broker.security.security_admin import (
    ALTER_SCRAM_ACCESS,
    CREATE_ACLS_ACCESS,
    DELETE_ACLS_ACCESS,
    DESCRIBE_ACLS_ACCESS,
    DESCRIBE_SCRAM_ACCESS,
    SecurityAdmin,
)
from annal.kafkaproto.wire import Request
from annal.security.scram import SCRAM_SHA_256, SCRAM_SHA_512

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51

# What a caller needs, per api key (Kafka's checks).
REQUIRED_ACCESS = {
    CREATE_ACLS: CREATE_ACLS_ACCESS,  # Alter on the cluster
    DESCRIBE_ACLS: DESCRIBE_ACLS_ACCESS,  # Describe on the cluster
    DELETE_ACLS: DELETE_ACLS_ACCESS,  # Alter on the cluster
    DESCRIBE_USER_SCRAM_CREDENTIALS: DESCRIBE_SCRAM_ACCESS,  # Describe on the cluster
    ALTER_USER_SCRAM_CREDENTIALS: ALTER_SCRAM_ACCESS,  # Alter on the cluster
}

MECHANISM_TYPES = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}  # Kafka's ScramMechanism types
MECHANISM_CODES = {name: code for code, name in MECHANISM_TYPES.items()}


def mechanism_name(code: int) -> str:
    """The SASL name of Kafka's mechanism type ``code`` (unknown: a name no check accepts)."""
    return MECHANISM_TYPES.get(code, f"SCRAM mechanism type {code}")


class SecurityAdminApis:
    """See the module docstring."""

    def __init__(self, security: SecurityAdmin) -> None:
        self._security = security

    def register(self, apis: KafkaApis) -> None:
        apis.add(DESCRIBE_ACLS, "DescribeAcls", (1, 3), self.describe_acls)
        apis.add(CREATE_ACLS, "CreateAcls", (1, 3), self.create_acls)
        apis.add(DELETE_ACLS, "DeleteAcls", (1, 3), self.delete_acls)
        apis.add(
            DESCRIBE_USER_SCRAM_CREDENTIALS,
            "DescribeUserScramCredentials",
            (0, 0),
            self.describe_user_scram_credentials,
        )
        apis.add(
            ALTER_USER_SCRAM_CREDENTIALS,
            "AlterUserScramCredentials",
            (0, 0),
            self.alter_user_scram_credentials,
        )

    # -- ACLs ---------------------------------------------------------------------------

    async def create_acls(self, request: Request) -> Values:
        """Needs CREATE_ACLS_ACCESS: Alter on the cluster."""
        ask = st.CreateAclsRequest(
            [
                st.AclBinding(
                    c.resource_type,
                    c.resource_name,
                    c.resource_pattern_type,
                    c.principal,
                    c.host,
                    c.operation,
                    c.permission_type,
                )
                for c in request.body.creations
            ]
        )
        answer = await self._security.create_acls(ask, request.session)
        return {
            "throttle_time": 0,
            "results": [
                {"error_code": r.error, "error_message": r.error_message or None}
                for r in answer.results
            ],
        }

    async def describe_acls(self, request: Request) -> Values:
        """Needs DESCRIBE_ACLS_ACCESS: Describe on the cluster."""
        answer = await self._security.describe_acls(
            st.DescribeAclsRequest(_filter(request.body)), request.session
        )
        resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for acl in answer.acls:
            key = (acl.resource_type, acl.resource_name, acl.pattern_type)
            resources.setdefault(key, []).append(
                {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                 "permission_type": acl.permission_type}
            )  # fmt: skip
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "error_message": answer.error_message or None,
            "resources": [
                {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": entries}
                for (t, n, p), entries in resources.items()
            ],
        }

    async def delete_acls(self, request: Request) -> Values:
        """Needs DELETE_ACLS_ACCESS: Alter on the cluster."""
        ask = st.DeleteAclsRequest([_filter(f) for f in request.body.filters])
        answer = await self._security.delete_acls(ask, request.session)
        return {
            "throttle_time": 0,
            "filter_results": [
                {
                    "error_code": r.error,
                    "error_message": r.error_message or None,
                    "matching_acls": [_deleted(d) for d in r.deleted],
                }
                for r in answer.results
            ],
        }

    # -- SCRAM credentials ------------------------------------------------------------------

    async def describe_user_scram_credentials(self, request: Request) -> Values:
        """Needs DESCRIBE_SCRAM_ACCESS: Describe on the cluster."""
        users = [u.name for u in request.body.users or ()]
        answer = await self._security.describe_user_scram_credentials(
            st.DescribeUserScramCredentialsRequest(users), request.session
        )
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "error_message": answer.error_message or None,
            "results": [
                {
                    "user": r.user,
                    "error_code": r.error,
                    "error_message": r.error_message or None,
                    "credential_infos": [
                        {"mechanism": MECHANISM_CODES[c.mechanism], "iterations": c.iterations}
                        for c in r.credentials
                    ],
                }
                for r in answer.results
            ],
        }

    async def alter_user_scram_credentials(self, request: Request) -> Values:
        """Needs ALTER_SCRAM_ACCESS: Alter on the cluster."""
        body = request.body
        ask = st.AlterUserScramCredentialsRequest(
            [
                st.ScramCredentialDeletion(d.name, mechanism_name(d.mechanism))
                for d in body.deletions
            ],
            [
                st.ScramCredentialUpsertion(
                    u.name, mechanism_name(u.mechanism), u.iterations, u.salt, u.salted_password
                )
                for u in body.upsertions
            ],
        )
        answer = await self._security.alter_user_scram_credentials(ask, request.session)
        return {
            "throttle_time": 0,
            "results": [
                {"user": r.user, "error_code": r.error, "error_message": r.error_message or None}
                for r in answer.results
            ],
        }


def _filter(body: Any) -> st.AclBindingFilter:
    """The filter of a DescribeAcls request or a DeleteAcls filter (same fields; null
    strings match every value)."""
    return st.AclBindingFilter(
        body.resource_type_filter,
        body.resource_name_filter,
        body.pattern_type_filter,
        body.principal_filter,
        body.host_filter,
        body.operation,
        body.permission_type,
    )


def _deleted(deleted: st.DeletedAcl) -> dict[str, Any]:
    acl = deleted.acl
    return {
        "error_code": deleted.error,
        "error_message": deleted.error_message or None,
        "resource_type": acl.resource_type,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission_type": acl.permission_type,
    }
