"""ACL patches of Metadata applied to its topics as byte slices (proxy/datapath/listing.py).

The oracle is the whole-answer path the sidecar used before: decode the broker's answer,
apply the patch, encode it (``whole`` below). For generated answers of every Metadata
version, generated requests (named topics or all of them) and generated ACLs, the real
:class:`~proxy.datapath.authorize.Authorization` builds the patch (narrowing, refused
entries, topic-ID learning); the splice must give the same bytes and teach the same IDs.
kafka-python, an independent decoder, reads a large narrowed answer.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, cast

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataResponse
from prometheus_client import CollectorRegistry

from protocol.apis import DEFAULT_REGISTRY as R
from protocol.errors import DecodeError
from protocol.headers import RequestHeader
from protocol.leniency import QUIET, RESPONSE, TRAILING_BYTES, Leniency
from protocol.schema import encode
from proxy.auth.acl.enforce import PASS, Forward
from proxy.auth.acl.evaluate import AclIndex, Authorizer
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.datapath.authorize import Authorization
from proxy.datapath.connection import Connection
from proxy.datapath.listing import Kept, ListingSplice
from proxy.local.api import Context
from proxy.local.ports import AclDirectory
from tests.protocol.strategies import message_values
from tests.proxy.test_rewrite_splice import big_metadata

METADATA = R.api(3)
assert METADATA.versions.hi is not None
VERSIONS = range(METADATA.versions.lo, METADATA.versions.hi + 1)
ALICE = "User:alice"


class Acls:
    """The ACL port with a fixed authorizer; learned topic IDs are recorded."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self.topic_names: dict[uuid.UUID, str] = {}
        self.learned: list[tuple[uuid.UUID, str]] = []

    def learn_topics(self, pairs: Iterable[tuple[uuid.UUID, str]]) -> None:
        self.learned.extend(pairs)


def describe(prefixes: Iterable[str], literals: Iterable[str]) -> Authorizer:
    """An authorizer letting alice Describe topics by prefix and by exact name."""
    def binding(name: str, pattern: PatternType) -> AclBinding:
        return AclBinding(ResourcePattern(ResourceType.TOPIC, name, pattern),
                          AclEntry(ALICE, "*", Operation.DESCRIBE, Permission.ALLOW))
    return Authorizer(AclIndex([*(binding(p, PatternType.PREFIXED) for p in prefixes),
                                *(binding(n, PatternType.LITERAL) for n in literals)]))  # fmt: skip


def patch_for(acls: Acls, version: int, topics: list[str] | None) -> Any:
    """The patch Authorization builds for alice's Metadata request naming ``topics``
    (``None``: all topics, which v0 asks for with an empty list)."""
    if topics is None and version == 0:
        topics = []
    authorization = Authorization(cast(AclDirectory, acls), R, CollectorRegistry(), shadow=False)
    request = {"Topics": None if topics is None else [{"Name": t, "TopicId": uuid.UUID(int=0)} for t in topics],
               "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False,
               "IncludeClusterAuthorizedOperations": False}  # fmt: skip
    header = RequestHeader(api_key=3, api_version=version, correlation_id=1, client_id="c", header_version=1, size=0)
    raw = memoryview(encode(METADATA.request, version, request))
    context = Context(listener="PLAINTEXT", peer=("10.0.0.1", 5000), ports=cast(Any, None), principal=ALICE)
    action, _ = authorization.check(header, raw, context, True)
    assert isinstance(action, Forward) and action.patch is not None  # Metadata answers always teach IDs
    return authorization, action.patch


def whole(patch: Any, version: int, body: bytes) -> bytes:
    """The oracle: decode the whole answer, patch it, encode it."""
    value, trailing = QUIET.response(METADATA, version, body)
    return encode(METADATA.response, version, patch(dict(value))) + trailing


def outcome(call: Any) -> Any:
    try:
        return call()
    except Exception as exc:  # both paths must fail alike
        return type(exc)


