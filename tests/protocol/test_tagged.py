"""Tagged fields: which values count as default (and so are not written)."""

from __future__ import annotations

import construct as c

from protocol import primitives as p
from protocol.apis import DEFAULT_REGISTRY
from protocol.schema import decode, encode
from tests.protocol.strategies import plain


def test_is_default_sees_unknown_tags_that_container_equality_skips() -> None:
    default = c.Container(A=-1, B=c.ListContainer())
    tagged = c.Container(A=-1, B=c.ListContainer(), **{p.UNKNOWN_TAGS_KEY: [(3, b"")]})
    assert tagged == default  # construct ignores "_" keys...
    assert not p.is_default(tagged, default)  # ...the writer must not
    assert p.is_default(c.Container(A=-1, B=[]), default)
    assert not p.is_default(c.Container(A=-1), default)
    assert not p.is_default(c.Container(A=0, B=[]), default)


def test_is_default_compares_nested_structs_and_lists_deeply() -> None:
    inner = c.Container(X=1)
    default = c.Container(S=inner, L=[inner])
    assert p.is_default(c.Container(S=c.Container(X=1), L=[c.Container(X=1)]), default)
    marked = c.Container(X=1, **{p.UNKNOWN_TAGS_KEY: [(0, b"")]})
    assert not p.is_default(c.Container(S=inner, L=[marked]), default)
    assert not p.is_default(c.Container(S=marked, L=[inner]), default)
    assert not p.is_default(c.Container(S=inner, L=[inner, inner]), default)
    assert p.is_default([], ()) and not p.is_default([1], ())
    assert p.is_default(None, None) and not p.is_default("", None)


def test_tagged_struct_with_only_unknown_tags_survives_a_round_trip() -> None:
    spec = DEFAULT_REGISTRY.api(1).response  # FetchResponse v12+: SnapshotId is tag 2
    snapshot = c.Container(EndOffset=-1, Epoch=-1, **{p.UNKNOWN_TAGS_KEY: [(9, b"\x01")]})
    partition = {"PartitionIndex": 0, "SnapshotId": snapshot}
    value = {"Responses": [{"Topic": "t", "Partitions": [partition]}]}
    wire = encode(spec, 12, value)
    got = decode(spec, 12, wire)["Responses"][0]["Partitions"][0]["SnapshotId"]
    assert plain(got) == {"EndOffset": -1, "Epoch": -1, p.UNKNOWN_TAGS_KEY: [[9, b"\x01"]]}
