"""Import the JSON message specs of one pinned Apache Kafka release into ``protocol/specs/kafka``.

Theory of operation
-------------------
The schema table (:mod:`protocol.messages.generated`) has one source: Kafka's own JSON
message specs (``clients/src/main/resources/common/message`` in apache/kafka) at one
release, named by its tag and commit. ``python -m protocol.release`` reads that directory
from a checkout of the pinned commit and writes, under :data:`KAFKA_SPEC_DIR`:

* one file per *selected* spec (every request whose ``listeners`` include ``"broker"``, its
  response, the request/response headers and the consumer protocol payloads), with the
  structure exactly as Kafka declares it — every key, in Kafka's order — and only the prose
  removed (``//`` comments and ``about`` strings: facts carry over, prose does not);
* :data:`MANIFEST_NAME`, which records the release tag, the commit, and for **every** file of
  the release directory (selected or not) its git blob id, name, type, API key, listeners,
  valid and flexible versions, and the SHA-256 of the structural copy written for it.

The generator (:mod:`protocol.codegen`) reads only those committed files, so regenerating
and ``--check`` need no network and no Kafka checkout. ``tests/protocol/test_release.py``
fails when a spec of the pinned release is not represented in the table, when a version
range differs from the manifest, or when a structural copy no longer matches its recorded
digest; anyone holding a checkout can check the blob ids with
``git ls-tree <commit> clients/src/main/resources/common/message``.

Usage: a bump is one command, :mod:`protocol.bump`, which reads the tag from a local git
directory of apache/kafka, imports with this module, regenerates the table and writes the
change report into docs/protocol.md::

    python -m protocol.bump 4.1.0 --kafka-git /path/to/kafka.git

This module's own command imports an already extracted directory (no report)::

    python -m protocol.release --kafka-messages kafka/clients/src/main/resources/common/message \\
        --release 4.1.0 --commit 13f70256db3c994c590e5d262a7cc50b9e973204
    python -m protocol.codegen
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

__all__ = [
    "EXTRA_MESSAGES",
    "KAFKA_MESSAGE_PATH",
    "KAFKA_SPEC_DIR",
    "MANIFEST_NAME",
    "ReleaseError",
    "git_blob_id",
    "import_release",
    "is_selected",
    "load_json_spec",
    "main",
    "read_manifest",
    "select_specs",
    "strip_json_comments",
    "structural",
    "structural_text",
]

#: A JSON object as ``json.loads`` returns it.
RawSpec = dict[str, Any]

_PACKAGE_DIR: Final = Path(__file__).resolve().parent
#: Where the structural copies of the pinned release's specs live.
KAFKA_SPEC_DIR: Final = _PACKAGE_DIR / "specs" / "kafka"
#: The manifest's file name inside :data:`KAFKA_SPEC_DIR`.
MANIFEST_NAME: Final = "SOURCE.json"
#: Where the specs live in apache/kafka.
KAFKA_MESSAGE_PATH: Final = "clients/src/main/resources/common/message"

#: Non-API messages that are part of the table whatever their listeners.
EXTRA_MESSAGES: Final = frozenset(
    {
        "RequestHeader",
        "ResponseHeader",
        "ConsumerProtocolSubscription",
        "ConsumerProtocolAssignment",
    }
)

#: Keys whose values are prose; everything else is structure and is kept.
_PROSE_KEYS: Final = frozenset({"about"})
_COMMIT_RE: Final = re.compile(r"[0-9a-f]{40}")


class ReleaseError(Exception):
    """The release directory or the committed copies cannot be used (malformed or stale)."""


# --------------------------------------------------------------------------- reading


def strip_json_comments(text: str) -> str:
    """Remove ``//`` comments (Kafka's specs carry them) outside string literals."""
    out: list[str] = []
    in_string = False
    escaped = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            i += 1
        elif ch == '"':
            in_string = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def load_json_spec(path: Path) -> RawSpec:
    """Read one JSON message spec (Kafka's, comments stripped, or one of our copies)."""
    try:
        data = json.loads(strip_json_comments(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ReleaseError(f"{path}: top level is not an object")
    return cast(RawSpec, data)


def git_blob_id(data: bytes) -> str:
    """The id git gives a file with these bytes (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


# --------------------------------------------------------------------------- selection


def _is_selected_request_or_extra(raw: RawSpec) -> bool:
    if raw.get("name") in EXTRA_MESSAGES:
        return True
    return raw.get("type") == "request" and "broker" in raw.get("listeners", ())


def select_specs(specs: Iterable[RawSpec]) -> list[RawSpec]:
    """Keep broker-facing requests, their responses, the headers and the consumer protocol."""
    specs = list(specs)
    keys = {
        raw["apiKey"] for raw in specs if _is_selected_request_or_extra(raw) and "apiKey" in raw
    }
    return [
        raw
        for raw in specs
        if _is_selected_request_or_extra(raw)
        or (raw.get("type") == "response" and raw.get("apiKey") in keys)
    ]


def is_selected(raw: RawSpec, broker_keys: set[int]) -> bool:
    """True when ``raw`` belongs in the table, given the API keys of the selected requests."""
    return _is_selected_request_or_extra(raw) or (
        raw.get("type") == "response" and raw.get("apiKey") in broker_keys
    )


# --------------------------------------------------------------------------- structure


def structural(value: Any) -> Any:
    """``value`` with every prose key removed at any depth, order and all else kept."""
    if isinstance(value, dict):
        return {k: structural(v) for k, v in value.items() if k not in _PROSE_KEYS}
    if isinstance(value, list):
        return [structural(v) for v in value]
    return value


def structural_text(raw: RawSpec) -> str:
    """The text of a structural copy: one JSON object per field, fields one per line."""
    return _render(structural(raw), "") + "\n"


def _render(value: Any, indent: str) -> str:
    # Objects that hold a "fields" list are spread over lines (one field per line); every
    # other value is written on one line, so a copy reads like Kafka's file without prose.
    if isinstance(value, dict) and ("fields" in value or "commonStructs" in value):
        inner = indent + "  "
        parts = [f"{inner}{json.dumps(k)}: {_render_member(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(parts) + f"\n{indent}}}"
    return json.dumps(value, ensure_ascii=False)


def _render_member(value: Any, indent: str) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        inner = indent + "  "
        items = [f"{inner}{_render(v, inner)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    return _render(value, indent)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- import


def _entry(path: Path, raw: RawSpec) -> dict[str, Any]:
    return {
        "blob": git_blob_id(path.read_bytes()),
        "name": raw.get("name"),
        "type": raw.get("type"),
        "apiKey": raw.get("apiKey"),
        "listeners": raw.get("listeners", []),
        "validVersions": raw.get("validVersions"),
        "flexibleVersions": raw.get("flexibleVersions"),
    }


def import_release(
    messages_dir: Path,
    release: str,
    commit: str,
    out_dir: Path = KAFKA_SPEC_DIR,
    errors: Mapping[int, str] | None = None,
) -> list[str]:
    """Write the structural copies and the manifest; return the names of the copies.

    ``out_dir`` is emptied of ``*.json`` first, so a spec dropped by a newer release goes.
    ``errors`` (code -> name, from the release's ``Errors.java``) is recorded in the
    manifest when given, so the next bump can report the error codes a release added.
    """
    if not _COMMIT_RE.fullmatch(commit):
        raise ReleaseError(f"commit must be 40 lowercase hex digits, not {commit!r}")
    paths = sorted(messages_dir.glob("*.json"))
    if not paths:
        raise ReleaseError(f"{messages_dir}: no *.json message specs")
    raws = {path.name: load_json_spec(path) for path in paths}
    for name, raw in raws.items():
        if f"{raw.get('name')}.json" != name:
            raise ReleaseError(f"{messages_dir / name}: name {raw.get('name')!r} != file name")
    broker_keys = {
        raw["apiKey"]
        for raw in raws.values()
        if _is_selected_request_or_extra(raw) and "apiKey" in raw
    }
    files: dict[str, dict[str, Any]] = {}
    copies: dict[str, str] = {}
    for path in paths:
        raw = raws[path.name]
        entry = _entry(path, raw)
        if is_selected(raw, broker_keys):
            copies[path.name] = structural_text(raw)
            entry["structure"] = _sha256(copies[path.name])
        files[path.name] = entry
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.json"):
        stale.unlink()
    for name, text in copies.items():
        (out_dir / name).write_text(text, encoding="utf-8")
    manifest: dict[str, Any] = {
        "release": release,
        "commit": commit,
        "repository": "https://github.com/apache/kafka",
        "path": KAFKA_MESSAGE_PATH,
        "files": files,
    }
    if errors is not None:
        manifest["errors"] = {str(code): errors[code] for code in sorted(errors)}
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return sorted(copies)


def read_manifest(spec_dir: Path = KAFKA_SPEC_DIR) -> Mapping[str, Any]:
    """The manifest of the committed copies (release, commit, every file of the release)."""
    path = spec_dir / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"{path}: {exc}") from exc
    if not isinstance(data, dict) or not {"release", "commit", "files"} <= data.keys():
        raise ReleaseError(f"{path}: not a release manifest")
    return cast(Mapping[str, Any], data)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m protocol.release``."""
    parser = argparse.ArgumentParser(
        prog="python -m protocol.release",
        description="Copy one Kafka release's JSON message specs (structure only) into "
        "protocol/specs/kafka and record their source.",
    )
    parser.add_argument("--kafka-messages", type=Path, required=True, help=KAFKA_MESSAGE_PATH)
    parser.add_argument("--release", required=True, help="the release tag, e.g. 4.1.0")
    parser.add_argument("--commit", required=True, help="the commit the tag points to")
    parser.add_argument("--output", type=Path, default=KAFKA_SPEC_DIR)
    args = parser.parse_args(argv)
    try:
        names = import_release(args.kafka_messages, args.release, args.commit, args.output)
    except ReleaseError as exc:
        print(f"protocol.release: {exc}", file=sys.stderr)
        return 2
    print(f"protocol.release: wrote {len(names)} specs of Kafka {args.release} to {args.output}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
