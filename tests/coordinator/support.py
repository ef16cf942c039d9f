"""Helpers for the coordinator tests: deterministic ids, request builders, step readers."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from coordinator.core import GroupCoordinator
from coordinator.messages import (
    Client,
    JoinGroupRequest,
    Protocol,
    SyncAssignment,
    SyncGroupRequest,
)
from coordinator.outcome import Response, Step
from coordinator.settings import CoordinatorSettings

CLIENT = Client(client_id="c", client_host="/127.0.0.1")


def counter_ids() -> Callable[[], str]:
    """Member id suffixes 1, 2, 3, ..."""
    numbers = itertools.count(1)
    return lambda: str(next(numbers))


def make(now: int = 0, **settings: Any) -> GroupCoordinator:
    """A core with deterministic ids and the given settings."""
    return GroupCoordinator(CoordinatorSettings(**settings), now=now, new_id=counter_ids())


def join(group: str = "g", member: str = "", *, version: int = 5, session: int = 10_000,
         rebalance: int = 10_000, instance: str | None = None,
         protocols: tuple[tuple[str, bytes], ...] = (("range", b"m"),)) -> JoinGroupRequest:
    """A JoinGroup request."""
    return JoinGroupRequest(version=version, group_id=group, session_timeout_ms=session,
                            rebalance_timeout_ms=rebalance, member_id=member, group_instance_id=instance,
                            protocol_type="consumer",
                            protocols=tuple(Protocol(name=n, metadata=m) for n, m in protocols))


def sync(group: str, member: str, generation: int, assignments: dict[str, bytes] | None = None,
         instance: str | None = None) -> SyncGroupRequest:
    """A SyncGroup request."""
    return SyncGroupRequest(version=5, group_id=group, generation_id=generation, member_id=member,
                            group_instance_id=instance,
                            assignments=tuple(SyncAssignment(member_id=k, assignment=v)
                                              for k, v in (assignments or {}).items()))


def answers(step: Step[Any]) -> dict[int, Response]:
    """The late answers of a step, by ticket."""
    return {a.ticket: a.response for a in step.answers}
