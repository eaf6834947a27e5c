"""Kafka's AclAuthorizer decision, rule by rule, and the ACL cache under it."""

from __future__ import annotations

import threading
import time

import pytest
from annal.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    Resource,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from annal.security.authorizer import (
    AclCache,
    Authorizer,
    Decision,
    super_users_from_config,
)
from hypothesis import given
from hypothesis import strategies as st

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
Op = AclOperation

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
ADMIN = KafkaPrincipal("User", "admin")
HOST = "10.0.0.1"
ORDERS = Resource(TOPIC, "orders")
LIT_ORDERS = ResourcePattern.literal(TOPIC, "orders")
LIT_STAR = ResourcePattern.literal(TOPIC, "*")


def ace(
    principal: str = "User:alice",
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


def authorizer(
    acls: dict[ResourcePattern, list[AccessControlEntry]] | None = None,
    allow_everyone: bool = False,
) -> Authorizer:
    cache = AclCache()
    for pattern, entries in (acls or {}).items():
        cache.replace(pattern, entries)
    return Authorizer(cache, frozenset({"User:admin"}), allow_everyone)


def allowed(
    auth: Authorizer,
    operation: AclOperation = Op.READ,
    resource: Resource = ORDERS,
    principal: KafkaPrincipal = ALICE,
    host: str = HOST,
) -> bool:
    return auth.authorize(principal, host, operation, resource).allowed


# -- 1. super users --------------------------------------------------------------------


def test_super_user_is_allowed_everything_even_against_a_deny() -> None:
    auth = authorizer({LIT_ORDERS: [ace("User:*", Op.ALL, DENY)]})
    decision = auth.authorize(ADMIN, HOST, Op.DELETE, ORDERS)
    assert decision == Decision(True, "super user")
    assert allowed(authorizer(), Op.ALTER_CONFIGS, Resource.cluster(), ADMIN)
    assert not allowed(auth, Op.DELETE, ORDERS, ALICE)


def test_super_users_are_parsed() -> None:
    assert super_users_from_config(" User:admin ; User:ops;;") == {"User:admin", "User:ops"}
    assert super_users_from_config("") == frozenset()
    with pytest.raises(ValueError, match="principal 'admin' is not of the form"):
        super_users_from_config("User:ops;admin")
    with pytest.raises(ValueError, match="super.users: principal 'root' is not of the form"):
        Authorizer(AclCache(), frozenset({"root"}))


# -- 2/3. no ACLs at all ---------------------------------------------------------------


@pytest.mark.parametrize("allow_everyone", [True, False])
def test_no_acl_found(allow_everyone: bool) -> None:
    # ACLs on other resources do not count: nothing applies to 'orders'.
    auth = authorizer(
        {
            ResourcePattern.literal(TOPIC, "payments"): [ace()],
            ResourcePattern.prefixed(TOPIC, "pay"): [ace()],
            ResourcePattern.literal(GROUP, "orders"): [ace()],
        },
        allow_everyone,
    )
    decision = auth.authorize(BOB, HOST, Op.WRITE, ORDERS)
    assert decision.allowed is allow_everyone
    flag = "true" if allow_everyone else "false"
    assert decision.reason == f"no ACL found, allow.everyone.if.no.acl.found={flag}"
    assert decision.acl is None


def test_acls_for_someone_else_mean_no_fallback() -> None:
    """Once any ACL applies, allow.everyone.if.no.acl.found no longer does."""
    auth = authorizer({LIT_ORDERS: [ace("User:bob")]}, allow_everyone=True)
    decision = auth.authorize(ALICE, HOST, Op.READ, ORDERS)
    assert decision == Decision(False, "no matching allow ACL")


# -- 4. principal and host -------------------------------------------------------------


def test_principal_must_match_or_be_the_wildcard() -> None:
    auth = authorizer({LIT_ORDERS: [ace("User:alice")]})
    assert allowed(auth, principal=ALICE)
    assert not allowed(auth, principal=BOB)
    # Same name, other principal type: not the same principal.
    assert not allowed(auth, principal=KafkaPrincipal("Group", "alice"))
    auth = authorizer({LIT_ORDERS: [ace("User:*")]})
    assert allowed(auth, principal=BOB)
    assert allowed(auth, principal=KafkaPrincipal.ANONYMOUS)
    # Only User:* is the wildcard.
    auth = authorizer({LIT_ORDERS: [ace("Group:*")]})
    assert not allowed(auth, principal=KafkaPrincipal("Group", "ops"))


def test_host_must_match_or_be_the_wildcard() -> None:
    auth = authorizer({LIT_ORDERS: [ace(host="10.0.0.1")]})
    assert allowed(auth, host="10.0.0.1")
    assert not allowed(auth, host="10.0.0.2")
    auth = authorizer({LIT_ORDERS: [ace(host="*")]})
    assert allowed(auth, host="192.168.1.9")


def test_deny_for_another_host_or_principal_does_not_apply() -> None:
    auth = authorizer(
        {
            LIT_ORDERS: [
                ace(),
                ace(host="10.9.9.9", permission=DENY),
                ace("User:bob", permission=DENY),
            ]
        }
    )
    assert allowed(auth)
    assert not allowed(auth, host="10.9.9.9")
    assert not allowed(auth, principal=BOB)


# -- 5. deny beats allow ---------------------------------------------------------------


def test_deny_beats_allow() -> None:
    auth = authorizer({LIT_ORDERS: [ace(), ace(permission=DENY)]})
    decision = auth.authorize(ALICE, HOST, Op.READ, ORDERS)
    assert not decision.allowed
    assert (
        decision.reason == "denied by ACL: Deny User:alice Read from host * on Topic:LITERAL:orders"
    )
    assert decision.acl == AclBinding(LIT_ORDERS, ace(permission=DENY))


def test_deny_anywhere_beats_allow_anywhere() -> None:
    """The deny may sit on another applying pattern than the allow."""
    prefixed = ResourcePattern.prefixed(TOPIC, "ord")
    auth = authorizer({LIT_ORDERS: [ace("User:*", Op.ALL)], prefixed: [ace(permission=DENY)]})
    decision = auth.authorize(ALICE, HOST, Op.READ, ORDERS)
    assert not decision.allowed
    assert decision.acl == AclBinding(prefixed, ace(permission=DENY))
    assert allowed(auth, Op.WRITE)  # the deny is for Read only
    assert allowed(auth, principal=BOB)


def test_deny_all_denies_every_operation() -> None:
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.ALL), ace(operation=Op.ALL, permission=DENY)]})
    for operation in Op:
        if operation > Op.ANY:
            assert not allowed(auth, operation)


