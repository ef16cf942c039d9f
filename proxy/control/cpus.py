"""How many worker processes a sidecar runs: ``sidecar.workers``, and what 0 means.

A sidecar runs in its broker's pod, as a rule on the same cores as the broker. There, a
second worker process does not add a core: it takes one from the broker, and the pair
serves less than one process does (0.6-0.7 of it, measured on a 2-core machine). So
``sidecar.workers=0`` counts only the CPUs the sidecar is *given*, never the host's:

* **a cgroup CPU quota**: the smallest quota on the path from the process's own cgroup
  (``/proc/self/cgroup``) up to the root of the mounted hierarchy, since Kubernetes sets a
  container's CPU limit on the container's cgroup and a parent may hold a smaller one.
  cgroup v2 ``cpu.max`` ("QUOTA PERIOD", or "max") and cgroup v1 ``cpu.cfs_quota_us`` /
  ``cpu.cfs_period_us`` (-1: none) are both read. QUOTA/PERIOD is rounded *down*, to at
  least 1: a worker that CFS throttles in the middle of a pass answers late.
* **a cpuset narrower than the host**: fewer CPUs in the process's affinity than the host
  has (Kubernetes' static CPU manager, ``taskset``, ``docker --cpuset-cpus``).

The count is the smaller of those that are set, and never more than the CPUs the process
may run on. With neither, the sidecar shares the host's cores with its broker: one
process. An operator who gives the sidecar cores of its own sets ``sidecar.workers`` or a
CPU limit on its container. A file that cannot be read or parsed counts as absent.

:func:`choose_workers` decides from the facts alone; :func:`read_cpu_facts` reads them from
``/proc`` and ``/sys`` (the paths are parameters, for tests); :func:`resolve_workers` puts
the two together with the setting and says why, in the line ``ksidecar run`` logs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Where the process's cgroup membership is listed (``ID:CONTROLLERS:PATH`` per line).
PROC_CGROUP = Path("/proc/self/cgroup")
#: Where the cgroup hierarchies are mounted: the v2 hierarchy itself, or one directory per
#: v1 hierarchy (``cpu,cpuacct``, with a ``cpu`` link to it).
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuFacts:
    """What the sidecar is given to run on."""

    #: CPUs the process may run on (``os.sched_getaffinity``).
    affinity: int
    #: CPUs of the host (``os.cpu_count``).
    host: int
    #: The smallest cgroup CPU quota on the process's cgroup path, in cores; ``None``: none.
    quota: float | None


def choose_workers(affinity: int, host: int, quota: float | None) -> tuple[int, str]:
    """The worker count for ``sidecar.workers=0``, and why (the text in the startup log's
    parentheses).

    ``affinity`` and ``host`` are CPU counts (the cpuset is set when ``affinity < host``),
    ``quota`` the cgroup CPU quota in cores or ``None``. The count is the smaller of the
    quota rounded down (at least 1) and the cpuset, and at most ``affinity``; with neither
    set it is 1.
    """
    affinity = max(1, affinity)
    host = max(host, affinity)
    limits: list[int] = []
    reasons: list[str] = []
    if quota is not None:
        by_quota = max(1, math.floor(quota))
        limits.append(by_quota)
        reasons.append(f"cgroup CPU quota {round(quota, 2):g} cores -> {by_quota}")
    if affinity < host:
        limits.append(affinity)
        reasons.append(f"cpuset {affinity} of {host} CPUs")
    if not limits:
        return 1, (f"no CPU quota or cpuset: the sidecar shares the host's {host} CPUs with its "
                   "broker; set sidecar.workers to use more")
    count = min(limits)
    if count > affinity:  # a quota larger than the CPUs this process may run on
        count = affinity
        reasons.append(f"at most the {affinity} CPUs this process may run on")
    return count, "; ".join(reasons)


def read_cgroup_quota(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> float | None:
    """The smallest CPU quota, in cores, on the way from this process's cgroup up to the
    root of each mounted hierarchy (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); ``None`` when
    no level has one.

    Inside a container with a cgroup namespace the path is ``/`` and the mount's root is the
    container's own cgroup. Without one, the listed path may not exist under the mount (it
    is the host's), and the walk reaches the mount's root, which is then the container's.
    An unreadable ``/proc/self/cgroup`` is read as the path ``/``.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        lines = ["0::/", "1:cpu:/"]
    quotas: list[float] = []
    for line in lines:
        fields = line.strip().split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and not controllers:  # the v2 hierarchy
            quotas += (q for d in _up_from(root, path) if (q := _v2_quota(d)) is not None)
        elif "cpu" in controllers.split(","):  # the v1 hierarchy holding the cpu controller
            mount = next((m for m in (root / controllers, root / "cpu") if m.is_dir()), None)
            if mount is not None:
                quotas += (q for d in _up_from(mount, path) if (q := _v1_quota(d)) is not None)
    return min(quotas, default=None)


def read_cpu_facts(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> CpuFacts:
    """This process's :class:`CpuFacts`: its affinity, the host's CPUs, and its cgroup CPU
    quota (:func:`read_cgroup_quota`)."""
    affinity = len(os.sched_getaffinity(0))
    return CpuFacts(affinity, os.cpu_count() or affinity, read_cgroup_quota(proc_cgroup, root))


def resolve_workers(setting: int, facts: CpuFacts | None = None) -> tuple[int, str]:
    """``sidecar.workers`` as a process count, and the line that says why, e.g.
    ``sidecar.workers=0: 2 workers (cgroup CPU quota 2.5 cores -> 2; cpuset 4 of 8 CPUs)``.

    A setting above 0 is the count. For 0, :func:`choose_workers` decides from ``facts``
    (read from this process when not given).
    """
    if setting > 0:
        count, why = setting, "as set"
    else:
        facts = facts if facts is not None else read_cpu_facts()
        count, why = choose_workers(facts.affinity, facts.host, facts.quota)
    return count, f"sidecar.workers={setting}: {count} worker{'' if count == 1 else 's'} ({why})"


def worker_count(setting: int, facts: CpuFacts | None = None) -> int:
    """``sidecar.workers`` as a process count (:func:`resolve_workers`, without the why)."""
    return resolve_workers(setting, facts)[0]


def _up_from(mount: Path, path: str) -> Iterator[Path]:
    """The directories from ``path`` under ``mount`` up to ``mount`` itself (a path that
    climbs out of the namespace, ``/../x``, is read as the mount's root alone)."""
    parts = [part for part in path.strip().split("/") if part]
    if any(part in (".", "..") for part in parts):
        parts = []
    for depth in range(len(parts), -1, -1):
        yield mount.joinpath(*parts[:depth])


def _v2_quota(directory: Path) -> float | None:
    """Cores allowed by ``directory/cpu.max`` ("QUOTA PERIOD"); ``None`` for "max", a
    missing or malformed file."""
    try:
        quota, period = (directory / "cpu.max").read_text().split()
        return _cores(int(quota), int(period)) if quota != "max" else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _v1_quota(directory: Path) -> float | None:
    """Cores allowed by ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` in ``directory``;
    ``None`` for -1 (no quota), a missing or malformed file."""
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        if quota < 0:
            return None
        return _cores(quota, int((directory / "cpu.cfs_period_us").read_text()))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _cores(quota: int, period: int) -> float | None:
    """``quota / period``, or ``None`` unless both are positive."""
    return quota / period if quota > 0 and period > 0 else None
