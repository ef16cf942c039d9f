"""The local-API table of a listener: every API the sidecar answers itself, in one place.

To add a local API, write its module (a handler of ``(request, context)``, see
:mod:`proxy.local.api`) and add its entry here; ApiVersions advertises it from the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.apis import ApiRegistry
from proxy.local import (
    acls,
    broker_metadata,
    client_quotas,
    features,
    group_configs,
    groups,
    scram_credentials,
    shares,
)
from proxy.local.api import LocalApi, LocalApiTable
from proxy.local.api_versions import ApiVersionsApi
from proxy.local.remote import Owner, remote
from proxy.local.sasl import SaslApis


@dataclass(frozen=True, kw_only=True)
class TableSpec:
    """Which optional local APIs a listener serves."""

    #: SaslHandshake/SaslAuthenticate (a SASL listener where the sidecar terminates SASL).
    sasl: SaslApis | None = None
    #: Describe/AlterUserScramCredentials (the sidecar owns the SCRAM users).
    scram_credentials: bool = False
    #: The group APIs (``sidecar.coordinator=embedded``).
    groups: bool = False
    #: Describe/Create/DeleteAcls (``sidecar.authorizer=acls``).
    acls: bool = False
    #: UpdateFeatures for the sidecar's KIP-584 features (with ZooKeeper).
    features: bool = False
    #: ``sidecar.unparsed.request.policy=forward``: ApiVersions advertises the broker's
    #: ranges of what the sidecar cannot parse (:func:`~proxy.local.api_versions.advertised_ranges`).
    forward_unparsed: bool = False
    #: API keys whose answers name brokers (never advertised beyond what the sidecar rewrites).
    names_brokers: frozenset[int] = frozenset()
    #: A worker of a sidecar with several (``sidecar.workers``): the APIs of the sidecar-wide
    #: state (groups, ACL and quota administration, SCRAM credentials, features) are answered
    #: by this owner (:mod:`proxy.local.remote`); ``None``: here.
    owner: Owner | None = None


def build_table(registry: ApiRegistry, spec: TableSpec) -> LocalApiTable:
    """The listener's table: ApiVersions, BrokerMetadata, per-IP quotas, then what ``spec`` adds."""
    versions = ApiVersionsApi(registry, lambda: table.served(), forward_unparsed=spec.forward_unparsed,
                              names_brokers=spec.names_brokers)
    served: list[LocalApi] = [versions.entry(), broker_metadata.entry(registry)]
    if spec.sasl is not None:
        served.extend(spec.sasl.entries(registry))
    owned = owned_entries(registry, spec)
    served.extend(owned if spec.owner is None else remote(owned, spec.owner))
    table = LocalApiTable(served, raw_token=spec.sasl.raw_token if spec.sasl is not None else None)
    return table


def owned_entries(registry: ApiRegistry, spec: TableSpec) -> list[LocalApi]:
    """The entries of the sidecar-wide state ``spec`` serves: one process owns them."""
    owned = client_quotas.entries(registry)
    if spec.scram_credentials:
        owned.extend(scram_credentials.entries(registry))
    if spec.groups:
        owned.extend(groups.entries(registry))
        owned.extend(group_configs.entries(registry))
        owned.extend(shares.entries(registry))
    if spec.acls:
        owned.extend(acls.entries(registry))
    if spec.features:
        owned.append(features.entry(registry))
    return owned
