"""A response whose broker entries are one top-level array field is rewritten by splicing
that field between the broker's bytes (``Rewriter._rewrite_field``): Metadata's and
DescribeCluster's ``Brokers``, FindCoordinator's ``Coordinators`` (v4+), ShareFetch's and
ShareAcknowledge's ``NodeEndpoints``. The topics and partitions after Metadata's brokers are
never decoded, so the cost is in the brokers, not in the partitions.

The oracle is the whole-response path, decode-rewrite-encode through the full schema
(``Rewriter.rewrite_decoded``): for generated responses of every such version, and an
address book that maps some brokers and withholds others, the splice gives the same bytes
and the same counts. kafka-python (an independent decoder) reads a large spliced Metadata.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataResponse

from protocol.apis import DEFAULT_REGISTRY as R
from protocol.apis import Api
from protocol.schema import encode
from proxy.config.keys import HostPort
from proxy.datapath.rewrite import Rewriter, reads_to_end
from tests.protocol.strategies import message_values
from tests.proxy.test_rewrite_lenient import PER_VERSION, rewritten_versions


class EvenBrokers:
    """Maps even broker ids to a sidecar address; odd ones are unknown (withheld)."""

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        return HostPort(f"sidecar-{node_id}.example", 19092) if node_id % 2 == 0 else None


CASES = [(api, v) for api, v in rewritten_versions() if not reads_to_end(api, v)]  # the splice's


def test_the_splice_covers_every_version_whose_brokers_are_one_array_field() -> None:
    names = {(a.name, v) for a, v in CASES}
    metadata = R.api(3)
    assert metadata.versions.hi is not None
    assert {("Metadata", v) for v in range(metadata.versions.lo, metadata.versions.hi + 1)} <= names
    assert ("FindCoordinator", 4) in names and ("FindCoordinator", 3) not in names  # v0-3: one top-level entry
    assert ("DescribeCluster", 0) in names


@pytest.mark.parametrize(("api", "version"), CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
@PER_VERSION
@given(data=st.data())
def test_the_splice_gives_the_bytes_decode_rewrite_encode_gives(api: Api, version: int, data: st.DataObject) -> None:
    body = encode(api.response, version, data.draw(message_values(api.response, version)))
    unmapped_fast: list[tuple[str, int]] = []
    unmapped_slow: list[tuple[str, int]] = []
    fast = Rewriter(EvenBrokers(), "PLAINTEXT", lambda *a: unmapped_fast.append(a)).rewrite(api, version, body)
    slow = Rewriter(EvenBrokers(), "PLAINTEXT", lambda *a: unmapped_slow.append(a)).rewrite_decoded(
        api, version, body)
    if slow is None:
        assert fast is None
    else:
        assert fast is not None
        assert (fast.body, fast.rewritten, fast.unmapped) == (slow.body, slow.rewritten, slow.unmapped)
    assert unmapped_fast == unmapped_slow


def big_metadata(topics: int, partitions: int) -> dict[str, Any]:
    return {
        "ThrottleTimeMs": 0, "ClusterId": "c1", "ControllerId": 2, "ClusterAuthorizedOperations": -2147483648,
        "Brokers": [{"NodeId": n, "Host": f"broker-{n}.internal", "Port": 9092, "Rack": None} for n in (1, 2, 4)],
        "Topics": [{"ErrorCode": 0, "Name": f"topic-{t:04d}", "TopicId": uuid.UUID(int=t + 1), "IsInternal": False,
                    "TopicAuthorizedOperations": -2147483648,
                    "Partitions": [{"ErrorCode": 0, "PartitionIndex": p, "LeaderId": 1 + p % 3, "LeaderEpoch": 5,
                                    "ReplicaNodes": [1, 2, 4], "IsrNodes": [1, 2, 4], "OfflineReplicas": []}
                                   for p in range(partitions)]} for t in range(topics)],
    }  # fmt: skip


def test_a_large_metadata_keeps_every_topic_byte_and_kafka_python_reads_the_sidecars() -> None:
    api = R.api(3)
    body = encode(api.response, 12, big_metadata(200, 10))
    result = Rewriter(EvenBrokers(), "PLAINTEXT").rewrite(api, 12, body)
    assert result is not None and (result.rewritten, result.unmapped) == (2, 1)
    decoded = MetadataResponse[12].decode(result.body).to_dict()
    assert [(b["node_id"], b["host"], b["port"]) for b in decoded["brokers"]] == [
        (2, "sidecar-2.example", 19092), (4, "sidecar-4.example", 19092)]
    assert len(decoded["topics"]) == 200 and decoded["topics"][199]["name"] == "topic-0199"
    # Everything after the brokers is the broker's own bytes.
    assert result.body.endswith(body[body.index(b"c1") - 1 :])
