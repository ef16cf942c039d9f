"""The audit's ``throttle_time_ms`` column (schema version 3): the response's top-level
``ThrottleTimeMs`` as the client received it (client quotas, KIP-219), on every row of the
request; null when the response has none at its version, or there is no response.

Produce and Fetch responses are built by kafka-python's protocol classes, which share no
code with ours; the rest by our encoder from values written here. Expected values are
written out by hand. Both isolations: under the process one, Produce requests and Fetch
responses past the pick size are picked in the parent, and the throttle time must travel
with what was picked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceResponse

from observers.audit_rows import TopErrors, top_picker
from observers.audit_schema import schema_for
from observers.traffic import TopicNames, fetch_throttle, produce_traffic, throttle_in
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header, encode_response_header
from protocol.schema import encode
from tests.bench.kafka import record_batch
from tests.observers.test_audit_denials import Audit, rows_of
from tests.observers.test_audit_format import files
from tests.observers.test_audit_isolation import BIG, SMALL
from tests.observers.test_audit_rows import ERROR_CASES, expected_error, metadata, response_frame
from tests.protocol.strategies import message_values
from tests.proxy.wire import request_frame

P = ProduceResponse
F = FetchResponse


def kp_produce_body(version: int, throttle: int, errors: tuple[int, ...] = (0, 6)) -> bytes:
    """A Produce response body for t1 partitions 0.. with ``errors``, by kafka-python."""
    partitions = [P.TopicProduceResponse.PartitionProduceResponse(index=i, error_code=e, base_offset=10 * i)
                  for i, e in enumerate(errors)]
    message = P(responses=[P.TopicProduceResponse(name="t1", partition_responses=partitions)],
                throttle_time_ms=throttle)
    body: bytes = message.encode(version=version)
    return body


def kp_fetch_body(version: int, throttle: int, records: bytes) -> bytes:
    """A Fetch response body for t1 partition 0 holding ``records``, by kafka-python."""
    partition = F.FetchableTopicResponse.PartitionData(partition_index=0, error_code=0, high_watermark=10,
                                                       records=records)
    message = F(throttle_time_ms=throttle, error_code=0, session_id=0,
                responses=[F.FetchableTopicResponse(topic="t1", partitions=[partition])])
    body: bytes = message.encode(version=version)
    return body


def frame_of(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """``body`` behind a response header, size-prefixed."""
    head = encode_response_header(correlation_id, DEFAULT_REGISTRY.api(api_key).response_header_version(version))
    return len(head + body).to_bytes(4, "big") + head + body


def produce_request(version: int, correlation_id: int, records: bytes, acks: int = -1) -> bytes:
    return request_frame(0, version, correlation_id, {
        "TransactionalId": None, "Acks": acks, "TimeoutMs": 1000, "TopicData": [
            {"Name": "t1", "PartitionData": [{"Index": 0, "Records": records}, {"Index": 1, "Records": records}]}]})


def produce_body(version: int, records: bytes, acks: int = -1) -> memoryview:
    """The body of :func:`produce_request`'s frame (after its header)."""
    frame = memoryview(produce_request(version, 1, records, acks)[4:])
    return frame[decode_request_header(frame).size:]


def fetch_request(version: int, correlation_id: int) -> bytes:
    return request_frame(1, version, correlation_id, {"MaxWaitMs": 500, "Topics": [
        {"Topic": "t1", "Partitions": [{"Partition": 0}]}]})


# -- the picks, without an observer -------------------------------------------------------


@pytest.mark.parametrize(("version", "expected"), [(0, None), (1, 250), (7, 250), (8, 250), (9, 250), (12, 250)])
def test_produce_traffic_reads_the_throttle_time_with_the_partition_errors(version: int, expected: int | None) -> None:
    body = kp_produce_body(version, 250)
    acks, parts, throttle = produce_traffic(version, produce_body(version, SMALL), memoryview(body), TopicNames())
    assert (acks, throttle) == (-1, expected)
    assert [(p.topic, p.partition, p.error_code) for p in parts] == [("t1", 0, 0), ("t1", 1, 6)]


