"""Kafka's ACL decision, case by case; every expectation worked out by hand from Kafka's rules."""

from __future__ import annotations

from proxy.auth.acl.evaluate import AclIndex, Authorizer
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    BindingFilter,
    EntryFilter,
    Operation,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    invalid_binding,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
HOME, AWAY = "10.0.0.1", "10.0.0.2"


def acl(rtype: ResourceType, name: str, principal: str, op: Operation, perm: Permission = ALLOW,
        host: str = "*", pattern: PatternType = LIT) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AclEntry(principal, host, op, perm))


def authorizer(*bindings: AclBinding, **kw: object) -> Authorizer:
    return Authorizer(AclIndex(bindings), **kw)  # type: ignore[arg-type]


def test_no_acls_denies_unless_allow_everyone_or_super_user() -> None:
    empty = authorizer()
    assert not empty.authorize("User:alice", HOME, R, TOPIC, "t")
    assert authorizer(allow_if_no_acl=True).authorize("User:alice", HOME, R, TOPIC, "t")
    assert authorizer(super_users=frozenset({"User:admin"})).authorize("User:admin", HOME, R, TOPIC, "t")


def test_allow_everyone_applies_only_to_resources_without_any_acl() -> None:
    auth = authorizer(acl(TOPIC, "t", "User:alice", R), allow_if_no_acl=True)
    assert auth.authorize("User:alice", HOME, R, TOPIC, "t")
    assert not auth.authorize("User:bob", HOME, R, TOPIC, "t")  # t has an ACL (alice's)
    assert auth.authorize("User:bob", HOME, W, TOPIC, "u")      # u has none


def test_read_implies_describe_but_not_write() -> None:
    auth = authorizer(acl(TOPIC, "t", "User:alice", R))
    assert auth.authorize("User:alice", HOME, R, TOPIC, "t")
    assert auth.authorize("User:alice", HOME, D, TOPIC, "t")
    assert not auth.authorize("User:alice", HOME, W, TOPIC, "t")
    assert not auth.authorize("User:bob", HOME, R, TOPIC, "t")


def test_describe_is_implied_by_write_delete_alter_not_by_create() -> None:
    for op, implies in ((W, True), (Operation.DELETE, True), (Operation.ALTER, True), (Operation.CREATE, False),
                        (Operation.ALTER_CONFIGS, False)):
        auth = authorizer(acl(TOPIC, "t", "User:a", op))
        assert auth.authorize("User:a", HOME, D, TOPIC, "t") is implies, op


