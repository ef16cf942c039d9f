"""What a bump of the pinned Kafka release must review in the sidecar's own work.

A new release can add versions and fields the table then parses. These tests fail where the
sidecar has to decide something about them, so a bump (``python -m protocol.bump``) is a
review and not an archaeology:

* every response field that names a host or a port is a site the rewriter covers
  (``proxy/datapath/rewrite.py`` ``SITES``) or is listed below with why it is no broker's;
* the version ranges of the APIs the sidecar answers itself are written out by hand: a bump
  that moves one fails here until its handler is checked at the new versions; the embedded
  coordinator advertises only what it serves (``coordinator.core.SERVED_API_VERSIONS``);
* a client at the newest versions of every API the pinned release has, in front of a broker
  that serves them, gets each request through (forwarded or answered), none "unsupported",
  and ApiVersions advertises every one of those versions; kafka-python's newest protocol
  classes ask for versions the sidecar parses.

Expected values are read from Kafka's specs of the pinned release (docs/protocol.md's table)
and the coordinator's own table, not from the code under test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from coordinator.core import SERVED_API_VERSIONS
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import RequestHeader
from protocol.messages import RESPONSES
from protocol.release import load_json_spec
from protocol.spec import FieldSpec, Versions
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.rewrite import SITES, Rewriter
from proxy.datapath.routing import FORWARD, Router
from proxy.local.api import Context, LocalApi
from proxy.local.api_versions import advertised_ranges
from proxy.local.ports import UpstreamInfo
from proxy.local.sasl import SaslApis
from proxy.local.table import TableSpec, build_table

#: Response fields naming a host or a port that are not a broker's address, and why.
NOT_BROKERS: dict[tuple[int, str], str] = {
    (15, "Groups.Members.ClientHost"): "a group member's client address (DescribeGroups)",
    (29, "Resources.Acls.Host"): "an ACL's host pattern (DescribeAcls)",
    (31, "FilterResults.MatchingAcls.Host"): "an ACL's host pattern (DeleteAcls)",
    (55, "Nodes.Listeners.Host"): "a KRaft controller's listener (DescribeQuorum): no sidecar",
    (55, "Nodes.Listeners.Port"): "a KRaft controller's listener (DescribeQuorum): no sidecar",
    (69, "Groups.Members.ClientHost"): "a member's client address (ConsumerGroupDescribe)",
    (77, "Groups.Members.ClientHost"): "a member's client address (ShareGroupDescribe)",
    (88, "PartitionsByUserEndpoint.UserEndpoint.Host"): "a Streams instance (KIP-1071)",
    (88, "PartitionsByUserEndpoint.UserEndpoint.Port"): "a Streams instance (KIP-1071)",
    (89, "Groups.Members.ClientHost"): "a member's client address (StreamsGroupDescribe)",
    (89, "Groups.Members.UserEndpoint.Host"): "a Streams instance (KIP-1071)",
    (89, "Groups.Members.UserEndpoint.Port"): "a Streams instance (KIP-1071)",
}

#: The versions each locally answered API advertises, by the pinned Kafka 4.3.1's specs (the ACL APIs
#: widened to Kafka 3.9's minimum 0) and the embedded coordinator's served ranges.
LOCAL_VERSIONS: dict[int, tuple[int, int]] = {
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    28: (0, 5),  # TxnOffsetCommit (answered with a refusal at every version)
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    36: (0, 2),  # SaslAuthenticate
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    57: (0, 2),  # UpdateFeatures
    10035: (0, 1),  # BrokerMetadata (ours)
    # The embedded coordinator's (coordinator/core.py), equal to Kafka 4.1's ranges:
    8: (0, 10),  # OffsetCommit
    9: (0, 10),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe
    # Share groups (proxy/local/shares.py), Kafka 4.3's ranges:
    76: (1, 1),  # ShareGroupHeartbeat
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 2),  # ShareFetch
    79: (1, 2),  # ShareAcknowledge
    90: (0, 1),  # DescribeShareGroupOffsets
    91: (0, 0),  # AlterShareGroupOffsets
    92: (0, 0),  # DeleteShareGroupOffsets
    # Its groups' configs (proxy/local/group_configs.py), Kafka 4.x's ranges:
    32: (1, 4),  # DescribeConfigs
    44: (0, 1),  # IncrementalAlterConfigs
}

_ADDRESS = re.compile(r"(Host|Port)$")


def _walk(fields: tuple[FieldSpec, ...], prefix: str = "") -> Iterator[str]:
    for field in fields:
        yield prefix + field.name
        yield from _walk(field.fields, f"{prefix}{field.name}.")


def _address_fields() -> dict[tuple[int, str], str]:
    """(key, path) -> the top-level field holding it, for every host or port field."""
    return {
        (key, path): path.split(".", 1)[0]
        for key, spec in RESPONSES.items()
        for path in _walk(spec.fields)
        if _ADDRESS.search(path.rsplit(".", 1)[-1])
    }


def test_every_field_naming_an_address_is_a_rewrite_site_or_no_brokers() -> None:
    found = _address_fields()
    rewritten = {(key, top) for (key, path), top in found.items() if (key, path) not in NOT_BROKERS}
    # FindCoordinator v0-3 names its one coordinator at the top level (Site(None)).
    sites = {(key, site.array or "Host") for key, group in SITES.items() for site in group}
    sites |= {(key, site.array or "Port") for key, group in SITES.items() for site in group}
    assert rewritten == sites, "a response names an address the rewriter does not cover"
    stale = set(NOT_BROKERS) - set(found)
    assert not stale, f"NOT_BROKERS names fields the pinned release does not have: {stale}"


def test_the_address_fields_of_the_pinned_release() -> None:
    # Hand-read from Kafka 4.3.1's response specs (as 4.1.0's): the broker-naming arrays.
    tops = {
        (key, top)
        for (key, path), top in _address_fields().items()
        if (key, path) not in NOT_BROKERS
    }
    assert tops == {
        (0, "NodeEndpoints"), (1, "NodeEndpoints"), (3, "Brokers"), (10, "Host"), (10, "Port"),
        (10, "Coordinators"), (60, "Brokers"), (78, "NodeEndpoints"), (79, "NodeEndpoints"),
    }  # fmt: skip


def _table(groups: bool) -> Any:
    sasl = SaslApis(cast(Any, None))  # entries() reads no session
    spec = TableSpec(sasl=sasl, scram_credentials=True, groups=groups, acls=True, features=True)
    return build_table(DEFAULT_REGISTRY, spec)


def test_locally_answered_apis_advertise_the_reviewed_versions() -> None:
    served = _table(groups=True).served()
    assert served == LOCAL_VERSIONS
    # The coordinator advertises what it serves, and serves only what the table parses.
    for key, (low, high) in SERVED_API_VERSIONS.items():
        assert served[key] == (low, high)
        api = DEFAULT_REGISTRY.api(key)
        assert low in api.versions and high in api.versions, api.name


class _Broker:
    """A broker that serves every version the pinned table parses."""

    def __init__(self) -> None:
        ranges = {
            api.key: (api.versions.lo, cast(int, api.versions.hi)) for api in DEFAULT_REGISTRY
        }
        ranges.pop(DEFAULT_REGISTRY.broker_metadata_key)
        self.info = UpstreamInfo(api_versions=ranges, api_versions_body={})


def _header(key: int, version: int) -> RequestHeader:
    return RequestHeader(
        api_key=key, api_version=version, correlation_id=1, client_id="c", header_version=2, size=0
    )


@pytest.mark.parametrize("policy", ["answer", "forward", "close"])
def test_a_client_at_the_newest_versions_gets_every_request_through(policy: str) -> None:
    table = _table(groups=False)
    broker = _Broker()
    router = Router(DEFAULT_REGISTRY, table, broker, Rewriter(StaticAddressBook({}), "PLAINTEXT"),
                    unparsed_policy=policy)  # fmt: skip
    # No sidecar-owned features here: UpdateFeatures is the broker's to answer.
    ports = cast(Any, SimpleNamespace(features=None))
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 1), ports=ports)
    advertised = {k: (lo, hi) for k, lo, hi in advertised_ranges(
        DEFAULT_REGISTRY, broker.info.api_versions, table.served())}  # fmt: skip
    for api in DEFAULT_REGISTRY:
        newest = cast(int, api.versions.hi)
        route = router.route(_header(api.key, newest), memoryview(b""), context)
        assert route == FORWARD or isinstance(route, LocalApi), (api.name, newest, route)
        assert advertised[api.key] == (api.versions.lo, newest), api.name


def test_kafka_pythons_newest_request_versions_are_parsed() -> None:
    # kafka-python 3.x builds its protocol classes from its own copy of Kafka 4.3's request
    # specs: the newest version of each is one the sidecar parses (and so forwards or answers).
    kafka = pytest.importorskip("kafka")
    resources = Path(kafka.__file__).parent / "protocol" / "schemas" / "resources"
    newest: dict[str, tuple[int, int | None]] = {}
    for path in sorted(resources.glob("*Request.json")):
        raw = load_json_spec(path)
        newest[raw["name"]] = (raw["apiKey"], Versions.parse(raw["validVersions"]).hi)
    assert len(newest) >= 50
    for name, (key, version) in newest.items():
        assert version in DEFAULT_REGISTRY.api(key).versions, (name, version)
