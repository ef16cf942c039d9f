"""The group APIs, answered by the embedded coordinator (``sidecar.coordinator=embedded``).

Each API is a thin adapter: the connection decodes the body with the API's schema, the
request becomes the coordinator's typed request (``XRequest.from_wire``), the core is
called through the :class:`~proxy.local.ports.GroupPort`, and its typed answer is encoded
(``to_wire``). An answer the core holds back (a JoinGroup parked for its rebalance, a
SyncGroup waiting for the leader, an OffsetCommit waiting for ZooKeeper) becomes an
answer-later: the pump reads on, and the slot is filled when the core answers.

FindCoordinator is taken only for group keys (KeyType 0); transaction coordinators are
the broker's, and such a request is forwarded (and its answer's address rewritten).

DescribeGroups (v3+) and ConsumerGroupDescribe that ask for ``IncludeAuthorizedOperations``
get each group's AuthorizedOperations filled after the core answers, as Kafka's
``KafkaApis`` fills them around its coordinator (:func:`proxy.local.acls.group_operations`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.core import SERVED_API_VERSIONS, GroupCoordinator
from coordinator.errors import Code
from coordinator.features import GATED_APIS
from coordinator.messages.admin import (
    KEY_TYPE_GROUP,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    ListGroupsRequest,
)
from coordinator.messages.classic import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from coordinator.messages.common import Client
from coordinator.messages.consumer import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator.messages.offsets import (
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)
from coordinator.outcome import Response, Step
from protocol.apis import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    ApiRegistry,
)
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from proxy.local import shares as shares_api
from proxy.local.acls import group_operations
from proxy.local.api import Answer, Context, Handler, Later, LocalApi, LocalRequest, Respond, Takes
from proxy.local.ports import GroupPort, Pending, SharePort

#: Builds the core call for one decoded request: ``(request, context) -> (core, now) -> Step``,
#: naming the groups the request is about.
CallFor = Callable[[LocalRequest, Context], "CoreCall"]


def _client(request: LocalRequest, context: Context) -> Client:
    return Client(client_id=request.header.client_id or "", client_host=f"/{context.peer[0]}",
                  principal=context.principal)


def _body(request: LocalRequest) -> Any:
    assert request.body is not None
    return request.body


def _find(request: LocalRequest, context: Context) -> CoreCall:
    req = FindCoordinatorRequest.from_wire(request.version, _body(request))
    groups = _port(context)
    node_id, host, port = groups.coordinator_address(context.listener)
    listener = context.listener
    return CoreCall((), lambda core, now: core.find_coordinator(req, node_id=node_id, host=host, port=port,
                                                                listener=listener))


def _join(request: LocalRequest, context: Context) -> CoreCall:
    req = JoinGroupRequest.from_wire(request.version, _body(request))
    client = _client(request, context)
    return CoreCall(group_ids_of(req), lambda core, now: core.join_group(req, client, now))


def _consumer_heartbeat(request: LocalRequest, context: Context) -> CoreCall:
    req = ConsumerGroupHeartbeatRequest.from_wire(request.version, _body(request))
    client = _client(request, context)
    subscribes = req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None
    port = _port(context)

    def call(core: GroupCoordinator, now: int) -> Step[ConsumerGroupHeartbeatResponse]:
        answer = core.consumer_group_heartbeat(req, client, now)
        # Once the core holds the subscription (a call may wait for its group's claim), so
        # that the refresh this asks for sees it.
        if subscribes:
            port.subscriptions_changed()
        return answer

    return CoreCall(group_ids_of(req), call)


def _describe_groups(request: LocalRequest, context: Context) -> CoreCall:
    req = DescribeGroupsRequest.from_wire(request.version, _body(request))
    version = request.version

    def finish(response: DescribeGroupsResponse) -> DescribeGroupsResponse:
        return response.with_authorized_operations(version, group_operations(context))

    return CoreCall(group_ids_of(req), lambda core, now: core.describe_groups(req),
                    finish if req.include_authorized_operations else None)


def _consumer_group_describe(request: LocalRequest, context: Context) -> CoreCall:
    req = ConsumerGroupDescribeRequest.from_wire(request.version, _body(request))

    def finish(response: ConsumerGroupDescribeResponse) -> ConsumerGroupDescribeResponse:
        return response.with_authorized_operations(group_operations(context))

    return CoreCall(group_ids_of(req), lambda core, now: core.consumer_group_describe(req),
                    finish if req.include_authorized_operations else None)


def _simple(parse: Callable[[int, Any], Any], call: Callable[[GroupCoordinator, Any, int], Step[Any]]) -> CallFor:
    """A request that becomes one core call: ``parse(version, body)`` gives the typed request,
    ``call(core, request, now)`` asks the core."""

    def call_for(request: LocalRequest, context: Context) -> CoreCall:
        req = parse(request.version, _body(request))
        return CoreCall(group_ids_of(req), lambda core, now: call(core, req, now))

    return call_for


#: API key -> how its request becomes a core call.
CALLS: dict[int, CallFor] = {
    OFFSET_COMMIT: _simple(OffsetCommitRequest.from_wire, lambda core, req, now: core.offset_commit(req, now)),
    OFFSET_FETCH: _simple(OffsetFetchRequest.from_wire, lambda core, req, now: core.offset_fetch(req)),
    FIND_COORDINATOR: _find,
    JOIN_GROUP: _join,
    HEARTBEAT: _simple(HeartbeatRequest.from_wire, lambda core, req, now: core.heartbeat(req, now)),
    LEAVE_GROUP: _simple(LeaveGroupRequest.from_wire, lambda core, req, now: core.leave_group(req, now)),
    SYNC_GROUP: _simple(SyncGroupRequest.from_wire, lambda core, req, now: core.sync_group(req, now)),
    DESCRIBE_GROUPS: _describe_groups,
    LIST_GROUPS: _simple(ListGroupsRequest.from_wire, lambda core, req, now: core.list_groups(req)),
    TXN_OFFSET_COMMIT: _simple(TxnOffsetCommitRequest.from_wire,
                               lambda core, req, now: core.txn_offset_commit(req)),
    DELETE_GROUPS: _simple(DeleteGroupsRequest.from_wire, lambda core, req, now: core.delete_groups(req, now)),
    OFFSET_DELETE: _simple(OffsetDeleteRequest.from_wire, lambda core, req, now: core.offset_delete(req)),
    CONSUMER_GROUP_HEARTBEAT: _consumer_heartbeat,
    CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
}


@dataclass(frozen=True, slots=True)
class CoreCall:
    """A core call that names the groups its request is about (``group_ids``), so that in a
    fleet the shell can hold it until this sidecar has claimed them (docs/coordinator.md)."""

    group_ids: tuple[str, ...]
    fn: Callable[[GroupCoordinator, int], Step[Any]]
    #: What the handler makes of the core's answer before encoding it (the describe
    #: answers' AuthorizedOperations), ``None``: the answer as it is.
    finish: Callable[[Any], Response] | None = None

    def __call__(self, core: GroupCoordinator, now: int) -> Step[Any]:
        return self.fn(core, now)

    def finished(self, response: Response) -> Response:
        """The core's ``response`` as the client gets it."""
        return response if self.finish is None else self.finish(response)


