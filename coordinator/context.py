"""What the protocol modules of the core share: settings, groups, timers, outbox, ids."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator.messages.common import TopicAccess
from coordinator.outcome import Outbox
from coordinator.settings import CoordinatorSettings
from coordinator.timers import Deadlines

if TYPE_CHECKING:
    from coordinator.classic_group import ClassicGroup
    from coordinator.consumer_group import ConsumerGroup


def random_id() -> str:
    """A fresh random id (Kafka uses a UUID string for member ids)."""
    return str(uuid.uuid4())


@dataclass(kw_only=True, slots=True)
class Context:
    """The state one coordinator core shares between its protocol modules."""

    settings: CoordinatorSettings
    groups: dict[str, ClassicGroup | ConsumerGroup] = field(default_factory=dict)
    timers: Deadlines = field(default_factory=Deadlines)
    outbox: Outbox = field(default_factory=Outbox)
    #: Source of member ids; tests inject a deterministic one.
    new_id: Callable[[], str] = random_id
    #: ``(principal, host, names) -> the names the principal may Describe``, when the sidecar
    #: enforces ACLs: the topics a KIP-848 member's regex resolves to are filtered by its
    #: rights (Kafka 4.0's rule). ``None``: every matching topic. Set by the shell.
    topic_access: TopicAccess | None = None
    #: ``group id -> (session timeout, heartbeat interval)`` in ms for a KIP-848 group: its
    #: group configs (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``)
    #: where it has some. ``None``: :attr:`settings` for every group. Set by the shell.
    group_timeouts: Callable[[str], tuple[int, int]] | None = None

    def consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """``(session timeout, heartbeat interval)`` in ms for the KIP-848 group ``group_id``."""
        if self.group_timeouts is not None:
            return self.group_timeouts(group_id)
        return self.settings.consumer_session_timeout_ms, self.settings.consumer_heartbeat_interval_ms
