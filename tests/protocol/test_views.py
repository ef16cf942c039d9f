"""Read-only views: names, defaults by version, records summaries, lazy decoding, garbage."""

from __future__ import annotations

import contextlib
import copy
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY, PRODUCE
from protocol.errors import ProtocolError, TrailingBytes
from protocol.schema import decode, encode
from protocol.views import LazyBody, RecordsView, StructView, snake_case, view_of
from tests.protocol.test_records import GZIP, NONE, kp_batch

PRODUCE_API = DEFAULT_REGISTRY.api(PRODUCE)
METADATA_API = DEFAULT_REGISTRY.api(3)


def produce_body(version: int, records: bytes | None) -> bytes:
    partition = {"Index": 2, "Records": records}
    topic = {"Name": "t", "TopicId": uuid.UUID(int=5), "PartitionData": [partition]}
    return encode(PRODUCE_API.request, version, {"Acks": -1, "TimeoutMs": 30, "TopicData": [topic]})


def test_kafka_and_snake_case_names() -> None:
    view = view_of(PRODUCE_API.request, 9, produce_body(9, None))
    assert view["Acks"] == view.acks == -1
    assert view.timeout_ms == 30
    (topic,) = view.topic_data
    assert isinstance(view.topic_data, tuple) and isinstance(topic, StructView)
    assert topic.name == "t" and topic.partition_data[0].index == 2
    assert view.version == 9
    assert list(view) == ["TransactionalId", "Acks", "TimeoutMs", "TopicData"]
    assert len(view) == 4


def test_lower_camel_spec_names_have_snake_twins() -> None:
    # CreateTopics spells two fields timeoutMs / validateOnly.
    spec = DEFAULT_REGISTRY.api(19).request
    view = view_of(spec, 1, encode(spec, 1, {"timeoutMs": 9, "validateOnly": True}))
    assert (view.timeout_ms, view.validate_only) == (9, True)
    assert snake_case("ClusterAuthorizedOperations") == "cluster_authorized_operations"


def test_fields_absent_at_a_version_read_as_defaults() -> None:
    v2 = view_of(PRODUCE_API.request, 2, produce_body(2, None))
    assert v2.transactional_id is None  # v3+, nullable, default null
    assert v2.topic_data[0].topic_id == uuid.UUID(int=0)  # v13+
    v13 = view_of(PRODUCE_API.request, 13, produce_body(13, None))
    assert v13.topic_data[0].name == ""  # v0-12 only
    assert v13.topic_data[0].topic_id == uuid.UUID(int=5)


def test_absent_struct_and_array_defaults() -> None:
    spec = METADATA_API.response
    view = view_of(spec, 0, encode(spec, 0, {"Brokers": [], "Topics": []}))
    assert view.throttle_time_ms == 0  # v3+
    assert view.cluster_id is None  # v2+, nullable
    assert view.controller_id == -1  # v1+, default -1
    fetch = DEFAULT_REGISTRY.api(1).request
    old = view_of(fetch, 4, encode(fetch, 4, {}))
    assert old.replica_state.replica_id == -1  # tagged struct of v15+: its defaults
    assert old.forgotten_topics_data == ()


def test_arrays_of_primitives_are_tuples() -> None:
    spec = METADATA_API.response
    partition = {"PartitionIndex": 0, "ReplicaNodes": [1, 2], "IsrNodes": [1]}
    body = encode(spec, 12, {"Topics": [{"Name": "t", "Partitions": [partition]}]})
    (read,) = view_of(spec, 12, body).topics[0].partitions
    assert (read.replica_nodes, read.isr_nodes, read.offline_replicas) == ((1, 2), (1,), ())


def test_null_values() -> None:
    spec = METADATA_API.request
    view = view_of(spec, 12, encode(spec, 12, {"Topics": None}))
    assert view.topics is None
    heartbeat = DEFAULT_REGISTRY.api(68).response
    body = encode(heartbeat, 0, {"Assignment": None})
    assert view_of(heartbeat, 0, body).assignment is None


def test_records_view_sizes_and_counts() -> None:
    records = kp_batch(2, NONE, [b"a", b"b", b"c"]) + kp_batch(2, GZIP, [b"d"], offset=3)
    view = view_of(PRODUCE_API.request, 9, produce_body(9, records))
    field = view.topic_data[0].partition_data[0].records
    assert isinstance(field, RecordsView)
    assert (field.is_null, field.size_bytes, field.record_count) == (False, len(records), 4)
    assert field.summary.batch_count == 2
    assert field.summary is field.summary  # computed once
    assert repr(field) == f"RecordsView(size_bytes={len(records)})"
    null = view_of(PRODUCE_API.request, 9, produce_body(9, None)).topic_data[0].partition_data[0]
    assert (null.records.is_null, null.records.size_bytes, null.records.record_count) == (
        True,
        0,
        0,
    )


def test_to_dict_and_repr() -> None:
    records = kp_batch(2, NONE, [b"x"])
    view = view_of(PRODUCE_API.request, 3, produce_body(3, records))
    assert view.to_dict() == {
        "TransactionalId": None,
        "Acks": -1,
        "TimeoutMs": 30,
        "TopicData": [
            {
                "Name": "t",
                "TopicId": uuid.UUID(int=0),
                "PartitionData": [{"Index": 2, "Records": {"size_bytes": len(records)}}],
            },
        ],
    }
    assert repr(view).startswith("StructView(TransactionalId=None, Acks=-1")
    wide = view_of(METADATA_API.response, 12, encode(METADATA_API.response, 12, {}))
    assert repr(wide).endswith(", …)")


def test_unknown_names() -> None:
    view = view_of(METADATA_API.request, 12, encode(METADATA_API.request, 12, {}))
    with pytest.raises(KeyError):
        view["Nope"]
    with pytest.raises(AttributeError):
        _ = view.nope
    with pytest.raises(AttributeError):
        _ = view._private
    assert copy.copy(view).topics == ()


def test_lazy_body_decodes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("protocol.views.decode", counting)
    body = LazyBody(PRODUCE_API.request, 9, produce_body(9, None))
    assert calls == []
    assert body.view.acks == -1
    assert body.view.timeout_ms == 30
    assert calls == [1]


def test_lazy_body_raises_protocol_errors_on_use_only() -> None:
    body = LazyBody(PRODUCE_API.request, 9, produce_body(9, None) + b"x")
    with pytest.raises(TrailingBytes):
        _ = body.view


@settings(max_examples=300)
@given(raw=st.binary(max_size=64), version=st.integers(0, 13))
def test_garbage_raises_only_protocol_errors(raw: bytes, version: int) -> None:
    try:
        view = view_of(PRODUCE_API.request, version, raw)
        for topic in view.topic_data:
            for partition in topic.partition_data:
                partition.records.record_count  # noqa: B018 - the summary walk may raise
    except ProtocolError:
        pass


@settings(max_examples=100)
@given(batch=st.binary(max_size=80))
def test_records_garbage_raises_only_protocol_errors(batch: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        RecordsView(batch).record_count  # noqa: B018


def test_present_says_whether_a_field_exists_at_the_view_version() -> None:
    api = DEFAULT_REGISTRY.api(3)  # Metadata: a top-level ErrorCode from v13 only
    old = view_of(api.response, 12, encode(api.response, 12, {}))
    new = view_of(api.response, 13, encode(api.response, 13, {"ErrorCode": 5}))
    assert not old.present("ErrorCode") and old["ErrorCode"] == 0
    assert new.present("ErrorCode") and new["ErrorCode"] == 5
    assert not new.present("NoSuchField")
