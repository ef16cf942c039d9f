"""docs/observers.md: its generated blocks (contract, audit schema, keys) match the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.control.observing import main, refresh_docs

DOC = Path(__file__).resolve().parents[2] / "docs" / "observers.md"


def test_observers_doc_is_in_step_with_the_code() -> None:
    text = DOC.read_text()
    assert refresh_docs(text) == text, "run: python -m proxy.control.observing docs/observers.md"
    assert "ksidecar_observer_dropped_total" in text and "| `time` |" in text


def test_refresh_rebuilds_blocks_and_needs_its_markers(tmp_path: Path) -> None:
    stale = tmp_path / "observers.md"
    stale.write_text(DOC.read_text().replace("| `time` |", "| `tme` |"))
    assert main([str(stale)]) == 0
    assert stale.read_text() == DOC.read_text()
    with pytest.raises(ValueError, match="no <!-- generated:contract:begin --> marker"):
        refresh_docs("nothing")
    with pytest.raises(ValueError, match="no <!-- generated:contract:end --> marker"):
        refresh_docs("<!-- generated:contract:begin -->\n")
