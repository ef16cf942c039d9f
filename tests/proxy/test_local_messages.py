"""The local APIs' typed messages (proxy/local/messages) against Kafka's specs, every version.

Requests are encoded with our schemas from field values and decoded again, so ``from_wire``
reads what the codec really hands a handler at that version; the typed request expected is
written out by hand. Responses are compared with bodies written out by hand from the JSON
specs (``protocol/specs/kafka/*.json``: which fields each version has), then encoded with the
schema of that version, which refuses a body of the wrong shape.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.features import FeatureUpdate, UpgradeType
from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ErrorCode
from protocol.schema import decode, encode, struct_defaults
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    BindingFilter,
    EntryFilter,
    Operation,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.local.messages.acls import (
    AclOutcome,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeletedAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribedResource,
    FilterResult,
)
from proxy.local.messages.api_versions import (
    ApiVersionRange,
    ApiVersionsFeatures,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FinalizedFeature,
    SupportedFeature,
)
from proxy.local.messages.broker_metadata import (
    BrokerDescription,
    BrokerMetadataRequest,
    BrokerMetadataResponse,
)
from proxy.local.messages.features import (
    FeatureResult,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from proxy.local.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

R = DEFAULT_REGISTRY
BROKER_METADATA = R.broker_metadata_key


def wire_request(key: int, version: int, **fields: Any) -> Any:
    """A request body as the codec decodes it: ``fields`` over the defaults, encoded, decoded."""
    spec = R.api(key).request
    body = dict(struct_defaults(spec.fields, version))
    body.update({name: value for name, value in fields.items() if name in body})
    return decode(spec, version, encode(spec, version, body))


def encodes(key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body``, once the response schema of ``version`` has encoded it (a shape check)."""
    encode(R.api(key).response, version, body)
    return body


# -- ApiVersions (18) ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_api_versions_request_before_v3_names_no_software(version: int) -> None:
    assert ApiVersionsRequest.from_wire(version, wire_request(18, version)) == ApiVersionsRequest()


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_request_v3_names_the_software(version: int) -> None:
    body = wire_request(18, version, ClientSoftwareName="librdkafka", ClientSoftwareVersion="2.4.0")
    assert ApiVersionsRequest.from_wire(version, body) == ApiVersionsRequest(
        client_software_name="librdkafka", client_software_version="2.4.0")


FEATURES = ApiVersionsFeatures(
    supported=(SupportedFeature(name="group.version", min_version=0, max_version=1),),
    finalized_epoch=7,
    finalized=(FinalizedFeature(name="group.version", max_version_level=1, min_version_level=1),),
    zk_migration_ready=True,
)
KEYS = (ApiVersionRange(api_key=0, min_version=3, max_version=11),
        ApiVersionRange(api_key=18, min_version=0, max_version=4))
