"""The API registry, the version-range model, and the generated table in docs/protocol.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol import apis
from protocol.apis import DEFAULT_REGISTRY, KAFKA_MAX_API_KEY, ApiRegistry, markdown_table
from protocol.errors import ErrorCode, UnknownApiKey, UnsupportedVersion
from protocol.messages import extensions
from protocol.spec import NO_VERSIONS, Versions

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_default_registry_holds_kafka_and_broker_metadata() -> None:
    assert extensions.BROKER_METADATA_API_KEY == 10035
    assert DEFAULT_REGISTRY.broker_metadata_key == 10035
    api = DEFAULT_REGISTRY.api(10035)
    assert (api.name, str(api.versions)) == ("BrokerMetadata", "0-1")
    assert 10035 in DEFAULT_REGISTRY and 4 not in DEFAULT_REGISTRY
    keys = [a.key for a in DEFAULT_REGISTRY]
    assert keys == sorted(keys) and len(keys) == len(DEFAULT_REGISTRY)
    assert KAFKA_MAX_API_KEY == 92
    assert DEFAULT_REGISTRY.get(3) is DEFAULT_REGISTRY.api(3)
    assert DEFAULT_REGISTRY.get(9999) is None
    assert (DEFAULT_REGISTRY.name(0), DEFAULT_REGISTRY.name(9999)) == ("Produce", "unknown")


def test_lookups_raise_protocol_errors() -> None:
    with pytest.raises(UnknownApiKey) as unknown:
        DEFAULT_REGISTRY.api(9999)
    assert (unknown.value.api_key, unknown.value.error_code) == (
        9999,
        ErrorCode.UNSUPPORTED_VERSION,
    )
    with pytest.raises(UnsupportedVersion) as version:
        DEFAULT_REGISTRY.checked(3, 14)
    assert (version.value.api_key, version.value.api_version) == (3, 14)
    assert DEFAULT_REGISTRY.checked(3, 13).name == "Metadata"


@pytest.mark.parametrize("key", [-1, 0x8000, 0, 7, 92])
def test_broker_metadata_key_must_be_outside_kafkas_keys(key: int) -> None:
    with pytest.raises(ValueError):
        ApiRegistry(broker_metadata_key=key)


def test_broker_metadata_key_is_configurable() -> None:
    registry = ApiRegistry(broker_metadata_key=93)
    assert registry.api(93).name == "BrokerMetadata" and 10035 not in registry


def test_versions_model() -> None:
    assert str(Versions(3, None)) == "3+"
    assert str(Versions(0, 2)) == "0-2"
    assert str(Versions(5, 5)) == "5"
    assert str(NO_VERSIONS) == "none"
    assert Versions.parse(" 3+ ") == Versions(3, None)
    assert Versions.parse("0-2") == Versions(0, 2)
    assert Versions.parse("5") == Versions(5, 5)
    assert Versions.parse("none") is NO_VERSIONS
    assert 4 in Versions(3, None) and 2 not in Versions(3, None) and 3 not in Versions(0, 2)
    assert "3" not in Versions(0, 5)
    assert 0 not in NO_VERSIONS


def test_flexible_from() -> None:
    assert apis.flexible_from(DEFAULT_REGISTRY.api(3)) == 9
    assert apis.flexible_from(DEFAULT_REGISTRY.api(17)) is None  # SaslHandshake: never
    assert apis.flexible_from(DEFAULT_REGISTRY.api(10035)) == 1


def test_markdown_table_rows() -> None:
    table = markdown_table()
    assert "| 0 | Produce | 0-13 | 9 |" in table
    assert "| 17 | SaslHandshake | 0-1 | never |" in table
    assert "| 10035 | BrokerMetadata | 0-1 | 1 |" in table
    assert len(table.splitlines()) == 2 + len(DEFAULT_REGISTRY)


def test_main_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert apis.main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown_table()


def test_docs_table_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    begin, end = "<!-- api-table:begin -->\n", "<!-- api-table:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == markdown_table(), (
        "docs/protocol.md is stale: paste `python -m protocol.apis --markdown` between its "
        "api-table markers"
    )


def test_docs_name_the_extension_key_and_its_config() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "10035" in text and "sidecar.broker.metadata.api.key" in text
    for tag in (
        "broker.id",
        "broker.version",
        "broker.version.int",
        "compression.codecs",
        "message.max.bytes",
        "message.formats",
        "endpoints",
        "tag.<name>",
    ):
        assert f"`{tag}" in text
