"""The one-command bump: a release read from a local git directory, the change report, the docs.

A small apache/kafka stand-in is built with git in a temporary directory: tag ``9.0.0`` holds
the committed structural copies of the pinned release (plus a controller-only pair and an
``Errors.java``), tag ``9.1.0`` changes them the way a release does (a new version with a new
field, a new tagged field, a removed field, a new API whose answer names hosts, new and
removed files, a listeners change, a new error code). Every expected line below is written
from those edits by hand (with the pinned release's own numbers where an edit extends them),
not read from the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from protocol import bump as bump_mod
from protocol import release, release_git, release_notes
from protocol.bump import BumpPaths, bump, pin_line, readiness_releases, update_doc
from protocol.release import KAFKA_MESSAGE_PATH, KAFKA_SPEC_DIR, MANIFEST_NAME, ReleaseError
from protocol.release_notes import FieldChange, FieldFacts, SpecSet, compare, flatten
from protocol.spec import Versions

ROOT = Path(__file__).resolve().parents[2]

ERRORS_V1 = """package org.apache.kafka.common.protocol;
public enum Errors {
    UNKNOWN_SERVER_ERROR(-1, "The server experienced an unexpected error.",
            UnknownServerException::new),
    NONE(0, null, message -> null),
    OFFSET_OUT_OF_RANGE(1, "The requested offset is not within the range.",
            OffsetOutOfRangeException::new);

    Errors(int code, String defaultExceptionString, Function<String, ApiException> builder) {}
}
"""
ERRORS_V2 = ERRORS_V1.replace(
    "OffsetOutOfRangeException::new);",
    'OffsetOutOfRangeException::new),\n    SHINY_NEW_ERROR(200, "New.", ShinyException::new);',
)


def _spec_of(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((KAFKA_SPEC_DIR / f"{name}.json").read_text("utf-8"))
    return raw


#: ListOffsets' valid versions in the pinned release: the stand-in's 9.1.0 adds the next one.
LO, HI = (int(v) for v in _spec_of("ListOffsetsRequest")["validVersions"].split("-"))
NEW = HI + 1
#: FetchResponse's newest version, where the stand-in adds a tagged field.
FETCH_HI = int(_spec_of("FetchResponse")["validVersions"].split("-")[1])
#: Whether OffsetCommit's latest version is unstable in the pinned release (9.1.0 flips it).
UNSTABLE = bool(_spec_of("OffsetCommitRequest").get("latestVersionUnstable", False))
FLIP = "unstable → stable" if UNSTABLE else "stable → unstable"

DOC = """# Protocol

<!-- kafka-pin:begin -->
old pin
<!-- kafka-pin:end -->

<!-- api-table:begin -->
old table
<!-- api-table:end -->

## Release history

<!-- release-history:begin -->
### Kafka 8.0.0 → 9.0.0

