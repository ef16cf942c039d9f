"""RESULTS.md is shared: the runner rewrites only its own section."""

from __future__ import annotations

from pathlib import Path

from tests.bench.report import BEGIN, END, update_results_md


def test_only_the_runners_section_changes(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\n## Protocol\nkept\n")
    update_results_md(path, "## Sidecar vs direct vs peer\nfirst")
    path.write_text(path.read_text() + "\n## Quotas\nalso kept\n")
    update_results_md(path, "## Sidecar vs direct vs peer\nsecond")
    text = path.read_text()
    assert "## Protocol\nkept" in text and "## Quotas\nalso kept" in text
    assert "second" in text and "first" not in text
    assert text.count(BEGIN) == 1 and text.count(END) == 1


def test_a_dangling_marker_never_swallows_other_sections(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text(f"# Benchmark results\n\n{BEGIN}\n\n## Quotas\nkept\n")
    update_results_md(path, "## Sidecar vs direct vs peer\nnew")
    text = path.read_text()
    assert "## Quotas\nkept" in text
    assert text.count(BEGIN) == 1 and text.endswith(f"new\n{END}\n")


def test_another_generators_markers_leave_the_prose_alone(tmp_path: Path) -> None:
    """docs/sizing.md: prose before and after the block written by tests.bench.sizing."""
    from tests.bench.sizing import BEGIN as SIZING_BEGIN
    from tests.bench.sizing import END as SIZING_END

    path = tmp_path / "sizing.md"
    path.write_text(f"# Sizing\n\nbefore\n\n{SIZING_BEGIN}\nold\n{SIZING_END}\n\nafter\n")
    update_results_md(path, "new", begin=SIZING_BEGIN, end=SIZING_END)
    assert path.read_text() == f"# Sizing\n\nbefore\n\n{SIZING_BEGIN}\nnew\n{SIZING_END}\n\nafter\n"
    assert BEGIN not in path.read_text()
