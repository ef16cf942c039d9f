"""The pinned Kafka release: every spec file it holds is represented, with its version ranges.

``protocol/specs/kafka/SOURCE.json`` lists every file of
``clients/src/main/resources/common/message`` at the pinned release (blob id, name, type, API
key, listeners, versions). These tests hold the generated table to that listing, and the
structural copies to the digests the importer recorded, so neither can drift by hand. With
a Kafka checkout, ``git ls-tree <commit> clients/src/main/resources/common/message`` gives
the same blob ids.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from protocol import codegen, release
from protocol.messages import DATA, HEADERS, MESSAGES, REQUESTS, RESPONSES
from protocol.release import KAFKA_SPEC_DIR, MANIFEST_NAME, ReleaseError
from protocol.spec import Versions

MANIFEST = release.read_manifest()
FILES: dict[str, dict[str, Any]] = MANIFEST["files"]

#: The pinned release (issue 34: the newest at hand) and the commit its tag names in
#: apache/kafka (docs/protocol.md, "Where the schemas come from").
RELEASE = "4.3.1"
COMMIT = "26b251a451ce941d3d7a55e6487bcb7f16b5ad48"


def _selected_names() -> set[str]:
    broker_keys = {
        entry["apiKey"]
        for entry in FILES.values()
        if entry["type"] == "request" and "broker" in entry["listeners"]
    }
    return {
        name
        for name, entry in FILES.items()
        if entry["name"] in release.EXTRA_MESSAGES
        or (entry["type"] == "request" and "broker" in entry["listeners"])
        or (entry["type"] == "response" and entry["apiKey"] in broker_keys)
    }


def test_manifest_names_the_pinned_release() -> None:
    assert (MANIFEST["release"], MANIFEST["commit"]) == (RELEASE, COMMIT)
    assert MANIFEST["path"] == release.KAFKA_MESSAGE_PATH
    # The whole directory is listed, not just what we keep (198 JSON files in 4.3.1:
    # `git ls-tree --name-only 4.3.1 clients/src/main/resources/common/message/`, README.md
    # aside; 4.1.0 had 197, 4.2 added ControlRecordTypeSchema.json).
    assert len(FILES) == 198
    assert all(len(entry["blob"]) == 40 for entry in FILES.values())


def test_every_selected_spec_file_is_represented_with_its_versions() -> None:
    by_name = {message.name: message for message in MESSAGES}
    selected = _selected_names()
    assert len(selected) == 158
    for file_name in sorted(selected):
        entry = FILES[file_name]
        message = by_name.get(entry["name"])
        assert message is not None, f"{file_name} of Kafka {RELEASE} is not in the table"
        valid = Versions.parse(entry["validVersions"])
        legacy = (
            codegen.LEGACY_MIN_VERSION.get(entry["apiKey"])
            if entry["apiKey"] is not None
            else codegen.LEGACY_HEADER_MIN_VERSION.get(entry["name"])
        )
        expected = valid if legacy is None else Versions(legacy, valid.hi)
        assert message.valid == expected, file_name
        assert message.flexible == Versions.parse(entry["flexibleVersions"]), file_name
        assert message.api_key == entry["apiKey"] and message.kind == entry["type"], file_name


def test_table_holds_nothing_the_release_does_not() -> None:
    names = {entry["name"] for name, entry in FILES.items() if name in _selected_names()}
    assert {message.name for message in MESSAGES} == names
    assert len(REQUESTS) == len(RESPONSES) == 77
    assert set(HEADERS) == {"RequestHeader", "ResponseHeader"}
    assert set(DATA) == {"ConsumerProtocolSubscription", "ConsumerProtocolAssignment"}


def test_unselected_files_are_controller_only_or_not_messages() -> None:
    for name in sorted(set(FILES) - _selected_names()):
        entry = FILES[name]
        assert "structure" not in entry, name
        if entry["type"] == "request":
            assert "broker" not in entry["listeners"], name
        assert not (KAFKA_SPEC_DIR / name).exists(), name


def test_structural_copies_match_the_manifest_and_hold_no_prose() -> None:
    copies = sorted(p.name for p in KAFKA_SPEC_DIR.glob("*.json") if p.name != MANIFEST_NAME)
    assert copies == sorted(_selected_names())
    for name in copies:
        text = (KAFKA_SPEC_DIR / name).read_text(encoding="utf-8")
        assert hashlib.sha256(text.encode()).hexdigest() == FILES[name]["structure"], name
        assert '"about"' not in text and "//" not in text, name
        assert release.structural_text(json.loads(text)) == text, name


# --------------------------------------------------------------------------- the importer


def _spec(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiKey": 1000,
        "type": "request",
        "listeners": ["broker"],
        "name": "TestRequest",
        "validVersions": "0-1",
        "flexibleVersions": "1+",
        "fields": [
            {"name": "A", "type": "int32", "versions": "0+", "about": "prose"},
            {
                "name": "S",
                "type": "[]S",
                "versions": "0+",
                "about": "prose",
                "fields": [{"name": "B", "type": "string", "versions": "0+"}],
            },
        ],
    }
    raw.update(overrides)
    return raw


def _kafka_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "message"
    directory.mkdir()
    specs = {
        "TestRequest": _spec(),
        "TestResponse": _spec(type="response", name="TestResponse", listeners=None),
        "ControllerOnlyRequest": _spec(
            apiKey=1001, name="ControllerOnlyRequest", listeners=["controller"]
        ),
        "ControllerOnlyResponse": _spec(
            apiKey=1001, type="response", name="ControllerOnlyResponse"
        ),
        "RequestHeader": _spec(
            apiKey=None, type="header", name="RequestHeader", validVersions="1-2"
        ),
        "SomeRecord": _spec(apiKey=None, type="data", name="SomeRecord"),
    }
    for name, raw in specs.items():
        raw = {k: v for k, v in raw.items() if v is not None}
        text = "// Licensed ...\n" + json.dumps(raw, indent=2).replace('"name"', '// x\n"name"', 1)
        (directory / f"{name}.json").write_text(text, encoding="utf-8")
    return directory


def test_import_copies_structure_and_lists_every_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "Stale.json").write_text("{}", encoding="utf-8")
    names = release.import_release(_kafka_dir(tmp_path), "9.9.9", "a" * 40, out)
    assert names == ["RequestHeader.json", "TestRequest.json", "TestResponse.json"]
    assert not (out / "Stale.json").exists()
    copy = json.loads((out / "TestRequest.json").read_text(encoding="utf-8"))
    assert copy == release.structural(_spec())
    assert list(copy) == list(_spec())  # Kafka's key order
    assert "about" not in json.dumps(copy)
    manifest = release.read_manifest(out)
    assert (manifest["release"], manifest["commit"]) == ("9.9.9", "a" * 40)
    assert set(manifest["files"]) == {
        f"{n}.json"
        for n in (
            "TestRequest",
            "TestResponse",
            "ControllerOnlyRequest",
            "ControllerOnlyResponse",
            "RequestHeader",
            "SomeRecord",
        )
    }
    entry = manifest["files"]["ControllerOnlyRequest.json"]
    assert "structure" not in entry and entry["listeners"] == ["controller"]
    original = (tmp_path / "message" / "TestRequest.json").read_bytes()
    assert manifest["files"]["TestRequest.json"]["blob"] == release.git_blob_id(original)
    # git hash-object of an empty file, a well-known id.
    assert release.git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    # The generator reads what the importer wrote.
    assert sorted(raw["name"] for raw in codegen.load_sources(out)) == [
        "RequestHeader",
        "TestRequest",
        "TestResponse",
    ]


def test_import_refusals(tmp_path: Path) -> None:
    directory = _kafka_dir(tmp_path)
    with pytest.raises(ReleaseError, match="40 lowercase hex"):
        release.import_release(directory, "1", "ABC", tmp_path / "o")
    with pytest.raises(ReleaseError, match=r"no \*\.json"):
        release.import_release(tmp_path / "empty", "1", "a" * 40, tmp_path / "o")
    (directory / "Wrong.json").write_text(json.dumps(_spec()), encoding="utf-8")
    with pytest.raises(ReleaseError, match="file name"):
        release.import_release(directory, "1", "a" * 40, tmp_path / "o")
    (directory / "Wrong.json").write_text("[1]", encoding="utf-8")
    with pytest.raises(ReleaseError, match="not an object"):
        release.import_release(directory, "1", "a" * 40, tmp_path / "o")
    (directory / "Wrong.json").write_text("{", encoding="utf-8")
    with pytest.raises(ReleaseError, match=r"Wrong\.json"):
        release.import_release(directory, "1", "a" * 40, tmp_path / "o")


def test_read_manifest_refusals(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match=r"SOURCE\.json"):
        release.read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text('{"release": "1"}', encoding="utf-8")
    with pytest.raises(ReleaseError, match="not a release manifest"):
        release.read_manifest(tmp_path)


def test_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = _kafka_dir(tmp_path)
    out = tmp_path / "out"
    args = ["--kafka-messages", str(directory), "--release", "9.9.9", "--output", str(out)]
    assert release.main([*args, "--commit", "b" * 40]) == 0
    assert "wrote 3 specs of Kafka 9.9.9" in capsys.readouterr().out
    assert release.main([*args, "--commit", "nope"]) == 2
    assert "40 lowercase hex" in capsys.readouterr().err
