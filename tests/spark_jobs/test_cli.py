"""``ksidecar audit report``: the subcommand's options reach the report; other commands stay
free of Spark."""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proxy.tools import cli


def test_audit_report_passes_every_option_to_the_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from spark_jobs import report

    seen: list[argparse.Namespace] = []

    def fake_run(args: argparse.Namespace, spark: object = None) -> Path:
        seen.append(args)
        return tmp_path / "index.html"

    monkeypatch.setattr(report, "run", fake_run)

    code = cli.main(["audit", "report", "--audit", "s3a://b/audit", "--out", str(tmp_path),
                     "--mirror", "/m", "--mirror-prefix", "src.", "--since", "2026-01-02",
                     "--sidecars", "1,3", "--slo-ms", "50", "--days", "3"])

    assert code == 0
    (args,) = seen
    assert (args.audit, args.out, args.mirror, args.mirror_prefix) == (
        "s3a://b/audit", str(tmp_path), "/m", "src.")
    assert args.since == datetime(2026, 1, 2, tzinfo=UTC) and args.until is None
    assert (args.sidecars, args.slo_ms, args.days, args.window_minutes) == ([1, 3], 50.0, 3, 60)
    assert capsys.readouterr().out.strip() == f"audit report: {tmp_path / 'index.html'}"


def test_the_ksidecar_command_does_not_load_spark() -> None:
    code = "import proxy.tools.cli; proxy.tools.cli.main(['audit', 'report', '--help'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "--mirror" in result.stdout
    check = "import sys, proxy.tools.cli; print('pyspark' in sys.modules, 'altair' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["False", "False"]
