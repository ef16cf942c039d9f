"""Which groups this sidecar serves, among a fleet of sidecars (sans-IO).

Seed 000: "every broker will be the co-ordinator for a subset of consumer groups". A
:class:`Fleet` is this sidecar's view of that split: the live sidecars (their ids and
advertised endpoints, from ``/brokers/ids``), which of them is this one, and the groups this
sidecar has *claimed* in ZooKeeper (with the version of each claim, the fencing token its
writes carry; see :mod:`coordinator.claims`). It does no I/O; the shell feeds it the live set
and the claims it won or lost, and asks it what to do.

A group is **served** here only while it is claimed here. The placement
(:func:`coordinator.placement.owner`) says who *should* serve it; between the two lies the
hand-over:

* the placement names this sidecar but the group is not claimed yet: requests get
  COORDINATOR_LOAD_IN_PROGRESS (retriable; Kafka answers the same while it loads a group)
  and the group is queued for the shell to claim (:meth:`Fleet.take_wanted`);
* the placement names another sidecar: NOT_COORDINATOR, so the client asks
  FindCoordinator again, which names that sidecar (:meth:`Fleet.locate`);
* the group is claimed here but the placement moved it away: the shell must stop serving
  it, let its writes finish, then give the claim up (:meth:`Fleet.misplaced`).

While the ZooKeeper session is SUSPENDED (:attr:`Fleet.suspended`) claimed groups are still
served, but writes (commits, deletions) are refused with COORDINATOR_NOT_AVAILABLE: they
could not be made durable, and the claim may already be gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator.errors import Code
from coordinator.placement import owner

#: ``{listener name: (host, port)}`` of one sidecar.
Endpoints = Mapping[str, tuple[str, int]]


class Fleet:
    """This sidecar's view of the fleet and of the groups it serves."""

    def __init__(self) -> None:
        #: This sidecar's id, once its registration is seen (``None`` before).
        self.me: int | None = None
        #: Live sidecar id -> its advertised endpoints.
        self.live: dict[int, Endpoints] = {}
        #: Group id -> the version of this sidecar's claim (served groups only).
        self.held: dict[str, int] = {}
        #: The ZooKeeper session is suspended: no writes.
        self.suspended = False
        self._wanted: set[str] = set()

    # -- what the shell tells it ---------------------------------------------------------

    def set_live(self, live: Mapping[int, Endpoints], me: int | None) -> None:
        """The registered sidecars changed (or this one's own registration)."""
        self.live = dict(live)
        self.me = me

    def claimed(self, group_id: str, version: int) -> None:
        """This sidecar now holds ``group_id``'s claim at ``version`` (and has loaded it)."""
        self.held[group_id] = version
        self._wanted.discard(group_id)

    def want(self, group_id: str) -> None:
        """A request for ``group_id`` is waiting here for its claim: claim it."""
        self._wanted.add(group_id)

    def released(self, group_id: str) -> None:
        """This sidecar no longer serves ``group_id``."""
        self.held.pop(group_id, None)

    # -- what it answers -----------------------------------------------------------------

    def owner(self, group_id: str) -> int | None:
        """The sidecar the placement names for ``group_id`` (``None``: no live sidecar)."""
        return owner(group_id, self.live)

    def code(self, group_id: str, *, write: bool = False) -> Code:
        """How a request for ``group_id`` is answered here: NONE (served), or the error."""
        if group_id in self.held:
            if write and self.suspended:
                return Code.COORDINATOR_NOT_AVAILABLE
            return Code.NONE
        if self.me is None or self.owner(group_id) in (self.me, None):
            self._wanted.add(group_id)
            return Code.COORDINATOR_LOAD_IN_PROGRESS
        return Code.NOT_COORDINATOR

    def locate(self, group_id: str, listener: str) -> tuple[int, str, int] | None:
        """``(node id, host, port)`` of the sidecar serving ``group_id`` on ``listener``,
        or ``None`` when this sidecar should name itself (it is the owner, no view yet, or
        the owner has no such listener)."""
        chosen = self.owner(group_id)
        if chosen is None or chosen == self.me:
            if chosen is not None:
                self._wanted.add(group_id)  # a client is about to come: claim it now
            return None
        address = self.live[chosen].get(listener)
        if address is None:
            return None
        return chosen, address[0], address[1]

    # -- what the shell must do ----------------------------------------------------------

    def take_wanted(self) -> set[str]:
        """Groups asked about here that the placement gives this sidecar and that are not
        claimed yet: the shell claims them. Clears the set."""
        wanted = {g for g in self._wanted if g not in self.held}
        self._wanted.clear()
        return wanted

    def has_wanted(self) -> bool:
        """Whether :meth:`take_wanted` has something."""
        return any(g not in self.held for g in self._wanted)

    def misplaced(self) -> list[str]:
        """Claimed groups the placement now gives another sidecar: to hand over."""
        if self.me is None:
            return []
        return sorted(g for g in self.held if self.owner(g) not in (self.me, None))

    def mine(self, group_ids: Iterable[str]) -> list[str]:
        """Of ``group_ids``, those the placement gives this sidecar and not claimed yet."""
        if self.me is None:
            return []
        return sorted(g for g in group_ids if g not in self.held and self.owner(g) == self.me)

    def statistics(self) -> dict[str, int]:
        """Counts for metrics: live sidecars and groups served here."""
        return {"live": len(self.live), "held": len(self.held)}