An older entry.
<!-- release-history:end -->
"""

FROB_REQUEST = {
    "apiKey": 93,
    "type": "request",
    "listeners": ["broker"],
    "name": "FrobRequest",
    "validVersions": "0-1",
    "flexibleVersions": "0+",
    "fields": [{"name": "GroupId", "type": "string", "versions": "0+"}],
}
FROB_RESPONSE = {
    "apiKey": 93,
    "type": "response",
    "name": "FrobResponse",
    "validVersions": "0-1",
    "flexibleVersions": "0+",
    "fields": [
        {"name": "ErrorCode", "type": "int16", "versions": "0+"},
        {"name": "Nodes", "type": "[]Node", "versions": "1+"},
    ],
    "commonStructs": [
        {
            "name": "Node",
            "versions": "1+",
            "fields": [
                {"name": "NodeId", "type": "int32", "versions": "1+"},
                {"name": "Host", "type": "string", "versions": "1+"},
                {"name": "Port", "type": "int32", "versions": "1+"},
            ],
        }
    ],
}


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_DATE": "2026-05-22T12:00:00+00:00",
        "GIT_AUTHOR_DATE": "2026-05-22T12:00:00+00:00",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _write(path: Path, raw: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")


def _edit(path: Path, change: Any) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    change(raw)
    _write(path, raw)


def _partitions(raw: dict[str, Any]) -> list[dict[str, Any]]:
    topics = next(f for f in raw["fields"] if f["name"] == "Topics")
    fields: list[dict[str, Any]] = next(f for f in topics["fields"] if f["name"] == "Partitions")[
        "fields"
    ]
    return fields


def _v2_list_offsets_request(raw: dict[str, Any]) -> None:
    raw["validVersions"] = f"{LO}-{NEW}"
    _partitions(raw).append({"name": "NewThing", "type": "int32", "versions": f"{NEW}+"})


def _v2_list_offsets_response(raw: dict[str, Any]) -> None:
    raw["validVersions"] = f"{LO}-{NEW}"
    parts = _partitions(raw)
    parts[:] = [f for f in parts if f["name"] != "LeaderEpoch"]


def _v2_fetch_response(raw: dict[str, Any]) -> None:
    raw["fields"].append(
        {
            "name": "NewTag",
            "type": "int32",
            "versions": f"{FETCH_HI}+",
            "taggedVersions": f"{FETCH_HI}+",
            "tag": 9,
        }
    )


def _v2_add_raft_voter(raw: dict[str, Any]) -> None:
    raw["listeners"] = list(reversed(raw["listeners"]))  # ["controller", "broker"] in 4.x


def _v2_heartbeat(raw: dict[str, Any]) -> None:
    fields = raw["fields"]  # GroupId, GenerationId, MemberId, ... -> MemberId before GenerationId
    fields[1], fields[2] = fields[2], fields[1]


def _v2_describe_cluster(raw: dict[str, Any]) -> None:
    endpoint_type = next(f for f in raw["fields"] if f["name"] == "EndpointType")
    endpoint_type["default"] = "2"


def _v2_offset_commit(raw: dict[str, Any]) -> None:
    raw["latestVersionUnstable"] = not UNSTABLE


def _v2_delete_groups(raw: dict[str, Any]) -> None:
    raw["fields"][0]["entityType"] = "topicName"  # no wire change


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The stand-in repository, its two release commits and a spec dir pinned at 9.0.0."""
    repo = tmp_path_factory.mktemp("kafka")
    _git(repo, "init", "-q", "-b", "trunk")
    messages = repo / KAFKA_MESSAGE_PATH
    messages.mkdir(parents=True)
    for path in KAFKA_SPEC_DIR.glob("*.json"):
        if path.name != MANIFEST_NAME:
            shutil.copy(path, messages / path.name)
    vote = {"apiKey": 52, "type": "request", "listeners": ["controller"], "name": "VoteRequest",
            "validVersions": "0-2", "flexibleVersions": "0+", "fields": []}  # fmt: skip
    _write(messages / "VoteRequest.json", vote)
    _write(messages / "VoteResponse.json", {**vote, "type": "response", "name": "VoteResponse"})
    (messages / "NOTES.txt").write_text("not a spec\n", encoding="utf-8")
    errors = repo / release_git.ERRORS_PATH
    errors.parent.mkdir(parents=True)
    errors.write_text(ERRORS_V1, encoding="utf-8")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "9.0.0")
    _git(repo, "tag", "-a", "-m", "release", "9.0.0")  # annotated: peeled to its commit
    v1 = _git(repo, "rev-parse", "HEAD")

    _edit(messages / "ListOffsetsRequest.json", _v2_list_offsets_request)
    _edit(messages / "ListOffsetsResponse.json", _v2_list_offsets_response)
    _edit(messages / "FetchResponse.json", _v2_fetch_response)
    _edit(messages / "AddRaftVoterRequest.json", _v2_add_raft_voter)
    _edit(messages / "HeartbeatRequest.json", _v2_heartbeat)
    _edit(messages / "DescribeClusterRequest.json", _v2_describe_cluster)
    _edit(messages / "OffsetCommitRequest.json", _v2_offset_commit)
    _edit(messages / "DeleteGroupsRequest.json", _v2_delete_groups)
    _write(messages / "FrobRequest.json", FROB_REQUEST)
    _write(messages / "FrobResponse.json", FROB_RESPONSE)
    (messages / "VoteRequest.json").unlink()
    (messages / "VoteResponse.json").unlink()
    decommission = {**vote, "apiKey": 94, "name": "DecommissionControllerRequest"}
    _write(messages / "DecommissionControllerRequest.json", decommission)
    _write(messages / "DecommissionControllerResponse.json",
           {**decommission, "type": "response", "name": "DecommissionControllerResponse"})  # fmt: skip
    errors.write_text(ERRORS_V2, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "9.1.0")
    _git(repo, "tag", "9.1.0-rc0")
    _git(repo, "tag", "9.1.0")
    v2 = _git(repo, "rev-parse", "HEAD")
    _git(repo, "branch", "9.1")

    # The pin at 9.0.0, imported without an error table (as 4.1.0 was).
    pinned = tmp_path_factory.mktemp("pinned")
    release.import_release(_export(repo, v1, tmp_path_factory.mktemp("m1")), "9.0.0", v1, pinned)
    return {"repo": repo, "v1": v1, "v2": v2, "pinned": pinned}


