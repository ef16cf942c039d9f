"""KIP-848 reconciliation: how a member moves from its current assignment to its target.

This is Kafka's ``CurrentAssignmentBuilder``. A member is in one of four states:

* ``STABLE`` -- it owns its assignment at its epoch; when the target epoch moves on it
  computes the next step;
* ``UNREVOKED_PARTITIONS`` -- it must first give up ``pending_revocation``; it stays at its
  epoch until a heartbeat no longer reports owning any of them, then moves to the next epoch;
* ``UNRELEASED_PARTITIONS`` -- it is at the target epoch but some target partitions are
  still owned (assigned or pending revocation) by other members; it receives them once
  they are free;
* ``UNKNOWN`` -- not used by this core (Kafka's placeholder for records it cannot read).

The rule that keeps a partition from having two owners: a partition is added to a member's
assignment only when no other member holds it (``partition_epoch`` returns -1), and a
member holding partitions it must revoke does not advance its epoch until it reports them
gone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from uuid import UUID

from coordinator.assignors import Assignment
from coordinator.errors import Code, GroupError
from coordinator.messages.common import TopicPartitions


class MemberState(Enum):
    """Where a member is in its reconciliation (``MemberState``)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True, slots=True)
class Reconciled:
    """A member's assignment state after one reconciliation step."""

    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


PartitionEpoch = Callable[[UUID, int], int]
"""The epoch of the member that holds a partition (assigned or pending revocation), or -1."""


def owns_any(owned: tuple[TopicPartitions, ...] | None, partitions: Mapping[UUID, frozenset[int]]) -> bool:
    """Whether the reported owned partitions still include any of ``partitions``
    (an unreported list counts as "yes": a heartbeat without it proves nothing)."""
    if owned is None:
        return True
    return any(p in partitions.get(tp.topic_id, frozenset()) for tp in owned for p in tp.partitions)


def is_subset(owned: tuple[TopicPartitions, ...] | None, assigned: Mapping[UUID, frozenset[int]]) -> bool:
    """Whether every reported owned partition is in ``assigned``."""
    if owned is None:
        return False
    return all(p in assigned.get(tp.topic_id, frozenset()) for tp in owned for p in tp.partitions)


def reconcile(
    current: Reconciled,
    *,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: tuple[TopicPartitions, ...] | None,
) -> Reconciled:
    """One step of ``CurrentAssignmentBuilder.build``."""
    if current.state is MemberState.STABLE:
        if current.member_epoch != target_epoch:
            return _next(current, current.member_epoch, target_epoch, target, partition_epoch, owned)
        return current
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, current.pending_revocation):
            return current
        return _next(current, current.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if current.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(current, current.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or owned:
        raise GroupError(Code.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                         "The member must abandon all its partitions and rejoin.")
    return _next(current, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(current: Reconciled, epoch: int, target_epoch: int, target: Assignment,
          partition_epoch: PartitionEpoch, owned: tuple[TopicPartitions, ...] | None) -> Reconciled:
    unreleased = False
    assigned: dict[UUID, frozenset[int]] = {}
    revoking: dict[UUID, frozenset[int]] = {}
    adding: dict[UUID, frozenset[int]] = {}
    for topic in set(target) | set(current.assigned):
        want = target.get(topic, frozenset())
        have = current.assigned.get(topic, frozenset())
        keep = have & want
        revoke = have - keep
        free = frozenset(p for p in want - keep if partition_epoch(topic, p) == -1)
        unreleased = unreleased or len(free) < len(want - keep)
        if keep:
            assigned[topic] = keep
        if revoke:
            revoking[topic] = revoke
        if free:
            adding[topic] = free
    # ``updateMemberEpoch``: the previous epoch is always the epoch before this step.
    previous = current.member_epoch
    if revoking and owns_any(owned, revoking):
        return Reconciled(state=MemberState.UNREVOKED_PARTITIONS, member_epoch=epoch,
                          previous_member_epoch=previous,
                          assigned=assigned, pending_revocation=revoking)
    for topic, parts in adding.items():
        assigned[topic] = assigned.get(topic, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return Reconciled(state=state, member_epoch=target_epoch,
                      previous_member_epoch=previous, assigned=assigned)