def test_deny_is_not_implied() -> None:
    """Denying Read does not deny Describe, which an Allow of Describe still grants."""
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.DESCRIBE), ace(permission=DENY)]})
    assert allowed(auth, Op.DESCRIBE)
    assert not allowed(auth, Op.READ)
    # Even an Allow of Read that a Deny of Read cancels still implies Describe, as in
    # Kafka: the deny is looked for under the requested operation only.
    auth = authorizer({LIT_ORDERS: [ace(), ace(permission=DENY)]})
    assert not allowed(auth, Op.READ)
    assert allowed(auth, Op.DESCRIBE)


def test_the_denying_acl_is_stable() -> None:
    entries = [
        ace(permission=DENY),
        ace("User:*", permission=DENY),
        ace(operation=Op.ALL, permission=DENY),
    ]
    decisions = set()
    for order in (entries, entries[::-1], entries[1:] + entries[:1]):
        decisions.add(authorizer({LIT_ORDERS: order}).authorize(ALICE, HOST, Op.READ, ORDERS))
    assert len(decisions) == 1


# -- 6. allow, ALL, implied operations ---------------------------------------------------


def test_allow_only_the_operation() -> None:
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.WRITE)]})
    decision = auth.authorize(ALICE, HOST, Op.WRITE, ORDERS)
    assert decision.allowed
    assert (
        decision.reason
        == "allowed by ACL: Allow User:alice Write from host * on Topic:LITERAL:orders"
    )
    assert not allowed(auth, Op.READ)
    assert not allowed(auth, Op.CREATE)


def test_allow_all_allows_every_operation() -> None:
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.ALL)]})
    for operation in Op:
        if operation > Op.ANY:
            assert allowed(auth, operation), operation


