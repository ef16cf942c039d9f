"""The fleet side of the trio shell (proxy/control/groups.py) on trio's virtual clock.

ZooKeeper is replaced by stubs that answer at once (the claims and the store are tested
against a real ZooKeeper in test_claims.py and test_store.py); what is tested here is the
shell's own logic: a request waits for its group's claim, is answered anyway once the wait
is over, and a group the placement moves away is handed over. Sidecars 1, 2 and 3 are
live; ``payments`` belongs to 1 (this one), ``orders`` to 2 (test_placement.py's table).
"""

from __future__ import annotations

import uuid
from typing import Any, cast

import trio
import trio.testing
from prometheus_client import CollectorRegistry

from coordinator.core import GroupCoordinator, LoadedGroup
from coordinator.errors import Code
from coordinator.messages import (
    Client,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from coordinator.outcome import Response, Write
from coordinator.settings import CoordinatorSettings
from coordinator.topics import TopicInfo, TopicsSnapshot
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import RequestHeader
from protocol.schema import decode, encode
from proxy.control.groups import GroupService
from proxy.local.api import Context, Later, LocalRequest, Respond
from proxy.local.groups import CALLS, CoreCall, handler
from proxy.local.ports import Pending, Ports

CLIENT = Client(client_id="c", client_host="/127.0.0.1")
LIVE: dict[int, Any] = {1: {"PLAINTEXT": ("h1", 1)}, 2: {"PLAINTEXT": ("h2", 2)}, 3: {"PLAINTEXT": ("h3", 3)}}


class StubZooKeeper:
    """Runs "blocking" calls inline; no session events."""

    client: Any = None
    session_timeout = 10.0

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        await trio.sleep(0.001)  # a ZooKeeper round trip
        return fn(*args, **kwargs)

    def states(self) -> trio.MemoryReceiveChannel[str]:
        return trio.open_memory_channel[str](0)[1]


class StubClaims:
    def __init__(self, version: int | None) -> None:
        self.node_id = 1
        self.version = version
        self.claimed: list[str] = []
        self.released: list[str] = []

    def claim(self, group_id: str) -> int | None:
        self.claimed.append(group_id)
        return self.version

    def release(self, group_id: str) -> bool:
        self.released.append(group_id)
        return True

    def guard(self, group_id: str, version: int) -> tuple[str, int]:
        return f"/coordinators/groups/{group_id}", version


class StubStore:
    def __init__(self) -> None:
        self.applied: list[list[Write]] = []

    def group_ids(self) -> list[str]:
        return []

    def load_group(self, group_id: str) -> LoadedGroup | None:
        return None

    def forget(self, group_id: str | None = None) -> None:
        pass

    def apply(self, writes: list[Write]) -> None:
        self.applied.append(writes)


class NoMetadata:
    async def topics(self, names: set[str] | None) -> list[Any]:
        return []


def service(claims: StubClaims) -> GroupService:
    built = GroupService(CoordinatorSettings(), StubZooKeeper(), NoMetadata(),  # type: ignore[arg-type]
                         lambda listener: (1, "h1", 1), CollectorRegistry(),
                         store=StubStore(), clock=lambda: int(trio.current_time() * 1000))  # type: ignore[arg-type]
    assert built.fleet is not None
    built.fleet.set_live(LIVE, me=1)
    built.claims = claims  # type: ignore[assignment]
    return built


def heartbeat(group: str) -> CoreCall:
    req = HeartbeatRequest(group_id=group, generation_id=1, member_id="m")
    return CoreCall((group,), lambda core, now: core.heartbeat(req, now))


async def answer(outcome: Response | Pending[Response]) -> Response:
    return await outcome.wait() if isinstance(outcome, Pending) else outcome


async def test_a_request_waits_for_its_groups_claim(autojump_clock: trio.testing.MockClock) -> None:
    claims = StubClaims(version=7)
    groups = service(claims)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups._place)
        outcome = groups.run(heartbeat("payments"), "Heartbeat", ("payments",))
        assert isinstance(outcome, Pending)
        began = trio.current_time()
        response = await answer(outcome)
        # Served by the core once claimed: an unknown member of a new group, not LOAD_IN_PROGRESS.
        assert response == HeartbeatResponse(error=Code.UNKNOWN_MEMBER_ID)
        assert trio.current_time() - began < 0.1
        assert claims.claimed == ["payments"]
        assert groups.fleet is not None and groups.fleet.held == {"payments": 7}
        # Another sidecar's group is refused at once, and not claimed.
        refused = groups.run(heartbeat("orders"), "Heartbeat", ("orders",))
        assert refused == HeartbeatResponse(error=Code.NOT_COORDINATOR)
        nursery.cancel_scope.cancel()
    assert claims.claimed == ["payments"]


