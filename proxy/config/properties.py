"""Reading Java ``.properties`` files, the format Kafka operators already write.

Supports what ``server.properties`` files use in practice: ``key=value``, ``key: value``
and ``key value``; ``#`` and ``!`` comments; backslash line continuations; the escapes
``\\t \\n \\r \\f \\\\ \\uXXXX``; and, as our own addition for containers, ``${NAME}`` or
``${NAME:-default}`` substitution from the environment (``$${`` writes a literal ``${``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class PropertiesError(ValueError):
    """A properties file that cannot be read; the message names the line."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip() if pending else raw
        if not pending:
            start = number
            stripped = line.lstrip()
            if not stripped or stripped[0] in "#!":
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        lines.append((start, pending + line))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def _unescape(text: str, number: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"line {number}: malformed \\u escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or white space; one '=' or ':' after
    # optional white space is part of the separator, as in java.util.Properties.
    line = line.lstrip(" \t\f")
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return line[:i], rest


def substitute_env(value: str, environ: Mapping[str, str], where: str) -> str:
    """Replace ``${NAME}`` / ``${NAME:-default}``; an unset name without default is an error."""

    def repl(match: re.Match[str]) -> str:
        escaped, name, default = match.groups()
        if escaped:
            return match.group(0)[1:]
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise PropertiesError(f"{where}: environment variable {name} is not set (use ${{{name}:-default}})")

    return _ENV.sub(repl, value)


def parse_properties(
    text: str, *, environ: Mapping[str, str] | None = None, source: str = "<properties>"
) -> dict[str, str]:
    """Parse properties text into a dict; later keys win, as in Java."""
    env = os.environ if environ is None else environ
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        raw_key, raw_value = _split(line)
        key = _unescape(raw_key, number)
        if not key:
            raise PropertiesError(f"{source} line {number}: a value with no key")
        value = _unescape(raw_value, number)
        result[key] = substitute_env(value, env, f"{source} line {number} ({key})")
    return result


def text_line(data: bytes, offset: int) -> int:
    """The 1-based line of ``data`` that byte ``offset`` is on."""
    return data.count(b"\n", 0, offset) + 1


def read_properties(path: str, *, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Read and parse a properties file (UTF-8)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise PropertiesError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = text_line(exc.object, exc.start)
        raise PropertiesError(f"{path}:{line}: not UTF-8 (byte {exc.object[exc.start]:#04x} at offset "
                              f"{exc.start})") from None
    return parse_properties(text, environ=environ, source=path)