@pytest.mark.parametrize("granting", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied(granting: AclOperation) -> None:
    auth = authorizer({LIT_ORDERS: [ace(operation=granting)]})
    decision = auth.authorize(ALICE, HOST, Op.DESCRIBE, ORDERS)
    assert decision.allowed
    assert decision.acl == AclBinding(LIT_ORDERS, ace(operation=granting))


@pytest.mark.parametrize(
    "not_granting",
    [Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE],
)
def test_describe_is_not_implied_by_the_rest(not_granting: AclOperation) -> None:
    auth = authorizer({LIT_ORDERS: [ace(operation=not_granting)]})
    assert not allowed(auth, Op.DESCRIBE)


def test_describe_configs_is_implied_by_alter_configs_only() -> None:
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.ALTER_CONFIGS)]})
    assert allowed(auth, Op.DESCRIBE_CONFIGS)
    assert not allowed(auth, Op.DESCRIBE)
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.ALTER)]})
    assert not allowed(auth, Op.DESCRIBE_CONFIGS)
    # Nothing implies the stronger operations.
    auth = authorizer({LIT_ORDERS: [ace(operation=Op.DESCRIBE)]})
    for stronger in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert not allowed(auth, stronger)


# -- 2. which patterns apply ------------------------------------------------------------


def test_literal_wildcard_applies_to_every_name_of_its_type() -> None:
    auth = authorizer({LIT_STAR: [ace()]})
    assert allowed(auth, resource=Resource(TOPIC, "anything"))
    assert not allowed(auth, resource=Resource(GROUP, "anything"))  # no ACLs: fallback false
    auth = authorizer({LIT_STAR: [ace()], ResourcePattern.literal(GROUP, "g"): [ace()]})
    assert not allowed(auth, resource=Resource(GROUP, "h"))


def test_prefixed_patterns() -> None:
    auth = authorizer({ResourcePattern.prefixed(TOPIC, "ord"): [ace()]})
    assert allowed(auth, resource=Resource(TOPIC, "orders"))
    assert allowed(auth, resource=Resource(TOPIC, "ord"))  # a prefix of itself
    assert not allowed(auth, resource=Resource(TOPIC, "or"))
    assert not allowed(auth, resource=Resource(TOPIC, "xorders"))
    # A prefixed '*' is only the character '*', not a wildcard.
    auth = authorizer({ResourcePattern.prefixed(TOPIC, "*"): [ace()]})
    assert not allowed(auth, resource=ORDERS)
    assert allowed(auth, resource=Resource(TOPIC, "*x"))


def test_a_literal_name_is_not_a_prefix() -> None:
    auth = authorizer({ResourcePattern.literal(TOPIC, "ord"): [ace()]})
    assert not allowed(auth, resource=ORDERS)


def test_cluster_resource() -> None:
    cluster = ResourcePattern.literal(ResourceType.CLUSTER, "kafka-cluster")
    auth = authorizer({cluster: [ace("User:broker", Op.CLUSTER_ACTION)]})
    broker = KafkaPrincipal("User", "broker")
    assert allowed(auth, Op.CLUSTER_ACTION, Resource.cluster(), broker)
    assert not allowed(auth, Op.CLUSTER_ACTION, Resource.cluster(), ALICE)


def test_filter_operations_cannot_be_authorized() -> None:
    for operation in (Op.ANY, Op.UNKNOWN):
        with pytest.raises(ValueError, match="filter operation"):
            authorizer().authorize(ALICE, HOST, operation, ORDERS)


def test_log_line() -> None:
    auth = authorizer({ResourcePattern.prefixed(TOPIC, "ord"): [ace(operation=Op.WRITE)]})
    decision = auth.authorize(ALICE, HOST, Op.DESCRIBE, ORDERS)
    assert decision.log_line(ALICE, HOST, Op.DESCRIBE, ORDERS) == (
        "ALLOWED: principal User:alice from host 10.0.0.1, operation Describe on resource "
        "Topic:LITERAL:orders (allowed by ACL: Allow User:alice Write from host * on "
        "Topic:PREFIXED:ord)"
    )
    decision = auth.authorize(BOB, "::1", Op.READ, Resource(GROUP, "g"))
    assert decision.log_line(BOB, "::1", Op.READ, Resource(GROUP, "g")) == (
        "DENIED: principal User:bob from host ::1, operation Read on resource Group:LITERAL:g "
        "(no ACL found, allow.everyone.if.no.acl.found=false)"
    )


# -- authorize_any (KIP-679) ------------------------------------------------------------


