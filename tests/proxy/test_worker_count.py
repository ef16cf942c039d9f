"""``sidecar.workers=0`` (proxy/control/cpus.py): the count follows the CPUs the sidecar is
given (a cgroup CPU quota, a cpuset narrower than the host), and is 1 without either.

The decision is checked on facts given by hand; the reader on fake ``/proc/self/cgroup``
and ``/sys/fs/cgroup`` trees in a temporary directory.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from proxy.config import load_config
from proxy.control import cpus
from proxy.control.cpus import (
    CpuFacts,
    choose_workers,
    read_cgroup_quota,
    read_cpu_facts,
    resolve_workers,
    worker_count,
)
from proxy.tools.cli import prepare

# -- the decision -----------------------------------------------------------------------------


def test_no_quota_and_every_host_cpu_means_one_process() -> None:
    assert choose_workers(8, 8, None) == (1, "no CPU quota or cpuset: the sidecar shares the host's 8 CPUs with "
                                              "its broker; set sidecar.workers to use more")
    assert choose_workers(2, 2, None)[0] == 1


def test_a_quota_is_rounded_down() -> None:
    assert choose_workers(8, 8, 2.5) == (2, "cgroup CPU quota 2.5 cores -> 2")
    assert choose_workers(8, 8, 3.0) == (3, "cgroup CPU quota 3 cores -> 3")
    assert choose_workers(8, 8, 2.99) == (2, "cgroup CPU quota 2.99 cores -> 2")


def test_a_quota_below_one_core_still_runs_one_worker() -> None:
    assert choose_workers(8, 8, 0.5) == (1, "cgroup CPU quota 0.5 cores -> 1")
    assert choose_workers(8, 8, 0.01)[0] == 1


def test_a_cpuset_narrower_than_the_host() -> None:
    assert choose_workers(3, 8, None) == (3, "cpuset 3 of 8 CPUs")
    assert choose_workers(1, 8, None) == (1, "cpuset 1 of 8 CPUs")


def test_quota_and_cpuset_the_smaller_wins() -> None:
    assert choose_workers(2, 8, 4.0) == (2, "cgroup CPU quota 4 cores -> 4; cpuset 2 of 8 CPUs")
    assert choose_workers(4, 8, 2.5) == (2, "cgroup CPU quota 2.5 cores -> 2; cpuset 4 of 8 CPUs")


def test_a_quota_above_the_cpus_the_process_may_run_on_is_capped() -> None:
    assert choose_workers(8, 8, 16.0) == (8, "cgroup CPU quota 16 cores -> 16; at most the 8 CPUs this "
                                             "process may run on")


def test_the_startup_line() -> None:
    assert resolve_workers(0, CpuFacts(affinity=4, host=8, quota=2.5)) == (
        2, "sidecar.workers=0: 2 workers (cgroup CPU quota 2.5 cores -> 2; cpuset 4 of 8 CPUs)")
    assert resolve_workers(0, CpuFacts(affinity=2, host=2, quota=None)) == (
        1, "sidecar.workers=0: 1 worker (no CPU quota or cpuset: the sidecar shares the host's 2 CPUs with its "
           "broker; set sidecar.workers to use more)")


def test_an_explicit_setting_wins() -> None:
    assert resolve_workers(3, CpuFacts(affinity=8, host=8, quota=None)) == (3, "sidecar.workers=3: 3 workers (as set)")
    assert worker_count(1, CpuFacts(affinity=2, host=8, quota=4.0)) == 1
    assert worker_count(5, CpuFacts(affinity=2, host=8, quota=1.0)) == 5
    assert worker_count(0, CpuFacts(affinity=2, host=8, quota=1.0)) == 1


# -- the reader -------------------------------------------------------------------------------


def _tree(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A fake ``/proc/self/cgroup`` holding ``membership`` and a cgroup mount holding
    ``files`` (paths relative to the mount)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(membership)
    root = tmp_path / "cgroup"
    root.mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return proc, root


def test_cgroup_v2_in_a_cgroup_namespace(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/\n", {"cpu.max": "250000 100000\n"})
    assert read_cgroup_quota(proc, root) == 2.5
    (root / "cpu.max").write_text("max 100000\n")
    assert read_cgroup_quota(proc, root) is None
    (root / "cpu.max").unlink()
    assert read_cgroup_quota(proc, root) is None


def test_cgroup_v2_nested_path_the_smallest_quota_up_to_the_root(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/cpu.max": "max 100000\n",   # the container: no limit of its own
        "kubepods/pod1/cpu.max": "150000 100000\n",    # the pod: 1.5 cores
        "kubepods/cpu.max": "400000 100000\n",         # every pod: 4 cores
    })
    assert read_cgroup_quota(proc, root) == 1.5
    (root / "kubepods/pod1/ctr/cpu.max").write_text("50000 100000\n")
    assert read_cgroup_quota(proc, root) == 0.5


def test_cgroup_v2_the_listed_path_missing_under_the_mount(tmp_path: Path) -> None:
    """No cgroup namespace: the path is the host's, the mount's root is the container's."""
    proc, root = _tree(tmp_path, "0::/system.slice/docker-abc.scope\n", {"cpu.max": "200000 100000\n"})
    assert read_cgroup_quota(proc, root) == 2.0


