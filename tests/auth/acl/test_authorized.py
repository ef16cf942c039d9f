"""AuthorizedOperations in the group-describe answers the sidecar gives itself (KIP-430).

First the pure computation (proxy/auth/acl/authorized.py, Kafka's
``AuthHelper.authorizedOperations``), then the three handlers that use it, called with a
plain ``Context`` over a real coordinator core and their answers encoded with our schemas.
Every bitfield is written out by hand from Kafka's operation codes: READ 3, WRITE 4,
CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12; a group supports READ, DESCRIBE, DELETE,
DESCRIBE_CONFIGS and ALTER_CONFIGS (``AclEntry.supportedOperations(GROUP)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
import trio

from coordinator.core import GroupCoordinator
from coordinator.errors import Code
from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.outcome import Response
from coordinator.share_group import DescribedShareGroup
from protocol.apis import (
    CONSUMER_GROUP_DESCRIBE,
    DEFAULT_REGISTRY,
    DESCRIBE_GROUPS,
    SHARE_GROUP_DESCRIBE,
)
from protocol.headers import RequestHeader
from protocol.schema import decode, encode
from proxy.auth.acl.authorized import authorized_operations, bitfield
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
from proxy.local import groups, shares
from proxy.local.api import Context, Later, LocalRequest, Respond
from proxy.local.ports import Ports
from tests.coordinator.support import CLIENT, join, make

GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
HOME = "10.0.0.1"
#: Every group operation: READ | DELETE | DESCRIBE | DESCRIBE_CONFIGS | ALTER_CONFIGS.
ALL_GROUP_OPS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
#: READ and the DESCRIBE it implies.
READ_DESCRIBE = (1 << 3) | (1 << 8)
#: Int.MinValue: not asked for.
OMITTED = -2147483648


def acl(name: str, op: Operation, *, principal: str = "User:alice", host: str = "*", deny: bool = False,
        prefixed: bool = False, rtype: ResourceType = GROUP) -> AclBinding:
    pattern = ResourcePattern(rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL)
    return AclBinding(pattern, AclEntry(principal, host, op, Permission.DENY if deny else Permission.ALLOW))


def authorizer(*bindings: AclBinding, **kw: Any) -> Authorizer:
    return Authorizer(AclIndex(bindings), **kw)


def alice_on(auth: Authorizer | None, group: str = "g", host: str = HOME) -> int:
    return authorized_operations(auth, "User:alice", host, GROUP, group)


# -- the computation -------------------------------------------------------------------------------


def test_the_hand_computed_constants() -> None:
    assert ALL_GROUP_OPS == 8 + 64 + 256 + 1024 + 2048 == 3400
    assert READ_DESCRIBE == 8 + 256 == 264


def test_without_an_authorizer_every_supported_operation() -> None:
    assert alice_on(None) == ALL_GROUP_OPS
    # The other resource types' sets, as Kafka's DescribeCluster and Metadata would report them.
    assert authorized_operations(None, "User:alice", HOME, TOPIC, "t") == (
        (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11))
    assert authorized_operations(None, "User:alice", HOME, CLUSTER, "kafka-cluster") == (
        (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12))


def test_an_allow_of_read_gives_read_and_the_describe_it_implies() -> None:
    assert alice_on(authorizer(acl("g", Operation.READ))) == (1 << 3) | (1 << 8)


def test_a_deny_of_delete_beside_an_allow_of_all_takes_delete_only() -> None:
    auth = authorizer(acl("g", Operation.ALL), acl("g", Operation.DELETE, deny=True))
    assert alice_on(auth) == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)
    # A DENY of Read does not take the Describe that ALL allows (a DENY implies nothing).
    auth = authorizer(acl("g", Operation.ALL), acl("g", Operation.READ, deny=True))
    assert alice_on(auth) == (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


def test_a_super_user_has_every_operation_without_any_acl() -> None:
    auth = authorizer(super_users=frozenset({"User:alice"}))
    assert alice_on(auth) == ALL_GROUP_OPS
    assert authorized_operations(auth, "User:bob", HOME, GROUP, "g") == 0


def test_each_implying_operation_brings_its_implied_one() -> None:
    assert alice_on(authorizer(acl("g", Operation.DELETE))) == (1 << 6) | (1 << 8)
    assert alice_on(authorizer(acl("g", Operation.ALTER_CONFIGS))) == (1 << 10) | (1 << 11)
    assert alice_on(authorizer(acl("g", Operation.DESCRIBE))) == 1 << 8
    # WRITE is no group operation, but an ALLOW of it implies DESCRIBE, which is.
    assert alice_on(authorizer(acl("g", Operation.WRITE))) == 1 << 8


def test_the_acls_that_apply_to_the_name_count_and_no_others() -> None:
    prefixed = authorizer(acl("app-", Operation.READ, prefixed=True))
    assert alice_on(prefixed, "app-1") == READ_DESCRIBE
    assert alice_on(prefixed, "web") == 0
    wildcard = authorizer(acl("*", Operation.DELETE))
    assert alice_on(wildcard, "anything") == (1 << 6) | (1 << 8)
    # Someone else's ACL, another host's ACL, an ACL on a topic of the same name: nothing.
    assert alice_on(authorizer(acl("g", Operation.ALL, principal="User:bob"))) == 0
    assert alice_on(authorizer(acl("g", Operation.ALL, host="10.0.0.9"))) == 0
    assert alice_on(authorizer(acl("g", Operation.ALL, host="10.0.0.9")), host="10.0.0.9") == ALL_GROUP_OPS
    assert alice_on(authorizer(acl("g", Operation.ALL, rtype=TOPIC))) == 0
    # allow.everyone.if.no.acl.found: a group no ACL applies to is open.
    assert alice_on(authorizer(acl("h", Operation.READ), allow_if_no_acl=True)) == ALL_GROUP_OPS


def test_bitfield_is_kafkas_to32bitfield() -> None:
    assert bitfield([]) == 0
    assert bitfield([Operation.READ, Operation.READ, Operation.DESCRIBE_TOKENS]) == (1 << 3) | (1 << 14)
    assert bitfield([Operation.ALL]) == 1 << 2


# -- the three answers -----------------------------------------------------------------------------


class Directory:
    """The ACL directory the handlers reach: only its authorizer."""

    def __init__(self, *bindings: AclBinding, enforcing: bool = True) -> None:
        self.authorizer = authorizer(*bindings)
        self.enforcing = enforcing


class CorePort:
    """A GroupPort over one core, answering at once."""

    def __init__(self, core: GroupCoordinator) -> None:
        self.core = core

    def run(self, call: Any, api: str = "", group_ids: tuple[str, ...] = ()) -> Response:
        step = call(self.core, 0)
        assert step.response is not None
        return cast(Response, step.response)


class SharesHere:
    """A SharePort whose only share group is ``s``, stable with no member."""

    async def load_groups(self, group_ids: Sequence[str]) -> None:
        pass

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedShareGroup, ...]:
        return tuple(DescribedShareGroup(group_id=g, group_state="Empty", group_epoch=1, assignment_epoch=1,
                                         assignor_name="simple") if g == "s" else
                     DescribedShareGroup(group_id=g, error=Code.GROUP_ID_NOT_FOUND,
                                         error_message=f"Group {g} not found.")
                     for g in group_ids)

    async def group_ids(self) -> list[tuple[str, str]]:
        return [("s", "Empty")]


def core_with_groups() -> GroupCoordinator:
    """A core with classic group ``g`` (Empty, a member id handed out) and KIP-848 group ``k``."""
    core = make()
    assert core.join_group(join("g"), CLIENT, 0).response is not None
    beat = ConsumerGroupHeartbeatRequest(version=1, group_id="k", member_id="m1", member_epoch=0,
                                         rebalance_timeout_ms=30_000, subscribed_topic_names=("t",),
                                         topic_partitions=())
    answered = core.consumer_group_heartbeat(beat, CLIENT, 0).response
    assert answered is not None and answered.error is Code.NONE
    return core


def ask(key: int, version: int, fields: dict[str, Any], *, directory: Directory | None,
        with_shares: bool = False) -> list[dict[str, Any]]:
    """The handler's answer to the request, encoded and decoded with our schemas: its groups."""
    ports = Ports(upstream=cast(Any, None), brokers=cast(Any, None), groups=cast(Any, CorePort(core_with_groups())),
                  acls=cast(Any, directory), shares=cast(Any, SharesHere()) if with_shares else None)
    context = Context(listener="PLAINTEXT", peer=(HOME, 5000), ports=ports, principal="User:alice")
    api = DEFAULT_REGISTRY.api(key)
    raw = encode(api.request, version, fields)
    header = RequestHeader(api_key=key, api_version=version, correlation_id=1, client_id="c", header_version=2,
                           size=0)
    handle = shares.HANDLERS[key] if key == SHARE_GROUP_DESCRIBE else groups.handler(groups.CALLS[key], api.name)
    answer = handle(LocalRequest(header=header, body=decode(api.request, version, raw), raw=raw), context)
    if isinstance(answer, Later):
        answer = trio.run(answer.answer)
    assert isinstance(answer, Respond) and isinstance(answer.body, dict)
    body = decode(api.response, version, encode(api.response, version, answer.body))
    return cast(list[dict[str, Any]], body["Groups"])