def _export(repo: Path, commit: str, out: Path) -> Path:
    release_git.export_messages(repo / ".git", commit, out)
    return out


def _paths(kafka: dict[str, Any], tmp_path: Path) -> BumpPaths:
    spec_dir = tmp_path / "specs"
    shutil.copytree(kafka["pinned"], spec_dir)
    doc = tmp_path / "protocol.md"
    doc.write_text(DOC, encoding="utf-8")
    return BumpPaths(
        spec_dir=spec_dir,
        generated=tmp_path / "generated.py",
        doc=doc,
        readiness_table=tmp_path / "table.py",
    )


# --------------------------------------------------------------------------- the git reader


def test_tags_resolve_to_commits_and_only_release_tags_count(kafka: dict[str, Any]) -> None:
    git = release_git.git_dir_of(kafka["repo"])
    assert git == kafka["repo"] / ".git"
    assert release_git.git_dir_of(git) == git  # a bare mirror is its own git directory
    assert release_git.release_tags(git) == ["9.0.0", "9.1.0"]  # no -rc, no branch
    ref = release_git.resolve_tag(git, "9.0.0")
    assert (ref.tag, ref.commit, ref.date) == ("9.0.0", kafka["v1"], "2026-05-22")
    for bad, match in (("9.1", "not a release tag"), ("9.1.0-rc0", "not a release tag"),
                       ("9.9.9", r"no tag 9\.9\.9 \(release tags: \['9\.0\.0', '9\.1\.0'\]\)")):  # fmt: skip
        with pytest.raises(ReleaseError, match=match):
            release_git.resolve_tag(git, bad)
    with pytest.raises(ReleaseError, match="not a git repository"):
        release_git.resolve_tag(kafka["repo"] / "nowhere", "9.0.0")


def test_export_is_the_tree_byte_for_byte(kafka: dict[str, Any], tmp_path: Path) -> None:
    git = release_git.git_dir_of(kafka["repo"])
    names = release_git.export_messages(git, kafka["v2"], tmp_path)
    assert "FrobRequest.json" in names and "VoteRequest.json" not in names
    listed = _git(kafka["repo"], "ls-tree", kafka["v2"], KAFKA_MESSAGE_PATH + "/")
    blobs = {
        line.split("\t")[1].rsplit("/", 1)[1]: line.split()[2]
        for line in listed.splitlines()
        if line.endswith(".json")
    }
    assert sorted(blobs) == names
    for name in names:
        assert release.git_blob_id((tmp_path / name).read_bytes()) == blobs[name], name
    empty_tree = _git(kafka["repo"], "hash-object", "-t", "tree", "-w", "/dev/null")
    with pytest.raises(ReleaseError, match=r"has no clients/src/main/resources/common/message"):
        release_git.export_messages(git, empty_tree, tmp_path)


