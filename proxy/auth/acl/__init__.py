"""Kafka ACLs at the sidecar: the model, the evaluator, the request table, the ZooKeeper store.

``model`` (resource patterns, entries, filters), ``evaluate`` (Kafka's decision, one ACL
question or one whole request), ``requests`` (which request needs which operation on which
resource, as data) and ``authorized`` (a describe answer's AuthorizedOperations) are
sans-IO; ``store`` keeps the ACLs in ZooKeeper in Kafka's format (the kazoo client
injected). See ``docs/authorization.md``.
"""
