"""``ssl.principal.mapping.rules``: Kafka's ``SslPrincipalMapper``, sans-IO.

A client certificate's subject (the RFC 2253 string of
:func:`proxy.auth.distinguished_name.subject_dn`, e.g. ``CN=alice,OU=eng,O=Acme``) becomes
the name of the principal ``User:<name>`` through a list of rules, as Kafka's
``org.apache.kafka.common.security.ssl.SslPrincipalMapper`` does:

* ``RULE:<pattern>/<replacement>/`` with an optional ``L`` or ``U`` after the last slash
  (lower- or upper-case the result). The rule applies when ``pattern`` matches the *whole*
  DN; the result is then Java's ``dn.replaceAll(pattern, replacement)``: ``$1`` names a group,
  ``\\x`` is a literal ``x``, and a ``$n`` past the pattern's groups is a literal ``$n``
  (Kafka escapes it). ``\\/`` writes a slash inside the pattern or replacement.
* ``DEFAULT``: the whole DN, unchanged.
* Rules are separated by commas, with spaces around them ignored; a comma inside a pattern
  needs no escape (Kafka's splitter reads a ``RULE:`` up to its closing slash), and empty
  rules are skipped. The first rule that applies wins; when none does, the connection fails
  authentication (:class:`NoMatchingRule`, Kafka's exception of that name).

The splitting and parsing use Kafka's own two regular expressions, so what Kafka accepts,
refuses or splits oddly is accepted, refused or split the same way. Patterns are Python
regular expressions: the constructs Kafka's rules use (anchors, groups, lazy quantifiers,
character classes) mean the same; Java-only syntax (``\\p{Lu}``, ``(?<name>...)``, ``\\Q..\\E``)
fails at start. So does a replacement that can never expand (a dangling ``\\`` or ``$``),
which Kafka would only report at the first connection it applies to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MappingRuleError", "NoMatchingRule", "PrincipalMapper", "Rule"]

#: Java's ``.`` does not match any of its line terminators; Python's only misses ``\n``.
_DOT = "[^\n\r\u0085\u2028\u2029]"
#: Java's ``\s`` is ASCII whitespace only.
_SPACE = "[ \t\n\x0b\f\r]"
#: Kafka's ``RULE_PATTERN``, verbatim but for ``.`` (group numbers as in Kafka's parser).
_RULE_PATTERN = rf"(DEFAULT)|RULE:((\\{_DOT}|[^\\/])*)/((\\{_DOT}|[^\\/])*)/([LU]?){_DOT}*?|({_DOT}*?)"
_RULE_SPLITTER = re.compile(rf"{_SPACE}*({_RULE_PATTERN}){_SPACE}*(,{_SPACE}*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")
#: Java's ``String.trim()``: every character up to U+0020.
_TRIMMED = "".join(chr(c) for c in range(0x21))


class MappingRuleError(ValueError):
    """``ssl.principal.mapping.rules`` cannot be parsed (the operator's fault: refuse to start)."""


class NoMatchingRule(Exception):
    """No rule applies to the DN: the connection fails authentication."""


#: One piece of an expanded replacement: literal text, or the number of a group.
_Part = str | int


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's ``escapeLiteralBackReferences``: ``$n`` past the groups becomes ``\\$n``.

    Ported as it is, including that it walks the *original* string's matches while
    inserting into the copy (so with two such references the second escape lands one
    character early, as in Kafka).
    """
    if groups == 0:
        return replacement
    value = replacement
    for match in _BACK_REFERENCE.finditer(replacement):
        number = match.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = match.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
    return value


def _compile_replacement(replacement: str, pattern: re.Pattern[str]) -> tuple[_Part, ...]:
    """Java's ``Matcher.appendReplacement`` syntax, read once into literal text and groups."""
    groups = pattern.groups
    parts: list[_Part] = []
    text: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            i += 1
            if i == len(replacement):
                raise MappingRuleError("character to be escaped is missing at the end of the replacement")
            text.append(replacement[i])
            i += 1
        elif char == "$":
            i += 1
            if i == len(replacement):
                raise MappingRuleError("illegal group reference: group index is missing")
            if replacement[i] == "{":
                close = replacement.find("}", i)
                name = replacement[i + 1 : close] if close >= 0 else ""
                if close < 0 or not name or name not in pattern.groupindex:
                    raise MappingRuleError(f"no group named in the replacement {replacement!r}")
                number = pattern.groupindex[name]
                i = close + 1
            else:
                if not replacement[i].isdigit() or not replacement[i].isascii():
                    raise MappingRuleError(f"illegal group reference in the replacement {replacement!r}")
                number = int(replacement[i])
                i += 1
                # Java takes further digits while they still name an existing group.
                while i < len(replacement) and replacement[i] in "0123456789":
                    longer = number * 10 + int(replacement[i])
                    if longer > groups:
                        break
                    number = longer
                    i += 1
                if number > groups:
                    raise MappingRuleError(f"no group {number} in the pattern for the replacement {replacement!r}")
            if text:
                parts.append("".join(text))
                text = []
            parts.append(number)
        else:
            text.append(char)
            i += 1
    if text:
        parts.append("".join(text))
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule: ``DEFAULT`` (``pattern is None``) or ``RULE:pattern/replacement/[LU]``."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    lower: bool = False
    upper: bool = False
    #: The replacement after Kafka's escaping, as literal text and group numbers.
    parts: tuple[_Part, ...] = ()

    def apply(self, dn: str) -> str | None:
        """The name this rule makes of ``dn``, or ``None`` when it does not apply."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self._replace_all(self.pattern, dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def _replace_all(self, pattern: re.Pattern[str], dn: str) -> str:
        """Java's ``dn.replaceAll(pattern, replacement)``: every match, not only the whole.

        Not ``re.sub``: after an empty match Java resumes one character later, where Python
        (3.7+) may still find a non-empty match at the same place (``(.*?)`` over ``abc``:
        Java ``[]a[]b[]c[]``, ``re.sub`` ``[][a][][b][][c][]``).
        """
        out: list[str] = []
        copied = search = 0
        while search <= len(dn):
            match = pattern.search(dn, search)
            if match is None:
                break
            out.append(dn[copied : match.start()])
            out.extend(p if isinstance(p, str) else (match.group(p) or "") for p in self.parts)
            copied = match.end()
            search = match.end() + (1 if match.start() == match.end() else 0)
        out.append(dn[copied:])
        return "".join(out)

    def __str__(self) -> str:
        """Kafka's ``Rule.toString()`` (``RULE:pattern/replacement/L``, no closing slash)."""
        if self.pattern is None:
            return "DEFAULT"
        flag = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{flag}"


def _split(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip(_TRIMMED))]