def test_error_codes_come_from_errors_java(kafka: dict[str, Any]) -> None:
    git = release_git.git_dir_of(kafka["repo"])
    assert release_git.read_error_codes(git, kafka["v1"]) == {
        -1: "UNKNOWN_SERVER_ERROR",
        0: "NONE",
        1: "OFFSET_OUT_OF_RANGE",
    }
    assert release_git.read_error_codes(git, kafka["v2"])[200] == "SHINY_NEW_ERROR"  # type: ignore[index]
    assert release_git.has_commit(git, kafka["v1"]) and not release_git.has_commit(git, "f" * 40)
    empty_tree = _git(kafka["repo"], "hash-object", "-t", "tree", "-w", "/dev/null")
    assert release_git.read_error_codes(git, empty_tree) is None


def test_no_git_on_path_is_a_release_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReleaseError, match="cannot run git"):
        release_git.release_tags(tmp_path)


def test_version_key_orders_numerically() -> None:
    assert sorted(["4.10.0", "4.9.1", "4.2.0"], key=release_git.version_key) == [
        "4.2.0",
        "4.9.1",
        "4.10.0",
    ]


# --------------------------------------------------------------------------- the bump


def test_bump_writes_copies_table_docs_and_the_report(
    kafka: dict[str, Any], tmp_path: Path
) -> None:
    paths = _paths(kafka, tmp_path)
    written: list[tuple[Path, dict[str, str], Path]] = []
    changes = bump(
        "9.1.0",
        kafka["repo"],
        paths,
        readiness=lambda git, releases, table: written.append((git, dict(releases), table)),
    )
    assert changes is not None
    manifest = release.read_manifest(paths.spec_dir)
    assert (manifest["release"], manifest["commit"]) == ("9.1.0", kafka["v2"])
    assert manifest["errors"] == {"-1": "UNKNOWN_SERVER_ERROR", "0": "NONE",
                                  "1": "OFFSET_OUT_OF_RANGE", "200": "SHINY_NEW_ERROR"}  # fmt: skip
    assert (paths.spec_dir / "FrobResponse.json").exists()
    assert not (paths.spec_dir / "DecommissionControllerRequest.json").exists()  # controller
    generated = paths.generated.read_text(encoding="utf-8")
    assert f"# Sources: Apache Kafka 9.1.0 at commit {kafka['v2']}." in generated
    assert f'FieldSpec("NewThing", "int32", Versions({NEW}), default=0)' in generated
    # The readiness table gets each minor line after 9.0.0: 9.1 at its tag.
    assert written == [(kafka["repo"] / ".git", {"9.1": kafka["v2"]}, paths.readiness_table)]

    doc = paths.doc.read_text(encoding="utf-8")
    assert pin_line("9.1.0", kafka["v2"]) in doc
    assert f"| 2 | ListOffsets | 0-{NEW} | 6 |" in doc  # legacy minimum 0 kept
    assert "| 93 | Frob | 0-1 | 0 |" in doc
    history = doc.split("<!-- release-history:begin -->\n")[1]
    assert history.startswith("### Kafka 9.0.0 → 9.1.0\n")
    assert history.index("### Kafka 8.0.0 → 9.0.0") > history.index("### Kafka 9.0.0 → 9.1.0")

    report = changes.markdown()
    assert report in doc
    assert f"Pinned Apache Kafka 9.1.0, commit `{kafka['v2']}` (committed 2026-05-22)" in report
    assert "**New APIs**:\n\n- 93 Frob (v0-1)\n" in report
    assert "**Removed APIs**: none." in report
    assert f"| 2 | ListOffsets | {LO}-{HI} | {LO}-{NEW} | {NEW} | — | 6+ |" in report
    assert f"- `ListOffsetsRequest`: + `Topics.Partitions.NewThing` int32 [{NEW}+]\n" in report
    assert (
        '- `ListOffsetsResponse`: - `Topics.Partitions.LeaderEpoch` int32 [4+, default "-1"]\n'
        in report
    )
    assert (
        f"**Tagged fields**:\n\n- `FetchResponse`: + `NewTag` int32 [tag 9, {FETCH_HI}+]\n"
        in report
    )
    # The 9.0.0 manifest has no error table: read from the git directory, which has 9.0.0.
    assert "**Error codes**:\n\n- + 200 `SHINY_NEW_ERROR`\n" in report
    assert "**Field order**:\n\n- `HeartbeatRequest` `(top level)`\n" in report
    assert '- `DescribeClusterRequest`: ~ `EndpointType` int8 [1+, default "1"] → ' in report
    assert "**Latest version (`latestVersionUnstable`)**:\n\n" in report
    assert f"- `OffsetCommitRequest`: {FLIP}\n" in report
    assert (
        "**Other changes to a copy (no field, version or order change found)**:\n\n"
        "- `DeleteGroupsRequest`\n" in report
    )
    assert "+ `DecommissionControllerRequest.json`" in report
    assert "- `VoteRequest.json`" in report
    assert (
        "~ `AddRaftVoterRequest.json` listeners ['controller', 'broker'] → "
        "['broker', 'controller']" in report
    )
    assert (
        "**Fields naming an address (review `proxy/datapath/rewrite.py` SITES)**:\n\n"
        "- `FrobResponse` `Nodes.Host`\n- `FrobResponse` `Nodes.Port`\n" in report
    )
    assert [(a.key, a.gained, a.dropped) for a in changes.new_apis] == [(93, (0, 1), ())]
    list_offsets = next(a for a in changes.apis if a.key == 2)
    assert (list_offsets.gained, list_offsets.dropped) == ((NEW,), ())

    # Again at the same tag: nothing new to report, the history is left as it is.
    assert bump("9.1.0", kafka["repo"], paths, readiness=None) is None
    assert paths.doc.read_text(encoding="utf-8") == doc


