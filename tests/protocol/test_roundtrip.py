"""Round trips for every (API key, version, request/response), headers and payloads.

For a random field-value container ``x`` generated from the spec (tests/protocol/strategies.py):
``decode(encode(x)) == x``, and for the canonical bytes ``b = encode(x)``,
``encode(decode(b)) == b``. The interpreted parser reads ``b`` the same way as the compiled
one :func:`protocol.schema.decode` uses.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.schema import decode, decode_interpreted, encode
from protocol.spec import MessageSpec
from tests.protocol.strategies import all_schemas, message_values, plain

CASES = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for _kind, spec, version in all_schemas()
]

#: ~600 schemas: a few examples each under the ci profile, more under deep.
EXAMPLES = max(5, settings().max_examples // 20)


def test_every_api_is_covered() -> None:
    names = {p.values[0].name for p in CASES}  # type: ignore[union-attr]
    assert {"ProduceRequest", "BrokerMetadataResponse", "RequestHeader", "ResponseHeader"} <= names
    assert len(CASES) > 600


@pytest.mark.parametrize(("spec", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_round_trip(spec: MessageSpec, version: int, data: st.DataObject) -> None:
    value = data.draw(message_values(spec, version))
    wire = encode(spec, version, value)
    decoded = decode(spec, version, wire)
    assert plain(decoded) == plain(value)
    assert encode(spec, version, decoded) == wire
    interpreted, used = decode_interpreted(spec, version, wire)
    assert used == len(wire)
    assert plain(interpreted) == plain(decoded)
