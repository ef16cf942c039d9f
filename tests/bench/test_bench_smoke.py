"""The benchmark runner works end to end (not a timed test: only structure and sanity).

Runs ``python -m tests.bench``'s quick mode on one tiny workload against a real broker,
a real ``ksidecar run`` and Tansu's proxy, and checks the JSON it writes: every target
measured, numbers positive, ratios present. RESULTS.md is left alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bench.__main__ import BASELINES, main

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_quick_run_of_one_workload(tmp_path: Path) -> None:
    assert main(["produce-b1-acks1", "--quick", "--duration", "0.3", "--results", "no",
                 "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "latest.json").read_text())
    assert document["repeats"] == 1
    assert document["machine"]["nproc"] >= 1
    workload = document["workloads"]["produce-b1-acks1"]
    assert set(workload["targets"]) == {"direct", "sidecar", "peer"}
    for target in workload["targets"].values():
        assert target["median"] > 0
        assert len(target["runs"]) == 1
        assert target["runs"][0]["requests_per_s"] > 0
    comparisons = workload["comparisons"]
    for key in ("sidecar/direct", "peer/direct", "sidecar/peer"):
        assert math.isfinite(comparisons[key]) and comparisons[key] > 0
    assert {t["target"] for t in document["targets"]} == {"sidecar/direct ≥ 0.75", "sidecar ≥ peer"}
    assert not (tmp_path / "RESULTS.md").exists()


def test_quick_a_b_against_a_baseline_commit(tmp_path: Path) -> None:
    """``--baseline``: the sidecar of a commit (here HEAD's own tree, extracted) runs next
    to this one in front of the same broker, and is compared with it."""
    assert main(["produce-b1-acks1", "--quick", "--duration", "0.3", "--results", "no",
                 "--out", str(tmp_path), "--baseline", "HEAD"]) == 0
    document = json.loads((tmp_path / "latest.json").read_text())
    assert document["baseline"] and len(document["baseline"]) == 7
    tree = next(BASELINES.glob(f"{document['baseline']}*"))
    assert (tree / "proxy" / "tools" / "cli.py").is_file()
    workload = document["workloads"]["produce-b1-acks1"]
    assert set(workload["targets"]) == {"direct", "sidecar", "peer", "baseline"}
    assert workload["targets"]["baseline"]["runs"][0]["requests_per_s"] > 0
    assert math.isfinite(workload["comparisons"]["sidecar/baseline"])