def test_a_second_bump_compares_error_codes_and_replaces_its_own_entry(
    kafka: dict[str, Any], tmp_path: Path
) -> None:
    git = release_git.git_dir_of(kafka["repo"])
    before = release_notes.read_spec_set(kafka["pinned"])
    with_errors = SpecSet(release=before.release, commit=before.commit, files=before.files,
                          specs=before.specs, errors=release_git.read_error_codes(git, kafka["v1"]))  # fmt: skip
    stage = tmp_path / "stage"
    release.import_release(_export(kafka["repo"], kafka["v2"], tmp_path / "m"), "9.1.0",
                           kafka["v2"], stage, release_git.read_error_codes(git, kafka["v2"]))  # fmt: skip
    changes = compare(with_errors, release_notes.read_spec_set(stage))
    assert changes.new_errors == ((200, "SHINY_NEW_ERROR"),) and changes.removed_errors == ()
    assert "**Error codes**:\n\n- + 200 `SHINY_NEW_ERROR`\n" in changes.markdown()
    backwards = compare(release_notes.read_spec_set(stage), with_errors)
    assert backwards.removed_errors == ((200, "SHINY_NEW_ERROR"),)
    assert [a.key for a in backwards.removed_apis] == [93]
    assert "**Removed APIs**:\n\n- 93 Frob (v0-1)\n" in backwards.markdown()
    assert f"| 2 | ListOffsets | {LO}-{NEW} | {LO}-{HI} | — | {NEW} | 6+ |" in backwards.markdown()
    # The same heading again replaces the entry rather than adding a second one.
    doc = update_doc(DOC, pin="p\n", api_table="t\n", report=changes.markdown())
    again = update_doc(doc, pin="p\n", api_table="t\n", report=changes.markdown())
    assert again == doc and again.count("### Kafka 9.0.0 → 9.1.0") == 1