KEYS_WIRE = [{"ApiKey": 0, "MinVersion": 3, "MaxVersion": 11}, {"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4}]


@pytest.mark.parametrize(("version", "expected"), [
    (0, {"ErrorCode": 0, "ApiKeys": KEYS_WIRE}),
    (1, {"ErrorCode": 0, "ApiKeys": KEYS_WIRE, "ThrottleTimeMs": 0}),
    (2, {"ErrorCode": 0, "ApiKeys": KEYS_WIRE, "ThrottleTimeMs": 0}),
    *[(v, {"ErrorCode": 0, "ApiKeys": KEYS_WIRE, "ThrottleTimeMs": 0,
           "SupportedFeatures": [{"Name": "group.version", "MinVersion": 0, "MaxVersion": 1}],
           "FinalizedFeaturesEpoch": 7,
           "FinalizedFeatures": [{"Name": "group.version", "MaxVersionLevel": 1, "MinVersionLevel": 1}],
           "ZkMigrationReady": True}) for v in (3, 4)],
])
def test_api_versions_response_fields_by_version(version: int, expected: dict[str, Any]) -> None:
    response = ApiVersionsResponse(api_keys=KEYS, features=FEATURES)
    assert encodes(18, version, response.to_wire(version)) == expected


def test_api_versions_response_advertising_and_refusals() -> None:
    assert ApiVersionsResponse.advertising([(0, 3, 11), (18, 0, 4)]) == ApiVersionsResponse(api_keys=KEYS)
    # The KIP-35 refusal is read at v0 whatever was asked; an invalid request lists nothing.
    refusal = ApiVersionsResponse(error=ErrorCode.UNSUPPORTED_VERSION, api_keys=KEYS[1:])
    assert encodes(18, 0, refusal.to_wire(0)) == {
        "ErrorCode": 35, "ApiKeys": [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4}]}
    assert encodes(18, 3, ApiVersionsResponse(error=ErrorCode.INVALID_REQUEST).to_wire(3)) == {
        "ErrorCode": 42, "ApiKeys": [], "ThrottleTimeMs": 0, "SupportedFeatures": [],
        "FinalizedFeaturesEpoch": -1, "FinalizedFeatures": [], "ZkMigrationReady": False}


def test_api_versions_features_read_from_an_answer_body() -> None:
    broker = {
        "ErrorCode": 0, "ApiKeys": [],
        "SupportedFeatures": [{"Name": "group.version", "MinVersion": 0, "MaxVersion": 1}],
        "FinalizedFeaturesEpoch": 7,
        "FinalizedFeatures": [{"Name": "group.version", "MaxVersionLevel": 1, "MinVersionLevel": 1}],
        "ZkMigrationReady": True,
    }
    assert ApiVersionsFeatures.from_wire(broker) == FEATURES
    # A v0-v2 answer (or a merge without ZkMigrationReady) leaves the fields at their defaults.
    assert ApiVersionsFeatures.from_wire({"ErrorCode": 0, "ApiKeys": []}) == ApiVersionsFeatures(
        supported=(), finalized_epoch=-1, finalized=(), zk_migration_ready=False)


# -- BrokerMetadata (the KIP-35 draft) -------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_broker_metadata(version: int) -> None:
    assert BrokerMetadataRequest.from_wire(version, wire_request(BROKER_METADATA, version, NodeIds=[-1, 3])) == (
        BrokerMetadataRequest(node_ids=(-1, 3)))
    assert BrokerMetadataRequest.from_wire(version, wire_request(BROKER_METADATA, version)) == (
        BrokerMetadataRequest(node_ids=()))
    response = BrokerMetadataResponse(brokers=(BrokerDescription(
        node_id=7, host="h", port=9, protocol_version_min=0, protocol_version_max=300,
        tags=(("broker.id", "7"), ("rack", "r1"))),))
    assert encodes(BROKER_METADATA, version, response.to_wire(version)) == {"Brokers": [{
        "NodeId": 7, "Host": "h", "Port": 9, "ProtocolVersionMin": 0, "ProtocolVersionMax": 300,
        "Tags": [{"Key": "broker.id", "Value": "7"}, {"Key": "rack", "Value": "r1"}]}]}


# -- SaslHandshake (17), SaslAuthenticate (36) -----------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_sasl_handshake(version: int) -> None:
    assert SaslHandshakeRequest.from_wire(version, wire_request(17, version, Mechanism="SCRAM-SHA-256")) == (
        SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    response = SaslHandshakeResponse(error=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=("PLAIN", "SCRAM-SHA-512"))
    assert encodes(17, version, response.to_wire(version)) == {"ErrorCode": 33, "Mechanisms": ["PLAIN", "SCRAM-SHA-512"]}


@pytest.mark.parametrize(("version", "expected"), [
    (0, {"ErrorCode": 58, "ErrorMessage": "no", "AuthBytes": b"t"}),
    (1, {"ErrorCode": 58, "ErrorMessage": "no", "AuthBytes": b"t", "SessionLifetimeMs": 3600000}),
    (2, {"ErrorCode": 58, "ErrorMessage": "no", "AuthBytes": b"t", "SessionLifetimeMs": 3600000}),
])
def test_sasl_authenticate(version: int, expected: dict[str, Any]) -> None:
    request = SaslAuthenticateRequest.from_wire(version, wire_request(36, version, AuthBytes=b"\x00user\x00pw"))
    assert request == SaslAuthenticateRequest(auth_bytes=b"\x00user\x00pw")
    assert "pw" not in repr(request)
    response = SaslAuthenticateResponse(error=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message="no",
                                        auth_bytes=b"t", session_lifetime_ms=3_600_000)
    assert encodes(36, version, response.to_wire(version)) == expected
    assert encodes(36, version, SaslAuthenticateResponse().to_wire(version))["ErrorMessage"] is None


# -- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ---------------------------------------------

FILTER_FIELDS = {"ResourceTypeFilter": 2, "ResourceNameFilter": "orders", "PatternTypeFilter": 4,
                 "PrincipalFilter": "User:a", "HostFilter": None, "Operation": 3, "PermissionType": 3}


def expected_filter(pattern_type: PatternType) -> BindingFilter:
    return BindingFilter(PatternFilter(ResourceType.TOPIC, "orders", pattern_type),
                         EntryFilter("User:a", None, Operation.READ, Permission.ALLOW))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_describe_acls_request(version: int) -> None:
    request = DescribeAclsRequest.from_wire(version, wire_request(29, version, **FILTER_FIELDS))
    # v0 has no PatternTypeFilter: LITERAL.
    assert request == DescribeAclsRequest(
        filter=expected_filter(PatternType.LITERAL if version == 0 else PatternType.PREFIXED))


def test_acl_codes_kafka_does_not_define_read_as_unknown() -> None:
    body = wire_request(29, 1, **{**FILTER_FIELDS, "ResourceTypeFilter": 99, "Operation": 99, "PatternTypeFilter": 9})
    assert DescribeAclsRequest.from_wire(1, body).filter == BindingFilter(
        PatternFilter(ResourceType.UNKNOWN, "orders", PatternType.UNKNOWN),
        EntryFilter("User:a", None, Operation.UNKNOWN, Permission.ALLOW))


LITERAL_READ = AclBinding(ResourcePattern(ResourceType.TOPIC, "t"),
                          AclEntry("User:a", "*", Operation.READ, Permission.ALLOW))
ACL_WIRE = {"Principal": "User:a", "Host": "*", "Operation": 3, "PermissionType": 3}


def answer(key: int, version: int, body: dict[str, Any]) -> Any:
    """``body`` encoded at ``version`` and decoded again: what the client reads."""
    spec = R.api(key).response
    return decode(spec, version, encode(spec, version, body))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_describe_acls_response(version: int) -> None:
    response = DescribeAclsResponse(resources=(DescribedResource(pattern=LITERAL_READ.pattern,
                                                                 acls=(LITERAL_READ.entry,)),))
    resource = {"ResourceType": 2, "ResourceName": "t", "PatternType": 3, "Acls": [ACL_WIRE]}
    assert encodes(29, version, response.to_wire(version)) == {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Resources": [resource]}
    # PatternType is a v1+ field: a v0 client reads none.
    read = answer(29, version, response.to_wire(version))["Resources"][0]
    assert ("PatternType" in read) is (version >= 1)
    refused = DescribeAclsResponse(error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="denied")
    assert encodes(29, version, refused.to_wire(version)) == {
        "ThrottleTimeMs": 0, "ErrorCode": 31, "ErrorMessage": "denied", "Resources": []}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_acls(version: int) -> None:
    creation = {"ResourceType": 3, "ResourceName": "g-", "ResourcePatternType": 4, "Principal": "User:b",
                "Host": "10.0.0.1", "Operation": 6, "PermissionType": 2}
    request = CreateAclsRequest.from_wire(version, wire_request(30, version, Creations=[creation]))
    assert request == CreateAclsRequest(creations=(AclBinding(
        ResourcePattern(ResourceType.GROUP, "g-", PatternType.LITERAL if version == 0 else PatternType.PREFIXED),
        AclEntry("User:b", "10.0.0.1", Operation.DELETE, Permission.DENY)),))
    response = CreateAclsResponse(results=(AclOutcome(), AclOutcome(error=ErrorCode.INVALID_REQUEST,
                                                                    error_message="bad")))
    assert encodes(30, version, response.to_wire(version)) == {"ThrottleTimeMs": 0, "Results": [
        {"ErrorCode": 0, "ErrorMessage": None}, {"ErrorCode": 42, "ErrorMessage": "bad"}]}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_delete_acls(version: int) -> None:
    request = DeleteAclsRequest.from_wire(version, wire_request(31, version, Filters=[FILTER_FIELDS, FILTER_FIELDS]))
    expected = expected_filter(PatternType.LITERAL if version == 0 else PatternType.PREFIXED)
    assert request == DeleteAclsRequest(filters=(expected, expected))
    response = DeleteAclsResponse(filter_results=(
        FilterResult(matching=(DeletedAcl(binding=LITERAL_READ),
                               DeletedAcl(binding=LITERAL_READ, error=ErrorCode.UNKNOWN_SERVER_ERROR,
                                          error_message="lost"))),
        FilterResult(error=ErrorCode.INVALID_REQUEST, error_message="unknown"),
    ))
    matched = {"ResourceType": 2, "ResourceName": "t", "PatternType": 3, **ACL_WIRE}
    assert encodes(31, version, response.to_wire(version)) == {"ThrottleTimeMs": 0, "FilterResults": [
        {"ErrorCode": 0, "ErrorMessage": None, "MatchingAcls": [
            {"ErrorCode": 0, "ErrorMessage": None, **matched},
            {"ErrorCode": -1, "ErrorMessage": "lost", **matched}]},
        {"ErrorCode": 42, "ErrorMessage": "unknown", "MatchingAcls": []},
    ]}


# -- UpdateFeatures (57) ----------------------------------------------------------------------------


def test_update_features_request_v0_reads_the_downgrade_flag() -> None:
    body = wire_request(57, 0, timeoutMs=5000, FeatureUpdates=[
        {"Feature": "ksidecar.audit.format", "MaxVersionLevel": 1, "AllowDowngrade": True},
        {"Feature": "group.version", "MaxVersionLevel": 1, "AllowDowngrade": False}])
    assert UpdateFeaturesRequest.from_wire(0, body) == UpdateFeaturesRequest(timeout_ms=5000, updates=(
        FeatureUpdate(feature="ksidecar.audit.format", level=1, upgrade_type=UpgradeType.SAFE_DOWNGRADE, version=0),
        FeatureUpdate(feature="group.version", level=1, upgrade_type=UpgradeType.UPGRADE, version=0),
    ), validate_only=False)


@pytest.mark.parametrize("version", [1, 2])
def test_update_features_request_v1_reads_the_upgrade_type_and_validate_only(version: int) -> None:
    body = wire_request(57, version, FeatureUpdates=[
        {"Feature": "ksidecar.audit.format", "MaxVersionLevel": 0, "UpgradeType": 3}], ValidateOnly=True)
    request = UpdateFeaturesRequest.from_wire(version, body)
    assert request == UpdateFeaturesRequest(timeout_ms=60_000, validate_only=True, updates=(
        FeatureUpdate(feature="ksidecar.audit.format", level=0, upgrade_type=UpgradeType.UNSAFE_DOWNGRADE,
                      version=version),))
    assert request.features == ["ksidecar.audit.format"]


RESULTS_WIRE = [{"Feature": "a", "ErrorCode": 0, "ErrorMessage": None},
                {"Feature": "b", "ErrorCode": 42, "ErrorMessage": "twice"}]


@pytest.mark.parametrize(("version", "expected"), [
    (0, {"ThrottleTimeMs": 0, "ErrorCode": 42, "ErrorMessage": "twice", "Results": RESULTS_WIRE}),
    (1, {"ThrottleTimeMs": 0, "ErrorCode": 42, "ErrorMessage": "twice", "Results": RESULTS_WIRE}),
    (2, {"ThrottleTimeMs": 0, "ErrorCode": 42, "ErrorMessage": "twice"}),  # no per-feature results
])
def test_update_features_response(version: int, expected: dict[str, Any]) -> None:
    response = UpdateFeaturesResponse(error=ErrorCode.INVALID_REQUEST, error_message="twice", results=(
        FeatureResult(feature="a"), FeatureResult(feature="b", error=ErrorCode.INVALID_REQUEST,
                                                  error_message="twice")))
    assert encodes(57, version, response.to_wire(version)) == expected