def operations(described: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    return {g["GroupId"]: (g["ErrorCode"], g["AuthorizedOperations"]) for g in described}


#: alice may Read every group whose name starts with a letter of ours.
READERS = Directory(*(acl(p, Operation.READ, prefixed=True) for p in ("g", "k", "s")))


@pytest.mark.parametrize("with_shares", [False, True], ids=["core-only", "with-share-groups"])
def test_describe_groups_fills_what_is_answered_without_error(with_shares: bool) -> None:
    asked = {"Groups": ["g", "k", "unknown"], "IncludeAuthorizedOperations": True}
    # v6: the KIP-848 group and the unknown one are errors, without operations.
    assert operations(ask(DESCRIBE_GROUPS, 6, asked, directory=READERS, with_shares=with_shares)) == {
        "g": (0, READ_DESCRIBE), "k": (69, OMITTED), "unknown": (69, OMITTED)}
    # v5: both are Dead without an error, and Kafka fills those too ("unknown" has no ACL: 0).
    assert operations(ask(DESCRIBE_GROUPS, 5, asked, directory=READERS, with_shares=with_shares)) == {
        "g": (0, READ_DESCRIBE), "k": (0, READ_DESCRIBE), "unknown": (0, 0)}
    assert operations(ask(DESCRIBE_GROUPS, 6, asked, directory=None, with_shares=with_shares)) == {
        "g": (0, ALL_GROUP_OPS), "k": (69, OMITTED), "unknown": (69, OMITTED)}
    not_asked = {**asked, "IncludeAuthorizedOperations": False}
    assert operations(ask(DESCRIBE_GROUPS, 6, not_asked, directory=READERS, with_shares=with_shares)) == {
        "g": (0, OMITTED), "k": (69, OMITTED), "unknown": (69, OMITTED)}


def test_in_shadow_mode_the_acls_change_no_answer() -> None:
    """``sidecar.authorizer.mode=shadow`` refuses nothing, so a client is told it may do
    everything, as without ACLs (the regex resolution of KIP-848 likewise filters only when
    enforcing)."""
    shadow = Directory(*(acl(p, Operation.READ, prefixed=True) for p in ("g", "k", "s")), enforcing=False)
    asked = {"Groups": ["g"], "IncludeAuthorizedOperations": True}
    assert operations(ask(DESCRIBE_GROUPS, 6, asked, directory=shadow)) == {"g": (0, ALL_GROUP_OPS)}
    assert operations(ask(CONSUMER_GROUP_DESCRIBE, 1, {"GroupIds": ["k"], "IncludeAuthorizedOperations": True},
                          directory=shadow)) == {"k": (0, ALL_GROUP_OPS)}


def test_describe_groups_of_a_share_group_before_v6_is_dead_with_operations() -> None:
    asked = {"Groups": ["s"], "IncludeAuthorizedOperations": True}
    assert operations(ask(DESCRIBE_GROUPS, 5, asked, directory=READERS, with_shares=True)) == {"s": (0, READ_DESCRIBE)}
    assert operations(ask(DESCRIBE_GROUPS, 6, asked, directory=READERS, with_shares=True)) == {"s": (69, OMITTED)}


def test_consumer_group_describe_fills_what_is_answered_without_error() -> None:
    asked = {"GroupIds": ["k", "g"], "IncludeAuthorizedOperations": True}
    for version in (0, 1):
        assert operations(ask(CONSUMER_GROUP_DESCRIBE, version, asked, directory=READERS)) == {
            "k": (0, READ_DESCRIBE), "g": (69, OMITTED)}
    deny_delete = Directory(acl("k", Operation.ALL), acl("k", Operation.DELETE, deny=True))
    assert operations(ask(CONSUMER_GROUP_DESCRIBE, 1, asked, directory=deny_delete)) == {
        "k": (0, (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)), "g": (69, OMITTED)}
    assert operations(ask(CONSUMER_GROUP_DESCRIBE, 1, asked, directory=None)) == {
        "k": (0, ALL_GROUP_OPS), "g": (69, OMITTED)}
    not_asked = {**asked, "IncludeAuthorizedOperations": False}
    assert operations(ask(CONSUMER_GROUP_DESCRIBE, 1, not_asked, directory=READERS)) == {
        "k": (0, OMITTED), "g": (69, OMITTED)}


def test_share_group_describe_fills_what_is_answered_without_error() -> None:
    asked = {"GroupIds": ["s", "nope"], "IncludeAuthorizedOperations": True}
    assert operations(ask(SHARE_GROUP_DESCRIBE, 1, asked, directory=READERS, with_shares=True)) == {
        "s": (0, READ_DESCRIBE), "nope": (69, OMITTED)}
    assert operations(ask(SHARE_GROUP_DESCRIBE, 1, asked, directory=None, with_shares=True)) == {
        "s": (0, ALL_GROUP_OPS), "nope": (69, OMITTED)}
    not_asked = {**asked, "IncludeAuthorizedOperations": False}
    assert operations(ask(SHARE_GROUP_DESCRIBE, 1, not_asked, directory=READERS, with_shares=True)) == {
        "s": (0, OMITTED), "nope": (69, OMITTED)}