async def test_a_claim_held_elsewhere_answers_load_in_progress_after_the_wait(
        autojump_clock: trio.testing.MockClock) -> None:
    claims = StubClaims(version=None)  # an old owner's session has not expired yet
    groups = service(claims)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups._place)
        began = trio.current_time()
        response = await answer(groups.run(heartbeat("payments"), "Heartbeat", ("payments",)))
        waited = trio.current_time() - began
        assert response == HeartbeatResponse(error=Code.COORDINATOR_LOAD_IN_PROGRESS)
        assert groups.claim_wait <= waited < groups.claim_wait + 0.5
        assert len(claims.claimed) > 10  # retried every claim_retry (0.2 s) meanwhile
        nursery.cancel_scope.cancel()


async def test_a_group_the_placement_moves_away_is_handed_over(autojump_clock: trio.testing.MockClock) -> None:
    claims = StubClaims(version=3)
    groups = service(claims)
    assert groups.fleet is not None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups._place)
        await answer(groups.run(heartbeat("payments"), "Heartbeat", ("payments",)))
        assert "payments" in groups.fleet.held
        # payments on {2, 3, 4}: 4 wins (test_placement.py); this sidecar stays registered.
        groups.fleet.set_live({1: LIVE[1], 2: LIVE[2], 3: LIVE[3], 4: {"PLAINTEXT": ("h4", 4)}}, me=1)
        groups._place_now.set()
        await trio.sleep(1)
        assert claims.released == ["payments"]
        assert groups.fleet.held == {}
        assert [g for g, _ in groups.handovers] == ["payments"]
        core: GroupCoordinator = groups.core
        assert "payments" not in core.ctx.groups
        refused = groups.run(heartbeat("payments"), "Heartbeat", ("payments",))
        assert refused == HeartbeatResponse(error=Code.NOT_COORDINATOR)
        nursery.cancel_scope.cancel()


def consumer_heartbeat(member: str, epoch: int) -> CoreCall:
    joining = epoch == 0
    req = ConsumerGroupHeartbeatRequest(
        version=1, group_id="solo", member_id=member, member_epoch=epoch,
        rebalance_timeout_ms=30_000 if joining else -1,
        subscribed_topic_names=("t",) if joining else None, topic_partitions=() if joining else None)
    return CoreCall(("solo",), lambda core, now: core.consumer_group_heartbeat(req, CLIENT, now))