NAMES = st.text(alphabet="abo-", min_size=1, max_size=4)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=max(20, settings.default.max_examples // 5))
@given(data=st.data())
def test_the_splice_gives_the_bytes_decode_patch_encode_gives(version: int, data: st.DataObject) -> None:
    value = data.draw(message_values(METADATA.response, version))
    for topic in value["Topics"]:  # names from a small alphabet, so that ACLs and requests hit them
        if topic["Name"] is not None or data.draw(st.booleans()):
            topic["Name"] = data.draw(NAMES)
    body = encode(METADATA.response, version, value)
    authorizer = describe(data.draw(st.lists(NAMES, max_size=2)), data.draw(st.lists(NAMES, max_size=3)))
    requested = data.draw(st.none() | st.lists(NAMES, max_size=4, unique=True))
    fast_acls, slow_acls = Acls(authorizer), Acls(authorizer)
    fast_authorization, fast_patch = patch_for(fast_acls, version, requested)
    _, slow_patch = patch_for(slow_acls, version, requested)
    fast = outcome(lambda: fast_authorization.patched(fast_patch, 3, version, body))
    slow = outcome(lambda: whole(slow_patch, version, body))
    assert fast == slow
    assert fast_acls.learned == slow_acls.learned


def test_the_splice_covers_every_metadata_version() -> None:
    for version in VERSIONS:
        ListingSplice(METADATA, version, "Topics")
    with pytest.raises(ValueError, match="ClusterId is not a non-null array of structs"):
        ListingSplice(METADATA, 12, "ClusterId")


def test_a_large_answer_narrowed_to_half_reads_in_kafka_python() -> None:
    body = encode(METADATA.response, 12, big_metadata(1000, 10))
    acls = Acls(describe([], [f"topic-{t:04d}" for t in range(0, 1000, 2)]))
    authorization, patch = patch_for(acls, 12, None)
    narrowed = authorization.patched(patch, 3, 12, body)
    decoded = MetadataResponse[12].decode(narrowed).to_dict()
    assert [t["name"] for t in decoded["topics"]] == [f"topic-{t:04d}" for t in range(0, 1000, 2)]
    assert all(len(t["partitions"]) == 10 for t in decoded["topics"])
    assert decoded["topics"][1]["partitions"][7]["replica_nodes"] == [1, 2, 4]
    assert len(acls.learned) == 1000 and acls.learned[999] == (uuid.UUID(int=1000), "topic-0999")
    # Named topics it may not see come back as TOPIC_AUTHORIZATION_FAILED (29), added last.
    authorization, patch = patch_for(acls, 12, ["topic-0001", "topic-0002", "nope"])
    named = encode(METADATA.response, 12, big_metadata(3, 2))
    decoded = MetadataResponse[12].decode(authorization.patched(patch, 3, 12, named)).to_dict()
    assert [(t["name"], t["error_code"]) for t in decoded["topics"]] == [
        ("topic-0000", 0), ("topic-0002", 0), ("topic-0001", 29), ("nope", 29)]


def test_an_answer_kept_whole_is_the_brokers_bytes_and_trailing_bytes_are_reported() -> None:
    reported: list[tuple[str, str, str, int]] = []
    splice = ListingSplice(METADATA, 13, "Topics")
    value = big_metadata(3, 2) | {"ErrorCode": 0}
    body = encode(METADATA.response, 13, value) + b"\x00"
    assert splice.apply(lambda a: a, body, Leniency(lambda *a: reported.append(a))) == body
    assert reported == [("Metadata", RESPONSE, TRAILING_BYTES, 1)]
    with pytest.raises(DecodeError):
        splice.apply(lambda a: a, body[:-40])


def test_a_patch_cannot_change_a_kept_topic() -> None:
    body = encode(METADATA.response, 12, big_metadata(2, 1))

    def rename(answer: dict[str, Any]) -> dict[str, Any]:
        answer["Topics"][0]["Name"] = "renamed"
        return answer

    with pytest.raises(TypeError, match="cannot be changed"):
        ListingSplice(METADATA, 12, "Topics").apply(rename, body)
    kept = Kept({"Name": "t"}, (0, 1))
    for change in (lambda: kept.update(Name="u"), lambda: kept.pop("Name"), kept.clear,
                   lambda: kept.setdefault("x", 1)):  # fmt: skip
        with pytest.raises(TypeError):
            change()
    assert isinstance(kept, Mapping) and kept == {"Name": "t"} and kept.extent == (0, 1)


def test_metadata_without_a_patch_of_its_own_still_passes_through_learning() -> None:
    # Nothing refused, nothing filtered (a super user aside): PASS becomes a learning patch.
    acls = Acls(describe([""], []))
    authorization, patch = patch_for(acls, 12, None)
    assert patch is not PASS
    body = encode(METADATA.response, 12, big_metadata(4, 1))
    assert authorization.patched(patch, 3, 12, body) == body
    assert [name for _, name in acls.learned] == [f"topic-{t:04d}" for t in range(4)]


# -- in slices, through a connection ---------------------------------------------------


async def test_a_large_answer_is_patched_in_slices_with_other_tasks_served_between(
        autojump_clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.datapath.slices.SLICE", 0.0)
    body = encode(METADATA.response, 12, big_metadata(1000, 10))
    acls = Acls(describe([], [f"topic-{t:04d}" for t in range(0, 1000, 2)]))
    authorization, patch = patch_for(acls, 12, None)
    ticks = 0
    done = trio.Event()

    async def other_connection() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_connection)
        sliced = await authorization.patched_in_slices(patch, 3, 12, body)
        done.set()
    _, whole_patch = patch_for(Acls(acls.authorizer), 12, None)
    assert sliced == whole(whole_patch, 12, body)
    assert ticks >= 1000 // 64 - 1  # a scheduler pass after every 64 topics


async def through_a_connection(body: bytes, requests: int) -> tuple[list[bytes], list[int]]:
    """``requests`` full Metadata v12 requests from alice through a connection enforcing
    ACLs (alice may Describe the even topics of big_metadata), in front of a broker that
    answers each with ``body``: the answer frames the client read before the connection
    ended or all came, and the API keys patched in slices."""
    from tests.proxy.test_connection_seam import FakeBroker, build

    class MetadataBroker(FakeBroker):
        async def answer(self, correlation_id: int) -> None:
            assert self.stream is not None
            frame = struct.pack(">i", correlation_id) + b"\x00" + body  # response header v1
            await self.stream.send_all(struct.pack(">i", len(frame)) + frame)

    acls = Acls(describe([], [f"topic-{t:04d}" for t in range(0, 1000, 2)]))
    authorization = Authorization(cast(AclDirectory, acls), R, CollectorRegistry(), shadow=False)
    sliced: list[int] = []
    in_slices = authorization.patched_in_slices

    async def counted(*args: Any) -> bytes:
        sliced.append(args[1])
        return await in_slices(*args)

    authorization.patched_in_slices = counted  # type: ignore[method-assign]
    request = encode(METADATA.request, 12, {"Topics": None, "AllowAutoTopicCreation": False,
                                            "IncludeTopicAuthorizedOperations": False})
    answers: list[bytes] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker=MetadataBroker())
        parts = dataclasses.replace(h.connection.parts, authorization=authorization, dispatch=None)
        h.connection.context.principal = ALICE
        connection = Connection(parts, h.connection.client, h.connection.context)  # the same client stream
        nursery.start_soon(connection.run)
        for cid in range(1, requests + 1):
            payload = struct.pack(">hhih", 3, 12, cid, 1) + b"t" + b"\x00" + request  # request header v2
            await h.client.send_all(struct.pack(">i", len(payload)) + payload)
        buffer = b""
        while len(answers) < requests and (data := await h.client.receive_some(1 << 20)):
            buffer += data
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                size = struct.unpack(">i", buffer[:4])[0]
                answers.append(buffer[4 : 4 + size])
                buffer = buffer[4 + size :]
        nursery.cancel_scope.cancel()
    return answers, sliced


