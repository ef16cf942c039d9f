"""Process and machine CPU and memory from Linux's /proc (no extra dependency).

The benchmark reads the RSS and CPU time of the processes it compares, and the CPU the
rest of the machine used meanwhile (so a run disturbed by other work can be recognised).
A sidecar with several workers is a process tree (the supervisor, its fork server, the
workers under the fork server): ``tree_*`` count all of it.
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
    fields = _stat_fields(pid)
    # utime, stime, cutime, cstime are fields 14-17 of stat(5); here indexes 11-14.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICKS


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name (which may hold spaces) start at ')' + 2.
    return text[text.rindex(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process under it (children, grandchildren, ...), parents first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry.name))[1])  # ppid: field 4 of stat(5)
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        children.setdefault(parent, []).append(int(entry.name))
    found = [pid]
    for at in found:  # breadth first; grows while walked
        found.extend(sorted(children.get(at, ())))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``'s whole tree: every live process's own time plus what its
    exited, waited-for children used (a replaced worker's time stays counted)."""
    total = 0.0
    for member in descendants(pid):
        try:
            total += cpu_seconds(member, children=True)
        except (OSError, ValueError):
            continue
    return total


def tree_rss_bytes(pid: int) -> int:
    """The sum of the RSS of ``pid``'s tree (pages shared between processes, such as a fork
    server's with its workers, count once per process: see :func:`tree_pss_bytes`)."""
    total = 0
    for member in descendants(pid):
        try:
            total += rss_bytes(member)
        except (OSError, ValueError):
            continue
    return total


def pss_bytes(pid: int) -> int:
    """Proportional set size of ``pid`` (shared pages divided among their sharers)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no Pss in /proc/{pid}/smaps_rollup")


def tree_pss_bytes(pid: int) -> int:
    """The sum of the PSS of ``pid``'s tree: its memory with shared pages counted once."""
    total = 0
    for member in descendants(pid):
        try:
            total += pss_bytes(member)
        except (OSError, ValueError):
            continue
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (nor waiting for I/O) since boot."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:]
    ticks = [int(f) for f in fields]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    # already counted in user and nice.
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]
    return busy / _TICKS