def test_produce_without_a_response_or_with_a_torn_one_has_no_throttle_time() -> None:
    body = produce_body(9, SMALL)
    assert produce_traffic(9, body, None, TopicNames())[2] is None
    torn = kp_produce_body(9, 250)[:-3]
    _, parts, throttle = produce_traffic(9, body, memoryview(torn), TopicNames())
    assert throttle is None and [p.error_code for p in parts] == [None, None]


@pytest.mark.parametrize(("version", "expected"), [(0, None), (1, 1500), (4, 1500), (11, 1500), (12, 1500)])
def test_fetch_throttle_is_the_first_four_bytes_from_version_1(version: int, expected: int | None) -> None:
    assert fetch_throttle(version, memoryview(kp_fetch_body(version, 1500, SMALL))) == expected


def test_fetch_throttle_of_a_body_too_short_is_none() -> None:
    assert fetch_throttle(12, memoryview(b"\x00\x00\x05")) is None
    assert fetch_throttle(12, memoryview(b"\x00\x00\x05\xdc")) == 1500


def test_top_errors_read_the_throttle_time_wherever_the_spec_puts_it() -> None:
    errors = TopErrors()

    def read(key: int, version: int, value: dict[str, Any]) -> tuple[int | None, int | None]:
        api = DEFAULT_REGISTRY.api(key)
        return errors.read_top(api, version, memoryview(encode(api.response, version, value)))

    # Metadata: no throttle time before v3; at v3 it is the first field; errors per topic.
    topics = [{"Name": "a", "ErrorCode": 0, "Partitions": []}, {"Name": "b", "ErrorCode": 3, "Partitions": []}]
    assert read(3, 1, {"Brokers": [], "Topics": topics}) == (3, None)
    assert read(3, 12, {"ThrottleTimeMs": 40, "Brokers": [], "Topics": topics}) == (3, 40)
    # ApiVersions: ErrorCode comes first, ThrottleTimeMs after the ApiKeys array (v1+).
    assert read(18, 0, {"ErrorCode": 35, "ApiKeys": []}) == (35, None)
    assert read(18, 3, {"ErrorCode": 0, "ApiKeys": [{"ApiKey": 0, "MinVersion": 3, "MaxVersion": 12}],
                        "ThrottleTimeMs": 7}) == (0, 7)
    # JoinGroup v5: ThrottleTimeMs, then the top-level ErrorCode.
    assert read(11, 5, {"ThrottleTimeMs": 900, "ErrorCode": 30, "GenerationId": -1, "ProtocolName": "",
                        "Leader": "", "MemberId": "", "Members": []}) == (30, 900)
    # CreateTopics v2: the throttle time, then errors per topic only.
    assert read(19, 2, {"ThrottleTimeMs": 12, "Topics": [{"Name": "x", "ErrorCode": 0},
                                                          {"Name": "y", "ErrorCode": 36}]}) == (36, 12)
    # SaslHandshake has no throttle time at any version.
    assert read(17, 1, {"ErrorCode": 0, "Mechanisms": ["PLAIN"]}) == (0, None)
    # Unknown API, unreadable body.
    assert errors.read_top(None, 0, memoryview(b"")) == (None, None)
    assert errors.read_top(DEFAULT_REGISTRY.api(11), 5, memoryview(b"\x00\x00")) == (None, None)


def test_every_response_with_a_throttle_time_gets_a_picker_for_it() -> None:
    for key, version in ERROR_CASES:
        spec = DEFAULT_REGISTRY.api(key).response
        picker, _, at = top_picker(spec, version)
        picker.program(version)  # raises Unpickable if a field it needs were tagged
        assert (at is not None) == throttle_in(spec, version)


THROTTLE_CASES = [(key, version) for key, version in ERROR_CASES
                  if throttle_in(DEFAULT_REGISTRY.api(key).response, version)]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the profile's examples: the
@given(data=st.data())  # error half is test_audit_rows' 400 examples' concern already
def test_every_api_reads_its_error_and_throttle_time_as_the_values_say(data: st.DataObject) -> None:
    key, version = data.draw(st.sampled_from(ERROR_CASES))
    api = DEFAULT_REGISTRY.api(key)
    value = data.draw(message_values(api.response, version))
    error, throttle = TopErrors().read_top(api, version, memoryview(encode(api.response, version, value)))
    assert error == expected_error(api.response, version, value)
    assert throttle == (value["ThrottleTimeMs"] if throttle_in(api.response, version) else None)