def test_a_release_the_generator_cannot_read_touches_nothing(
    kafka: dict[str, Any], tmp_path: Path
) -> None:
    repo = tmp_path / "broken"
    shutil.copytree(kafka["repo"], repo)
    (repo / KAFKA_MESSAGE_PATH / "FrobResponse.json").unlink()  # a request without response
    _git(repo, "commit", "-q", "-am", "broken")
    _git(repo, "tag", "9.2.0")
    paths = _paths(kafka, tmp_path)
    before = {p.name: p.read_bytes() for p in paths.spec_dir.iterdir()}
    with pytest.raises(ReleaseError, match="the generator cannot read it: requests without"):
        bump("9.2.0", repo, paths, readiness=None)
    assert {p.name: p.read_bytes() for p in paths.spec_dir.iterdir()} == before
    assert paths.doc.read_text(encoding="utf-8") == DOC and not paths.generated.exists()


def test_readiness_lines_take_each_minor_at_its_newest_patch(kafka: dict[str, Any],
                                                             tmp_path: Path) -> None:  # fmt: skip
    repo = tmp_path / "tags"
    shutil.copytree(kafka["repo"], repo)
    for tag in ("9.0.1", "9.1.1", "9.2.0", "9.2.1", "9.3.0"):
        _git(repo, "tag", tag, kafka["v2"])
    git = repo / ".git"
    assert readiness_releases(git, "9.0.0", "9.2.1") == {
        "9.0": "9.0.1",
        "9.1": "9.1.1",
        "9.2": "9.2.1",
    }
    assert readiness_releases(git, "9.1.1", "9.1.1") == {}


def test_the_readiness_table_gains_the_new_release(kafka: dict[str, Any], tmp_path: Path) -> None:
    table = tmp_path / "table.py"
    bump_mod.run_kafka_releases(kafka["repo"] / ".git", {"9.1": kafka["v2"]}, table)
    namespace: dict[str, Any] = {}
    exec(table.read_text(encoding="utf-8"), namespace)
    releases = namespace["RELEASES"]
    assert list(releases) == ["3.9", "4.0", "4.1", "4.2", "4.3", "9.1"]  # the others kept
    entry = releases["9.1"]
    assert (entry["tag"], entry["commit"]) == ("9.1.0", kafka["v2"])
    assert entry["apis"][2] == ("ListOffsets", LO, NEW) and entry["apis"][93] == ("Frob", 0, 1)
    assert 52 not in entry["apis"] and 94 not in entry["apis"]  # controller-only
    with pytest.raises(ReleaseError, match=r"spark_jobs\.kafka_releases failed"):
        bump_mod.run_kafka_releases(tmp_path, {"9.1": kafka["v2"]}, table)


def test_doc_markers_are_required(tmp_path: Path) -> None:
    for missing in ("<!-- kafka-pin:begin -->", "<!-- api-table:end -->",
                    "<!-- release-history:begin -->"):  # fmt: skip
        text = DOC.replace(missing, "")
        for report in (None, "### Kafka 1 → 2\n"):
            with pytest.raises(ReleaseError, match="needs one"):
                update_doc(text, pin="p\n", api_table="t\n", report=report, where=tmp_path)
    swapped = DOC.replace("<!-- kafka-pin:begin -->", "@").replace("<!-- kafka-pin:end -->",
                          "<!-- kafka-pin:begin -->").replace("@", "<!-- kafka-pin:end -->")  # fmt: skip
    with pytest.raises(ReleaseError, match="needs one"):
        update_doc(swapped, pin="p\n", api_table="t\n", report=None)
    assert update_doc(DOC, pin="p\n", api_table="t\n", report=None) == DOC.replace(
        "old pin", "p"
    ).replace("old table", "t")


