"""The coordinator's reading of Metadata topics (proxy/control/topic_reader.py).

Answers are encoded by kafka-python (an independent encoder) where a version is written out
by hand, and by our encoder for generated answers of every version, whose expected topics
come from the construct decoder (a different reader than the picker under test).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.topics import TopicInfo
from protocol.apis import DEFAULT_REGISTRY as R
from protocol.errors import Truncated
from protocol.schema import decode, encode
from proxy.control.topic_reader import NAMESPACE, TopicReader
from tests.protocol.strategies import message_values
from tests.protocol.test_differential import KP_CLASSES, to_kafka_python

METADATA = R.api(3)
assert METADATA.versions.hi is not None
VERSIONS = range(METADATA.versions.lo, METADATA.versions.hi + 1)


def kafka_python(version: int, topics: list[tuple[int, str | None, uuid.UUID, int]]) -> bytes:
    """A MetadataResponse body as kafka-python writes it: one broker, and per topic its
    error, name, id and that many partitions (led by broker 1)."""
    value = {
        "ThrottleTimeMs": 0, "ClusterId": "c", "ControllerId": 1, "ClusterAuthorizedOperations": -2147483648,
        "Brokers": [{"NodeId": 1, "Host": "b1", "Port": 9092, "Rack": None}],
        "Topics": [{"ErrorCode": error, "Name": name, "TopicId": topic_id, "IsInternal": False,
                    "TopicAuthorizedOperations": -2147483648,
                    "Partitions": [{"ErrorCode": 0, "PartitionIndex": p, "LeaderId": 1, "LeaderEpoch": 0,
                                    "ReplicaNodes": [1], "IsrNodes": [1], "OfflineReplicas": []}
                                   for p in range(count)]} for error, name, topic_id, count in topics]}  # fmt: skip
    kp = KP_CLASSES[(3, "response")]
    return bytes(to_kafka_python(kp._struct, METADATA.response.fields, value, version).encode(version=version))


def test_names_ids_and_counts_as_kafka_python_wrote_them() -> None:
    a, b = uuid.UUID(int=7), uuid.UUID(int=8)
    body = kafka_python(12, [(0, "orders", a, 3), (3, "gone", uuid.UUID(int=0), 0), (0, "audit", b, 1)])
    assert TopicReader(METADATA.response).read(12, body) == [
        TopicInfo(name="orders", topic_id=a, partitions=3), TopicInfo(name="audit", topic_id=b, partitions=1)]


def test_versions_without_ids_make_them_up_from_names() -> None:
    body = kafka_python(1, [(0, "orders", uuid.UUID(int=0), 2)])
    assert TopicReader(METADATA.response).read(1, body) == [
        TopicInfo(name="orders", topic_id=uuid.uuid5(NAMESPACE, "orders"), partitions=2)]
    # Stored in group records: the namespace may never change.
    assert str(NAMESPACE) == "6b9f3c3e-5c1a-4a56-9a0f-2f0e4b4d8c11"


def test_an_unchanged_topic_is_the_same_object_and_a_changed_one_is_read_again() -> None:
    a, b = uuid.UUID(int=7), uuid.UUID(int=8)
    reader = TopicReader(METADATA.response)
    first = reader.read(12, kafka_python(12, [(0, "orders", a, 3), (0, "audit", b, 1)]))
    again = reader.read(12, kafka_python(12, [(0, "orders", a, 3), (0, "audit", b, 2)]))
    assert again[0] is first[0]
    assert again[1] == TopicInfo(name="audit", topic_id=b, partitions=2)
    assert reader.read(12, kafka_python(12, [(0, "audit", b, 2)])) == [again[1]]
    assert reader._known.keys() and len(reader._known) == 1  # forgotten with the answer


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=max(10, settings.default.max_examples // 10))
@given(data=st.data())
def test_generated_answers_read_as_the_decoder_reads_them(version: int, data: st.DataObject) -> None:
    body = encode(METADATA.response, version, data.draw(message_values(METADATA.response, version)))
    decoded = decode(METADATA.response, version, body)
    expected = []
    for topic in decoded["Topics"]:
        if topic["ErrorCode"] or topic["Name"] is None:
            continue
        topic_id = topic.get("TopicId") or uuid.UUID(int=0)
        if topic_id.int == 0:
            topic_id = uuid.uuid5(NAMESPACE, topic["Name"])
        expected.append(TopicInfo(name=topic["Name"], topic_id=topic_id, partitions=len(topic["Partitions"])))
    reader = TopicReader(METADATA.response)
    assert reader.read(version, body) == expected
    assert reader.read(version, body) == expected  # from memory


def test_read_a_topic_at_a_time_is_read_whole() -> None:
    topics = [(0, f"t{i}", uuid.UUID(int=i + 1), i % 3 + 1) for i in range(10)]
    body = kafka_python(12, topics)
    reader = TopicReader(METADATA.response)
    read = reader.begin(12, body)
    steps = 0
    while not read.step(3):
        steps += 1
        assert read.left == 10 - 3 * steps
    assert steps == 3 and read.left == 0
    found = read.finish()
    assert found == [TopicInfo(name=n, topic_id=i, partitions=c) for _, n, i, c in topics]
    assert reader.read(12, body) == found and reader.read(12, body)[4] is found[4]  # remembered
    unfinished = reader.begin(12, kafka_python(12, topics[:5]))
    with pytest.raises(AssertionError, match="finish before every topic was read"):
        unfinished.finish()


def test_begin_reads_as_far_as_the_count_and_each_step_only_its_topics() -> None:
    """A shell that reads 10,000 topics a few at a time must not pay for all of them at once:
    a topic cut short is found by the step that reaches it, not before."""
    topics = [(0, f"t{i}", uuid.UUID(int=i + 1), 2) for i in range(6)]
    body = kafka_python(12, topics)
    # The last topic's TopicAuthorizedOperations and tag section (4 + 1 bytes) and the
    # answer's own tag section (1 byte) are cut off: that topic no longer ends in the body.
    cut = body[:-6]
    read = TopicReader(METADATA.response).begin(12, cut)
    assert read.left == 6
    assert not read.step(5)
    with pytest.raises(Truncated):
        read.step(1)


def test_what_follows_the_topics_is_walked_once_they_are_read() -> None:
    body = kafka_python(12, [(0, "orders", uuid.UUID(int=7), 1)])
    # v12 ends with the topics, then the answer's tag section: one byte, 0 (no tags). A
    # section that announces a tag with no bytes left for it is refused as a client refuses it.
    assert body[-1] == 0
    read = TopicReader(METADATA.response).begin(12, body[:-1] + b"\x01")
    with pytest.raises(Truncated):
        read.step(1)


def test_an_answer_that_is_the_last_one_byte_for_byte_is_read_at_once() -> None:
    topics = [(0, f"t{i}", uuid.UUID(int=i + 1), 2) for i in range(4)]
    body = kafka_python(12, topics)
    reader = TopicReader(METADATA.response)
    first = reader.read(12, body)
    again = reader.begin(12, bytearray(body))  # equal bytes, another buffer
    assert again.left == 0 and again.step(100)
    second = again.finish()
    assert second == first and second is not first and all(a is b for a, b in zip(second, first, strict=True))
    # The same topics at another version, or one byte changed (the throttle time, first in
    # v12), are read topic by topic; unchanged topics are still the objects remembered.
    assert reader.begin(11, kafka_python(11, topics)).left == 4
    throttled = b"\x00\x00\x00\x05" + body[4:]
    read = reader.begin(12, throttled)
    assert read.left == 4 and read.step(4)
    assert all(a is b for a, b in zip(read.finish(), first, strict=True))