async def test_the_timer_task_sleeps_through_heartbeats_and_wakes_for_an_expiry(
        autojump_clock: trio.testing.MockClock) -> None:
    """A heartbeat moves its member's session deadline later and must not wake the timer
    task; a new member's earlier deadline must, and the session then expires on time."""
    groups = GroupService(CoordinatorSettings(consumer_session_timeout_ms=45_000), StubZooKeeper(),  # type: ignore[arg-type]
                          NoMetadata(), lambda listener: (1, "h1", 1), CollectorRegistry(),  # type: ignore[arg-type]
                          store=StubStore(), fleet=False,  # type: ignore[arg-type]
                          clock=lambda: int(trio.current_time() * 1000))
    wakes = 0
    on_timer = groups.core.on_timer

    def counted(now: int) -> Any:
        nonlocal wakes
        wakes += 1
        return on_timer(now)

    groups.core.on_timer = counted  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(groups._timers)
        nursery.start_soon(groups._writer)
        await trio.sleep(1)  # asleep until the offset-retention sweep, 10 minutes away
        joined = await answer(groups.run(consumer_heartbeat("m1", 0), "ConsumerGroupHeartbeat", ("solo",)))
        assert isinstance(joined, ConsumerGroupHeartbeatResponse) and joined.error is Code.NONE
        await trio.sleep(0.5)
        asleep_on = groups._deadline_changed  # the event the timer task waits on (a new one per wake)
        for beat_no in range(20):  # 60 s of heartbeats, every 3 s
            await trio.sleep(3)
            beat = await answer(groups.run(consumer_heartbeat("m1", joined.member_epoch),
                                           "ConsumerGroupHeartbeat", ("solo",)))
            assert isinstance(beat, ConsumerGroupHeartbeatResponse) and beat.error is Code.NONE
            if beat_no < 14:  # before the first session deadline (45 s after joining) came
                assert groups._deadline_changed is asleep_on, f"woken by heartbeat {beat_no}"
        last = trio.current_time()
        assert wakes == 0  # nothing was due: each deadline had moved on
        assert "m1" in groups.core.ctx.groups["solo"].members
        await trio.sleep(45 - (trio.current_time() - last) - 0.01)
        assert "m1" in groups.core.ctx.groups["solo"].members
        await trio.sleep(0.02)  # the session of 45 s since the last heartbeat is over
        assert "m1" not in groups.core.ctx.groups["solo"].members
        nursery.cancel_scope.cancel()


class ManyTopics:
    """A broker with 5,000 topics: app000-t00 ... app199-t24 (25 per application)."""

    def __init__(self) -> None:
        self.found = [TopicInfo(name=f"app{a:03d}-t{t:02d}", topic_id=uuid.UUID(int=a * 100 + t + 1), partitions=2)
                      for a in range(200) for t in range(25)]  # fmt: skip

    async def topics(self, names: set[str] | None) -> list[Any]:
        return self.found


def regex_heartbeat(group: str) -> CoreCall:
    req = ConsumerGroupHeartbeatRequest(
        version=1, group_id=group, member_id=f"{group}-m", member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_regex=f"{group}-.*", topic_partitions=())
    return CoreCall((group,), lambda core, now: core.consumer_group_heartbeat(req, CLIENT, now))


async def test_a_refresh_rechecks_regex_groups_in_slices_with_other_tasks_served_between(
        autojump_clock: trio.testing.MockClock) -> None:
    """200 groups subscribed by regex to 5,000 topics: after a refresh each group's
    subscription is its application's 25 topics, and with a slice of 0 s another task
    runs between every scheduler pass of rechecks (none waits for all 200)."""
    source = ManyTopics()
    groups = GroupService(CoordinatorSettings(), StubZooKeeper(), source,  # type: ignore[arg-type]
                          lambda listener: (1, "h1", 1), CollectorRegistry(), store=StubStore(),  # type: ignore[arg-type]
                          fleet=False, recheck_slice=0.0, clock=lambda: int(trio.current_time() * 1000))
    names = [f"app{a:03d}" for a in range(200)]
    for name in names:
        joined = await answer(groups.run(regex_heartbeat(name), "ConsumerGroupHeartbeat", (name,)))
        assert isinstance(joined, ConsumerGroupHeartbeatResponse) and joined.error is Code.NONE
    epochs = {n: groups.core.ctx.groups[n].group_epoch for n in names}
    events: list[str] = []
    recheck = groups.core.recheck_topics

    def recorded(group_ids: Any, now: int) -> Any:
        events.extend(group_ids)
        return recheck(group_ids, now)

    groups.core.recheck_topics = recorded  # type: ignore[method-assign]
    done = trio.Event()

    async def other_connection() -> None:
        while not done.is_set():
            events.append("tick")
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_connection)
        await groups._recheck(TopicsSnapshot.of(await source.topics(None)))
        done.set()
    rechecked = [e for e in events if e != "tick"]
    assert rechecked == names
    # Trio runs the tasks of one scheduler batch in a random order: two groups may meet
    # across a batch boundary, never three.
    longest = run = 0
    for event in events:
        run = 0 if event == "tick" else run + 1
        longest = max(longest, run)
    assert longest <= 2
    for a, name in enumerate(names):
        group = groups.core.ctx.groups[name]
        assert sorted(group.subscription_metadata) == [f"{name}-t{t:02d}" for t in range(25)]
        assert group.subscription_metadata[f"{name}-t07"] == (uuid.UUID(int=a * 100 + 8), 2)
        assert group.group_epoch == epochs[name] + 1



