"""Administration of ACLs and SCRAM credentials, for both protocols.

The gRPC service (``service.py``) and the Kafka listener (``broker/kafka/security_admin.py``)
both hand their requests here, and take the answers back, as the broker's own types
(``broker/requests/security_types.py``), each adapting to them once.  Requests are checked
first (``security_requests.py``); ZooKeeper work runs on the broker's admin pool, never on
the event loop:

* CreateAcls adds each pattern's new entries with one versioned write of the pattern's
  znode (then a change notification: every broker re-reads the pattern);
* DescribeAcls answers from this broker's ``SecurityStore`` cache, as Kafka answers
  from its authorizer's; this broker's own writes are in it at once, the others' within
  a second or two;
* DeleteAcls looks at every pattern the cache knows, and the patterns a filter names
  exactly, and removes from each, in one versioned write, the entries some filter
  selects; each removed ACL is reported under the first filter that selected it;
* DescribeUserScramCredentials reads ZooKeeper (mechanisms and iterations only);
* AlterUserScramCredentials writes each user's deletions and upsertions together, in
  one versioned write of the user's znode; a deletion of a credential the user does
  not have fails the whole user (RESOURCE_NOT_FOUND) and writes nothing.

A broker without an authorizer (``acls_enabled=False``) answers the ACL APIs
SECURITY_DISABLED, as Kafka does; credentials are managed either way.

Every change is logged at INFO, naming the principal, the resource and the operation,
or the user and the mechanism; a salt, key or password never reaches a log or a reply.

Authorization: each handler takes the caller's ``Session`` and checks, before anything
else, the access ``REQUIRED_ACCESS`` names (Kafka's checks: Alter on the cluster to
create or delete ACLs and to alter credentials, KIP-554; Describe on it to describe
either).  A refusal is CLUSTER_AUTHORIZATION_FAILED where the error goes: on every
creation, filter or user of the request, or on the whole answer of a Describe.

Thread safety: the handlers run on the event loop; ``_..._now`` methods on the admin
pool, touching only ZooKeeper and the thread-safe store.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from annal.broker.requests import security_types as st
from annal.broker.requests.request_checks import Refusal
from annal.broker.security.authorization import ALLOW_ALL, INTERNAL, RequestAuthorizer, denial
from annal.broker.security.security_requests import (
    UserAlterations,
    alteration_items,
    binding_answer,
    binding_from_request,
    credential_from_salted_password,
    filter_from_request,
    named_patterns,
    plan_alterations,
)
from annal.broker.security.security_store import SecurityStore
from annal.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    Resource,
    ResourcePattern,
)
from annal.security.scram import MECHANISMS, ScramConfigError
from annal.security.session import Session
from annal.zk.client import CredentialNotFoundError, ZkClient, ZkError
from annal.zk.layout import LayoutError

from annal import errors

logger = logging.getLogger(__name__)

T = TypeVar("T")
RunAdmin = Callable[[Callable[[], Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Access:
    """What a caller must be allowed to do, on which resource, to call an API."""

    operation: AclOperation
    resource: Resource


_CLUSTER = Resource.cluster()
# What each API checks: Kafka's checks (the two SCRAM APIs as KIP-554 has them).
CREATE_ACLS_ACCESS = Access(AclOperation.ALTER, _CLUSTER)
DESCRIBE_ACLS_ACCESS = Access(AclOperation.DESCRIBE, _CLUSTER)
DELETE_ACLS_ACCESS = Access(AclOperation.ALTER, _CLUSTER)
DESCRIBE_SCRAM_ACCESS = Access(AclOperation.DESCRIBE, _CLUSTER)
ALTER_SCRAM_ACCESS = Access(AclOperation.ALTER, _CLUSTER)
REQUIRED_ACCESS = {
    "CreateAcls": CREATE_ACLS_ACCESS,
    "DescribeAcls": DESCRIBE_ACLS_ACCESS,
    "DeleteAcls": DELETE_ACLS_ACCESS,
    "DescribeUserScramCredentials": DESCRIBE_SCRAM_ACCESS,
    "AlterUserScramCredentials": ALTER_SCRAM_ACCESS,
}


_DISABLED = Refusal(
    errors.SECURITY_DISABLED, "this broker has no authorizer: ACLs are not managed here"
)


def _failed(exc: Exception) -> Refusal:
    """An error of ZooKeeper or of a znode's content, for one item of an answer."""
    return Refusal(errors.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {exc}")


class SecurityAdmin:
    """See the module docstring."""

    def __init__(
        self,
        zk: ZkClient,
        store: SecurityStore,
        run_admin: RunAdmin,
        acls_enabled: bool = True,
        authorizer: RequestAuthorizer = ALLOW_ALL,
    ) -> None:
        """``run_admin`` runs a blocking call on the admin pool (``NetworkLayer.run_admin``).
        With ``acls_enabled=False`` the three ACL APIs answer SECURITY_DISABLED, as Kafka
        does on a broker without an authorizer; credentials are served either way.
        ``authorizer`` decides who may call each API (``REQUIRED_ACCESS``)."""
        self._zk = zk
        self._store = store
        self._run_admin = run_admin
        self._acls_enabled = acls_enabled
        self._authorizer = authorizer

    async def _blocking(self, fn: Callable[..., T], *args: object) -> T:
        result: T = await self._run_admin(functools.partial(fn, *args))
        return result

    def _refusal(self, session: Session, access: Access, audited: bool = False) -> Refusal | None:
        """CLUSTER_AUTHORIZATION_FAILED, naming the caller, unless it has ``access``."""
        if self._authorizer.allowed(session, access.operation, access.resource, audited):
            return None
        return Refusal(
            errors.CLUSTER_AUTHORIZATION_FAILED,
            denial(session, access.operation, access.resource),
        )

    # -- ACLs ---------------------------------------------------------------------------

    async def create_acls(
        self, request: st.CreateAclsRequest, session: Session = INTERNAL
    ) -> st.CreateAclsResponse:
        """Authorization: CREATE_ACLS_ACCESS (Alter on the cluster)."""
        refused = self._refusal(session, CREATE_ACLS_ACCESS, audited=True)
        if refused is None and not self._acls_enabled:
            refused = _DISABLED
        if refused is not None:
            return st.CreateAclsResponse([_result(refused) for _ in request.creations])
        return await self._blocking(self._create_acls_now, request)

    def _create_acls_now(self, request: st.CreateAclsRequest) -> st.CreateAclsResponse:
        results: list[Refusal | None] = [None] * len(request.creations)
        wanted: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}
        for index, creation in enumerate(request.creations):
            parsed = binding_from_request(creation)
            if isinstance(parsed, Refusal):
                results[index] = parsed
            else:
                wanted.setdefault(parsed.pattern, []).append((index, parsed.entry))
        for pattern, items in wanted.items():
            entries = frozenset(entry for _, entry in items)
            try:
                before, after = self._zk.update_acls(pattern, entries.union)
                self._store.refresh_acls(pattern)
            except (ZkError, LayoutError) as exc:
                for index, _ in items:
                    results[index] = _failed(exc)
                continue
            for entry in sorted(after - before):
                logger.info("ACL added: %s", AclBinding(pattern, entry))
        return st.CreateAclsResponse([_result(r) for r in results])

    async def describe_acls(
        self, request: st.DescribeAclsRequest, session: Session = INTERNAL
    ) -> st.DescribeAclsResponse:
        """Authorization: DESCRIBE_ACLS_ACCESS (Describe on the cluster)."""
        parsed = self._refusal(session, DESCRIBE_ACLS_ACCESS) or (
            filter_from_request(request.filter) if self._acls_enabled else _DISABLED
        )
        if isinstance(parsed, Refusal):
            return st.DescribeAclsResponse(parsed.error.number, parsed.message)
        return st.DescribeAclsResponse(
            acls=[binding_answer(b) for b in self._store.acls.acls(parsed)]
        )

    async def delete_acls(
        self, request: st.DeleteAclsRequest, session: Session = INTERNAL
    ) -> st.DeleteAclsResponse:
        """Authorization: DELETE_ACLS_ACCESS (Alter on the cluster)."""
        refused = self._refusal(session, DELETE_ACLS_ACCESS, audited=True)
        if refused is None and not self._acls_enabled:
            refused = _DISABLED
        if refused is not None:
            return st.DeleteAclsResponse(
                [st.DeleteAclsResult(**_fields(refused)) for _ in request.filters]
            )
        return await self._blocking(self._delete_acls_now, request)

    def _delete_acls_now(self, request: st.DeleteAclsRequest) -> st.DeleteAclsResponse:
        response = st.DeleteAclsResponse()
        filters: list[tuple[int, AclBindingFilter]] = []
        for index, message in enumerate(request.filters):
            parsed = filter_from_request(message)
            result = st.DeleteAclsResult()
            response.results.append(result)
            if isinstance(parsed, Refusal):
                result.error, result.error_message = parsed.error.number, parsed.message
            else:
                filters.append((index, parsed))
        patterns = set(self._store.acls.patterns())
        for _, binding_filter in filters:
            patterns.update(named_patterns(binding_filter.pattern_filter))
        for pattern in sorted(patterns):
            matching = [(i, f) for i, f in filters if f.pattern_filter.matches(pattern)]
            if matching:
                self._delete_from(pattern, matching, response)
        for result in response.results:
            result.deleted.sort(key=lambda d: _sort_key(d.acl))
        return response

    def _delete_from(
        self,
        pattern: ResourcePattern,
        matching: list[tuple[int, AclBindingFilter]],
        response: st.DeleteAclsResponse,
    ) -> None:
        """Remove the pattern's entries the filters select; record each under its first."""
        doomed: dict[AccessControlEntry, int] = {}

        def remove(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
            doomed.clear()  # a retried write starts over from what it read
            for entry in current:
                first = next((i for i, f in matching if f.entry_filter.matches(entry)), None)
                if first is not None:
                    doomed[entry] = first
            return current - doomed.keys()

        try:
            self._zk.update_acls(pattern, remove)
            self._store.refresh_acls(pattern)
        except (ZkError, LayoutError) as exc:
            refusal = _failed(exc)
            if not doomed:  # nothing was read: say so on every filter that looked here
                for index, _ in matching:
                    result = response.results[index]
                    result.error, result.error_message = refusal.error.number, refusal.message
            for entry, index in doomed.items():
                response.results[index].deleted.append(
                    st.DeletedAcl(
                        binding_answer(AclBinding(pattern, entry)),
                        refusal.error.number,
                        refusal.message,
                    )
                )
            return
        for entry, index in sorted(doomed.items()):
            binding = AclBinding(pattern, entry)
            logger.info("ACL removed: %s", binding)
            response.results[index].deleted.append(st.DeletedAcl(binding_answer(binding)))

    # -- SCRAM credentials ------------------------------------------------------------------

    async def describe_user_scram_credentials(
        self, request: st.DescribeUserScramCredentialsRequest, session: Session = INTERNAL
    ) -> st.DescribeUserScramCredentialsResponse:
        """Authorization: DESCRIBE_SCRAM_ACCESS (Describe on the cluster)."""
        if refused := self._refusal(session, DESCRIBE_SCRAM_ACCESS):
            return st.DescribeUserScramCredentialsResponse(**_fields(refused))
        return await self._blocking(self._describe_scram_now, list(request.users))

    def _describe_scram_now(self, asked: list[str]) -> st.DescribeUserScramCredentialsResponse:
        response = st.DescribeUserScramCredentialsResponse()
        try:
            users = asked or self._zk.scram_users()
        except ZkError as exc:
            refusal = _failed(exc)
            response.error, response.error_message = refusal.error.number, refusal.message
            return response
        done: set[str] = set()
        for user in users:
            if user in done:
                continue
            done.add(user)
            result = st.UserScramCredentials(user)
            response.results.append(result)
            if not user:
                result.error = errors.RESOURCE_NOT_FOUND.number
                result.error_message = "cannot describe the credentials of an empty user name"
            elif asked.count(user) > 1:
                result.error = errors.DUPLICATE_RESOURCE.number
                result.error_message = f"user {user!r} is asked about twice in one request"
            else:
                self._describe_user(result, explicit=bool(asked))
        return response

    def _describe_user(self, result: st.UserScramCredentials, explicit: bool) -> None:
        try:
            found = self._zk.get_user_scram_credentials(result.user)
        except (ZkError, ScramConfigError, LayoutError) as exc:
            refusal = _failed(exc)
            result.error, result.error_message = refusal.error.number, refusal.message
            return
        if not found and explicit:
            result.error = errors.RESOURCE_NOT_FOUND.number
            result.error_message = f"user {result.user!r} has no SCRAM credential"
        for mechanism in MECHANISMS:
            if mechanism in found:
                result.credentials.append(
                    st.ScramCredentialInfo(mechanism, found[mechanism].iterations)
                )

    async def alter_user_scram_credentials(
        self, request: st.AlterUserScramCredentialsRequest, session: Session = INTERNAL
    ) -> st.AlterUserScramCredentialsResponse:
        """Authorization: ALTER_SCRAM_ACCESS (Alter on the cluster)."""
        if refused := self._refusal(session, ALTER_SCRAM_ACCESS, audited=True):
            users = dict.fromkeys(item.user for item in alteration_items(request))
            return st.AlterUserScramCredentialsResponse(
                [st.AlterUserScramResult(user, **_fields(refused)) for user in users]
            )
        return await self._blocking(self._alter_scram_now, request)

    def _alter_scram_now(
        self, request: st.AlterUserScramCredentialsRequest
    ) -> st.AlterUserScramCredentialsResponse:
        refused, plans = plan_alterations(request)
        outcome: dict[str, Refusal | None] = dict(refused)
        for plan in plans:
            outcome[plan.user] = self._alter_user(plan)
        users = [*dict.fromkeys(item.user for item in alteration_items(request))]
        return st.AlterUserScramCredentialsResponse(
            [st.AlterUserScramResult(user, **_fields(outcome.get(user))) for user in users]
        )

    def _alter_user(self, plan: UserAlterations) -> Refusal | None:
        credentials = {
            u.mechanism: credential_from_salted_password(
                u.mechanism, u.salt, u.salted_password, u.iterations
            )
            for u in plan.upsertions
        }
        try:
            self._zk.alter_user_scram_credentials(plan.user, credentials, plan.deletions)
            self._store.refresh_user(plan.user)
        except CredentialNotFoundError as exc:
            return Refusal(errors.RESOURCE_NOT_FOUND, f"cannot delete: {exc} (nothing was changed)")
        except (ZkError, LayoutError) as exc:
            return _failed(exc)
        for mechanism in plan.deletions:
            logger.info("SCRAM credential deleted: user %r, %s", plan.user, mechanism)
        for u in plan.upsertions:
            logger.info(
                "SCRAM credential set: user %r, %s, %d iterations",
                plan.user,
                u.mechanism,
                u.iterations,
            )
        return None


def _result(refusal: Refusal | None) -> st.AclResult:
    return st.AclResult(**_fields(refusal))


def _fields(refusal: Refusal | None) -> dict[str, Any]:
    if refusal is None:
        return {}
    return {"error": refusal.error.number, "error_message": refusal.message}


def _sort_key(message: st.AclBinding) -> tuple[Any, ...]:
    return (
        message.resource_type,
        message.pattern_type,
        message.resource_name,
        message.principal,
        message.host,
        message.operation,
        message.permission_type,
    )