def test_main(kafka: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    paths = _paths(kafka, tmp_path)
    monkeypatch.setattr(bump_mod, "BumpPaths", lambda: paths)
    assert bump_mod.main(["9.1.0", "--kafka-git", str(kafka["repo"]), "--no-readiness"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### Kafka 9.0.0 → 9.1.0\n") and "test_release_review.py" in out
    # (An already pinned tag is bumped for real in the test above; here only what main says.)
    monkeypatch.setattr(bump_mod, "bump", lambda *args, **kwargs: None)
    assert bump_mod.main(["9.1.0", "--kafka-git", str(kafka["repo"]), "--no-readiness"]) == 0
    assert "Kafka 9.1.0 is already pinned" in capsys.readouterr().out
    monkeypatch.undo()
    assert bump_mod.main(["9.1", "--kafka-git", str(kafka["repo"])]) == 2
    assert "protocol.bump: '9.1' is not a release tag" in capsys.readouterr().err


def test_the_module_runs_as_a_command() -> None:
    done = subprocess.run([sys.executable, "-m", "protocol.bump", "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0 and "--kafka-git" in done.stdout


# --------------------------------------------------------------------------- the report's parts


def test_flatten_inlines_common_structs_and_keeps_attributes() -> None:
    fields = flatten(FROB_RESPONSE)
    assert list(fields) == ["ErrorCode", "Nodes", "Nodes.NodeId", "Nodes.Host", "Nodes.Port"]
    assert fields["Nodes"] == FieldFacts(type="[]Node", versions="1+")
    tagged = FieldFacts(type="string", versions="3+", nullable="3+", tag=0, tagged="3+")
    assert tagged.describe() == "string [tag 0, 3+, nullable 3+]"
    deep: dict[str, Any] = {"name": "Deep", "fields": [], "commonStructs": [
        {"name": "S", "fields": [{"name": "Again", "type": "S", "versions": "0+"}]}]}  # fmt: skip
    deep["fields"] = [{"name": "Top", "type": "S", "versions": "0+"}]
    with pytest.raises(ReleaseError, match="nest too deep"):
        flatten(deep)


def test_field_changes_describe_themselves() -> None:
    before = FieldFacts(type="int32", versions="0+")
    after = FieldFacts(type="int32", versions="0-3")
    change = FieldChange(message="XResponse", path="A.Host", before=before, after=after)
    assert change.line() == "~ `A.Host` int32 [0+] → int32 [0-3]"
    assert change.names_an_address and not change.tagged
    assert not FieldChange(message="X", path="Hostile", before=None, after=after).names_an_address


def test_the_committed_manifest_reads_as_a_spec_set(tmp_path: Path) -> None:
    committed = release_notes.read_spec_set()
    assert committed.release == release.read_manifest()["release"]
    assert len(committed.specs) == 158 and committed.specs["ListOffsetsRequest"]["apiKey"] == 2
    assert compare(committed, committed).apis == ()
    no_table = replace(committed, errors=None)
    assert "**Error codes**: not compared" in compare(no_table, committed).markdown()
    git_less = compare(committed, committed, date="2026-06-17").markdown()
    assert "(committed 2026-06-17)" in git_less and "**Field order**: none." in git_less
    shutil.copy(KAFKA_SPEC_DIR / MANIFEST_NAME, tmp_path / MANIFEST_NAME)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text(encoding="utf-8"))
    manifest["errors"] = ["not", "a", "table"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ReleaseError, match="bad errors table"):
        release_notes.read_spec_set(tmp_path)


def test_an_api_whose_flexible_versions_move_is_reported() -> None:
    request = {"apiKey": 7, "type": "request", "listeners": ["broker"], "name": "XRequest",
               "validVersions": "0-2", "flexibleVersions": "none", "fields": []}  # fmt: skip
    files = {"XRequest.json": {"type": "request", "listeners": ["broker"]}}
    old = SpecSet(release="1.0.0", commit="a" * 40, files=files, specs={"XRequest": request})
    new = SpecSet(release="1.1.0", commit="b" * 40, files=files,
                  specs={"XRequest": {**request, "flexibleVersions": "2+"}})  # fmt: skip
    (change,) = compare(old, new).apis
    assert (change.before, change.after, change.gained) == (Versions(0, 2), Versions(0, 2), ())
    assert "| 7 | X | 0-2 | 0-2 | — | — | none → 2+ |" in compare(old, new).markdown()
    assert "**Versions**: no client-facing API changed" in compare(old, old).markdown()
    opened = SpecSet(release="1.2.0", commit="c" * 40, files=files,
                     specs={"XRequest": {**request, "validVersions": "3+"}})  # fmt: skip
    assert compare(old, opened).apis[0].gained == (3,)
