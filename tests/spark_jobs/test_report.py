"""report: every job over one synthetic audit, then the HTML page, parsed and loaded in
headless Chromium (tests/spark_jobs/browser.py; screenshots beside the page)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from spark_jobs import report, synthetic
from tests.spark_jobs.report_check import parse, summary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START = datetime(2026, 2, 1, 10, tzinfo=UTC)


@pytest.fixture(scope="module")
def reported(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    """A report over 24 hours of synthetic audit, against a mirror that lacks the second
    hour; returns the page and the source audit as one Arrow table."""
    root = tmp_path_factory.mktemp("report")
    audit, mirror = root / "audit", root / "mirror"
    synthetic.write_audit(audit, 6000, start=START, hours=24, seed=3, shape=synthetic.Shape(topics=20))
    shutil.copytree(audit, mirror)
    shutil.rmtree(mirror / "dt=2026-02-01" / "hour=11")
    index = report.run_all(audit, root / "out", spark=spark, mirror=str(mirror))
    return index, ds.dataset(audit, format="parquet").to_table()


def test_every_chart_and_table_is_on_the_page(reported: tuple[Path, pa.Table]) -> None:
    index, _ = reported

    page = parse(index)

    assert index.name == "index.html"
    assert sorted(page.charts) == sorted(report.CHARTS)
    drawn = {name for name, spec in page.specs.items() if spec}
    assert drawn == set(report.CHARTS) - {"completeness"} or drawn == set(report.CHARTS)
    assert set(report.TABLES) <= set(page.tables) | page.empty
    assert (index.parent / "data" / "cost_attribution" / "cost_attribution.csv").is_file()


def test_summary_totals_match_the_audit(reported: tuple[Path, pa.Table]) -> None:
    index, audit = reported
    page = parse(index)

    def total(api_key: int, column: str) -> int:
        rows = audit.filter(pc.and_(pc.equal(audit["api_key"], api_key), pc.is_valid(audit["topic"])))
        return int(pc.sum(rows[column]).as_py())

    assert summary(page, "records in") == f"{total(0, 'records'):,}"
    assert summary(page, "records out") == f"{total(1, 'records'):,}"
    assert summary(page, "requests") == f"{pc.sum(audit['first_row']).as_py():,}"


def test_windows_missing_from_the_mirror_are_listed(reported: tuple[Path, pa.Table]) -> None:
    index, audit = reported
    page = parse(index)

    # The mirror lacks 11:00-12:00: every topic produced to then (without error) differs there.
    eleven = audit.filter(pc.and_(
        pc.and_(pc.equal(audit["api_key"], 0), pc.is_valid(audit["topic"])),
        pc.and_(pc.equal(pc.hour(audit["time"]), 11),
                pc.or_kleene(pc.is_null(audit["error_code"]), pc.equal(audit["error_code"], 0))),
    ))
    topics = sorted(set(eleven["topic"].to_pylist()))
    listed = page.tables["completeness"][1:]
    assert sorted(row[0] for row in listed) == topics
    assert {row[1] for row in listed} == {"2026-02-01 11:00"}
    windows = summary(page, "windows differing from the mirror")
    assert windows.startswith(f"{len(topics)} of ")


def test_render_needs_only_the_outputs_and_says_what_was_not_run(
    reported: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    index, _ = reported
    shutil.copytree(index.parent / "data", tmp_path / "data")
    shutil.rmtree(tmp_path / "data" / "completeness")

    page = parse(report.render(tmp_path, title="no <mirror> & co"))

    assert "completeness" not in page.charts and "completeness" not in page.tables
    assert summary(page, "windows differing from the mirror") == "not compared"
    assert "no <mirror> & co" in "".join(page.text)  # escaped in the HTML, text again once parsed
    assert "<mirror>" not in (tmp_path / "index.html").read_text()


def test_inventory_lists_every_topic_and_the_idle_ones_are_unused(reported: tuple[Path, pa.Table]) -> None:
    index, _ = reported
    page = parse(index)

    # The synthetic cluster has 20 used topics and 10 idle ones (Shape.idle_topics), all
    # reported once an hour by each sidecar with 12 partitions; no list was supplied.
    inventory = {row[0]: row[1] for row in page.tables["inventory"][1:]}
    assert set(inventory) == {f"topic-{i:03d}" for i in range(20)} | {f"idle-{i:03d}" for i in range(10)}
    assert set(inventory.values()) == {"12"}
    unused = {row[0] for row in page.tables["unused"][1:]}
    assert {f"idle-{i:03d}" for i in range(10)} <= unused


@pytest.fixture(scope="module")
def chromium_binary() -> str:
    from tests.spark_jobs.browser import chromium

    found = chromium()
    if found is None:
        pytest.skip("chromium is not installed (scripts/test installs it: ensure_chromium)")
    return found


def test_the_page_renders_in_chromium_offline_without_errors(
    reported: tuple[Path, pa.Table], chromium_binary: str
) -> None:
    from tests.spark_jobs.browser import launch, load

    index, _ = reported
    with launch(chromium_binary) as browser:
        visit = load(browser, index, shots={
            "page": None,
            "drilldown": "window.ksReport.drill('topic-001', 'User:app-01')",
        })
    assert visit.errors == []
    assert visit.requests == []  # nothing fetched: the page works offline
    assert visit.values["charts"] == len(parse(index).specs)
    assert visit.values["svgs"] > 50  # marks drawn, not empty frames
    for shot in visit.screenshots:
        assert shot.parent == index.parent and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_empty_audit_says_not_enough_data_and_still_renders(
    spark: SparkSession, tmp_path: Path, chromium_binary: str
) -> None:
    from tests.spark_jobs.browser import launch, load

    audit = tmp_path / "audit"
    synthetic.write_audit(audit, 50, start=START, hours=1, seed=5, shape=synthetic.Shape(topics=3))
    # A range with no rows: every job runs and finds nothing.
    index = report.run_all(audit, tmp_path / "out", spark=spark,
                           since=datetime(2030, 1, 1, tzinfo=UTC), until=datetime(2030, 1, 2, tzinfo=UTC))
    page = parse(index)
    assert not page.specs and all(not drawn for drawn in page.charts.values())
    assert any("Not enough data" in t for t in page.text)
    with launch(chromium_binary) as browser:
        visit = load(browser, index, shots={"empty": None})
    assert visit.errors == [] and visit.requests == []
