"""Embedded consumer-group coordinator and cluster-wide feature versioning (KIP-584).

The group coordinator is sans-IO: :class:`coordinator.core.GroupCoordinator` takes typed
requests (:mod:`coordinator.messages`) and ``now`` and returns a
:class:`coordinator.outcome.Step` (the answer now or a ticket, late answers, store writes,
finished rebalances); :meth:`~coordinator.core.GroupCoordinator.next_deadline` says when
to call :meth:`~coordinator.core.GroupCoordinator.on_timer`. :mod:`coordinator.store` is
the only module that touches ZooKeeper (kazoo, client injected). ``docs/coordinator.md``
is the contract for the shell.
"""
