"""The generator's refusals: every malformed, duplicated or stale input names what is wrong.

tests/protocol/test_codegen.py checks the table the generator writes; this file feeds it the
broken inputs a spec update or a hand edit could bring, one per check, so none of the checks
can rot unnoticed (and protocol/ keeps its full branch coverage).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from protocol import codegen
from protocol.codegen import CodegenError
from protocol.spec import NO_VERSIONS, FieldSpec, MessageSpec, Versions


def message(**overrides: Any) -> dict[str, Any]:
    """A minimal valid request spec."""
    raw: dict[str, Any] = {
        "apiKey": 1000,
        "type": "request",
        "listeners": ["broker"],
        "name": "TestRequest",
        "validVersions": "0-1",
        "flexibleVersions": "1+",
        "fields": [{"name": "A", "type": "int32", "versions": "0+"}],
    }
    raw.update(overrides)
    return raw


def field(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": "F", "type": "int32", "versions": "0+"}
    raw.update(overrides)
    return raw


# --------------------------------------------------------------------------- loading


def _write(directory: Path, name: str, raw: dict[str, Any]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(json.dumps(raw), encoding="utf-8")


def test_load_sources_rejects_misnamed_and_malformed_files(tmp_path: Path) -> None:
    _write(tmp_path, "Other.json", message())
    with pytest.raises(CodegenError, match="does not match the file name"):
        codegen.load_sources(tmp_path)
    (tmp_path / "Other.json").write_text("{ not json", encoding="utf-8")
    with pytest.raises(CodegenError, match=r"Other\.json"):
        codegen.load_sources(tmp_path)


def test_load_sources_skips_the_manifest_and_source_line_needs_it(tmp_path: Path) -> None:
    _write(tmp_path, "TestRequest.json", message())
    _write(tmp_path, "SOURCE.json", {"release": "9.9.9", "commit": "c" * 40, "files": {}})
    assert [raw["name"] for raw in codegen.load_sources(tmp_path)] == ["TestRequest"]
    assert codegen.source_line(tmp_path) == f"Apache Kafka 9.9.9 at commit {'c' * 40}"
    (tmp_path / "SOURCE.json").unlink()
    with pytest.raises(CodegenError, match=r"SOURCE\.json"):
        codegen.source_line(tmp_path)


# --------------------------------------------------------------------------- overrides


def test_field_overrides_reach_common_structs() -> None:
    raw = message(
        fields=[{"name": "S", "type": "Shared", "versions": "0+"}],
        commonStructs=[{"name": "Shared", "versions": "0+", "fields": [field()]}],
    )
    patched = codegen.apply_field_overrides(raw, {"TestRequest:Shared.F": {"versions": "1+"}})
    assert patched["commonStructs"][0]["fields"][0]["versions"] == "1+"
    assert raw["commonStructs"][0]["fields"][0]["versions"] == "0+"  # a copy was patched


def test_field_overrides_of_unknown_attributes_are_refused() -> None:
    with pytest.raises(CodegenError, match="cannot override"):
        codegen.apply_field_overrides(message(), {"TestRequest:A": {"type": "int64"}})


def _legacy_message() -> dict[str, Any]:
    return message(
        validVersions="2-3",
        fields=[
            {"name": "S", "type": "[]S", "versions": "0+", "fields": [field(name="A")]},
        ],
    )


def test_legacy_fields_are_put_back_after_their_predecessor() -> None:
    raw = _legacy_message()
    old = field(name="Old", versions="0-1")
    patched = codegen.restore_legacy_fields(raw, {"TestRequest:S": (("A", old),)})
    assert [f["name"] for f in patched["fields"][0]["fields"]] == ["A", "Old"]
    assert [f["name"] for f in raw["fields"][0]["fields"]] == ["A"]  # a copy was patched
    assert codegen.restore_legacy_fields(raw, {"Other:S": (("A", old),)}) is raw


@pytest.mark.parametrize(
    ("legacy", "error"),
    [
        ({"TestRequest:Missing": (("A", field(name="Old", versions="0")),)}, "no struct"),
        ({"TestRequest:S": (("A", field(name="A", versions="0")),)}, "already in the spec"),
        ({"TestRequest:S": (("Nope", field(name="Old", versions="0")),)}, "not there"),
        ({"TestRequest:S": (("A", field(name="Old", versions="0-2")),)}, "supported version"),
        ({"TestRequest:S": (("A", field(name="Old", versions="0+")),)}, "supported version"),
    ],
)
def test_stale_legacy_fields_are_refused(
    legacy: dict[str, tuple[tuple[str, dict[str, Any]], ...]], error: str
) -> None:
    with pytest.raises(CodegenError, match=error):
        codegen.restore_legacy_fields(_legacy_message(), legacy)


# --------------------------------------------------------------------------- conversion


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (field(versions=3), "must be a string"),
        (field(versions="x-y"), "bad versions"),
        (field(name=None), "without a name or type"),
        (field(tag=1), "tag and taggedVersions go together"),
        (field(tag=-1, taggedVersions="0+"), "bad tag"),
        (field(tag=True, taggedVersions="0+"), "bad tag"),
        (field(fields=[field()]), "cannot have fields"),
        (field(type="[]int32", default="x"), "array default must be null"),
        (field(type="bool", default="null"), "cannot default to null"),
        (field(type="int32", default="null"), "cannot default to null"),
        (field(type="int8", default=300), "does not fit int8"),
        (field(type="int32", default=True), "bad integer default"),
        (field(type="int32", default="ten"), "bad integer default"),
        (field(type="int32", default=1.5), "bad integer default"),
        (field(type="bool", default="yes"), "bad bool default"),
        (field(type="float64", default=[1]), "bad float64 default"),
        (field(type="float64", default=True), "bad float64 default"),
        (field(type="uuid", default="not-a-uuid"), "bad uuid default"),
        (field(type="bytes", default="abc"), "only take a null default"),
    ],
)
def test_bad_fields_are_refused(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(CodegenError, match=error):
        codegen.convert_message(message(fields=[raw]))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (field(type="bool", default=True), True),
        (field(type="bool", default="TRUE"), True),
        (field(type="int16", default="0x7fff"), 0x7FFF),
        (field(type="int64", default=-5), -5),
        (field(type="float64", default="1.5"), 1.5),
        (field(type="float64", default=2), 2.0),
        (field(type="string", default="text"), "text"),
        (field(type="uuid", default=str(uuid.UUID(int=9))), uuid.UUID(int=9)),
        (field(type="bytes", default="null", nullableVersions="0+"), None),
        (field(type="[]int32", default="null", nullableVersions="1+"), ()),
        (field(type="[]int32", default="null", versions="0-3", nullableVersions="0+"), None),
        (field(type="[]int32", default="null", versions="0-3", nullableVersions="0-2"), ()),
        (field(type="[]int32", default="null", versions="none"), None),
    ],
)
def test_good_defaults(raw: dict[str, Any], expected: object) -> None:
    (converted,) = codegen.convert_message(message(fields=[raw])).fields
    assert converted.default == expected


def test_structs_that_nest_forever_are_refused() -> None:
    raw = message(
        fields=[{"name": "S", "type": "Loop", "versions": "0+"}],
        commonStructs=[
            {
                "name": "Loop",
                "versions": "0+",
                "fields": [{"name": "S", "type": "Loop", "versions": "0+"}],
            }
        ],
    )
    with pytest.raises(CodegenError, match="nest too deep"):
        codegen.convert_message(raw)


def test_duplicate_field_names_are_refused() -> None:
    with pytest.raises(CodegenError, match="duplicate field names"):
        codegen.convert_message(message(fields=[field(), field()]))


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"type": "nonsense"}, "bad name or type"),
        ({"apiKey": None}, "without an apiKey"),
        ({"apiKey": True}, "without an apiKey"),
        ({"type": "header"}, "with an apiKey"),
        ({"listeners": "broker"}, "bad listeners"),
        ({"listeners": [1]}, "bad listeners"),
    ],
)
def test_bad_messages_are_refused(overrides: dict[str, Any], error: str) -> None:
    with pytest.raises(CodegenError, match=error):
        codegen.convert_message(message(**overrides))


def test_unstable_latest_version_is_kept() -> None:
    converted = codegen.convert_message(message(latestVersionUnstable=True))
    assert converted.latest_version_unstable
    assert "latest_version_unstable=True" in codegen.render([converted, _response(converted)])


# --------------------------------------------------------------------------- the table


def _response(request: MessageSpec) -> MessageSpec:
    return MessageSpec(
        "TestResponse", "response", request.api_key, request.valid, request.flexible, ()
    )


def _real_table() -> list[MessageSpec]:
    return list(codegen.build_messages())


def test_table_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _real_table()
    without_response = [m for m in table if not (m.kind == "response" and m.api_key == 0)]
    with pytest.raises(CodegenError, match="requests without responses"):
        codegen._check_table(without_response)
    twice = [*table, next(m for m in table if m.kind == "request" and m.api_key == 3)]
    with pytest.raises(CodegenError, match="two requests share"):
        codegen._check_table(twice)
    no_header = [m for m in table if m.name != "RequestHeader"]
    with pytest.raises(CodegenError, match="missing"):
        codegen._check_table(no_header)
    monkeypatch.setattr(codegen, "LEGACY_MIN_VERSION", {**codegen.LEGACY_MIN_VERSION, 999: 0})
    with pytest.raises(CodegenError, match="LEGACY_MIN_VERSION names unknown keys"):
        codegen._check_table(table)
    monkeypatch.undo()
    monkeypatch.setattr(codegen, "FIELD_OVERRIDES", {"NoSuchMessage:Field": {"versions": "0+"}})
    with pytest.raises(CodegenError, match="names no generated message"):
        codegen._check_table(table)
    monkeypatch.setattr(codegen, "FIELD_OVERRIDES", {"MetadataRequest:Topics": {"versions": "0+"}})
    codegen._check_table(table)
    monkeypatch.setattr(codegen, "LEGACY_FIELDS", {"NoSuchMessage:Field": ()})
    with pytest.raises(CodegenError, match="LEGACY_FIELDS entry"):
        codegen._check_table(table)


def test_render_edges() -> None:
    plain = MessageSpec(
        "PlainRequest",
        "request",
        1000,
        Versions(0, 0),
        NO_VERSIONS,
        (FieldSpec("B", "bytes", Versions(0), default=b"ab"),),
    )
    text = codegen.render([plain, _response(plain)])
    assert "from uuid import UUID" not in text  # no UUID default in this table
    assert 'default=b"ab"' in text
    flexible = MessageSpec("F", "request", 1000, Versions(0, 0), Versions(0), ())
    assert "NO_VERSIONS" not in codegen.render([flexible])
    with pytest.raises(CodegenError, match="same constant name"):
        codegen.render([plain, plain])
    with pytest.raises(CodegenError, match="cannot render default"):
        codegen._py_value(object())


def test_main_reports_generator_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: Any) -> str:
        raise CodegenError("broken spec")

    monkeypatch.setattr(codegen, "generate", broken)
    assert codegen.main(["--check", "--output", str(tmp_path / "g.py")]) == 2
    assert "broken spec" in capsys.readouterr().err
    monkeypatch.undo()
    assert codegen.main(["--check", "--output", str(tmp_path / "missing.py")]) == 1
