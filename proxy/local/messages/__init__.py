"""Typed requests and responses of the local APIs, and their converters from/to decoded bodies.

Past the codec a local API works with typed values only: its handler turns the decoded body
into a request with ``<Request>.from_wire(version, body)``, decides, and answers
``Respond(body=response.to_wire(version))``, which the connection encodes with the API's
schema. Field names on the wire are Kafka's (``protocol/specs/kafka/*.json``); how a version
shapes the wire (fields it lacks or adds) is handled in ``from_wire`` and ``to_wire``, the
rules a version changes (ACL pattern types at v0) in the handlers. Error codes are
:class:`protocol.errors.ErrorCode`.

A message type lives beside the code that decides its answer, so that code can take and
return it without importing upwards (``tests/test_import_graph.py``):

========================================  ==============================================
API                                       messages
========================================  ==============================================
ApiVersions                               :mod:`proxy.local.messages.api_versions`
BrokerMetadata                            :mod:`proxy.local.messages.broker_metadata`
SaslHandshake, SaslAuthenticate           :mod:`proxy.local.messages.sasl`
Describe/Create/DeleteAcls                :mod:`proxy.local.messages.acls`
UpdateFeatures                            :mod:`proxy.local.messages.features`
Describe/AlterClientQuotas                :mod:`quotas.messages` (decided by :mod:`quotas.admin`)
Describe/AlterUserScramCredentials        :mod:`proxy.auth.sasl.scram_messages` (decided by
                                          :mod:`proxy.auth.sasl.scram_admin`)
the group APIs                            :mod:`coordinator.messages` (decided by the
                                          coordinator core)
========================================  ==============================================
"""