async def test_a_member_that_waits_for_its_groups_claim_is_seen_by_the_refresh_it_asks_for(
        autojump_clock: trio.testing.MockClock) -> None:
    """A regex member's first heartbeat waits for the group's claim; the topic refresh it
    asks for must run after the core holds its subscription, or the member gets nothing
    until the next periodic refresh (here 10 minutes away)."""
    source = ManyTopics()
    claims = StubClaims(version=7)
    groups = GroupService(CoordinatorSettings(), StubZooKeeper(), source,  # type: ignore[arg-type]
                          lambda listener: (1, "h1", 1), CollectorRegistry(), store=StubStore(),  # type: ignore[arg-type]
                          refresh_interval=600.0, clock=lambda: int(trio.current_time() * 1000))
    assert groups.fleet is not None
    groups.fleet.set_live({1: LIVE[1]}, me=1)
    groups.claims = claims  # type: ignore[assignment]
    ports = Ports(upstream=cast(Any, None), brokers=cast(Any, None), groups=groups)
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5000), ports=ports)
    api = DEFAULT_REGISTRY.api(68)
    header = RequestHeader(api_key=68, api_version=1, correlation_id=1, client_id="c", header_version=2, size=0)

    async def beat(epoch: int, regex: str | None, owned: list[Any] | None) -> Any:
        body = {"GroupId": "app007", "MemberId": "m-app007", "MemberEpoch": epoch, "InstanceId": None,
                "RackId": None, "RebalanceTimeoutMs": 30_000 if regex else -1, "SubscribedTopicNames": None,
                "SubscribedTopicRegex": regex, "ServerAssignor": None, "TopicPartitions": owned}
        raw = encode(api.request, 1, body)
        answer = handler(CALLS[68], "ConsumerGroupHeartbeat")(LocalRequest(header=header, body=decode(api.request, 1, raw), raw=raw), context)
        if isinstance(answer, Later):
            answer = await answer.answer()
        assert isinstance(answer, Respond) and isinstance(answer.body, dict)
        return answer.body

    async with trio.open_nursery() as nursery:
        for task in (groups._place, groups._refresh_topics, groups._timers, groups._writer):
            nursery.start_soon(task)
        joined = await beat(0, "app007-.*", [])
        assert joined["ErrorCode"] == 0 and claims.claimed == ["app007"]
        await trio.sleep(1)  # the refresh the join asked for, and its target assignment
        again = await beat(joined["MemberEpoch"], None, None)
        assert again["ErrorCode"] == 0 and again["Assignment"] is not None
        owned = {t["TopicId"]: sorted(t["Partitions"]) for t in again["Assignment"]["TopicPartitions"]}
        assert owned == {uuid.UUID(int=700 + t + 1): [0, 1] for t in range(25)}  # app007's 25 topics, 2 each
        nursery.cancel_scope.cancel()
