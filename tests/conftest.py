"""Shared test configuration: Hypothesis profiles and the real components.

Session-scoped fixtures start real processes through `proxy.tools.rig`, once per test session and only
if some selected test asks for them: `tansu` (a broker), `zookeeper`, `spark` (a local[2]
session). Their logs live under the session's pytest temp dir (`.../rig0/`). When a test fails,
its report gets a section per component it used, with what that component logged during the
test (or, if nothing, the last lines before). Processes are stopped by the fixture finalizers,
which pytest also runs after a Ctrl-C, and failing that by `proxy.tools.rig.process`'s atexit sweep.

Hypothesis: `HYPOTHESIS_PROFILE=ci` (the default: derandomized, 100 examples, no deadline) or
`HYPOTHESIS_PROFILE=deep` (2,000 examples, random).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from proxy.tools.rig.ports import PORT_RANGE_ENV
from proxy.tools.rig.process import read_tail
from proxy.tools.rig.tansu import TansuServer, start_broker
from proxy.tools.rig.zookeeper import ZooKeeperServer, start_zookeeper

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

PHASE_ENV = "KSIDECAR_TEST_PHASE"
"""`scripts/test` runs the suite in two phases: `parallel` (pytest-xdist workers, every test but
those marked `serial`), then `serial` (one process, only those). Unset: every selected test."""

COMPONENTS = frozenset({"tansu", "zookeeper", "spark"})
"""The fixtures that start a real process: a test that uses one is `integration`, marked or not."""

PORTS_LOW, PORTS_HIGH = 10_000, 32_000
"""Where each worker's own ports come from (`KSIDECAR_PORT_RANGE`): below the kernel's
ephemeral range (32768 and up), so no outgoing connection takes one either."""


def pytest_configure(config: pytest.Config) -> None:
    """Give this process a port range of its own: slice 0 of `PORTS_LOW`-`PORTS_HIGH` for a
    process that is no xdist worker (unless `KSIDECAR_PORT_RANGE` is set already), slice 1, 2,
    ... for workers gw0, gw1, ... (always: they inherit the controller's value)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker and config.getoption("dist", "no") == "loadgroup":
        config.pluginmanager.register(_GroupCheck(), "ksidecar-xdist-group-check")
    if not worker and PORT_RANGE_ENV in os.environ:
        return
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    index = int(worker.removeprefix("gw")) + 1 if worker else 0
    width = (PORTS_HIGH - PORTS_LOW) // (workers + 1)
    low = PORTS_LOW + index * width
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + width - 1}"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """In the `serial` phase, do not import a test module whose text never says `mark.serial`:
    it holds no test of that phase (the mark is the module's own `pytestmark` or decorator),
    and importing and collecting some 6,000 tests to keep 7 took the phase 5-10 s."""
    if os.environ.get(PHASE_ENV, "") != "serial":
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    try:
        text = collection_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return None if "mark.serial" in text else True


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a real component `integration`, keep the tests of this
    phase, and send the tests that share a costly fixture to one worker.

    Tests marked `serial` measure time or load the machine; they run alone, after the parallel
    phase. Tests that share a costly fixture form one xdist group (`_shared_group`), so one
    worker sets it up once for all of them (`--dist loadgroup`).
    """
    for item in items:
        if not COMPONENTS.isdisjoint(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    phase = os.environ.get(PHASE_ENV, "")
    if phase:
        keep: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            in_phase = (item.get_closest_marker("serial") is not None) == (phase == "serial")
            (keep if in_phase else deselected).append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = keep
    for item in items:
        group = _shared_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _shared_group(item: pytest.Item) -> str | None:
    """The xdist group `item` belongs to: `spark` for a test that uses the Spark session; else,
    for a test that uses a fixture shared wider than one test and defined below this file (a
    module's recorded traffic, the fleet's ensemble, the deployed sidecar), that fixture, so
    one worker sets it up once instead of every worker that gets one of its tests. The
    components of this file (`tansu`, `zookeeper`) start once per worker anyway."""
    names = getattr(item, "fixturenames", ())
    if "spark" in names:
        return "spark"
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in sorted(names):
        definitions = info.name2fixturedefs.get(name) or ()
        if not definitions:
            continue
        fixture = definitions[-1]
        if fixture.scope != "function" and fixture.baseid not in ("", "tests"):
            return f"{fixture.baseid}::{name}"
    return None


class _GroupCheck:
    """In a `--dist loadgroup` worker, fail at once if a grouped test's node id lacks its
    group: the groups would be spread over every worker, each starting its own Spark."""

    @pytest.hookimpl(trylast=True)  # after xdist has (or has not) marked the groups in node ids
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        lost = [item.nodeid for item in items
                if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(
                f"pytest-xdist's --dist loadgroup did not group {len(lost)} test(s), e.g. "
                f"{lost[0]}: this pytest and pytest-xdist do not work together "
                "(pytest-xdist#1386); install the versions pyproject.toml pins"
            )


LOG_LINES = 60
"""How many log lines a failure report shows per component."""

# fixture name -> that component's log file, filled in as components start.
_component_logs: dict[str, Path] = {}
_log_offsets = pytest.StashKey[dict[str, int]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Remember how long each component's log was before the test, to show only its part."""
    item.stash[_log_offsets] = {name: _size(path) for name, path in _component_logs.items()}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the logs of the components a failed test used to its report."""
    report = yield
    if report.failed:
        offsets = item.stash.get(_log_offsets, {})
        for name in getattr(item, "fixturenames", ()):
            path = _component_logs.get(name)
            if path is not None:
                title, text = _log_section(path, offsets.get(name, 0))
                report.sections.append((f"{name} {title} ({path})", text))
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _log_section(path: Path, offset: int) -> tuple[str, str]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            during = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "log", "(no log file)"
    if during.strip():
        return "log during this test", "\n".join(during.splitlines()[-LOG_LINES:])
    return "log tail (nothing logged during this test)", read_tail(path, LOG_LINES)


def _started(name: str, log_path: Path) -> None:
    _component_logs[name] = log_path


@pytest.fixture(scope="session")
def rig_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's directory for component logs, configs and data."""
    return tmp_path_factory.mktemp("rig")


@pytest.fixture(scope="session")
def tansu(rig_dir: Path) -> Iterator[TansuServer]:
    """A real Tansu broker on a free loopback port: `.bootstrap`, `.host`, `.port`.

    Shared by the whole session and memory-backed: use unique topic and group names.
    """
    with start_broker(rig_dir) as broker:
        _started("tansu", broker.log_path)
        yield broker


@pytest.fixture(scope="session")
def zookeeper(rig_dir: Path) -> Iterator[ZooKeeperServer]:
    """A real standalone ZooKeeper on a free loopback port: `.connect` is "127.0.0.1:PORT"."""
    with start_zookeeper(rig_dir) as server:
        _started("zookeeper", server.log_path)
        yield server


@pytest.fixture(scope="session")
def spark(rig_dir: Path) -> Iterator[SparkSession]:
    """A local[2] SparkSession bound to loopback (UTC, 2 shuffle partitions, no type inference
    for partition columns)."""
    from proxy.tools.rig.spark import spark_log_path, start_spark, stop_spark

    session = start_spark(rig_dir, app_name="ksidecar-tests")
    _started("spark", spark_log_path(rig_dir))
    try:
        yield session
    finally:
        stop_spark(session)


@pytest.fixture
def zk_path(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer) -> Iterator[str]:
    """A ZooKeeper path no other test uses (not created); removed with its children afterwards."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:80]
    path = f"/ksidecar-tests/{slug}-{uuid.uuid4().hex[:8]}"
    yield path
    _delete_tree(zookeeper.connect, path)


def _delete_tree(connect: str, path: str) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=10.0)
    try:
        if client.exists(path):
            client.delete(path, recursive=True)
    finally:
        client.stop()
        client.close()
