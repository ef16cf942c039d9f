"""Compiled and interpreted parsers agree on arbitrary bytes, failures included.

:func:`protocol.schema.decode` and the header decoders parse client bytes with
``KStruct.compile()`` (construct's compiler fed by our primitives' ``_emitparse``).
construct warns that compiled code skips checks; ours must not, so for every schema this
feeds both forms random bytes and damaged valid encodings (cut, flipped, inserted, removed
bytes) and requires the same value and bytes used, or the same exception class.
"""

from __future__ import annotations

import io
from typing import Any

import construct as c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import primitives as p
from protocol.errors import ProtocolError, Truncated
from protocol.schema import compiled_parser, decode_interpreted, decode_prefix, encode
from protocol.spec import MessageSpec
from tests.protocol.strategies import all_schemas, message_values, plain

CASES = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for _kind, spec, version in all_schemas()
]
EXAMPLES = max(5, settings().max_examples // 20)


def outcome(parse: Any, *args: Any) -> tuple[str, Any]:
    """What a parser did: its plain result, or the class of the protocol error it raised."""
    try:
        return "ok", plain(parse(*args))
    except ProtocolError as exc:
        return "error", type(exc)


@st.composite
def damaged(draw: st.DrawFn, spec: MessageSpec, version: int) -> bytes:
    """A valid encoding of a random message with one random injury, or plain noise."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=64))
    wire = bytearray(encode(spec, version, draw(message_values(spec, version))))
    at = draw(st.integers(0, len(wire)))
    injury = draw(st.sampled_from(["cut", "flip", "insert", "remove", "none"]))
    if injury == "cut":
        del wire[at:]
    elif injury == "flip" and at < len(wire):
        wire[at] = draw(st.integers(0, 255))
    elif injury == "insert":
        wire[at:at] = draw(st.binary(min_size=1, max_size=4))
    elif injury == "remove":
        del wire[at : at + draw(st.integers(1, 4))]
    return bytes(wire)


@pytest.mark.parametrize(("spec", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_compiled_agrees_with_interpreted(
    spec: MessageSpec, version: int, data: st.DataObject
) -> None:
    wire = data.draw(damaged(spec, version))
    assert outcome(decode_prefix, spec, version, wire) == outcome(
        decode_interpreted, spec, version, wire
    )


@settings(max_examples=300)
@given(
    version=st.integers(0, 2),
    wire=st.one_of(
        st.binary(max_size=40),
        st.builds(
            lambda head, n, tail: head + n.to_bytes(2, "big", signed=True) + tail,
            st.binary(min_size=8, max_size=8),
            st.integers(-3, 12),
            st.binary(max_size=16),
        ),
    ),
)
def test_compiled_headers_agree_with_interpreted(version: int, wire: bytes) -> None:
    from protocol.headers import REQUEST_HEADER, RESPONSE_HEADER

    for spec in (REQUEST_HEADER, RESPONSE_HEADER):
        if version in spec.valid:
            assert outcome(decode_prefix, spec, version, wire) == outcome(
                decode_interpreted, spec, version, wire
            )


def test_fixed_width_runs_are_read_at_once() -> None:
    from protocol.apis import DEFAULT_REGISTRY

    # MetadataResponse v1 partitions: ErrorCode int16, PartitionIndex int32, LeaderId int32.
    compiled = compiled_parser(DEFAULT_REGISTRY.api(3).response, 1)
    assert "struct.Struct('>hll')" in compiled.source


@pytest.mark.parametrize(
    "con",
    [
        p.KArray(p.Int32),
        p.KArray(p.Boolean, compact=True, nullable=True),
        p.KArray(p.Uuid),
        p.KArray(p.KString(compact=True)),
        p.KArray(p.KStruct([])),
        p.KNullable(p.KStruct([("A", p.Int8)])),
        p.KBytes(compact=True, nullable=True),
        p.KString(nullable=True),
        p.KStruct([("A", p.Boolean), ("B", p.Float64), ("C", p.UnsignedVarInt)]),
    ],
)
@settings(max_examples=60)
@given(wire=st.binary(max_size=24))
def test_compiled_primitives_agree(con: c.Construct, wire: bytes) -> None:
    compiled = con.compile()

    def run(parser: c.Construct) -> tuple[str, Any]:
        stream = io.BytesIO(wire)
        try:
            return "ok", (plain(parser._parsereport(stream, None, "")), stream.tell())
        except ProtocolError as exc:
            return "error", type(exc)
        except c.StreamError:
            # construct's fixed-width fields run out of input this way; decode() reports it
            # as Truncated, which is what the compiled form raises directly.
            return "error", Truncated

    assert run(compiled) == run(con)