def any_allowed(
    auth: Authorizer,
    operation: AclOperation = Op.WRITE,
    principal: KafkaPrincipal = ALICE,
    resource_type: ResourceType = TOPIC,
) -> bool:
    return auth.authorize_any(principal, HOST, operation, resource_type)


def test_authorize_any_super_user_and_no_acls() -> None:
    assert any_allowed(authorizer(), principal=ADMIN)
    assert not any_allowed(authorizer())
    assert any_allowed(authorizer(allow_everyone=True))
    wildcard_deny = {LIT_STAR: [ace("User:*", Op.ALL, DENY)]}
    assert any_allowed(authorizer(wildcard_deny), principal=ADMIN)


def test_authorize_any_allowed_somewhere() -> None:
    for pattern in (LIT_ORDERS, LIT_STAR, ResourcePattern.prefixed(TOPIC, "ord")):
        assert any_allowed(authorizer({pattern: [ace(operation=Op.WRITE)]}))
        assert any_allowed(authorizer({pattern: [ace("User:*", Op.ALL)]}))
        # Another operation, principal, host or resource type: no.
        assert not any_allowed(authorizer({pattern: [ace(operation=Op.READ)]}))
        assert not any_allowed(authorizer({pattern: [ace("User:bob", Op.WRITE)]}))
        assert not any_allowed(authorizer({pattern: [ace(operation=Op.WRITE, host="1.1.1.1")]}))
        assert not any_allowed(
            authorizer({pattern: [ace(operation=Op.WRITE)]}), resource_type=GROUP
        )
    # Nothing is implied: an Allow of Write does not answer for Describe.
    assert not any_allowed(authorizer({LIT_ORDERS: [ace(operation=Op.WRITE)]}), Op.DESCRIBE)


def test_authorize_any_denies() -> None:
    allow_orders = ace(operation=Op.WRITE)
    deny = ace(operation=Op.WRITE, permission=DENY)
    # A deny on the literal '*' shuts the whole type, even with the fallback on.
    star_deny = {LIT_ORDERS: [allow_orders], LIT_STAR: [deny]}
    assert not any_allowed(authorizer(star_deny))
    assert not any_allowed(authorizer(star_deny, allow_everyone=True))
    # The literal allow is shadowed by a literal deny of the same name ...
    assert not any_allowed(authorizer({LIT_ORDERS: [allow_orders, deny]}))
    # ... or by a deny prefix of it.
    pre_or = ResourcePattern.prefixed(TOPIC, "or")
    assert not any_allowed(authorizer({LIT_ORDERS: [allow_orders], pre_or: [deny]}))
    # A denied name elsewhere leaves this one allowed.
    other = ResourcePattern.literal(TOPIC, "other")
    assert any_allowed(authorizer({LIT_ORDERS: [allow_orders], other: [deny]}))
    # An allowed prefix survives only if no deny prefix of it exists.
    pre_orders = ResourcePattern.prefixed(TOPIC, "orders")
    assert not any_allowed(authorizer({pre_orders: [allow_orders], pre_or: [deny]}))
    assert any_allowed(authorizer({pre_or: [allow_orders], pre_orders: [deny]}))
    # A literal deny does not shadow a prefix.
    assert any_allowed(authorizer({pre_orders: [allow_orders], LIT_ORDERS: [deny]}))
    # An allow on the literal '*' survives any prefix deny.
    assert any_allowed(authorizer({LIT_STAR: [allow_orders], pre_or: [deny]}))
    # A deny for somebody else changes nothing.
    bob_deny = ace("User:bob", Op.WRITE, DENY)
    assert any_allowed(authorizer({LIT_ORDERS: [allow_orders], LIT_STAR: [bob_deny]}))


def test_authorize_any_with_the_fallback_on() -> None:
    """Kafka's AclAuthorizer: with allow.everyone.if.no.acl.found, some resource without
    ACLs can always be named, so only a deny on the literal '*' says no."""
    auth = authorizer({LIT_ORDERS: [ace("User:bob", Op.WRITE)]}, allow_everyone=True)
    assert any_allowed(auth)


def test_authorize_any_rejects_filters() -> None:
    with pytest.raises(ValueError, match="filter resource type"):
        any_allowed(authorizer(), resource_type=ResourceType.ANY)
    with pytest.raises(ValueError, match="filter operation"):
        any_allowed(authorizer(), operation=Op.ANY)


# -- the cache --------------------------------------------------------------------------