def test_a_path_out_of_the_namespace_reads_the_mount_root_alone(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/../elsewhere\n", {"cpu.max": "300000 100000\n",
                                                         "elsewhere/cpu.max": "100000 100000\n"})
    assert read_cgroup_quota(proc, root) == 3.0


def test_cgroup_v1(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n", {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "memory/docker/abc/cpu.cfs_quota_us": "10000\n",  # not the cpu hierarchy: not read
        "memory/docker/abc/cpu.cfs_period_us": "100000\n",
    })
    assert read_cgroup_quota(proc, root) == 3.0
    (root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    assert read_cgroup_quota(proc, root) is None


def test_cgroup_v1_nested_and_mounted_as_cpu(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "3:cpuacct,cpu:/kubepods/pod1/ctr\n", {
        "cpu/kubepods/pod1/ctr/cpu.cfs_quota_us": "-1\n",
        "cpu/kubepods/pod1/ctr/cpu.cfs_period_us": "100000\n",
        "cpu/kubepods/pod1/cpu.cfs_quota_us": "75000\n",
        "cpu/kubepods/pod1/cpu.cfs_period_us": "50000\n",
    })
    assert read_cgroup_quota(proc, root) == 1.5


@pytest.mark.parametrize("text", ["", "garbage\n", "250000\n", "abc 100000\n", "0 100000\n", "-5 100000\n",
                                  "250000 0\n", "250000 100000 7\n"])
def test_a_malformed_cpu_max_is_no_quota(tmp_path: Path, text: str) -> None:
    proc, root = _tree(tmp_path, "0::/ctr\n", {"ctr/cpu.max": text})
    assert read_cgroup_quota(proc, root) is None


def test_unreadable_or_malformed_files_are_absent(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/a/b\n", {"a/cpu.max": "200000 100000\n"})
    (root / "a/b/cpu.max").mkdir(parents=True)  # cannot be read as a file
    assert read_cgroup_quota(proc, root) == 2.0
    (root / "a/cpu.max").write_bytes(b"\xff\xfe 100000\n")  # not text
    assert read_cgroup_quota(proc, root) is None
    proc, root = _tree(tmp_path / "v1", "4:cpu:/\n", {"cpu/cpu.cfs_quota_us": "x\n",
                                                      "cpu/cpu.cfs_period_us": "100000\n"})
    assert read_cgroup_quota(proc, root) is None
    (root / "cpu/cpu.cfs_quota_us").write_text("200000\n")
    (root / "cpu/cpu.cfs_period_us").unlink()
    assert read_cgroup_quota(proc, root) is None


def test_malformed_membership_lines_are_skipped(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "nonsense\n\n0::/ctr\n", {"ctr/cpu.max": "100000 100000\n"})
    assert read_cgroup_quota(proc, root) == 1.0


def test_an_unreadable_membership_reads_the_mount_roots(tmp_path: Path) -> None:
    _, root = _tree(tmp_path, "", {"cpu.max": "200000 100000\n"})
    assert read_cgroup_quota(tmp_path / "absent", root) == 2.0
    assert read_cgroup_quota(tmp_path / "absent", tmp_path / "no-cgroup-mount") is None


def test_read_cpu_facts(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})
    affinity = len(os.sched_getaffinity(0))
    assert read_cpu_facts(proc, root) == CpuFacts(affinity=affinity, host=os.cpu_count() or affinity, quota=1.5)


# -- where it is used -------------------------------------------------------------------------


def test_ksidecar_run_logs_the_count_and_why(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(cpus, "read_cpu_facts", lambda: CpuFacts(affinity=2, host=2, quota=None))
    config = load_config(None, {"listeners": "PLAINTEXT://127.0.0.1:1", "sidecar.upstream": "127.0.0.1:2"}, environ={})
    with caplog.at_level(logging.INFO, logger="ksidecar"):
        prepare(config)  # one worker: a single process, nothing forked
    assert ("sidecar.workers=0: 1 worker (no CPU quota or cpuset: the sidecar shares the host's 2 CPUs with its "
            "broker; set sidecar.workers to use more)") in caplog.messages
