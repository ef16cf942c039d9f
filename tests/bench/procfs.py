"""Process and machine CPU and memory from Linux's /proc (no extra dependency).

The benchmark reads the RSS and CPU time of the processes it compares, and the CPU the
rest of the machine used meanwhile (so a run disturbed by other work can be recognised).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid``."""
    fields = Path(f"/proc/{pid}/statm").read_text().split()
    return int(fields[1]) * _PAGE


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU time of ``pid`` (and its waited-for children, if asked)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name (which may hold spaces) start at ')' + 2.
    fields = text[text.rindex(")") + 2 :].split()
    # utime, stime, cutime, cstime are fields 14-17 of stat(5); here indexes 11-14.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICKS


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (nor waiting for I/O) since boot."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:]
    ticks = [int(f) for f in fields]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    # already counted in user and nice.
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]
    return busy / _TICKS
