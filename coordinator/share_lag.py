"""A share-partition's lag (KIP-1226, DescribeShareGroupOffsets v1), and whom to ask for it.

Theory of operation. Kafka's group coordinator (``GroupCoordinatorService.
computeShareGroupLagAndBuildResponse``) reports, for each share-partition whose start
offset is known, the partition's latest offset less the share-partition start offset less
its *delivery complete count*: the records at or past the start offset that are already
ACKNOWLEDGED or ARCHIVED (they sit in the in-flight window while an earlier record is still
to be delivered, and are done with all the same). The latest offset is asked of the
partition's leader (``PartitionMetadataClient.listLatestOffsets``: ListOffsets with
timestamp LATEST, read_uncommitted), one request per leader for all of its partitions.

The shell supplies the facts, this module decides: :func:`plan_lag` groups the partitions
asked by the broker that leads them (a partition with no leader, or whose leader the broker
list does not name, cannot be asked); :func:`latest_offsets` keeps the offsets the leaders
answered without error; :func:`share_lag` computes one lag, -1 when the latest offset is
not known (the field's default, which Kafka's admin client shows as no lag).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from coordinator.share_state import ShareState

#: A partition as ListOffsets names it: ``(topic name, partition index)``.
TopicPartition = tuple[str, int]

#: The lag when it is not known (``DescribeShareGroupOffsetsResponse``'s default).
UNKNOWN_LAG = -1


@dataclass(frozen=True, kw_only=True, slots=True)
class LagPlan:
    """Whom to ask for the latest offsets of a set of partitions."""

    #: Each leader's broker id and its partitions, in the order they were asked.
    by_leader: Mapping[int, tuple[TopicPartition, ...]]
    #: Leaders the broker list does not name (a broker that is down, say) and their
    #: partitions: not asked, their lag is unknown.
    unaddressed: Mapping[int, tuple[TopicPartition, ...]]
    #: Partitions without a leader (or missing from the Metadata answer): lag unknown.
    leaderless: tuple[TopicPartition, ...]


def plan_lag(partitions: Iterable[TopicPartition], leaders: Mapping[TopicPartition, int],
             brokers: Collection[int]) -> LagPlan:
    """Group ``partitions`` by the broker that leads them (``leaders``: a leader id per
    partition, -1 for none), among the broker ids ``brokers`` names with an address."""
    by_leader: dict[int, list[TopicPartition]] = {}
    unaddressed: dict[int, list[TopicPartition]] = {}
    leaderless: list[TopicPartition] = []
    for tp in dict.fromkeys(partitions):
        leader = leaders.get(tp, -1)
        if leader < 0:
            leaderless.append(tp)
        elif leader in brokers:
            by_leader.setdefault(leader, []).append(tp)
        else:
            unaddressed.setdefault(leader, []).append(tp)
    return LagPlan(by_leader={b: tuple(ps) for b, ps in by_leader.items()},
                   unaddressed={b: tuple(ps) for b, ps in unaddressed.items()}, leaderless=tuple(leaderless))


def latest_offsets(answers: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    """The offsets of ListOffsets answers (``{partition: (error code, offset)}``) that have
    no error and a real offset; a partition answered with an error (the leader moved since
    the Metadata answer: NOT_LEADER_OR_FOLLOWER) is left out, its lag unknown."""
    return {tp: offset for tp, (code, offset) in answers.items() if code == 0 and offset >= 0}


def delivery_complete_count(state: ShareState) -> int:
    """Records in the in-flight window that are ACKNOWLEDGED or ARCHIVED (Kafka's
    ``SharePartition.deliveryCompleteCount``; the window starts at the start offset)."""
    return sum(b.last_offset - b.first_offset + 1 for b in state.batches
               if b.first_offset >= state.start_offset and b.delivery_state.terminal)


def share_lag(state: ShareState, latest_offset: int | None) -> int:
    """Records from the start offset to ``latest_offset`` (the next offset to be written)
    not yet acknowledged or archived; :data:`UNKNOWN_LAG` when either end is not known.

    Never below 0: a start offset past the log's end (altered there, or a log cut short)
    is no lag (Kafka passes the negative difference on, which its admin client shows as no
    lag at all)."""
    if latest_offset is None or latest_offset < 0 or state.start_offset < 0:
        return UNKNOWN_LAG
    return max(0, latest_offset - state.start_offset - delivery_complete_count(state))
