"""Profile the sidecar subprocess with py-spy while a workload runs through it.

``python -m tests.bench --profile produce-b1-acks1 consume`` starts a fresh stack per
workload, attaches ``py-spy record --format raw`` (collapsed stacks, sampling from outside
the process, ``--nonblocking`` so the sidecar is never paused) to the sidecar's PID, runs
the workload through the sidecar only until the sampling ends, and writes
``out/profile/<workload>.txt`` (the collapsed stacks, for flamegraph tools) and
``<workload>.summary.txt``: functions by self time and by inclusive time, as shares of the
samples in which the sidecar was busy (idle samples — the event loop waiting in epoll —
are counted apart).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.bench.stack import Stack
from tests.bench.workloads import Settings, Workload

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
#: Leaf frames that mean the event loop had nothing to do.
_IDLE = ("epoll", "select", "poll (", "_epoll", "get_events", "wait (threading")


def py_spy() -> str:
    """The py-spy executable (``pip install -e '.[bench]'``)."""
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    return found


def _short(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = match["file"]
    for root in ("/proxy/", "/protocol/", "/site-packages/", "/lib/python"):
        if root in path:
            path = path.split(root, 1)[1] if root.startswith("/site") or root.startswith("/lib") \
                else root.strip("/") + "/" + path.split(root, 1)[1]
            break
    return f"{match['func']} ({path})"


def summarize(raw: str, top: int = 30) -> str:
    """Self and inclusive time per function from py-spy's collapsed stacks."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = idle = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f and not f.startswith("process ")
                  and not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        if any(marker in stack.rsplit(";", 1)[-1] for marker in _IDLE):
            idle += count
            continue
        self_time[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    busy = total - idle
    lines = [f"samples: {total}, idle (waiting for I/O): {idle} ({_pct(idle, total)}), "
             f"busy: {busy}", "", f"top {top} by self time (% of busy samples):"]
    lines += [f"  {_pct(n, busy):>6}  {name}" for name, n in self_time.most_common(top)]
    lines += ["", f"top {top} by inclusive time (% of busy samples), project code only:"]
    ours = [(name, n) for name, n in inclusive.most_common()
            if "(proxy/" in name or "(protocol/" in name]
    lines += [f"  {_pct(n, busy):>6}  {name}" for name, n in ours[:top]]
    return "\n".join(lines) + "\n"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def profile_workloads(
    workloads: Sequence[Workload], settings: Settings, seconds: float, out_dir: Path
) -> list[Path]:
    """Profile each workload through the sidecar; return the summary files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries: list[Path] = []
    for workload in workloads:
        if "sidecar" not in workload.targets:
            continue
        with Stack(out_dir / "logs") as stack:
            state: dict[str, Any] = {}
            if workload.setup is not None:
                workload.setup(stack, settings, state)
            raw_path = out_dir / f"{workload.name}.txt"
            spy = subprocess.Popen(
                [py_spy(), "record", "--pid", str(stack.pid("sidecar")), "--rate", "200",
                 "--duration", str(int(seconds)), "--format", "raw", "--nonblocking",
                 "--output", str(raw_path)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
            time.sleep(0.5)  # attach
            long = replace(settings, duration=seconds, warmup=0.0)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and spy.poll() is None:
                workload.measure(stack, "sidecar", long, state)
            _, err = spy.communicate(timeout=seconds + 30)
            if spy.returncode != 0 or not raw_path.exists():
                raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')}")
            summary = out_dir / f"{workload.name}.summary.txt"
            summary.write_text(f"{workload.title}\n\n" + summarize(raw_path.read_text()))
            summaries.append(summary)
    return summaries