def test_alter_configs_implies_describe_configs_and_all_implies_everything() -> None:
    auth = authorizer(acl(TOPIC, "t", "User:a", Operation.ALTER_CONFIGS), acl(GROUP, "g", "User:a", Operation.ALL))
    assert auth.authorize("User:a", HOME, Operation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not auth.authorize("User:a", HOME, Operation.ALTER, TOPIC, "t")
    for op in (R, D, Operation.DELETE, Operation.DESCRIBE_CONFIGS):
        assert auth.authorize("User:a", HOME, op, GROUP, "g")


def test_prefixed_and_wildcard_patterns() -> None:
    auth = authorizer(acl(TOPIC, "orders-", "User:alice", W, pattern=PRE),
                      acl(GROUP, "*", "User:alice", R))
    assert auth.authorize("User:alice", HOME, W, TOPIC, "orders-eu")
    assert auth.authorize("User:alice", HOME, W, TOPIC, "orders-")
    assert not auth.authorize("User:alice", HOME, W, TOPIC, "orders")
    assert not auth.authorize("User:alice", HOME, W, TOPIC, "xorders-eu")
    assert auth.authorize("User:alice", HOME, R, GROUP, "anything")
    # A literal named "*" on a PREFIXED pattern is just the prefix "*".
    star = authorizer(acl(TOPIC, "*", "User:alice", R, pattern=PRE))
    assert not star.authorize("User:alice", HOME, R, TOPIC, "t")
    assert star.authorize("User:alice", HOME, R, TOPIC, "*t")


def test_deny_wins_and_is_host_specific() -> None:
    auth = authorizer(acl(TOPIC, "orders-", "User:alice", W, pattern=PRE),
                      acl(TOPIC, "orders-eu", "User:alice", W, DENY, host=HOME))
    assert not auth.authorize("User:alice", HOME, W, TOPIC, "orders-eu")
    assert auth.authorize("User:alice", AWAY, W, TOPIC, "orders-eu")
    assert auth.authorize("User:alice", HOME, W, TOPIC, "orders-us")


def test_deny_of_one_operation_does_not_deny_what_it_would_imply() -> None:
    auth = authorizer(acl(TOPIC, "t", "User:a", Operation.ALL), acl(TOPIC, "t", "User:a", R, DENY))
    assert not auth.authorize("User:a", HOME, R, TOPIC, "t")
    assert auth.authorize("User:a", HOME, D, TOPIC, "t")
    assert auth.authorize("User:a", HOME, W, TOPIC, "t")
    deny_all = authorizer(acl(TOPIC, "t", "User:a", W), acl(TOPIC, "*", "User:*", Operation.ALL, DENY))
    assert not deny_all.authorize("User:a", HOME, W, TOPIC, "t")


def test_wildcard_principal_and_super_user_over_deny() -> None:
    auth = authorizer(acl(TOPIC, "t", "User:*", R), acl(TOPIC, "t", "User:root", R, DENY),
                      super_users=frozenset({"User:root"}))
    assert auth.authorize("User:anyone", HOME, R, TOPIC, "t")
    assert auth.authorize("User:root", HOME, R, TOPIC, "t")  # super users skip the ACLs


def test_authorize_any_follows_authorize_by_resource_type() -> None:
    # A prefixed allow with no dominating deny.
    assert authorizer(acl(TOPIC, "orders-", "User:a", W, pattern=PRE)).authorize_any("User:a", HOME, W, TOPIC)
    # Nothing at all: refused (unless allow.everyone).
    assert not authorizer().authorize_any("User:a", HOME, W, TOPIC)
    assert authorizer(allow_if_no_acl=True).authorize_any("User:a", HOME, W, TOPIC)
    # A literal allow denied by a shorter deny prefix; a literal allow of a name denied literally.
    assert not authorizer(acl(TOPIC, "orders-eu", "User:a", W),
                          acl(TOPIC, "ord", "User:a", W, DENY, pattern=PRE)).authorize_any("User:a", HOME, W, TOPIC)
    assert not authorizer(acl(TOPIC, "x", "User:a", W), acl(TOPIC, "x", "User:a", W, DENY)).authorize_any(
        "User:a", HOME, W, TOPIC)
    # Deny of "*" refuses even with allow.everyone; an allow on another name survives a literal deny.
    assert not authorizer(acl(TOPIC, "*", "User:a", W, DENY), allow_if_no_acl=True).authorize_any(
        "User:a", HOME, W, TOPIC)
    assert authorizer(acl(TOPIC, "x", "User:a", W), acl(TOPIC, "y", "User:a", W, DENY)).authorize_any(
        "User:a", HOME, W, TOPIC)
    # Describe is not implied here (Kafka matches the operation or ALL only).
    assert not authorizer(acl(TOPIC, "x", "User:a", R)).authorize_any("User:a", HOME, D, TOPIC)


def test_filters_match_as_kafka_does() -> None:
    lit = ResourcePattern(TOPIC, "orders-eu", LIT)
    pre = ResourcePattern(TOPIC, "orders-", PRE)
    star = ResourcePattern(TOPIC, "*", LIT)
    match = PatternFilter(TOPIC, "orders-eu", PatternType.MATCH)
    assert [match.matches(p) for p in (lit, pre, star)] == [True, True, True]
    any_ = PatternFilter(TOPIC, "orders-eu", PatternType.ANY)
    assert [any_.matches(p) for p in (lit, pre, star)] == [True, False, False]
    assert [PatternFilter(ResourceType.ANY, None, PatternType.PREFIXED).matches(p) for p in (lit, pre)] == [False, True]
    assert not PatternFilter(GROUP, None, PatternType.ANY).matches(lit)
    entry = AclEntry("User:a", "*", R, ALLOW)
    assert EntryFilter().matches(entry)
    assert EntryFilter(principal="User:a", operation=R).matches(entry)
    assert not EntryFilter(host="h").matches(entry)
    assert not EntryFilter(permission=DENY).matches(entry)
    assert BindingFilter(PatternFilter(TOPIC, None, PatternType.ANY), EntryFilter(operation=R)).matches(
        AclBinding(lit, entry))


def test_invalid_bindings_are_named() -> None:
    assert invalid_binding(acl(TOPIC, "t", "User:a", R)) is None
    assert invalid_binding(acl(CLUSTER, "other", "User:a", Operation.ALTER)) == \
        "The only valid name for the CLUSTER resource is kafka-cluster"
    assert invalid_binding(acl(TOPIC, "", "User:a", R)) == "Invalid empty resource name"
    assert invalid_binding(acl(GROUP, "a/b", "User:a", R)) == "ACL binding contains invalid resource name: a/b"
    assert invalid_binding(acl(TOPIC, "t", "alice", R)) == "Could not parse principal from `alice`"
    assert invalid_binding(acl(TOPIC, "t", "User:a", Operation.ANY)) == "ACL binding contains unknown elements"
    assert invalid_binding(acl(TOPIC, "t", "User:a", R, pattern=PatternType.MATCH)) is not None


def test_names_parse_like_kafka() -> None:
    assert Operation.parse("IdempotentWrite") is Operation.IDEMPOTENT_WRITE
    assert Operation.parse("idempotent_write") is Operation.IDEMPOTENT_WRITE
    assert Operation.parse("nope") is Operation.UNKNOWN
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.TRANSACTIONAL_ID.pascal == "TransactionalId"
    assert Operation.DESCRIBE_CONFIGS.pascal == "DescribeConfigs"
    assert ResourceType.of(99) is ResourceType.UNKNOWN
