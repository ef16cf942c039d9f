"""The converters against the real schemas: every version decodes into the typed request
and every typed response encodes, with the version-dependent shapes worked out by hand."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from coordinator.errors import Code
from coordinator.messages import (
    CommitPartition,
    CommitTopic,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    Coordinator,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchedPartition,
    FetchedTopic,
    FetchGroupResult,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResult,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    NamedTopicPartitions,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionError,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicErrors,
    TopicPartitions,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from protocol.apis import ApiRegistry
from protocol.schema import decode, encode, struct_defaults

REGISTRY = ApiRegistry()
T = UUID(int=5)


def request(key: int, version: int, **fields: Any) -> Any:
    """Encode a request body with ``fields`` over the defaults, and decode it again."""
    api = REGISTRY.api(key)
    body = dict(struct_defaults(api.request.fields, version))
    body.update({k: v for k, v in fields.items() if k in body})
    return decode(api.request, version, encode(api.request, version, body))


def response(key: int, version: int, wire: dict[str, Any]) -> Any:
    api = REGISTRY.api(key)
    return decode(api.response, version, encode(api.response, version, wire))


def versions(key: int) -> list[int]:
    v = REGISTRY.api(key).versions
    return list(range(v.lo, (v.hi if v.hi is not None else v.lo) + 1))


@pytest.mark.parametrize("version", versions(11))
def test_join_group(version: int) -> None:
    body = request(11, version, GroupId="g", SessionTimeoutMs=10_000, RebalanceTimeoutMs=20_000,
                   MemberId="m", GroupInstanceId="i", ProtocolType="consumer",
                   Protocols=[{"Name": "range", "Metadata": b"x"}], Reason="r")
    req = JoinGroupRequest.from_wire(version, body)
    assert req.rebalance_timeout_ms == (10_000 if version == 0 else 20_000)
    assert req.group_instance_id == ("i" if version >= 5 else None)
    assert req.protocols[0].metadata == b"x"
    resp = JoinGroupResponse(generation_id=3, protocol_type="consumer", protocol_name=None, leader="m",
                             member_id="m", members=(JoinMember(member_id="m", group_instance_id=None,
                                                                metadata=b"x"),))
    out = response(11, version, resp.to_wire(version))
    assert out["ProtocolName"] == (None if version >= 7 else "")


@pytest.mark.parametrize("version", versions(14))
def test_sync_group(version: int) -> None:
    body = request(14, version, GroupId="g", GenerationId=2, MemberId="m", ProtocolName="range",
                   Assignments=[{"MemberId": "m", "Assignment": b"a"}])
    req = SyncGroupRequest.from_wire(version, body)
    assert req.assignments[0].assignment == b"a"
    assert req.protocol_name == ("range" if version >= 5 else None)
    out = response(14, version, SyncGroupResponse(assignment=b"a", protocol_type="consumer",
                                                  protocol_name="range").to_wire(version))
    assert out["Assignment"] == b"a"


@pytest.mark.parametrize("version", versions(12))
def test_heartbeat(version: int) -> None:
    req = HeartbeatRequest.from_wire(version, request(12, version, GroupId="g", GenerationId=1, MemberId="m"))
    assert (req.group_id, req.generation_id, req.member_id) == ("g", 1, "m")
    assert response(12, version, HeartbeatResponse(error=Code.REBALANCE_IN_PROGRESS).to_wire(version))[
        "ErrorCode"] == 27


@pytest.mark.parametrize("version", versions(13))
def test_leave_group(version: int) -> None:
    body = request(13, version, GroupId="g", MemberId="m",
                   Members=[{"MemberId": "a", "GroupInstanceId": None}, {"MemberId": "", "GroupInstanceId": "i"}])
    req = LeaveGroupRequest.from_wire(version, body)
    assert [m.member_id for m in req.members] == (["m"] if version < 3 else ["a", ""])
    resp = LeaveGroupResponse(members=(LeaveMemberResult(member_id="a", group_instance_id=None,
                                                         error=Code.UNKNOWN_MEMBER_ID),))
    out = response(13, version, resp.to_wire(version))
    assert out["ErrorCode"] == (25 if version < 3 else 0)


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit(version: int) -> None:
    body = request(8, version, GroupId="g", GenerationIdOrMemberEpoch=4, MemberId="m",
                   Topics=[{"Name": "t", "TopicId": T, "Partitions": [
                       {"PartitionIndex": 1, "CommittedOffset": 9, "CommittedLeaderEpoch": 2,
                        "CommitTimestamp": -1, "CommittedMetadata": None}]}])
    req = OffsetCommitRequest.from_wire(version, body)
    assert req.generation_id_or_member_epoch == (-1 if version == 0 else 4)
    topic = req.topics[0]
    assert (topic.name, topic.topic_id) == (("t", UUID(int=0)) if version < 10 else ("", T))
    assert topic.partitions[0] == CommitPartition(partition=1, offset=9, leader_epoch=2 if version >= 6 else -1,
                                                  metadata=None)
    resp = OffsetCommitResponse(topics=(TopicErrors(name=topic.name, topic_id=topic.topic_id,
                                                    partitions=(PartitionError(partition=1),)),))
    assert response(8, version, resp.to_wire(version))["Topics"][0]["Partitions"][0]["PartitionIndex"] == 1
    assert CommitTopic(name="t").partitions == ()


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch(version: int) -> None:
    body = request(9, version, GroupId="g", Topics=None if version >= 2 else [],
                   Groups=[{"GroupId": "a", "MemberId": None, "MemberEpoch": -1, "Topics": None},
                           {"GroupId": "b", "MemberId": "m", "MemberEpoch": 3,
                            "Topics": [{"Name": "t", "TopicId": T, "PartitionIndexes": [0]}]}])
    req = OffsetFetchRequest.from_wire(version, body)
    if version < 8:
        assert [g.group_id for g in req.groups] == ["g"]
        assert req.groups[0].topics == (None if version >= 2 else ())
    else:
        assert [g.group_id for g in req.groups] == ["a", "b"]
        assert req.groups[0].topics is None
        assert req.groups[1].member_epoch == (3 if version >= 9 else -1)
    resp = OffsetFetchResponse(groups=tuple(
        FetchGroupResult(group_id=g.group_id, error=Code.COORDINATOR_LOAD_IN_PROGRESS, topics=(FetchedTopic(
            name="t", topic_id=T, partitions=(FetchedPartition(partition=0, offset=5),)),)) for g in req.groups))
    out = response(9, version, resp.to_wire(version))
    if version < 2:
        # No group-level error field: the error travels on every partition.
        assert out["Topics"][0]["Partitions"][0]["ErrorCode"] == 14
    elif version < 8:
        assert out["ErrorCode"] == 14
    else:
        assert [g["ErrorCode"] for g in out["Groups"]] == [14, 14]


def test_offset_delete_and_txn() -> None:
    req = OffsetDeleteRequest.from_wire(0, request(47, 0, GroupId="g", Topics=[
        {"Name": "t", "Partitions": [{"PartitionIndex": 2}]}]))
    assert req.topics[0].partitions == (2,)
    out = OffsetDeleteResponse(topics=(TopicErrors(name="t", partitions=(
        PartitionError(partition=2, error=Code.GROUP_SUBSCRIBED_TO_TOPIC),)),))
    assert response(47, 0, out.to_wire(0))["Topics"][0]["Partitions"][0]["ErrorCode"] == 86
    for version in versions(28):
        txn = TxnOffsetCommitRequest.from_wire(version, request(28, version, GroupId="g", TransactionalId="x", Topics=[
            {"Name": "t", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 1,
                                          "CommittedMetadata": ""}]}]))
        resp = TxnOffsetCommitResponse(topics=(TopicErrors(name="t", partitions=(PartitionError(partition=0),)),))
        assert txn.topics[0].partitions == (0,)
        response(28, version, resp.to_wire(version))


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator(version: int) -> None:
    req = FindCoordinatorRequest.from_wire(version, request(10, version, Key="g", CoordinatorKeys=["a", "b"]))
    assert req.keys == (("g",) if version < 4 else ("a", "b"))
    resp = FindCoordinatorResponse(coordinators=tuple(Coordinator(key=k, node_id=1, host="h", port=2)
                                                      for k in req.keys))
    out = response(10, version, resp.to_wire(version))
    assert (out["NodeId"] if version < 4 else out["Coordinators"][1]["NodeId"]) == 1


@pytest.mark.parametrize("version", versions(16))
def test_list_groups(version: int) -> None:
    req = ListGroupsRequest.from_wire(version, request(16, version, StatesFilter=["Stable"], TypesFilter=["consumer"]))
    assert req.states_filter == (("Stable",) if version >= 4 else ())
    out = response(16, version, ListGroupsResponse(groups=(ListedGroup(
        group_id="g", protocol_type="consumer", group_state="Stable", group_type="classic"),)).to_wire(version))
    assert out["Groups"][0]["GroupId"] == "g"


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups(version: int) -> None:
    req = DescribeGroupsRequest.from_wire(version, request(15, version, Groups=["g", "x"]))
    assert req.groups == ("g", "x")
    resp = DescribeGroupsResponse(groups=(
        DescribedGroup(group_id="g", group_state="Stable", protocol_type="consumer", protocol_data="range",
                       members=(DescribedMember(member_id="m", group_instance_id=None, client_id="c",
                                                client_host="/h", metadata=b"x", assignment=b"y"),)),
        DescribedGroup(group_id="x", error=Code.GROUP_ID_NOT_FOUND, error_message="Group x not found.")))
    out = response(15, version, resp.to_wire(version))
    assert out["Groups"][0]["Members"][0]["MemberAssignment"] == b"y"
    assert (out["Groups"][1]["ErrorCode"], out["Groups"][1]["GroupState"]) == (
        (69, "") if version >= 6 else (0, "Dead"))


@pytest.mark.parametrize("version", [v for v in versions(15) if v >= 3])
def test_describe_groups_authorized_operations(version: int) -> None:
    resp = DescribeGroupsResponse(groups=(
        DescribedGroup(group_id="g", group_state="Empty"),
        DescribedGroup(group_id="x", error=Code.GROUP_ID_NOT_FOUND, error_message="Group x not found."),
        DescribedGroup(group_id="n", error=Code.NOT_COORDINATOR)))
    ops = {"g": 264, "x": 3400, "n": 8}
    assert [g["AuthorizedOperations"] for g in response(15, version, resp.to_wire(version))["Groups"]] == [
        -2147483648] * 3
    filled = response(15, version, resp.with_authorized_operations(version, ops.__getitem__).to_wire(version))
    # Before v6 the unknown group is Dead without an error, and Kafka fills it too.
    assert [(g["ErrorCode"], g["AuthorizedOperations"]) for g in filled["Groups"]] == [
        (0, 264), (0, 3400) if version < 6 else (69, -2147483648), (16, -2147483648)]


def test_delete_groups() -> None:
    for version in versions(42):
        req = DeleteGroupsRequest.from_wire(version, request(42, version, GroupsNames=["a"]))
        assert req.groups == ("a",)
        out = response(42, version, DeleteGroupsResponse(results=(("a", Code.NON_EMPTY_GROUP),)).to_wire(version))
        assert out["Results"][0]["ErrorCode"] == 68


@pytest.mark.parametrize("version", versions(68))
def test_consumer_group_heartbeat(version: int) -> None:
    body = request(68, version, GroupId="g", MemberId="m", MemberEpoch=0, RebalanceTimeoutMs=300,
                   SubscribedTopicNames=["t"], SubscribedTopicRegex="t.*", ServerAssignor=None,
                   TopicPartitions=[{"TopicId": T, "Partitions": [1]}])
    req = ConsumerGroupHeartbeatRequest.from_wire(version, body)
    assert req.subscribed_topic_names == ("t",)
    assert req.subscribed_topic_regex == ("t.*" if version >= 1 else None)
    assert req.topic_partitions == (TopicPartitions(topic_id=T, partitions=(1,)),)
    nulls = ConsumerGroupHeartbeatRequest.from_wire(version, request(68, version))
    assert nulls.subscribed_topic_names is None and nulls.topic_partitions is None
    resp = ConsumerGroupHeartbeatResponse(member_id="m", member_epoch=2, heartbeat_interval_ms=5_000,
                                          assignment=(TopicPartitions(topic_id=T, partitions=(0, 1)),))
    out = response(68, version, resp.to_wire(version))
    assert out["Assignment"]["TopicPartitions"][0]["Partitions"] == [0, 1]
    assert response(68, version, ConsumerGroupHeartbeatResponse().to_wire(version))["Assignment"] is None


@pytest.mark.parametrize("version", versions(69))
def test_consumer_group_describe(version: int) -> None:
    req = ConsumerGroupDescribeRequest.from_wire(version, request(69, version, GroupIds=["g"]))
    assert req.group_ids == ("g",)
    part = NamedTopicPartitions(topic_id=T, topic_name="t", partitions=(0,))
    resp = ConsumerGroupDescribeResponse(groups=(DescribedConsumerGroup(
        group_id="g", group_state="Stable", group_epoch=2, assignment_epoch=2, assignor_name="uniform",
        members=(DescribedConsumerMember(member_id="m", instance_id=None, rack_id=None, member_epoch=2,
                                         client_id="c", client_host="/h", subscribed_topic_names=("t",),
                                         subscribed_topic_regex=None, assignment=(part,),
                                         target_assignment=(part,)),)),))
    out = response(69, version, resp.to_wire(version))
    assert out["Groups"][0]["Members"][0]["Assignment"]["TopicPartitions"][0]["TopicName"] == "t"
    assert out["Groups"][0]["AuthorizedOperations"] == -2147483648
    two = ConsumerGroupDescribeResponse(groups=(resp.groups[0], DescribedConsumerGroup(
        group_id="x", error=Code.GROUP_ID_NOT_FOUND, error_message="Group x not found.")))
    filled = response(69, version, two.with_authorized_operations({"g": 264, "x": 3400}.__getitem__).to_wire(version))
    assert [(g["ErrorCode"], g["AuthorizedOperations"]) for g in filled["Groups"]] == [(0, 264), (69, -2147483648)]
