"""What changed on the wire between two pinned Kafka releases: the bump's change report.

Theory of operation
-------------------
A bump (:mod:`protocol.bump`) replaces the committed copies of one release's specs with
another's. Before it does, both sides are read as a :class:`SpecSet` (the manifest and the
structural copies of one directory) and :func:`compare` lists, in Kafka's own terms:

* APIs that appear or disappear among the client-facing ones (broker listener);
* per API, the request's valid and flexible versions before and after, and the versions
  gained or dropped;
* per message, fields added, removed or changed (type, versions, nullable versions, tag,
  default), walked by path with common structs inlined; tagged fields are listed on their
  own; structs whose fields changed their (wire) order; messages whose latest version
  became stable or unstable (``latestVersionUnstable``); and the messages whose copy
  changed in none of these ways (entity types, unused common structs);
* error codes added or removed (from the ``errors`` table the manifest records);
* files of the message directory that appear or disappear, and requests whose listeners
  change (an API becoming client-facing, or leaving);
* fields that name a host or a port: the sidecar rewrites broker addresses, so each one
  is a site to review (``proxy/datapath/rewrite.py``).

:meth:`ReleaseChanges.markdown` renders the report for docs/protocol.md's release history.
Everything here is facts from the two directories; nothing is read from the network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from protocol.release import (
    KAFKA_SPEC_DIR,
    MANIFEST_NAME,
    RawSpec,
    ReleaseError,
    load_json_spec,
    read_manifest,
)
from protocol.spec import Versions

__all__ = [
    "ApiChange",
    "FieldChange",
    "FieldFacts",
    "ReleaseChanges",
    "SpecSet",
    "compare",
    "flatten",
    "read_spec_set",
]

#: A field whose name ends so names where to connect (a broker's, a node's, a client's).
_ADDRESS: Final = re.compile(r"(Host|Port)$")
_MAX_DEPTH: Final = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecSet:
    """One release as committed: its manifest and the structural copies of its specs."""

    release: str
    commit: str
    #: The manifest's listing of every file of the message directory, by file name.
    files: Mapping[str, Mapping[str, Any]]
    #: The structural copies (selected specs), by message name.
    specs: Mapping[str, RawSpec]
    #: Error code -> name, when the manifest records the release's error table.
    errors: Mapping[int, str] | None = None


def read_spec_set(spec_dir: Path = KAFKA_SPEC_DIR) -> SpecSet:
    """The release committed in ``spec_dir`` (manifest and copies)."""
    manifest = read_manifest(spec_dir)
    specs: dict[str, RawSpec] = {}
    for path in sorted(spec_dir.glob("*.json")):
        if path.name != MANIFEST_NAME:
            raw = load_json_spec(path)
            specs[str(raw.get("name"))] = raw
    raw_errors = manifest.get("errors")
    errors = None
    if raw_errors is not None:
        try:
            errors = {int(code): str(name) for code, name in raw_errors.items()}
        except (AttributeError, ValueError) as exc:
            raise ReleaseError(f"{spec_dir / MANIFEST_NAME}: bad errors table: {exc}") from exc
    return SpecSet(
        release=str(manifest["release"]),
        commit=str(manifest["commit"]),
        files=manifest["files"],
        specs=specs,
        errors=errors,
    )


# --------------------------------------------------------------------------- fields


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldFacts:
    """What the wire depends on of one field (the spec's attributes, as written)."""

    type: str
    versions: str
    nullable: str = "none"
    tag: int | None = None
    tagged: str = "none"
    #: The spec's ``default`` as written (JSON), ``None`` when it declares none.
    default: str | None = None

    def describe(self) -> str:
        """``int32 [11+]``, with nullable versions, tag and default where there are some."""
        extra = "" if self.nullable == "none" else f", nullable {self.nullable}"
        extra += "" if self.default is None else f", default {self.default}"
        where = f"tag {self.tag}, " if self.tag is not None else ""
        return f"{self.type} [{where}{self.versions}{extra}]"


def flatten(raw: RawSpec) -> dict[str, FieldFacts]:
    """Every field of a spec by path (``Topics.Partitions.Timestamp``), common structs inlined."""
    structs = {s["name"]: s for s in raw.get("commonStructs", ()) if "name" in s}
    out: dict[str, FieldFacts] = {}

    def walk(fields: Iterable[RawSpec], prefix: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ReleaseError(f"{raw.get('name')}: structs nest too deep at {prefix}")
        for field in fields:
            path = f"{prefix}{field.get('name')}"
            type_ = str(field.get("type"))
            out[path] = FieldFacts(
                type=type_,
                versions=str(field.get("versions", "none")),
                nullable=str(field.get("nullableVersions", "none")),
                tag=field.get("tag"),
                tagged=str(field.get("taggedVersions", "none")),
                default=json.dumps(field["default"]) if "default" in field else None,
            )
            element = type_.removeprefix("[]")
            children = field.get("fields")
            if children is None and element in structs:
                children = structs[element].get("fields", ())
            walk(children or (), f"{path}.", depth + 1)

    walk(raw.get("fields", ()), "", 0)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldChange:
    """A field of one message added (``before`` is None), removed, or changed."""

    message: str
    path: str
    before: FieldFacts | None
    after: FieldFacts | None

    @property
    def tagged(self) -> bool:
        """True when the field is (or was) a tagged field."""
        return any(f is not None and f.tag is not None for f in (self.before, self.after))

    @property
    def names_an_address(self) -> bool:
        """True when the field names a host or a port (a site the rewriter may need)."""
        return bool(_ADDRESS.search(self.path.rsplit(".", 1)[-1]))

    def line(self) -> str:
        """``+ `Topics.Foo` int32 [11+]``, ``- ...`` or ``~ ...: before → after``."""
        if self.before is None:
            assert self.after is not None
            return f"+ `{self.path}` {self.after.describe()}"
        if self.after is None:
            return f"- `{self.path}` {self.before.describe()}"
        return f"~ `{self.path}` {self.before.describe()} → {self.after.describe()}"


def _order(raw: RawSpec) -> dict[str, list[str]]:
    """Struct path (``""`` for the top level) -> its fields' names, in wire order."""
    out: dict[str, list[str]] = {}
    for path in flatten(raw):
        parent, _, name = path.rpartition(".")
        out.setdefault(parent, []).append(name)
    return out


def _reordered(message: str, before: RawSpec, after: RawSpec) -> list[str]:
    """Structs of ``message`` whose fields present in both releases changed their order."""
    old, new = _order(before), _order(after)
    out = []
    for parent in sorted(old.keys() & new.keys()):
        common = set(old[parent]) & set(new[parent])
        if [n for n in old[parent] if n in common] != [n for n in new[parent] if n in common]:
            out.append(f"`{message}` `{parent or '(top level)'}`")
    return out


def _field_changes(
    message: str, before: RawSpec | None, after: RawSpec | None
) -> list[FieldChange]:
    old = flatten(before) if before is not None else {}
    new = flatten(after) if after is not None else {}
    return [
        FieldChange(message=message, path=path, before=old.get(path), after=new.get(path))
        for path in sorted(old.keys() | new.keys())
        if old.get(path) != new.get(path)
    ]


# --------------------------------------------------------------------------- APIs


def _range(text: str) -> Versions | None:
    parsed = Versions.parse(text)
    return None if str(parsed) == "none" else parsed


def _members(versions: Versions | None) -> set[int]:
    # validVersions are closed ranges in every Kafka spec; an open one counts its first.
    if versions is None:
        return set()
    return set(range(versions.lo, (versions.lo if versions.hi is None else versions.hi) + 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiChange:
    """One client-facing API whose request versions changed (or which came or went)."""

    key: int
    name: str
    before: Versions | None
    after: Versions | None
    flexible_before: str
    flexible_after: str

    @property
    def gained(self) -> tuple[int, ...]:
        """Versions the new release has and the old did not."""
        return tuple(sorted(_members(self.after) - _members(self.before)))

    @property
    def dropped(self) -> tuple[int, ...]:
        """Versions the old release had and the new one does not."""
        return tuple(sorted(_members(self.before) - _members(self.after)))


def _client_requests(specs: Mapping[str, RawSpec]) -> dict[int, RawSpec]:
    return {
        raw["apiKey"]: raw
        for raw in specs.values()
        if raw.get("type") == "request" and "broker" in raw.get("listeners", ())
    }


def _api_changes(before: SpecSet, after: SpecSet) -> list[ApiChange]:
    old, new = _client_requests(before.specs), _client_requests(after.specs)
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        flex_a = str(a.get("flexibleVersions", "none")) if a else "none"
        flex_b = str(b.get("flexibleVersions", "none")) if b else "none"
        va = _range(str(a.get("validVersions", "none"))) if a else None
        vb = _range(str(b.get("validVersions", "none"))) if b else None
        if va == vb and flex_a == flex_b:
            continue
        name = str((b or a or {}).get("name", "")).removesuffix("Request")
        out.append(
            ApiChange(
                key=key,
                name=name,
                before=va,
                after=vb,
                flexible_before=flex_a,
                flexible_after=flex_b,
            )
        )
    return out


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseChanges:
    """Everything :func:`compare` found between two releases."""

    before: str
    after: str
    commit: str
    date: str
    apis: tuple[ApiChange, ...]
    fields: tuple[FieldChange, ...]
    #: ``None`` when either manifest lacks the error table (not compared).
    new_errors: tuple[tuple[int, str], ...] | None
    removed_errors: tuple[tuple[int, str], ...] | None
    new_files: tuple[str, ...]
    removed_files: tuple[str, ...]
    #: ``(file, listeners before, listeners after)`` for requests whose listeners changed.
    listeners: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    #: ``(message, unstable before, unstable after)``: ``latestVersionUnstable`` changed.
    stability: tuple[tuple[str, bool, bool], ...] = ()
    #: Structs whose fields changed their order (the wire order), as report items.
    reordered: tuple[str, ...] = ()
    #: Messages whose copy changed with none of the above (entity types, unused structs).
    other: tuple[str, ...] = ()

    @property
    def new_apis(self) -> tuple[ApiChange, ...]:
        """Client-facing APIs the old release did not have."""
        return tuple(a for a in self.apis if a.before is None)

    @property
    def removed_apis(self) -> tuple[ApiChange, ...]:
        """Client-facing APIs the new release no longer has."""
        return tuple(a for a in self.apis if a.after is None)

    @property
    def address_fields(self) -> tuple[FieldChange, ...]:
        """Added or changed response fields that name a host or a port."""
        return tuple(
            f
            for f in self.fields
            if f.after is not None and f.names_an_address and f.message.endswith("Response")
        )

    def markdown(self) -> str:
        """The report as a section of docs/protocol.md's release history."""
        when = f" (committed {self.date})" if self.date else ""
        lines = [
            f"### Kafka {self.before} → {self.after}",
            "",
            f"Pinned Apache Kafka {self.after}, commit `{self.commit}`{when},"
            " by `python -m protocol.bump`.",
            "",
        ]
        lines += _items("New APIs", [_api_line(a) for a in self.new_apis])
        lines += _items("Removed APIs", [_api_line(a) for a in self.removed_apis])
        changed = [a for a in self.apis if a.before is not None and a.after is not None]
        if changed:
            lines += ["**Versions** (client-facing requests; their responses follow):", ""]
            lines += ["| Key | API | before | after | gained | dropped | flexible |"]
            lines += ["| ---: | --- | --- | --- | --- | --- | --- |"]
            for a in changed:
                flexible = (
                    a.flexible_after
                    if a.flexible_before == a.flexible_after
                    else f"{a.flexible_before} → {a.flexible_after}"
                )
                lines.append(
                    f"| {a.key} | {a.name} | {a.before} | {a.after} | {_list(a.gained)} "
                    f"| {_list(a.dropped)} | {flexible} |"
                )
            lines.append("")
        else:
            lines += ["**Versions**: no client-facing API changed its versions.", ""]
        lines += _grouped("Fields", [f for f in self.fields if not f.tagged])
        lines += _grouped("Tagged fields", [f for f in self.fields if f.tagged])
        lines += _items("Field order", list(self.reordered))
        lines += _items(
            "Latest version (`latestVersionUnstable`)",
            [
                f"`{name}`: {'unstable' if a else 'stable'} → {'unstable' if b else 'stable'}"
                for name, a, b in self.stability
            ],
        )
        if self.new_errors is None or self.removed_errors is None:
            lines += [
                f"**Error codes**: not compared (the manifest of Kafka {self.before} or "
                f"{self.after} records no error table).",
                "",
            ]
        else:
            errors = [f"+ {code} `{name}`" for code, name in self.new_errors]
            errors += [f"- {code} `{name}`" for code, name in self.removed_errors]
            lines += _items("Error codes", errors)
        files = [f"+ `{name}`" for name in self.new_files]
        files += [f"- `{name}`" for name in self.removed_files]
        files += [f"~ `{name}` listeners {list(a)} → {list(b)}" for name, a, b in self.listeners]
        lines += _items("Files of the message directory", files)
        lines += _items(
            "Fields naming an address (review `proxy/datapath/rewrite.py` SITES)",
            [f"`{f.message}` `{f.path}`" for f in self.address_fields],
        )
        lines += _items(
            "Other changes to a copy (no field, version or order change found)",
            [f"`{name}`" for name in self.other],
        )
        return "\n".join(lines).rstrip("\n") + "\n"


def _list(versions: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in versions) or "—"


def _api_line(api: ApiChange) -> str:
    versions = api.after if api.after is not None else api.before
    return f"{api.key} {api.name} (v{versions})"


def _items(title: str, items: list[str]) -> list[str]:
    if not items:
        return [f"**{title}**: none.", ""]
    return [f"**{title}**:", "", *(f"- {item}" for item in items), ""]


def _grouped(title: str, changes: list[FieldChange]) -> list[str]:
    by_message: dict[str, list[str]] = {}
    for change in changes:
        by_message.setdefault(change.message, []).append(change.line())
    items = [f"`{message}`: " + "; ".join(lines) for message, lines in sorted(by_message.items())]
    return _items(title, items)


def _errors_diff(
    before: Mapping[int, str] | None, after: Mapping[int, str] | None
) -> tuple[tuple[tuple[int, str], ...] | None, tuple[tuple[int, str], ...] | None]:
    if before is None or after is None:
        return None, None
    new = tuple((c, after[c]) for c in sorted(after) if before.get(c) != after[c])
    gone = tuple((c, before[c]) for c in sorted(before) if after.get(c) != before[c])
    return new, gone


def compare(before: SpecSet, after: SpecSet, *, date: str = "") -> ReleaseChanges:
    """The changes from release ``before`` to release ``after`` (see the module docstring)."""
    fields: list[FieldChange] = []
    for name in sorted(before.specs.keys() | after.specs.keys()):
        fields += _field_changes(name, before.specs.get(name), after.specs.get(name))
    listeners = tuple(
        (name, tuple(before.files[name]["listeners"]), tuple(after.files[name]["listeners"]))
        for name in sorted(before.files.keys() & after.files.keys())
        if after.files[name].get("type") == "request"
        and list(before.files[name]["listeners"]) != list(after.files[name]["listeners"])
    )
    new_errors, removed_errors = _errors_diff(before.errors, after.errors)
    names = sorted(before.specs.keys() & after.specs.keys())
    stability = tuple(
        (name, _unstable(before.specs[name]), _unstable(after.specs[name]))
        for name in names
        if _unstable(before.specs[name]) != _unstable(after.specs[name])
    )
    reordered = [r for n in names for r in _reordered(n, before.specs[n], after.specs[n])]
    apis = _api_changes(before, after)
    seen = {f.message for f in fields} | {m for m, _, _ in stability}
    seen |= {r.split("`")[1] for r in reordered} | {
        f.removesuffix(".json") for f, _, _ in listeners
    }
    seen |= {f"{a.name}{kind}" for a in apis for kind in ("Request", "Response")}
    other = tuple(
        name for name in names if before.specs[name] != after.specs[name] and name not in seen
    )
    return ReleaseChanges(
        before=before.release,
        after=after.release,
        commit=after.commit,
        date=date,
        apis=tuple(apis),
        fields=tuple(fields),
        new_errors=new_errors,
        removed_errors=removed_errors,
        new_files=tuple(sorted(after.files.keys() - before.files.keys())),
        removed_files=tuple(sorted(before.files.keys() - after.files.keys())),
        listeners=listeners,
        stability=stability,
        reordered=tuple(reordered),
        other=other,
    )


def _unstable(raw: RawSpec) -> bool:
    return bool(raw.get("latestVersionUnstable", False))