async def test_a_connection_forwards_large_narrowed_answers_in_order(autojump_clock: Any) -> None:
    """Two full Metadata answers of 1,000 topics (each over PATCH_LATER_MIN) go through a
    connection enforcing ACLs: each narrowed to alice's half, in request order."""
    from proxy.datapath.dispatch import PATCH_LATER_MIN

    body = encode(METADATA.response, 12, big_metadata(1000, 10))
    assert len(body) >= PATCH_LATER_MIN
    answers, sliced = await through_a_connection(body, 2)
    assert sliced == [3, 3]  # both went through the task that patches in slices
    for cid, frame in zip((1, 2), answers, strict=True):
        assert struct.unpack(">i", frame[:4])[0] == cid
        decoded = MetadataResponse[12].decode(frame[5:]).to_dict()
        assert [t["name"] for t in decoded["topics"]] == [f"topic-{t:04d}" for t in range(0, 1000, 2)]


async def test_a_large_answer_that_cannot_be_read_closes_its_own_connection(autojump_clock: Any) -> None:
    body = encode(METADATA.response, 12, big_metadata(1000, 10))
    broken = body[:400] + b"\xff" * (len(body) - 400)  # the brokers whole, the topics garbage
    answers, sliced = await through_a_connection(broken, 1)
    assert sliced == [3] and answers == []  # closed (bad_response), nothing half-forwarded
