"""Authorization of requests, one module for both protocols (docs/security.md).

Each API asks here whether the request's session may do Kafka's operation on
the resources it names; the protocol edges (``kafkaproto``, ``broker/service``)
only turn a denial into their own error.  Without ``authorizer.class.name``
every request is allowed, as Kafka allows everything without an authorizer.

Which operation each API needs is Kafka's (the table in docs/security.md).
Requests that only brokers send need ClusterAction on the Cluster resource:
see ``cluster_action``.

The authorizer log (logger ``annal.authorizer``): every denial at INFO, with
the principal, host, operation and resource; every allowed change to the
cluster's state (``audited``: deleting a topic, changing a config, an ACL,
a user, a group's offsets) at INFO too; other allowed requests at DEBUG.  A
check whose denial only narrows an answer or leads to another check
(``log_denied=False``: listing the topics one may describe, Create on the
cluster before Create on the topic) logs a denial at DEBUG, as Kafka's
``logIfDenied = false`` keeps it out of the authorizer log.

``denial`` words the message a refused request carries: the principal, the
operation and the resource.

Thread safety: the decision reads the ``AclCache``, which is thread-safe;
everything else is immutable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from annal.broker.requests.request_checks import Refusal
from annal.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    KafkaPrincipal,
    Resource,
    ResourceType,
)
from annal.security.authorizer import AclCache, Authorizer, Decision
from annal.security.session import UNAUTHENTICATED, Session

from annal import errors

log = logging.getLogger("annal.authorizer")

# Who an in-process caller is (tests, the broker's own work): the default session of
# every handler, asked about as User:ANONYMOUS (security/session.py).
INTERNAL = UNAUTHENTICATED

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
CLUSTER_RESOURCE = Resource(ResourceType.CLUSTER, CLUSTER_NAME)
# Kafka's operations of each resource type: what an authorized-operations bit
# field (KIP-430: DescribeCluster, Metadata, DescribeGroups) reports
RESOURCE_OPERATIONS = {
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
}  # fmt: skip


class RequestAuthorizer:
    """See the module docstring.  ``None`` authorizer: everything allowed."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self._authorizer = authorizer

    @classmethod
    def from_settings(
        cls,
        name: str,
        cache: AclCache,
        super_users: frozenset[str],
        allow_everyone_if_no_acl_found: bool,
    ) -> RequestAuthorizer:
        if not name:
            return cls(None)
        return cls(Authorizer(cache, super_users, allow_everyone_if_no_acl_found))

    @property
    def enabled(self) -> bool:
        return self._authorizer is not None

    def allowed(
        self,
        session: Session,
        operation: AclOperation,
        resource: Resource,
        audited: bool = False,
        log_denied: bool = True,
    ) -> bool:
        """Whether ``session`` may do ``operation`` on ``resource``; logged as the
        module docstring says."""
        if self._authorizer is None:
            return True
        decision = self._authorizer.authorize(
            session.principal, session.client_host, operation, resource
        )
        _log(decision, session, operation, resource, audited, log_denied)
        return decision.allowed

    def denied(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
        audited: bool = False,
        log_denied: bool = True,
    ) -> set[str]:
        """The names of ``names`` (of one resource type) that ``session`` may not
        ``operation``; each asked once."""
        if self._authorizer is None:
            return set()
        return {
            name
            for name in set(names)
            if not self.allowed(
                session, operation, Resource(resource_type, name), audited, log_denied
            )
        }

    def refused_topics(
        self,
        session: Session,
        operation: AclOperation,
        names: Iterable[str],
        audited: bool = False,
        log_denied: bool = True,
    ) -> dict[str, Refusal]:
        """TOPIC_AUTHORIZATION_FAILED, naming the caller (``denial``), for each topic of
        ``names`` that ``session`` may not ``operation``: what a handler answers for
        that topic's partitions."""
        denied = self.denied(session, operation, TOPIC, names, audited, log_denied)
        return {
            name: Refusal(
                errors.TOPIC_AUTHORIZATION_FAILED,
                denial(session, operation, Resource(TOPIC, name)),
            )
            for name in denied
        }

    def cluster(
        self,
        session: Session,
        operation: AclOperation,
        audited: bool = False,
        log_denied: bool = True,
    ) -> bool:
        return self.allowed(session, operation, CLUSTER_RESOURCE, audited, log_denied)

    def authorized_operations(self, session: Session, resource: Resource) -> int:
        """Kafka's bit field of the operations of the resource's type that
        ``session`` may do on ``resource`` (bit ``1 << code`` per operation,
        KIP-430); asked quietly, since nothing is refused."""
        allowed = 0
        for operation in RESOURCE_OPERATIONS[resource.resource_type]:
            if self.allowed(session, operation, resource, log_denied=False):
                allowed |= 1 << operation.value
        return allowed

    def cluster_action(self, session: Session) -> bool:
        """ClusterAction on the Cluster: what a request only a broker or the
        controller sends needs (replica fetches, LeaderAndIsr, StopReplica,
        UpdateMetadata, ControlledShutdown)."""
        return self.cluster(session, AclOperation.CLUSTER_ACTION)

    def any_resource(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``session`` may ``operation`` on at least one resource of the type
        (Kafka's authorizeByResourceType, KIP-679)."""
        if self._authorizer is None:
            return True
        return self._authorizer.authorize_any(
            session.principal, session.client_host, operation, resource_type
        )


def denial(session: Session, operation: AclOperation, resource: Resource) -> str:
    """What a refused request is told: ``User:bob may not Delete Topic:orders``."""
    return f"{session.principal} may not {operation.kafka_name} {resource}"


def cluster_denial(session: Session, operation: AclOperation) -> str:
    return denial(session, operation, CLUSTER_RESOURCE)


def _log(
    decision: Decision,
    session: Session,
    operation: AclOperation,
    resource: Resource,
    audited: bool,
    log_denied: bool = True,
) -> None:
    if decision.allowed:
        level = logging.INFO if audited else logging.DEBUG
    else:
        level = logging.INFO if log_denied else logging.DEBUG
    if log.isEnabledFor(level):
        principal: KafkaPrincipal = session.principal
        log.log(
            level,
            "%s (listener %s)",
            decision.log_line(principal, session.client_host, operation, resource),
            session.listener,
        )


ALLOW_ALL = RequestAuthorizer(None)