# -- rows, through the audit observer --------------------------------------------------------


def throttles(directory: Path) -> list[tuple[Any, ...]]:
    return [(r["correlation_id"], r["api_name"], r["first_row"], r["topic"], r["partition"], r["throttle_time_ms"])
            for r in rows_of(directory)]


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_every_row_of_a_request_carries_its_responses_throttle_time(tmp_path: Path, isolation: str) -> None:
    audit = Audit(tmp_path, isolation, level=1)
    audit.feed((produce_request(9, 1, SMALL), frame_of(0, 9, 1, kp_produce_body(9, 250))), ())
    audit.feed((produce_request(9, 2, BIG), frame_of(0, 9, 2, kp_produce_body(9, 3000))), ())  # picked in the parent
    audit.feed((produce_request(0, 3, SMALL), frame_of(0, 0, 3, kp_produce_body(0, 250))), ())  # v0: no field
    audit.feed((produce_request(9, 4, SMALL, acks=0), None), ())  # acks=0: no response
    audit.feed((fetch_request(12, 5), frame_of(1, 12, 5, kp_fetch_body(12, 1500, SMALL))), ())
    big = record_batch(40, 1024)
    audit.feed((fetch_request(12, 6), frame_of(1, 12, 6, kp_fetch_body(12, 0, big))), ())  # picked in the parent
    audit.feed((fetch_request(0, 7), frame_of(1, 0, 7, kp_fetch_body(0, 1500, SMALL))), ())  # v0: no field
    audit.feed(metadata(8, {"orders": 2}), ())  # v12: 0, on the inventory row too
    audit.feed((request_frame(11, 5, 9, {
        "GroupId": "g", "SessionTimeoutMs": 6000, "RebalanceTimeoutMs": 6000, "MemberId": "",
        "GroupInstanceId": None, "ProtocolType": "consumer", "Protocols": []}), response_frame(11, 5, 9, {
            "ThrottleTimeMs": 900, "ErrorCode": 0, "GenerationId": 1, "ProtocolName": "range", "Leader": "m",
            "MemberId": "m", "Members": []})), ())
    audit.close()

    assert throttles(tmp_path) == [
        (1, "Produce", True, "t1", 0, 250), (1, "Produce", False, "t1", 1, 250),
        (2, "Produce", True, "t1", 0, 3000), (2, "Produce", False, "t1", 1, 3000),
        (3, "Produce", True, "t1", 0, None), (3, "Produce", False, "t1", 1, None),
        (4, "Produce", True, "t1", 0, None), (4, "Produce", False, "t1", 1, None),
        (5, "Fetch", True, "t1", 0, 1500),
        (6, "Fetch", True, "t1", 0, 0),
        (7, "Fetch", True, "t1", 0, None),
        (8, "Metadata", True, None, None, 0), (8, "Metadata", False, "orders", None, 0),
        (9, "JoinGroup", True, None, None, 900),
    ]


def test_the_errors_are_unchanged_by_reading_the_throttle_time(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "thread", level=1)
    audit.feed((produce_request(9, 1, SMALL), frame_of(0, 9, 1, kp_produce_body(9, 250, (0, 6)))), ())
    audit.feed((request_frame(18, 3, 2, {}), response_frame(18, 3, 2, {"ErrorCode": 35, "ThrottleTimeMs": 5})), ())
    audit.close()
    assert [(r["error_code"], r["throttle_time_ms"]) for r in rows_of(tmp_path)] == [(0, 250), (6, 250), (35, 5)]


def test_level_0_writes_version_2_without_the_column(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "thread", level=0)
    audit.feed((produce_request(9, 1, SMALL), frame_of(0, 9, 1, kp_produce_body(9, 250))), ())
    audit.close()
    ((version, names, rows),) = files(tmp_path)
    assert version == b"2" and "throttle_time_ms" not in names and len(rows) == 2


def test_the_column_is_a_nullable_int32_closing_version_3() -> None:
    field = schema_for(3).field("throttle_time_ms")
    assert field.nullable and str(field.type) == "int32"
    assert schema_for(3).names[-1] == "throttle_time_ms"
