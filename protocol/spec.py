"""The declarative message model: what a Kafka message is made of, as plain data.

The generated table (:mod:`protocol.messages.generated`) is written in these types by
``python -m protocol.codegen`` from Kafka's JSON message specs; :mod:`protocol.schema`
turns one ``(message, version)`` into a ``construct`` parser/builder. Nothing here parses
bytes.

Version ranges follow the JSON specs: ``"3+"`` is ``Versions(3, None)``, ``"0-2"`` is
``Versions(0, 2)`` and ``"none"`` is :data:`NO_VERSIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: Primitive type names, as the JSON specs spell them.
PRIMITIVES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "float64",
        "uuid",
        "string",
        "bytes",
        "records",
    }
)

Kind = Literal["request", "response", "header", "data"]


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive range of versions; ``hi is None`` means open-ended."""

    lo: int
    hi: int | None = None

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int):
            return False
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def __str__(self) -> str:
        if self.lo > (self.hi if self.hi is not None else self.lo):
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        if self.hi == self.lo:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"

    @classmethod
    def parse(cls, text: str) -> Versions:
        """Read the JSON spec notation (``"3+"``, ``"0-2"``, ``"5"``, ``"none"``)."""
        text = text.strip()
        if text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))


#: The empty range (``"none"`` in the JSON specs).
NO_VERSIONS = Versions(1, 0)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a message or of a nested struct.

    ``type`` is a primitive name, ``"[]<primitive>"`` for an array of primitives, a
    struct name for a nested struct, or ``"[]<struct>"`` for an array of structs; in
    the last two cases ``fields`` holds the struct's fields (common structs are inlined
    by the generator). ``default`` is already converted to the Python value the field
    takes when absent (``None`` for a nullable field whose default is ``null``).
    """

    name: str
    type: str
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tag: int | None = None
    tagged: Versions = NO_VERSIONS
    default: object = None
    fields: tuple[FieldSpec, ...] = ()
    #: Overrides the message's flexible range for this field (RequestHeader.ClientId).
    flexible: Versions | None = None
    map_key: bool = False
    ignorable: bool = False

    @property
    def is_array(self) -> bool:
        """True for ``[]T`` fields."""
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """``T`` for ``[]T``, else the type itself."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True when the field (or its array elements) is a nested struct."""
        return self.element_type not in PRIMITIVES

    def present_in(self, version: int) -> bool:
        """True when the field exists at ``version`` (tagged or not)."""
        return version in self.versions

    def tagged_in(self, version: int) -> bool:
        """True when the field travels in the tagged section at ``version``."""
        return self.tag is not None and version in self.tagged and version in self.versions


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """A whole request, response or header message as declared by its JSON spec."""

    name: str
    kind: Kind
    api_key: int | None
    valid: Versions
    flexible: Versions
    fields: tuple[FieldSpec, ...]
    #: The broker roles that accept it (``"broker"``, ``"controller"``); empty for headers.
    listeners: tuple[str, ...] = field(default=())
    latest_version_unstable: bool = False

    def is_flexible(self, version: int) -> bool:
        """True when ``version`` uses compact encodings and tagged fields (KIP-482)."""
        return version in self.flexible

    def element(self, name: str) -> MessageSpec:
        """The elements of the top-level array of structs ``name``, as a message of their
        own (a :class:`~protocol.pick.Picker` over it reads one element where it starts)."""
        found = next((f for f in self.fields if f.name == name), None)
        if found is None or not (found.is_array and found.is_struct):
            raise ValueError(f"{self.name} has no array of structs {name!r}")
        flexible = self.flexible if found.flexible is None else found.flexible
        return MessageSpec(f"{self.name}.{name}[]", "data", None, self.valid, flexible, found.fields)