def test_cache_replace_and_read() -> None:
    cache = AclCache()
    pre = ResourcePattern.prefixed(TOPIC, "ord")
    cache.replace(LIT_ORDERS, [ace(), ace("User:bob")])
    cache.replace(pre, [ace(operation=Op.WRITE)])
    cache.replace(ResourcePattern.literal(GROUP, "g"), [ace()])
    assert cache.entries(LIT_ORDERS) == {ace(), ace("User:bob")}
    assert cache.entries(LIT_STAR) == frozenset()
    assert len(cache.patterns()) == 3
    assert cache.matching(ORDERS) == {
        LIT_ORDERS: frozenset({ace(), ace("User:bob")}),
        pre: frozenset({ace(operation=Op.WRITE)}),
    }
    assert set(cache.by_type(TOPIC)) == {LIT_ORDERS, pre}
    cache.replace(LIT_ORDERS, [ace("User:carol")])
    assert cache.entries(LIT_ORDERS) == {ace("User:carol")}
    cache.replace(LIT_ORDERS, [])  # empty: the pattern goes
    assert LIT_ORDERS not in cache.patterns()
    assert list(cache.matching(ORDERS)) == [pre]
    cache.clear()
    assert cache.patterns() == frozenset()
    assert cache.matching(ORDERS) == {}


def test_cache_acls_filter() -> None:
    cache = AclCache()
    pre = ResourcePattern.prefixed(TOPIC, "ord")
    cache.replace(LIT_ORDERS, [ace("User:bob"), ace()])
    cache.replace(pre, [ace(operation=Op.WRITE, permission=DENY)])
    everything = cache.acls()
    assert everything == sorted(everything)
    assert everything == [  # by type, then name ("ord" < "orders"), then entry
        AclBinding(pre, ace(operation=Op.WRITE, permission=DENY)),
        AclBinding(LIT_ORDERS, ace()),
        AclBinding(LIT_ORDERS, ace("User:bob")),
    ]
    match = ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH)
    assert len(cache.acls(AclBindingFilter(match))) == 3
    deny_only = AclBindingFilter(entry_filter=AccessControlEntryFilter(permission_type=DENY))
    assert cache.acls(deny_only) == [AclBinding(pre, ace(operation=Op.WRITE, permission=DENY))]
    bob = AclBindingFilter(
        ResourcePatternFilter(TOPIC, "orders", PatternType.LITERAL),
        AccessControlEntryFilter(principal="User:bob"),
    )
    assert cache.acls(bob) == [AclBinding(LIT_ORDERS, ace("User:bob"))]


@given(
    st.lists(
        st.tuples(st.text(alphabet="ab*", min_size=1, max_size=4), st.booleans()), max_size=12
    ),
    st.text(alphabet="ab*", max_size=5),
)
def test_cache_lookup_is_the_patterns_that_apply(
    patterns: list[tuple[str, bool]], resource_name: str
) -> None:
    cache = AclCache()
    stored = [
        ResourcePattern(TOPIC, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL)
        for name, prefixed in patterns
    ]
    for pattern in stored:
        cache.replace(pattern, [ace()])
    resource = Resource(TOPIC, resource_name)
    assert set(cache.matching(resource)) == {p for p in stored if p.applies_to(resource)}


def test_cache_is_thread_safe() -> None:
    """Writers replace and remove patterns while readers look up: readers never see a
    half-replaced set nor trip over a dictionary changing under them."""
    cache = AclCache()
    set_a = frozenset(ace(f"User:a{i}") for i in range(5))
    set_b = frozenset(ace(f"User:b{i}", Op.WRITE) for i in range(7))
    shared = ResourcePattern.prefixed(TOPIC, "o")
    cache.replace(shared, set_a)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        try:
            i = 0
            while not stop.is_set():
                cache.replace(shared, set_a if i % 2 else set_b)
                churn = ResourcePattern.prefixed(TOPIC, f"o{seed}-{i % 50}")
                cache.replace(churn, set_b if i % 3 else [])
                i += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                assert cache.entries(shared) in (set_a, set_b)
                for entries in cache.matching(Resource(TOPIC, "o1-7")).values():
                    assert entries in (set_a, set_b)
                cache.acls()
                cache.by_type(TOPIC)
                cache.patterns()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert cache.entries(shared) in (set_a, set_b)
