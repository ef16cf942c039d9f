"""Read one tagged Apache Kafka release out of a local git directory (a mirror or a checkout).

The bump (:mod:`protocol.bump`) fetches nothing: it is handed a git directory of apache/kafka
(``git clone --mirror``, a fork that carries the tags, or a working checkout) and a tag, and
everything it needs is read from that commit's tree with plain ``git`` commands:

* :func:`resolve_tag` turns the tag into the commit it names (annotated tags are peeled);
  a branch or a bare commit id is refused, so the manifest always names a release;
* :func:`export_messages` writes the ``*.json`` files of the message directory at that commit
  into a directory, each checked against the blob id ``git ls-tree`` lists for it;
* :func:`read_error_codes` reads Kafka's error table (``Errors.java``: every
  ``NAME(code, ...)`` constant) at the same commit, for the change report;
* :func:`release_tags` lists the release tags (``X.Y.Z``, no ``-rc``) the directory holds.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from protocol.release import KAFKA_MESSAGE_PATH, ReleaseError

__all__ = [
    "ERRORS_PATH",
    "ReleaseRef",
    "export_messages",
    "git_dir_of",
    "has_commit",
    "parse_error_codes",
    "read_error_codes",
    "release_tags",
    "resolve_tag",
    "version_key",
]

#: Where Kafka declares its error codes.
ERRORS_PATH: Final = "clients/src/main/java/org/apache/kafka/common/protocol/Errors.java"

_RELEASE_TAG: Final = re.compile(r"\d+\.\d+\.\d+")
#: One constant of the ``Errors`` enum: ``NAME(code,`` at the start of a line.
_ERROR_CONSTANT: Final = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\(\s*(-?\d+)\s*,", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRef:
    """A release tag and what it names in the git directory."""

    tag: str
    commit: str
    #: The commit's date (``YYYY-MM-DD``, committer time).
    date: str


def _git(git_dir: Path, *args: str, stdin: bytes = b"") -> bytes:
    try:
        done = subprocess.run(
            ["git", f"--git-dir={git_dir}", *args], input=stdin, capture_output=True, check=False
        )
    except OSError as exc:  # no git on PATH
        raise ReleaseError(f"cannot run git: {exc}") from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()
        raise ReleaseError(f"git {' '.join(args)} in {git_dir}: {message}")
    return done.stdout


def git_dir_of(path: Path) -> Path:
    """The git directory of ``path``: itself (a bare mirror) or its ``.git`` (a checkout)."""
    return path / ".git" if (path / ".git").exists() else path


def version_key(tag: str) -> tuple[int, ...]:
    """``"4.10.1"`` as ``(4, 10, 1)``, for ordering release tags."""
    return tuple(int(part) for part in tag.split("."))


def release_tags(git_dir: Path) -> list[str]:
    """Every release tag (``X.Y.Z``) of the git directory, oldest first."""
    names = _git(git_dir, "tag", "--list").decode().split()
    return sorted((name for name in names if _RELEASE_TAG.fullmatch(name)), key=version_key)


def resolve_tag(git_dir: Path, tag: str) -> ReleaseRef:
    """The commit release tag ``tag`` names; :class:`ReleaseError` if it is not a release tag."""
    if not _RELEASE_TAG.fullmatch(tag):
        raise ReleaseError(f"{tag!r} is not a release tag (X.Y.Z)")
    found = _git(git_dir, "tag", "--list", tag).decode().split()
    if found != [tag]:
        raise ReleaseError(f"{git_dir} has no tag {tag} (release tags: {release_tags(git_dir)})")
    commit = _git(git_dir, "rev-parse", "--verify", f"refs/tags/{tag}^{{commit}}").decode()
    date = _git(git_dir, "log", "-1", "--format=%cs", commit.strip()).decode()
    return ReleaseRef(tag=tag, commit=commit.strip(), date=date.strip())


def export_messages(git_dir: Path, commit: str, out_dir: Path) -> list[str]:
    """Write the message specs (``*.json``) at ``commit`` into ``out_dir``; return their names.

    Each file is read by the blob id the tree lists for it (git's ids are content hashes),
    so what is imported is exactly what the release holds, byte for byte.
    """
    listing = _git(git_dir, "ls-tree", commit, f"{KAFKA_MESSAGE_PATH}/").decode()
    blobs: dict[str, str] = {}
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        _mode, kind, blob = meta.split()
        name = path.rsplit("/", 1)[-1]
        if kind == "blob" and name.endswith(".json"):
            blobs[name] = blob
    if not blobs:
        raise ReleaseError(f"{commit} has no {KAFKA_MESSAGE_PATH}/*.json")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(blobs)
    # One git process for every blob: "<id> blob <size>\n<bytes>\n" per requested id.
    batch = _git(
        git_dir, "cat-file", "--batch", stdin="".join(f"{blobs[n]}\n" for n in names).encode()
    )
    at = 0
    for name in names:
        end = batch.index(b"\n", at)
        size = int(batch[at:end].split()[2])
        (out_dir / name).write_bytes(batch[end + 1 : end + 1 + size])
        at = end + 1 + size + 1
    return names


def has_commit(git_dir: Path, commit: str) -> bool:
    """True when the git directory holds ``commit`` (a mirror may lack an old pin's)."""
    try:
        _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}")
    except ReleaseError:
        return False
    return True


def parse_error_codes(source: str) -> dict[int, str]:
    """Error code -> name, from the text of Kafka's ``Errors.java`` (its enum constants)."""
    codes: dict[int, str] = {}
    for name, code in _ERROR_CONSTANT.findall(source):
        codes[int(code)] = name
    return codes


def read_error_codes(git_dir: Path, commit: str) -> Mapping[int, str] | None:
    """Kafka's error table at ``commit``, or ``None`` when the tree has no ``Errors.java``."""
    listed = _git(git_dir, "ls-tree", "--name-only", commit, ERRORS_PATH).decode().split()
    if not listed:
        return None
    return parse_error_codes(_git(git_dir, "show", f"{commit}:{ERRORS_PATH}").decode())