def group_ids_of(request: Any) -> tuple[str, ...]:
    """The group ids a typed group request is about (none for FindCoordinator and ListGroups)."""
    if isinstance(request, FindCoordinatorRequest | ListGroupsRequest):
        return ()
    if isinstance(request, OffsetFetchRequest):
        return tuple(g.group_id for g in request.groups)
    if isinstance(request, DescribeGroupsRequest | DeleteGroupsRequest):
        return tuple(request.groups)
    if isinstance(request, ConsumerGroupDescribeRequest):
        return tuple(request.group_ids)
    group_id = getattr(request, "group_id", None)
    return (group_id,) if isinstance(group_id, str) else ()


def _port(context: Context) -> GroupPort:
    groups = context.ports.groups
    assert groups is not None, "group APIs are in the table only when the coordinator is embedded"
    return groups


def handler(call_for: CallFor, api: str) -> Handler:
    """The local-API handler of one group API (``api``: its name, for metrics)."""

    def handle(request: LocalRequest, context: Context) -> Answer:
        version = request.version
        refusal = _gated_off(request, context)
        if refusal is not None:
            return Respond(body=refusal)
        shares = context.ports.shares
        if shares is not None and request.api_key in (LIST_GROUPS, DELETE_GROUPS, DESCRIBE_GROUPS):
            return _with_share_groups(request, context, shares, api)
        call = call_for(request, context)
        outcome = _port(context).run(call, api, call.group_ids)
        if not isinstance(outcome, Pending):
            return Respond(body=call.finished(outcome).to_wire(version))
        pending: Pending[Response] = outcome

        async def answer() -> Respond:
            response = await pending.wait()
            return Respond(body=call.finished(response).to_wire(version))

        return Later(answer=answer)

    return handle


