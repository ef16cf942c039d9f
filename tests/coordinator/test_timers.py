"""The keyed deadlines against a plain dict: same keys due, same next deadline, always.

The model is the obvious implementation (a dict of key -> deadline, scanned): whatever
order of arming, re-arming earlier or later, cancelling and popping, the heap must agree
with it, and must not keep an entry per re-arm (a heartbeat re-arms its member's session
deadline every few seconds).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.timers import Deadlines

KEYS = st.sampled_from([("s", "g", "a"), ("s", "g", "b"), ("s", "h", "a"), ("r", "g", "a")])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 60)),
        st.tuples(st.just("cancel"), KEYS, st.just(0)),
        st.tuples(st.just("cancel_group"), st.sampled_from(["g", "h"]), st.just(0)),
        st.tuples(st.just("pop"), st.just(None), st.integers(0, 60)),
        st.tuples(st.just("pop_due"), st.just(None), st.integers(0, 60)),
    ),
    max_size=60,
)


@given(OPS)
def test_deadlines_agree_with_a_dict(ops: list[tuple[str, object, int]]) -> None:
    deadlines = Deadlines()
    model: dict[object, int] = {}
    for op, key, when in ops:
        if op == "set":
            deadlines.set(key, when)  # type: ignore[arg-type]
            model[key] = when
        elif op == "cancel":
            deadlines.cancel(key)  # type: ignore[arg-type]
            model.pop(key, None)
        elif op == "cancel_group":
            doomed = [k for k in model if k[1] == key]  # type: ignore[index]
            assert deadlines.cancel_group(str(key)) == len(doomed)
            for k in doomed:
                del model[k]
        elif op == "pop":
            key_out = deadlines.pop_next(when)
            due = {k: w for k, w in model.items() if w <= when}
            if not due:
                assert key_out is None
            else:
                assert key_out in due and due[key_out] == min(due.values())
                del model[key_out]
        else:
            out = deadlines.pop_due(when)
            expected = sorted(w for w in model.values() if w <= when)
            assert sorted(model[k] for k in out) == expected
            assert len(set(out)) == len(out)
            for k in out:
                del model[k]
        assert len(deadlines) == len(model)
        assert deadlines.next_deadline() == (min(model.values()) if model else None)
        for k in model:
            assert deadlines.get(k) == model[k]  # type: ignore[arg-type]


def test_moving_a_deadline_later_pushes_nothing() -> None:
    deadlines = Deadlines()
    for member in range(100):
        deadlines.set(("s", "g", member), 45_000)
    for beat in range(1, 16):  # 15 heartbeats each, every 3 s
        for member in range(100):
            deadlines.set(("s", "g", member), 45_000 + beat * 3_000)
    assert len(deadlines._heap) == 100  # one entry per key, not 1,600
    # The first entry comes up at 45 s and goes back in at the member's real deadline.
    assert deadlines.next_deadline() == 90_000
    assert deadlines.pop_next(89_999) is None
    assert deadlines.pop_next(90_000) == ("s", "g", 0)
