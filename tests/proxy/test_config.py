"""Configuration: properties parsing, validation messages, overrides, the reference table."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.keys import (
    ConfigError,
    Endpoint,
    HostPort,
    build_config,
    env_overrides,
    load_config,
    reference_markdown,
)
from proxy.config.properties import PropertiesError, parse_properties

BASE = {"listeners": "PLAINTEXT://127.0.0.1:19092", "sidecar.upstream": "127.0.0.1:9092"}


def test_properties_syntax_like_java() -> None:
    text = (
        "# comment\n! also a comment\n"
        "a=1\nb : 2\nc 3\n"
        "d = spaced value  \n"
        "long = one, \\\n    two\n"
        "esc = tab\\there \\u0041\n"
        "key\\=with = eq\n"
        "empty=\n"
    )
    assert parse_properties(text, environ={}) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "long": "one, two",
        "esc": "tab\there A",
        "key=with": "eq",
        "empty": "",
    }


def test_env_substitution() -> None:
    env = {"HOST": "broker-0"}
    assert parse_properties("a=${HOST}:9092\nb=${PORT:-19092}\nc=$${HOST}", environ=env) == {
        "a": "broker-0:9092",
        "b": "19092",
        "c": "${HOST}",
    }
    with pytest.raises(PropertiesError, match="MISSING"):
        parse_properties("a=${MISSING}", environ={})


def test_bad_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesError, match="line 2"):
        parse_properties("a=1\nb=\\u12", environ={})


def test_defaults_and_types() -> None:
    cfg = build_config(BASE)
    assert cfg.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 19092),)
    assert cfg["sidecar.upstream"] == HostPort("127.0.0.1", 9092)
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["sidecar.unsupported.request.policy"] == "respond"
    assert cfg["broker.id"] == -1
    assert cfg.advertised("PLAINTEXT") == Endpoint("PLAINTEXT", "127.0.0.1", 19092)
    assert cfg.security_protocol("PLAINTEXT") == "PLAINTEXT"


def test_tags_observer_keys_and_listener_overrides() -> None:
    cfg = build_config(
        {
            **BASE,
            "listeners": "PLAINTEXT://127.0.0.1:19092,EXTERNAL://127.0.0.1:19093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SSL",
            "tag.rack": "r8a9",
            "tag.aws.zone": "eu-central-1",
            "observer.audit.path": "/tmp/audit",
            "listener.name.external.ssl.client.auth": "required",
        }
    )
    assert cfg.tags == {"rack": "r8a9", "aws.zone": "eu-central-1"}
    assert cfg.observer == {"observer.audit.path": "/tmp/audit"}
    assert cfg.security_protocol("EXTERNAL") == "SSL"
    assert cfg.listener_value("EXTERNAL", "ssl.client.auth") == "required"
    assert cfg.listener_value("PLAINTEXT", "ssl.client.auth") == "none"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"listeners": "127.0.0.1:9092"}, r"listeners='127.0.0.1:9092': '127.0.0.1:9092' is not name://host:port"),
        ({"listeners": "A://h:1,A://h:2"}, "listener name.*A appear twice"),
        ({"listeners": "A://h:70000"}, "port 70000 is outside"),
        ({"sidecar.upstream": "nohost"}, r"sidecar.upstream='nohost': expected host:port"),
        ({"broker.id": "x"}, r"broker.id='x': expected >= -1"),
        ({"broker.id": "-5"}, r"broker.id='-5': must be >= -1"),
        ({"sidecar.unsupported.request.policy": "drop"}, "must be one of respond, close"),
        ({"listeners": "PLAINTEXT://0.0.0.0:19092"}, "cannot be advertised"),
        ({"advertised.listeners": "OTHER://h:1"}, "OTHER is not one of the listeners"),
        ({"sidecar.address.mapping": "static"}, "needs sidecar.address.map"),
        ({"sidecar.address.mapping": "zookeeper"}, "needs zookeeper.connect"),
        ({"sidecar.address.map": "1:h:2"}, "is not <broker id>=<host>:<port>"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "is not <listener>"),
        ({"listener.name.plaintext.broker.id": "1"}, "cannot be set per listener"),
        ({"sidecar.broker.metadata.api.key": "40000"}, "between 93 and 32767"),
        ({"sidecar.broker.metadata.api.key": "7"}, "between 93 and 32767"),
        ({"connections.max.idle.ms": "soon"}, r"connections.max.idle.ms='soon'"),
    ],
)
def test_bad_values_name_key_value_and_rule(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({**BASE, **overrides})


def test_missing_required_key() -> None:
    with pytest.raises(ConfigError, match=r"sidecar.upstream is required"):
        build_config({"listeners": BASE["listeners"]})


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.properties"
    path.write_text("listeners=PLAINTEXT://127.0.0.1:19092\nsidecar.upstream=127.0.0.1:9092\nbroker.id=1\n")
    env = {"KSIDECAR_BROKER_ID": "2", "KSIDECAR_SIDECAR_LOG_LEVEL": "debug"}
    assert load_config(str(path), environ=env)["broker.id"] == 2
    assert load_config(str(path), environ=env)["sidecar.log.level"] == "debug"
    assert load_config(str(path), {"broker.id": "3"}, environ=env)["broker.id"] == 3


def test_env_override_names() -> None:
    assert env_overrides({"KSIDECAR_TAG_RACK": "a", "KSIDECAR_A__B": "x", "OTHER": "y"}) == {
        "tag.rack": "a",
        "a_b": "x",
    }


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PropertiesError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.properties"), environ={})


def test_a_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.properties"
    path.write_bytes(b"listeners=PLAINTEXT://127.0.0.1:9092\ntag.owner=Jos\xe9\n")
    with pytest.raises(PropertiesError, match=r"latin1.properties:2: not UTF-8 \(byte 0xe9 at offset 50\)"):
        load_config(str(path), environ={})


def test_reference_doc_is_current() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert doc.read_text() == reference_markdown(), "run: python -m proxy.config --markdown > docs/configuration.md"
