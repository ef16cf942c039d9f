"""The idle sweeper alone (proxy/datapath/idle.py), on trio's virtual clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from proxy.datapath.idle import IdleSweeper


class Quiet:
    """A connection that sent its last bytes at ``last_receive`` and may be busy."""

    def __init__(self, last_receive: float, busy: bool = False) -> None:
        self.last_receive = last_receive
        self.busy = busy
        self.closed_at: float | None = None

    def idle_expired(self, now: float, timeout: float) -> bool:
        assert now >= self.last_receive + timeout  # the sweeper asks only about those
        if self.busy:
            return False
        self.closed_at = now
        return True


def test_the_period_is_a_tenth_of_the_timeout_and_at_most_a_second() -> None:
    assert IdleSweeper(2.0).period == pytest.approx(0.2)
    assert IdleSweeper(600.0).period == 1.0


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_a_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    with pytest.raises(ValueError, match="idle timeout must be > 0"):
        IdleSweeper(timeout)


def test_a_sweep_closes_exactly_the_connections_idle_for_the_timeout() -> None:
    sweeper = IdleSweeper(10.0)
    old, fresh, busy = Quiet(0.0), Quiet(5.0), Quiet(0.0, busy=True)
    for c in (old, fresh, busy):
        sweeper.add(c)
    assert sweeper.sweep(9.99) == 0
    assert sweeper.sweep(10.0) == 1
    assert (old.closed_at, fresh.closed_at, busy.closed_at) == (10.0, None, None)
    assert len(sweeper) == 2  # a closed one is not looked at again
    assert sweeper.sweep(15.0) == 1 and fresh.closed_at == 15.0
    sweeper.discard(busy)
    assert len(sweeper) == 0


async def test_connections_close_within_a_period_after_the_timeout(autojump_clock: trio.testing.MockClock) -> None:
    sweeper = IdleSweeper(3.0)
    start = trio.current_time()
    conns = [Quiet(start + offset) for offset in (0.0, 0.45, 2.0)]
    for c in conns:
        sweeper.add(c)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweeper.run)
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    for c in conns:
        assert c.closed_at is not None
        late = c.closed_at - (c.last_receive + 3.0)
        assert 0 <= late <= sweeper.period + 1e-9, (c.last_receive - start, late)
