"""The share-group APIs (KIP-932), answered by the embedded coordinator.

ShareGroupHeartbeat and ShareGroupDescribe reach the membership core, ShareFetch and
ShareAcknowledge the share-partitions, all through the :class:`~proxy.local.ports.SharePort`
(:class:`proxy.control.shares.ShareService`). While ``share.version`` is finalized below 1
every one of them is answered UNSUPPORTED_VERSION, as Kafka answers them with share groups
off, and ApiVersions does not advertise them (:data:`coordinator.features.GATED_APIS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from coordinator.errors import Code
from coordinator.features import GATED_APIS
from coordinator.messages.admin import (
    AUTHORIZED_OPERATIONS_OMITTED,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from coordinator.messages.common import Client
from coordinator.share_group import ShareGroupHeartbeatRequest
from protocol.apis import (
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
    ApiRegistry,
)
from protocol.errors import ErrorCode
from proxy.local.acls import group_operations
from proxy.local.api import Answer, Context, Handler, Later, LocalApi, LocalRequest, Respond
from proxy.local.ports import SharePort

#: The versions served: the newest of the pinned Kafka (4.3).
SERVED_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    SHARE_GROUP_HEARTBEAT: (1, 1),
    SHARE_GROUP_DESCRIBE: (1, 1),
    SHARE_FETCH: (1, 2),
    SHARE_ACKNOWLEDGE: (1, 2),
}


#: The client id prefix of a share request one sidecar passed to another: the receiver
#: serves it (two views of the fleet that disagree for a moment pass nothing back and forth).
PASSED = "ksidecar-passed:"
#: ``Context.extra`` key: this connection's end is already hooked.
_SESSIONS_HERE = "share_sessions"


def _port(context: Context) -> SharePort:
    shares = context.ports.shares
    assert shares is not None, "share APIs are in the table only when the coordinator is embedded"
    return shares


def _body(request: LocalRequest) -> Mapping[str, Any]:
    assert request.body is not None
    return request.body


def _gated_off(request: LocalRequest, context: Context) -> dict[str, Any] | None:
    """UNSUPPORTED_VERSION while ``share.version`` is below 1 (read per request)."""
    features = context.ports.features
    if features is None or request.api_key not in features.snapshot.disabled_keys():
        return None
    name, level = GATED_APIS[request.api_key]
    message = (f"{name} is finalized at level {features.snapshot.level(name)}; share groups need level "
               f"{level} (ksidecar features upgrade --feature {name}={level})")
    if request.api_key == SHARE_GROUP_DESCRIBE:
        return {"ThrottleTimeMs": 0, "Groups": [
            {"GroupId": group, "ErrorCode": ErrorCode.UNSUPPORTED_VERSION, "ErrorMessage": message,
             "GroupState": "", "GroupEpoch": 0, "AssignmentEpoch": 0, "AssignorName": "", "Members": [],
             "AuthorizedOperations": AUTHORIZED_OPERATIONS_OMITTED}
            for group in _body(request)["GroupIds"]]}
    answer: dict[str, Any] = {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.UNSUPPORTED_VERSION, "ErrorMessage": message}
    if request.api_key == SHARE_GROUP_HEARTBEAT:
        answer.update(MemberId=None, MemberEpoch=0, HeartbeatIntervalMs=0, Assignment=None)
    elif request.api_key == DESCRIBE_SHARE_GROUP_OFFSETS:
        return {"ThrottleTimeMs": 0, "Groups": [
            {"GroupId": g["GroupId"], "Topics": [], "ErrorCode": ErrorCode.UNSUPPORTED_VERSION, "ErrorMessage": message}
            for g in _body(request)["Groups"]]}
    else:
        answer.update(Responses=[], NodeEndpoints=[])
        if request.api_key == SHARE_FETCH:
            answer["AcquisitionLockTimeoutMs"] = 0
    return answer


def _heartbeat(request: LocalRequest, context: Context) -> Answer:
    req = ShareGroupHeartbeatRequest.from_wire(request.version, _body(request))
    client = Client(client_id=request.header.client_id or "", client_host=f"/{context.peer[0]}",
                    principal=context.principal)
    port = _port(context)
    version = request.version

    async def answer() -> Respond:
        response = await port.heartbeat(req, client)
        return Respond(body=response.to_wire(version))

    return Later(answer=answer)


def _describe(request: LocalRequest, context: Context) -> Answer:
    """ShareGroupDescribe; the groups described without an error carry their
    AuthorizedOperations when the request asks (Kafka's ``handleShareGroupDescribe``)."""
    body = _body(request)
    group_ids = tuple(body["GroupIds"])
    include = bool(body["IncludeAuthorizedOperations"])
    port = _port(context)

    async def answer() -> Respond:
        await port.load_groups(group_ids)
        groups = port.describe(group_ids)
        if include:
            operations = group_operations(context)
            groups = tuple(replace(g, authorized_operations=operations(g.group_id)) if g.error is Code.NONE else g
                           for g in groups)
        return Respond(body={"ThrottleTimeMs": 0, "Groups": [g.to_wire() for g in groups]})

    return Later(answer=answer)


def _sessioned(fetch: bool) -> Handler:
    """ShareFetch (``fetch``) or ShareAcknowledge: a request of a share session, served here
    or passed to the sidecar that serves its group (:func:`_passed`)."""

    def handle(request: LocalRequest, context: Context) -> Answer:
        body = _body(request)
        port = _port(context)
        connection = _hooked(context, port)
        version = request.version
        passed = _passed(request, context, port, connection)
        if passed is not None:
            return passed

        async def answer() -> Respond:
            if fetch:
                return Respond(body=await port.share_fetch(version, body, connection))
            return Respond(body=await port.share_acknowledge(version, body))

        return Later(answer=answer)

    return handle


def _hooked(context: Context, port: SharePort) -> object:
    """This connection's identity for share sessions; its end is hooked once: the
    connection's share sessions end with it, and their members' records go back (Kafka's
    ShareSessionCache does the same when a client disconnects)."""
    connection = (context.listener, context.peer)
    if not context.extra.get(_SESSIONS_HERE):
        context.extra[_SESSIONS_HERE] = True
        context.closing.append(lambda: port.connection_closed(connection))
    return connection


def _passed(request: LocalRequest, context: Context, port: SharePort, connection: object) -> Later | None:
    """In a fleet sharing one broker, a share request for a group another sidecar serves is
    passed to it, whole, and its answer passed back (``None``: served here)."""
    group_id = _body(request)["GroupId"] or ""
    if (request.header.client_id or "").startswith(PASSED):
        return None  # passed here by another sidecar: served here, whatever this one's view
    address = port.peer(group_id, context.listener) if group_id else None
    if address is None:
        return None
    key, version = request.api_key, request.version

    header = request.header._replace(client_id=PASSED + (request.header.client_id or ""))

    async def answer() -> Respond:
        body = await port.forward(address, connection, header, request.raw)
        if body is not None:
            return Respond(body=body)
        refusal: dict[str, Any] = {
            "ThrottleTimeMs": 0, "ErrorCode": ErrorCode.COORDINATOR_NOT_AVAILABLE, "Responses": [], "NodeEndpoints": [],
            "ErrorMessage": f"The sidecar that serves group {group_id} could not be reached; try again."}
        if key == SHARE_FETCH:
            refusal["AcquisitionLockTimeoutMs"] = 0
        return Respond(body=refusal, version=version)

    return Later(answer=answer)


def _offsets(method: str) -> Handler:
    """Describe/Alter/DeleteShareGroupOffsets: one call of the port."""

    def handle(request: LocalRequest, context: Context) -> Answer:
        body = _body(request)
        call = getattr(_port(context), method)
        version = request.version

        async def answer() -> Respond:
            return Respond(body=await call(version, body))

        return Later(answer=answer)

    return handle


HANDLERS: dict[int, Handler] = {
    SHARE_GROUP_HEARTBEAT: _heartbeat,
    SHARE_GROUP_DESCRIBE: _describe,
    SHARE_FETCH: _sessioned(fetch=True),
    SHARE_ACKNOWLEDGE: _sessioned(fetch=False),
    DESCRIBE_SHARE_GROUP_OFFSETS: _offsets("describe_offsets"),
    ALTER_SHARE_GROUP_OFFSETS: _offsets("alter_offsets"),
    DELETE_SHARE_GROUP_OFFSETS: _offsets("delete_offsets"),
}


# -- share groups in the group APIs every group type shares ----------------------------------


async def list_groups(shares: SharePort, request: ListGroupsRequest, listed: ListGroupsResponse) -> ListGroupsResponse:
    """ListGroups' answer with the share groups added (type ``share``, Kafka's states), as
    its type and state filters select them."""
    types = {t.lower() for t in request.types_filter}
    states = {s.lower() for s in request.states_filter}
    if types and "share" not in types:
        return listed
    extra = tuple(ListedGroup(group_id=group_id, protocol_type="share", group_state=state, group_type="share")
                  for group_id, state in await shares.group_ids() if not states or state.lower() in states)
    return replace(listed, groups=listed.groups + extra)


async def share_group_ids(shares: SharePort, group_ids: Sequence[str]) -> set[str]:
    """Those of ``group_ids`` that are share groups."""
    known = {group_id for group_id, _ in await shares.group_ids()}
    return {g for g in group_ids if g in known}


def _gated(handler: Handler) -> Handler:
    def handle(request: LocalRequest, context: Context) -> Answer:
        refusal = _gated_off(request, context)
        if refusal is not None:
            return Respond(body=refusal)
        return handler(request, context)

    return handle


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The table entries of the share-group APIs."""
    return [LocalApi(key=key, name=registry.api(key).name, versions=SERVED_VERSIONS[key], handler=_gated(handler))
            for key, handler in HANDLERS.items()]
