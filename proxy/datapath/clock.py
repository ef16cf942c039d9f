"""The event loop's clock in milliseconds: the time of the quota sensors and gates.

Virtual under trio's ``MockClock`` in tests, so a quota's windows pass in no real time.
"""

from __future__ import annotations

import trio


def now_ms() -> int:
    """trio's clock in milliseconds."""
    return int(trio.current_time() * 1000)
