"""The share-group shell's own decisions, with plain objects (proxy/control/shares.py):
which fetched batches are aborted transactions (read_committed), and a heartbeat for a
group the fleet gives another sidecar. Expected values are worked out by hand."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import trio
from prometheus_client import CollectorRegistry

from coordinator.messages.common import Client
from coordinator.share_group import ShareGroupHeartbeatRequest
from protocol.errors import ErrorCode
from proxy.control.shares import ShareService, _aborted_ranges


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: bool = False


def test_aborted_ranges_run_from_the_first_offset_to_the_abort_marker() -> None:
    batches = [
        Batch(0, 9, 7, True),          # producer 7, before its aborted transaction began
        Batch(10, 14, 7, True),        # aborted
        Batch(15, 19, 8, True),        # producer 8: no aborted transaction
        Batch(20, 24, 7, True),        # still producer 7's aborted transaction
        Batch(25, 25, 7, True, True),  # its abort marker
        Batch(26, 30, 7, True),        # a later transaction of producer 7: not aborted
        Batch(31, 35),                 # not transactional
    ]
    assert _aborted_ranges(batches, [(7, 10)]) == [(10, 14), (20, 24)]
    assert _aborted_ranges(batches, []) == []
    # Two producers' aborted transactions, listed in any order.
    assert _aborted_ranges(batches, [(8, 15), (7, 10)]) == [(10, 14), (15, 19), (20, 24)]


def service(**keys: Any) -> ShareService:
    zk = SimpleNamespace(client=None)
    return ShareService(zk, None, None, CollectorRegistry(), **keys)  # type: ignore[arg-type]


async def test_a_group_another_sidecar_coordinates_is_not_coordinator_here() -> None:
    shares = service(coordinates=lambda group_id: group_id != "elsewhere")
    answer = await shares.heartbeat(ShareGroupHeartbeatRequest(
        group_id="elsewhere", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
    assert answer.error == ErrorCode.NOT_COORDINATOR
    assert "elsewhere" not in shares.core.groups


async def test_an_invalid_heartbeat_is_answered_before_any_io() -> None:
    shares = service()
    with trio.fail_after(1):
        answer = await shares.heartbeat(ShareGroupHeartbeatRequest(
            group_id="", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
    assert answer.error == ErrorCode.INVALID_REQUEST and answer.error_message == "GroupId can't be empty."
