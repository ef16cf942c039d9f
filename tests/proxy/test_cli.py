"""The ``ksidecar`` command line: configuration errors name the key and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.tools.cli import main


def test_missing_required_key_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sidecar.properties"
    config.write_text("listeners=PLAINTEXT://127.0.0.1:19092\n")
    assert main(["run", "--config", str(config)]) == 2
    assert "sidecar.upstream is required" in capsys.readouterr().err


def test_bad_flag_value_names_key_and_value(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--set", "listeners=PLAINTEXT://127.0.0.1:1", "--set", "sidecar.upstream=127.0.0.1:2",
                 "--set", "connections.max.idle.ms=-5"])
    assert code == 2
    assert "connections.max.idle.ms='-5': must be >= 1" in capsys.readouterr().err


def test_malformed_set_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--set", "no-equals-sign"]) == 2
    assert "expected key=value" in capsys.readouterr().err


def test_unreadable_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", str(tmp_path / "absent.properties")]) == 2
    assert "cannot read config file" in capsys.readouterr().err
