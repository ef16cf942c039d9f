"""Bump the pinned Kafka release in one command, and write down what changed.

Theory of operation
-------------------
``python -m protocol.bump 4.3.1 --kafka-git /path/to/kafka.git`` moves the schema table to
another Apache Kafka release. It reads everything from the local git directory it is given
(:mod:`protocol.release_git`; no network) and does, in order:

1. resolve the tag to its commit; export the message directory at that commit and read
   the error table (``Errors.java``);
2. import the specs into a staging directory (:func:`protocol.release.import_release`) and
   generate the table from it (:mod:`protocol.codegen`): a release the generator cannot
   read stops the bump here, with nothing in the work tree touched;
3. compare the committed release with the staged one (:mod:`protocol.release_notes`);
4. write: the structural copies and manifest (``protocol/specs/kafka``), the generated
   table, and docs/protocol.md (the pin line, the API table and, newest first, the change
   report in the release history);
5. add the releases from the old pin (exclusive) to the new one (inclusive), one per minor
   line at its newest patch tag, to the upgrade-readiness targets
   (``python -m spark_jobs.kafka_releases --keep``), so ``ksidecar audit readiness
   --target X.Y`` knows them.

What a bump cannot decide is left to review, and the tests say where:
``tests/protocol/test_release.py`` pins the release, its commit and its file counts (from
``git ls-tree``), ``tests/protocol/test_release_review.py`` fails on every field that names
an address outside the rewriter's sites and on every local API whose advertised versions
moved, and the kio differential lists the versions it cannot compare.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from protocol import codegen
from protocol.apis import ApiRegistry, markdown_table
from protocol.release import KAFKA_SPEC_DIR, ReleaseError, import_release
from protocol.release_git import (
    export_messages,
    git_dir_of,
    has_commit,
    read_error_codes,
    release_tags,
    resolve_tag,
    version_key,
)
from protocol.release_notes import ReleaseChanges, compare, read_spec_set

__all__ = [
    "DOC_PATH",
    "READINESS_TABLE",
    "BumpPaths",
    "bump",
    "main",
    "pin_line",
    "readiness_releases",
    "run_kafka_releases",
    "update_doc",
]

_ROOT: Final = Path(__file__).resolve().parents[1]
#: The document whose pin line, API table and release history a bump rewrites.
DOC_PATH: Final = _ROOT / "docs" / "protocol.md"
#: The readiness targets' release table (``spark_jobs/kafka_release_table.py``).
READINESS_TABLE: Final = _ROOT / "spark_jobs" / "kafka_release_table.py"

_PIN: Final = ("<!-- kafka-pin:begin -->", "<!-- kafka-pin:end -->")
_API_TABLE: Final = ("<!-- api-table:begin -->", "<!-- api-table:end -->")
_HISTORY: Final = ("<!-- release-history:begin -->", "<!-- release-history:end -->")

#: Writes the readiness table for ``{name: commit}`` read from a git directory.
ReadinessWriter = Callable[[Path, Mapping[str, str], Path], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class BumpPaths:
    """Where a bump writes (the repository's files unless a test says otherwise)."""

    spec_dir: Path = KAFKA_SPEC_DIR
    generated: Path = codegen.OUTPUT_PATH
    doc: Path = DOC_PATH
    readiness_table: Path = READINESS_TABLE


def _between(text: str, markers: tuple[str, str], body: str, where: Path) -> str:
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ReleaseError(f"{where}: needs one {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def _history(current: str, report: str) -> str:
    """The history block with ``report`` first, replacing an entry with the same heading."""
    heading = report.split("\n", 1)[0]
    entries = [e for e in ("\n" + current).split("\n### ") if e.strip()]
    kept = [
        "### " + e.strip("\n") + "\n" for e in entries if "### " + e.split("\n", 1)[0] != heading
    ]
    return "\n".join([report, *kept])


def update_doc(
    text: str, *, pin: str, api_table: str, report: str | None, where: Path = DOC_PATH
) -> str:
    """docs/protocol.md with its pin line, API table and (if any) a new history entry."""
    text = _between(text, _PIN, pin, where)
    text = _between(text, _API_TABLE, api_table, where)
    if report is None:
        _between(text, _HISTORY, "", where)  # the block must still be there
        return text
    begin, end = _HISTORY
    current = text.split(begin, 1)[1].split(end, 1)[0] if begin in text else ""
    return _between(text, _HISTORY, _history(current, report), where)


def pin_line(tag: str, commit: str) -> str:
    """The pin sentence of docs/protocol.md."""
    return f"Pinned: **Apache Kafka {tag}**, commit `{commit}` (the `{tag}` tag).\n"


def readiness_releases(git_dir: Path, old: str, new: str) -> dict[str, str]:
    """``{"X.Y": tag}`` for each minor line after ``old`` up to ``new``: its newest patch tag
    no newer than ``new`` (the bump's own tag for its own line)."""
    lines: dict[str, str] = {}
    for tag in release_tags(git_dir):
        if version_key(old) < version_key(tag) <= version_key(new):
            lines[".".join(tag.split(".")[:2])] = tag  # oldest first: the newest patch wins
    return lines


def run_kafka_releases(git_dir: Path, releases: Mapping[str, str], table: Path) -> None:
    """Add ``releases`` (name -> commit) to the readiness table with the spark_jobs generator
    (run as its own command: ``protocol`` imports nothing above it)."""
    args = [sys.executable, "-m", "spark_jobs.kafka_releases", "--git", str(git_dir), "--keep"]
    for name, commit in releases.items():
        args += ["--release", f"{name}={commit}"]
    done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=_ROOT)
    if done.returncode != 0:
        raise ReleaseError(f"spark_jobs.kafka_releases failed: {done.stderr.strip()}")
    table.write_text(done.stdout, encoding="utf-8")


def bump(
    tag: str,
    kafka_git: Path,
    paths: BumpPaths | None = None,
    readiness: ReadinessWriter | None = run_kafka_releases,
) -> ReleaseChanges | None:
    """Move the pin to ``tag`` (see the module docstring); the changes, or ``None`` when the
    tag is the one already pinned (the copies, table and docs are rewritten all the same)."""
    paths = paths or BumpPaths()
    git_dir = git_dir_of(kafka_git)
    ref = resolve_tag(git_dir, tag)
    before = read_spec_set(paths.spec_dir)
    if before.errors is None and has_commit(git_dir, before.commit):
        # A pin imported without its error table: read it from the same git directory.
        before = replace(before, errors=read_error_codes(git_dir, before.commit))
    errors = read_error_codes(git_dir, ref.commit)
    with tempfile.TemporaryDirectory(prefix="ksidecar-bump-") as tmp:
        messages = Path(tmp) / "message"
        export_messages(git_dir, ref.commit, messages)
        stage = Path(tmp) / "specs"
        import_release(messages, tag, ref.commit, stage, errors)
        try:
            table = codegen.build_messages(stage)
            generated = codegen.render(table, codegen.source_line(stage))
        except codegen.CodegenError as exc:
            raise ReleaseError(f"Kafka {tag}: the generator cannot read it: {exc}") from exc
        after = read_spec_set(stage)
        same = (before.release, before.commit) == (after.release, after.commit)
        changes = None if same else compare(before, after, date=ref.date)
        registry = ApiRegistry(
            requests={m.api_key: m for m in table if m.kind == "request" and m.api_key is not None},
            responses={
                m.api_key: m for m in table if m.kind == "response" and m.api_key is not None
            },
        )
        doc = update_doc(
            paths.doc.read_text(encoding="utf-8"),
            pin=pin_line(tag, ref.commit),
            api_table=markdown_table(registry),
            report=None if changes is None else changes.markdown(),
            where=paths.doc,
        )
        # Everything is read and checked: now write.
        import_release(messages, tag, ref.commit, paths.spec_dir, errors)
    paths.generated.write_text(generated, encoding="utf-8")
    paths.doc.write_text(doc, encoding="utf-8")
    if readiness is not None and not same:
        lines = readiness_releases(git_dir, before.release, tag)
        commits = {name: resolve_tag(git_dir, line_tag).commit for name, line_tag in lines.items()}
        readiness(git_dir, commits, paths.readiness_table)
    return changes


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m protocol.bump TAG --kafka-git DIR``."""
    parser = argparse.ArgumentParser(
        prog="python -m protocol.bump",
        description="Pin another Apache Kafka release: import its specs from a local git "
        "directory, regenerate the table, and write the change report into docs/protocol.md.",
    )
    parser.add_argument("tag", help="the release tag, e.g. 4.3.1")
    parser.add_argument(
        "--kafka-git", type=Path, required=True, help="a git directory or checkout of apache/kafka"
    )
    parser.add_argument(
        "--no-readiness", action="store_true", help="leave the readiness release table alone"
    )
    args = parser.parse_args(argv)
    try:
        changes = bump(
            args.tag, args.kafka_git, readiness=None if args.no_readiness else run_kafka_releases
        )
    except ReleaseError as exc:
        print(f"protocol.bump: {exc}", file=sys.stderr)
        return 2
    if changes is None:
        print(f"protocol.bump: Kafka {args.tag} is already pinned; copies and table rewritten.")
        return 0
    print(changes.markdown())
    print(
        "protocol.bump: next, review and run tests/protocol (test_release.py pins the release "
        "and its counts; test_release_review.py lists the address fields and local API "
        "versions to look at; the kio differential the versions it cannot compare)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