def _parse(text: str) -> Rule | None:
    match = _RULE_PARSER.match(text)
    if match is None:  # cannot happen (the last alternative matches anything), as in Kafka
        raise MappingRuleError(f"invalid rule: {text}")
    if match.end() != len(text):
        raise MappingRuleError(f"invalid rule: `{text}`, unmatched substring: `{text[match.end():]}`")
    if match.group(1) is not None:
        return Rule(None)
    if match.group(2) is None:
        return None  # an empty rule
    source, replacement, flag = match.group(2), match.group(4), match.group(6)
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise MappingRuleError(f"rule `{text}`: pattern {source!r} does not compile ({exc})") from None
    try:
        parts = _compile_replacement(_escape_literal_back_references(replacement, pattern.groups), pattern)
    except MappingRuleError as exc:
        raise MappingRuleError(f"rule `{text}`: {exc}") from None
    return Rule(pattern, replacement, lower=flag == "L", upper=flag == "U", parts=parts)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """The parsed rules, in order; :meth:`name` maps a DN."""

    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, rules: str) -> PrincipalMapper:
        """Parse the value of ``ssl.principal.mapping.rules``.

        Raises :class:`MappingRuleError` naming the rule that does not parse.
        """
        parsed = (_parse(text) for text in _split(rules))
        return cls(tuple(rule for rule in parsed if rule is not None))

    def name(self, dn: str) -> str:
        """The principal name of ``dn``: the first applying rule's result.

        Raises :class:`NoMatchingRule` when no rule applies.
        """
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        """Kafka's ``SslPrincipalMapper.toString()``."""
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"