def _with_share_groups(request: LocalRequest, context: Context, shares: SharePort, api: str) -> Answer:
    """ListGroups, DescribeGroups and DeleteGroups over every group type: the core's groups
    and the share groups (:mod:`proxy.local.shares`). DescribeGroups describes classic groups
    only: a share group is GROUP_ID_NOT_FOUND "is not a classic group" (``Dead`` before v6),
    as Kafka 4.3 answers."""
    version = request.version
    port = _port(context)

    async def core_answer(call: CoreCall) -> Any:
        outcome = port.run(call, api, call.group_ids)
        return await outcome.wait() if isinstance(outcome, Pending) else outcome

    if request.api_key == LIST_GROUPS:
        req = ListGroupsRequest.from_wire(version, _body(request))

        async def listed() -> Respond:
            answer = await core_answer(CoreCall((), lambda core, now: core.list_groups(req)))
            return Respond(body=(await shares_api.list_groups(shares, req, answer)).to_wire(version))

        return Later(answer=listed)
    if request.api_key == DESCRIBE_GROUPS:
        describe = _describe_groups(request, context)

        async def described() -> Respond:
            answer = await core_answer(describe)
            ours = await shares_api.share_group_ids(shares, describe.group_ids)
            groups = tuple(DescribedGroup(group_id=g.group_id, error=Code.GROUP_ID_NOT_FOUND,
                                          error_message=f"Group {g.group_id} is not a classic group.")
                           if g.group_id in ours else g for g in answer.groups)
            return Respond(body=describe.finished(DescribeGroupsResponse(groups=groups)).to_wire(version))

        return Later(answer=described)
    delete = DeleteGroupsRequest.from_wire(version, _body(request))

    async def deleted() -> Respond:
        ours = await shares_api.share_group_ids(shares, delete.groups)
        results: dict[str, Code] = {}
        for group_id in ours:
            code, _ = await shares.delete_group(group_id)
            results[group_id] = Code(code)
        rest = DeleteGroupsRequest(groups=tuple(g for g in delete.groups if g not in ours))
        if rest.groups:
            answer = await core_answer(CoreCall(rest.groups, lambda core, now: core.delete_groups(rest, now)))
            results.update(dict(answer.results))
        return Respond(body=DeleteGroupsResponse(results=tuple((g, results[g]) for g in delete.groups)).to_wire(version))

    return Later(answer=deleted)


def _gated_off(request: LocalRequest, context: Context) -> dict[str, Any] | None:
    """UNSUPPORTED_VERSION while the API's feature is finalized below its level (KIP-584:
    ``group.version`` < 1 keeps KIP-848 off); read per request, so an upgrade needs no restart."""
    gate = GATED_APIS.get(request.api_key)
    features = context.ports.features
    if gate is None or features is None or request.api_key not in features.snapshot.disabled_keys():
        return None
    name, level = gate
    message = (f"{name} is finalized at level {features.snapshot.level(name)}; this API needs level "
               f"{level} (kafka-features upgrade --feature {name}={level})")
    if request.api_key == CONSUMER_GROUP_DESCRIBE:
        return {"ThrottleTimeMs": 0, "Groups": [
            {"GroupId": group, "ErrorCode": ErrorCode.UNSUPPORTED_VERSION, "ErrorMessage": message}
            for group in _body(request)["GroupIds"]]}
    return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.UNSUPPORTED_VERSION, "ErrorMessage": message}


def _group_keys_only(registry: ApiRegistry) -> Takes:
    """FindCoordinator is ours for groups; a transaction coordinator is the broker's."""

    def takes(header: RequestHeader, body: Mapping[str, Any] | None, context: Context) -> bool:
        if body is None:  # a version we do not know ("unsupported"), or unreadable (closed)
            return True
        return int(body.get("KeyType", KEY_TYPE_GROUP) or 0) == KEY_TYPE_GROUP

    return takes


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The table entries of every group API the embedded coordinator serves."""
    out = []
    for key, call_for in CALLS.items():
        api = registry.api(key)
        served = SERVED_API_VERSIONS.get(key)
        if served is None:  # TxnOffsetCommit: answered (refused) at every version we parse
            assert api.versions.hi is not None
            served = (api.versions.lo, api.versions.hi)
        out.append(LocalApi(
            key=key, name=api.name, versions=served, handler=handler(call_for, api.name),
            takes=_group_keys_only(registry) if key == FIND_COORDINATOR else None,
        ))
    return out
