"""The evaluator against a small reference model written from Kafka's documentation.

The reference follows the prose of Kafka's security documentation ("Authorization and
ACLs", ``docs/security.html``) and the ``AclOperation`` javadoc, not the evaluator's code:

* "By default, if no ResourcePatterns match a specific Resource R, then R has no
  associated ACLs, and therefore no one other than super users is allowed to access R";
  ``allow.everyone.if.no.acl.found=true`` changes that;
* a pattern matches a resource when it is the literal name, the literal wildcard ``*``, or
  (PREFIXED) a prefix of the name;
* principals match by name or ``User:*``; hosts by address or ``*``;
* deny takes precedence over allow;
* "READ, WRITE, DELETE, ALTER implies DESCRIBE"; "ALTER_CONFIGS implies DESCRIBE_CONFIGS";
  ALL is every operation.

It is a brute-force scan over the ACL list with no index, no cache and no early return.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.auth.acl.evaluate import AclIndex, Authorizer
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID]
NAMES = ["a", "ab", "abc", "b", "ba", "*", ""]
PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:alice"]
HOSTS = ["10.0.0.1", "10.0.0.2", "*"]
CONCRETE_OPS = [op for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)]
ASKED_OPS = [op for op in CONCRETE_OPS if op is not Operation.ALL]

IMPLIERS = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}


def reference(acls: list[AclBinding], super_users: set[str], allow_everyone: bool,
              principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
    """Kafka's documented rules, by brute force."""
    if principal in super_users:
        return True

    def pattern_matches(pattern: ResourcePattern) -> bool:
        if pattern.resource_type != rtype:
            return False
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (name, "*")
        return name[: len(pattern.name)] == pattern.name

    on_resource = [b for b in acls if pattern_matches(b.pattern)]
    if not on_resource:
        return allow_everyone

    def applies_to_me(entry: AclEntry) -> bool:
        return entry.principal in (principal, "User:*") and entry.host in (host, "*")

    denied = any(applies_to_me(b.entry) and b.entry.permission == Permission.DENY
                 and b.entry.operation in (op, Operation.ALL) for b in on_resource)
    allowed = any(applies_to_me(b.entry) and b.entry.permission == Permission.ALLOW
                  and (b.entry.operation in (op, Operation.ALL) or b.entry.operation in IMPLIERS.get(op, set()))
                  for b in on_resource)
    return allowed and not denied


bindings = st.builds(
    lambda rtype, name, ptype, principal, host, op, perm: AclBinding(
        ResourcePattern(rtype, name, ptype), AclEntry(principal, host, op, perm)),
    st.sampled_from(TYPES), st.sampled_from(NAMES), st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(CONCRETE_OPS),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
)

questions = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:carol", "Group:alice"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    st.sampled_from(ASKED_OPS),
    st.sampled_from(TYPES),
    st.sampled_from(["a", "ab", "abc", "abcd", "b", "ba", "c", "*"]),
)


@given(
    acls=st.lists(bindings, max_size=12),
    super_users=st.sets(st.sampled_from(["User:alice", "User:carol"]), max_size=1),
    allow_everyone=st.booleans(),
    asked=st.lists(questions, min_size=1, max_size=20),
)
def test_evaluator_agrees_with_reference(acls: list[AclBinding], super_users: set[str], allow_everyone: bool,
                                         asked: list[tuple[str, str, Operation, ResourceType, str]]) -> None:
    authorizer = Authorizer(AclIndex(acls), super_users=frozenset(super_users), allow_if_no_acl=allow_everyone)
    for question in asked:
        expected = reference(acls, super_users, allow_everyone, *question)
        assert authorizer.authorize(*question) is expected, (question, acls)
        # Asked again (now from the cache), the answer is the same.
        assert authorizer.authorize(*question) is expected
